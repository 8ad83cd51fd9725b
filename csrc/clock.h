/* clock: the one monotonic clock of the C core and the Cython layer.
 *
 * Every deadline, timer and "since" in kipconsumer's native code is read from CLOCK_MONOTONIC here,
 * in milliseconds (consumer: poll interval, seek guard, close, auth hold) or microseconds (producer:
 * max.block.ms, flush, transactional calls). Both are the same clock, so a value of one converts to
 * the other by scaling. Realtime (CLOCK_REALTIME) is used only where an API demands an absolute
 * wall-clock time (pthread_cond_timedwait without a monotonic attribute, log timestamps). */
#ifndef KC_CLOCK_H
#define KC_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t kc_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t kc_now_ms(void) {
    return kc_now_us() / 1000;
}

#endif
