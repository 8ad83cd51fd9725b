# librdkafka's log lines -> Python logging (csrc/log_ring.h): install kc_log_cb on a conf, and call
# drain_logs() from the client's own calls, on the caller's thread.
from libc.stdint cimport uint64_t

from kipconsumer._rdk cimport rd_kafka_t


cdef extern from "log_ring.h" nogil:
    ctypedef struct kc_log_entry_t:
        double ts
        int level
        char name[64]
        char fac[32]
        char msg[512]
    size_t kc_log_pending()
    size_t kc_log_take(kc_log_entry_t *out, size_t max, uint64_t *dropped)
    void kc_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)


cdef inline int drain_logs() except -1:
    """Hands the waiting librdkafka log lines to the logger kipconsumer.librdkafka."""
    cdef kc_log_entry_t buf[8]
    cdef uint64_t dropped = 0
    cdef size_t n, i
    if not kc_log_pending():
        return 0
    from kipconsumer._rdklog import emit, emit_dropped
    while True:
        n = kc_log_take(buf, 8, &dropped)
        if dropped:
            emit_dropped(dropped)
        for i in range(n):
            emit(buf[i].level, buf[i].name.decode(errors="replace"), buf[i].fac.decode(errors="replace"),
                 buf[i].msg.decode(errors="replace"), buf[i].ts)
        if n < 8:
            return 0
