# The one monotonic clock of the native code (csrc/clock.h): milliseconds for the consumer's timers,
# microseconds for the producer's; the same clock.
from libc.stdint cimport int64_t


cdef extern from "clock.h" nogil:
    int64_t kc_now_ms()
    int64_t kc_now_us()
