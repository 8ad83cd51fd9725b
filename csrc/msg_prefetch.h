/* Software prefetch of consumed messages, for loops that walk a poll's batch (the record iterator,
 * the Arrow builder).
 *
 * A batch's messages sat in the fetch buffer since the prefetch thread (or an earlier poll) moved
 * them, so each message and each value is a cache miss when a loop reaches it; a loop prefetches
 * the message a few steps ahead and its value half as far (the message's line is there by then,
 * so reading m->payload does not stall). Each call costs a few instructions and never faults. */
#ifndef KC_MSG_PREFETCH_H
#define KC_MSG_PREFETCH_H

#include "rdk.h"

#if defined(__GNUC__)
#define KC_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define KC_PREFETCH(p) ((void)(p))
#endif

/* The lines of a consumed message that readers touch: rd_kafka_message_t and the timestamp fields
 * of the rd_kafka_msg_t it is embedded in (librdkafka 2.x: they end 104 bytes after the message's
 * start; a wrong guess costs only a useless prefetch). */
static inline void kc_prefetch_msg(const rd_kafka_message_t *m) {
    const char *p = (const char *)m;
    KC_PREFETCH(p);
    KC_PREFETCH(p + 64);
    KC_PREFETCH(p + 103);
}

/* The first two lines of a message's value (the hardware prefetcher follows values only within
 * one fetched message set). Reads m->payload: prefetch the message first. */
static inline void kc_prefetch_value(const rd_kafka_message_t *m) {
    const char *p = (const char *)m->payload;
    if (p) {
        KC_PREFETCH(p);
        KC_PREFETCH(p + 64);
    }
}

#endif
