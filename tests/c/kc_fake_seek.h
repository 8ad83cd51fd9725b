/* A fake seek for kc_filters_seek (record_filters.h) in the C unit tests: counts the seeks, notes the
 * last offset, and fails while g_seek_fails is set. Include once per test program. */
#ifndef KC_FAKE_SEEK_H
#define KC_FAKE_SEEK_H

#include <stdint.h>
#include "rdk.h"

static int g_seeks;           /* seeks issued */
static int64_t g_seek_offset; /* offset of the last one */
static int g_seek_fails;      /* the next seeks fail */
static int fake_seek(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t offset) {
    (void)rk;
    (void)topic;
    (void)partition;
    if (g_seek_fails)
        return -1;
    g_seeks++;
    g_seek_offset = offset;
    return 0;
}

#endif
