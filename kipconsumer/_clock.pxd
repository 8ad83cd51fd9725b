# The one monotonic clock of the native code (csrc/clock.h): milliseconds for the consumer's timers,
# microseconds for the producer's; the same clock. Deadlines, the one rounding rule (up) and the one
# wait slice are clock.h's too.
from libc.stdint cimport int64_t


cdef extern from "clock.h" nogil:
    int64_t kc_now_ms()
    int64_t kc_now_us()
    enum:
        KC_WAIT_SLICE_US
        KC_WAIT_SLICE_MS
        KC_MAX_FINITE_MS
    const int64_t KC_NO_DEADLINE
    int64_t kc_deadline_us(double seconds)
    int64_t kc_deadline_ms(double seconds)
    int kc_ms_until(int64_t deadline_ms)
    int kc_ms_until_us(int64_t deadline_us)
    int kc_slice_ms(int64_t deadline_ms)
    int64_t kc_slice_end_us(int64_t deadline_us)
