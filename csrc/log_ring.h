/* log_ring: librdkafka's log lines, kept for Python's logging without the GIL.
 *
 * kc_log_cb (installed with rd_kafka_conf_set_log_cb) runs on librdkafka's threads: it copies
 * the line into a bounded ring (the oldest line is dropped when full, and counted) under a mutex,
 * and never calls Python. The client's own calls (poll, flush, close, ...) take the lines out on
 * the caller's thread (kc_log_take) and hand them to the logger kipconsumer.librdkafka.
 * One ring per extension module (each module is linked with its own copy); thread-safe. */
#ifndef KC_LOG_RING_H
#define KC_LOG_RING_H

#include <stddef.h>
#include <stdint.h>
#include "rdk.h"

#define KC_LOG_RING_CAP 256
#define KC_LOG_NAME_MAX 64
#define KC_LOG_FAC_MAX  32
#define KC_LOG_MSG_MAX  512

typedef struct kc_log_entry {
    double ts;                  /* wall-clock time librdkafka logged it (seconds since the epoch) */
    int level;                  /* syslog level 0-7 */
    char name[KC_LOG_NAME_MAX]; /* rd_kafka_name() of the handle, e.g. rdkafka#consumer-1 */
    char fac[KC_LOG_FAC_MAX];   /* librdkafka's facility, e.g. FAIL */
    char msg[KC_LOG_MSG_MAX];   /* truncated to KC_LOG_MSG_MAX - 1 bytes */
} kc_log_entry_t;

void kc_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
/* Lines waiting (a racy hint, for a cheap check before kc_log_take). */
size_t kc_log_pending(void);
/* Moves up to `max` of the oldest lines into `out`; returns how many. `*dropped` gets the number of
 * lines dropped because the ring was full since the previous call. */
size_t kc_log_take(kc_log_entry_t *out, size_t max, uint64_t *dropped);

#endif
