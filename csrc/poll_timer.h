/* poll_timer: monotonic time of the application's last poll() (KIP-62).
 *
 * max.poll.interval.ms is measured between the application's calls of poll(); the
 * timer is read from any thread (metrics, commit checks), written by the poll thread. */
#ifndef KC_POLL_TIMER_H
#define KC_POLL_TIMER_H

#include <stdint.h>
#include <stdatomic.h>
#include "clock.h"

typedef struct kc_poll_timer {
    _Atomic int64_t last_poll_ms; /* 0: never polled */
    int64_t interval_ms;          /* effective max.poll.interval.ms */
} kc_poll_timer_t;

static inline void kc_poll_timer_init(kc_poll_timer_t *t, int64_t interval_ms) {
    atomic_store(&t->last_poll_ms, 0);
    t->interval_ms = interval_ms;
}

static inline void kc_poll_timer_mark(kc_poll_timer_t *t) {
    atomic_store(&t->last_poll_ms, kc_now_ms());
}

/* Milliseconds since the last poll(), or -1 if poll() was never called. */
static inline int64_t kc_poll_timer_since(kc_poll_timer_t *t) {
    int64_t last = atomic_load(&t->last_poll_ms);
    return last ? kc_now_ms() - last : -1;
}

/* True when the application has not polled within max.poll.interval.ms. */
static inline int kc_poll_timer_expired(kc_poll_timer_t *t) {
    int64_t since = kc_poll_timer_since(t);
    return since >= 0 && since > t->interval_ms;
}

#endif
