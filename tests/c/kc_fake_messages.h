/* Fake fetched messages for the C unit tests of the fetch buffer and what is built on it
 * (test_fetch_buffer.c, test_partition_state.c, test_consumer_core.c): heap rd_kafka_message_t with only
 * partition, offset and len set (the fields a fake may carry: tests/c/README.md), counted while alive
 * in g_live. main() sets kc_fb_msg_destroy = fake_destroy, so the buffer destroys the fakes it holds
 * through it; a case destroys the ones a drain returned with release() and ends with
 * destroy_and_check(), which fails the case if a fake is still alive. */
#ifndef KC_FAKE_MESSAGES_H
#define KC_FAKE_MESSAGES_H

#include <stdlib.h>

#include "fetch_buffer.h"

#include "kc_test.h"

/* The size of each fake fill() pushes (what the byte totals count it as). */
#define FAKE_LEN 10

static long g_live; /* fakes alive */

static inline void fake_destroy(rd_kafka_message_t *m) {
    g_live--;
    free(m);
}

static inline rd_kafka_message_t *fake(int32_t partition, int64_t offset, size_t len) {
    rd_kafka_message_t *m = calloc(1, sizeof(*m));
    m->partition = partition;
    m->offset = offset;
    m->len = len;
    g_live++;
    return m;
}

/* Pushes n fakes of FAKE_LEN bytes with offsets first.. into q, a partition of fb. */
static inline void fill(kc_fetch_buffer_t *fb, kc_fb_part_t *q, int n, int64_t first) {
    for (int i = 0; i < n; i++) {
        rd_kafka_message_t *m = fake(q->partition, first + i, FAKE_LEN);
        kc_fb_push(fb, q, &m, 1);
    }
}

/* Destroys the n fakes a drain returned into out. */
static inline void release(rd_kafka_message_t **out, size_t n) {
    for (size_t i = 0; i < n; i++)
        fake_destroy(out[i]);
}

/* The end of a case: destroys fb and what it holds; every fake must be gone then. Those still
 * counted fail this case and are forgotten, so that the next case counts from 0. */
static inline void destroy_and_check(kc_fetch_buffer_t *fb) {
    kc_fb_destroy(fb);
    CHECK_MSG(g_live == 0, "%ld fakes still alive", g_live);
    g_live = 0;
}

#endif
