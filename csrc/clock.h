/* clock: the one monotonic clock of the C core and the Cython layer.
 *
 * Every deadline, timer and "since" in kipconsumer's native code is read from CLOCK_MONOTONIC here,
 * in milliseconds (consumer: poll interval, seek guard, close, auth hold) or microseconds (producer:
 * max.block.ms, flush, transactional calls). Both are the same clock, so a value of one converts to
 * the other by scaling. Realtime (CLOCK_REALTIME) is used only where an API demands an absolute
 * wall-clock time (pthread_cond_timedwait without a monotonic attribute, log timestamps).
 * A deadline is a point on this clock: the consumer holds its deadlines in ms, the producer in us. */
#ifndef KC_CLOCK_H
#define KC_CLOCK_H

#include <math.h>
#include <stdint.h>
#include <time.h>

/* The one wait slice: a blocking native call waits at most this long without the GIL before it
 * checks for signals, wakeup() and close() (kipconsumer._timeouts.WAIT_SLICE_S is its twin). */
#define KC_WAIT_SLICE_US 50000
#define KC_WAIT_SLICE_MS (KC_WAIT_SLICE_US / 1000)
/* The deadline of an unbounded wait (a timeout of math.inf): never reached. */
#define KC_NO_DEADLINE INT64_MAX
/* The longest wait in milliseconds librdkafka's int timeouts take (kipconsumer._timeouts.MAX_FINITE_MS). */
#define KC_MAX_FINITE_MS 2147483646

static inline int64_t kc_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t kc_now_ms(void) {
    return kc_now_us() / 1000;
}

/* Deadlines. A timeout is checked once at the facade (kipconsumer._timeouts: seconds >= 0 or inf)
 * and becomes an absolute deadline on this clock here, once; every wait is derived from it. The one
 * rounding rule is up: a short positive timeout never becomes 0 (librdkafka's non-blocking). */

/* The kc_now_us() deadline `seconds` from now; KC_NO_DEADLINE for inf. */
static inline int64_t kc_deadline_us(double seconds) {
    if (isinf(seconds))
        return KC_NO_DEADLINE;
    if (seconds <= 0)
        return kc_now_us();
    if (seconds * 1000.0 >= (double)KC_MAX_FINITE_MS)
        return kc_now_us() + (int64_t)KC_MAX_FINITE_MS * 1000;
    return kc_now_us() + (int64_t)ceil(seconds * 1e6);
}

/* The kc_now_ms() deadline `seconds` from now (whole milliseconds, rounded up); KC_NO_DEADLINE for inf. */
static inline int64_t kc_deadline_ms(double seconds) {
    if (isinf(seconds))
        return KC_NO_DEADLINE;
    if (seconds <= 0)
        return kc_now_ms();
    if (seconds * 1000.0 >= (double)KC_MAX_FINITE_MS)
        return kc_now_ms() + KC_MAX_FINITE_MS;
    return kc_now_ms() + (int64_t)ceil(seconds * 1000.0);
}

/* Milliseconds left until a kc_now_us() deadline, rounded up, 0 once passed, at most KC_MAX_FINITE_MS:
 * the timeout to hand librdkafka for a wait that ends at the deadline. */
static inline int kc_ms_until_us(int64_t deadline_us) {
    int64_t left = deadline_us - kc_now_us();
    if (left <= 0)
        return 0;
    if (left >= (int64_t)KC_MAX_FINITE_MS * 1000)
        return KC_MAX_FINITE_MS;
    return (int)((left + 999) / 1000);
}

/* Milliseconds left until a kc_now_ms() deadline, 0 once passed, at most KC_MAX_FINITE_MS. */
static inline int kc_ms_until(int64_t deadline_ms) {
    int64_t left = deadline_ms - kc_now_ms();
    if (left <= 0)
        return 0;
    return (int)(left < KC_MAX_FINITE_MS ? left : KC_MAX_FINITE_MS);
}

/* The next wait in milliseconds towards a kc_now_ms() deadline: at most KC_WAIT_SLICE_MS, 0 once passed. */
static inline int kc_slice_ms(int64_t deadline_ms) {
    int64_t left = deadline_ms - kc_now_ms();
    if (left <= 0)
        return 0;
    return (int)(left < KC_WAIT_SLICE_MS ? left : KC_WAIT_SLICE_MS);
}

/* The end of the next wait slice towards a kc_now_us() deadline. */
static inline int64_t kc_slice_end_us(int64_t deadline_us) {
    int64_t until = kc_now_us() + KC_WAIT_SLICE_US;
    return until < deadline_us ? until : deadline_us;
}

#endif
