# Table of contents of kipconsumer/_producer.pyx and the unit files it includes: the C declarations
# (Python.h's GC tracking, csrc/producer_core.h, csrc/txn_call.h), the per-batch delivery context, and
# each class with its fields: ProduceFuture's C part (_producer_future.pxi), TxnCalls (_producer_txn.pxi),
# TopicCache (_producer_topics.pxi), StatsFeed (_producer_stats.pxi), and ProducerCore (_producer.pyx:
# the handle's lifecycle, the send path with its back-pressure, flush, close).
cimport cython
from libc.stdint cimport int32_t, int64_t
from posix.types cimport pid_t

from kipconsumer._clock cimport (KC_NO_DEADLINE, kc_deadline_us, kc_ms_until_us, kc_now_us,
                                kc_slice_end_us)
from kipconsumer._rdk cimport (rd_kafka_conf_t, rd_kafka_consumer_group_metadata_t, rd_kafka_error_t,
                               rd_kafka_headers_t, rd_kafka_resp_err_t, rd_kafka_t, rd_kafka_topic_partition_list_t,
                               rd_kafka_topic_t)


cdef extern from "Python.h":
    # the cycle collector's tracking, for ProduceFuture (_producer_future.pxi)
    void PyObject_GC_Track(object op)
    void PyObject_GC_UnTrack(object op)
    int PyObject_GC_IsTracked(object op)


cdef extern from *:
    """
    /* type.tp_new(type, args, NULL): a new instance without looking __new__ up or calling
     * __init__ (for ProduceFuture: _FutureCore's tp_new, fields zeroed, objects None). */
    static PyObject *kc_producer_tp_new(PyObject *type, PyObject *args) {
        return ((PyTypeObject *)type)->tp_new((PyTypeObject *)type, args, NULL);
    }
    """
    object _tp_new "kc_producer_tp_new"(object type, object args)


cdef extern from "txn_call.h" nogil:
    ctypedef struct kc_txn_call_t:
        pass
    kc_txn_call_t *kc_txn_call_start(rd_kafka_t *rk, int op, rd_kafka_topic_partition_list_t *offsets,
                                     rd_kafka_consumer_group_metadata_t *cgmd, int timeout_ms)
    int kc_txn_call_wait(kc_txn_call_t *c, int64_t until_us)
    int kc_txn_call_op(const kc_txn_call_t *c)
    rd_kafka_error_t *kc_txn_call_finish(kc_txn_call_t *c)
    void kc_txn_call_release(kc_txn_call_t *c, void (*release)(void *) noexcept nogil, void *arg)
    void kc_txn_call_set_test_hold_ms(int ms)


cdef extern from "producer_core.h" nogil:
    ctypedef struct kc_producer_rec_t:
        kc_producer_rec_t *prev
        kc_producer_rec_t *next
        void *future
        void *callback
        int32_t key_size
        int32_t value_size

    ctypedef struct kc_producer_dr_t:
        kc_producer_rec_t *rec
        int err
        const char *topic
        const char *errstr
        int32_t partition
        int64_t offset
        int64_t timestamp
        int64_t latency_us

    ctypedef struct kc_producer_stats_t:
        int64_t in_flight
        int64_t sent
        int64_t delivered
        int64_t failed
        int64_t timed_out
        int64_t buffer_waits
        int64_t buffer_timeouts
        int64_t dr_batches
        int64_t errors
        int fatal
        int outq_len

    ctypedef struct kc_producer_t:
        rd_kafka_t *rk
        int stats_ready

    kc_producer_t *kc_producer_new(rd_kafka_conf_t *conf, char *errstr, size_t errstr_size)
    int kc_producer_start(kc_producer_t *p,
                          void (*cb)(void *ctx, kc_producer_dr_t *items, size_t n) noexcept nogil,
                          void *ctx)
    rd_kafka_resp_err_t kc_producer_produce(kc_producer_t *p, rd_kafka_topic_t *rkt,
                                            int32_t partition, const void *value,
                                            size_t value_len, const void *key, size_t key_len,
                                            int64_t timestamp, rd_kafka_headers_t *hdrs,
                                            kc_producer_rec_t *rec)
    rd_kafka_resp_err_t kc_producer_produce_wait(kc_producer_t *p, rd_kafka_topic_t *rkt,
                                                 int32_t partition, const void *value,
                                                 size_t value_len, const void *key,
                                                 size_t key_len, int64_t timestamp,
                                                 rd_kafka_headers_t *hdrs,
                                                 kc_producer_rec_t *rec, int64_t deadline_us,
                                                 int *counted)
    void kc_producer_note_buffer_timeout(kc_producer_t *p)
    int64_t kc_producer_flush_until(kc_producer_t *p, int64_t until_us)
    int64_t kc_producer_wait_idle(kc_producer_t *p, int64_t deadline_us)
    void kc_producer_set_closing(kc_producer_t *p)
    rd_kafka_resp_err_t kc_producer_purge(kc_producer_t *p)
    void kc_producer_stop_thread(kc_producer_t *p)
    kc_producer_rec_t *kc_producer_take_all(kc_producer_t *p)
    void kc_producer_destroy(kc_producer_t *p)
    void kc_producer_get_stats(kc_producer_t *p, kc_producer_stats_t *out, char *last_error,
                               size_t last_error_size)
    int kc_producer_on_dr_thread(kc_producer_t *p)
    int kc_producer_auth_error(kc_producer_t *p, char *buf, size_t size)
    char *kc_producer_take_stats(kc_producer_t *p)


cdef struct _BatchCtx:
    # what the delivery callback needs of its producer, without the GIL until it completes futures
    int delivery_timeout_ms
    bint transactional  # a delivery refused for an old producer epoch means: fenced
    int64_t callback_errors
    int64_t work_us


cdef enum:
    # a ProduceFuture's state (_FutureCore.st): concurrent.futures' states, by index
    _ST_PENDING = 0
    _ST_RUNNING = 1
    _ST_CANCELLED = 2
    _ST_CANCELLED_AND_NOTIFIED = 3
    _ST_FINISHED = 4


cdef class _FutureCore:
    # _producer_future.pxi: the C part of ProduceFuture; completed by the delivery path
    # (_producer_delivery.pxi). st is written by _complete() (a future nobody waits on) and by the _state
    # setter (concurrent.futures.Future's own methods)
    cdef kc_producer_rec_t rec    # registry entry (no separate allocation)
    cdef int st                   # _ST_*
    cdef bint lazy_ready          # a condition / waiter / done-callback may exist: notify
    cdef bint md_pending          # delivered: RecordMetadata not built yet
    cdef int32_t partition
    cdef int64_t offset
    cdef int64_t timestamp
    cdef object topic             # str (shared by the records of a batch)
    cdef object res
    cdef object exc
    cdef object _metadata(self)


cdef enum ProducerState:
    # ProducerCore's lifecycle; "closed" (send() and every call but close()/metrics() refused) is any
    # state but OPEN. Each transition is written in one place:
    PRODUCER_NEW = 0              # __init__ has not finished (or failed): no handle
    PRODUCER_OPEN = 1             # NEW -> OPEN at the end of __init__
    PRODUCER_CLOSING = 2          # OPEN/INTERRUPTED -> CLOSING when close() starts (on _closing_thread)
    PRODUCER_INTERRUPTED = 3      # CLOSING -> INTERRUPTED when close()'s flush raised (a signal): records
                                  # stay pending, a later close() finishes
    PRODUCER_RELEASE_PENDING = 4  # CLOSING -> RELEASE_PENDING when close() finished while other calls
                                  # still run: the last one to leave releases the handle
    PRODUCER_RELEASED = 5         # CLOSING/RELEASE_PENDING -> RELEASED in _release(): handle freed


cdef class ProducerCore


cdef class TxnCalls:
    # _producer_txn.pxi: the transactional calls and the one parked by a caller that gave up on it.
    # State: IDLE (parked == NULL) or PARKED; written only by _park() and _take().
    cdef kc_txn_call_t *parked         # a call whose caller gave up; it still runs in librdkafka
    cdef int64_t parked_since_us       # ... started then (kc_now_us)

    cdef void _park(self, kc_txn_call_t *call, int64_t started_us) noexcept
    cdef kc_txn_call_t *_take(self) noexcept
    cdef bint blocked(self) noexcept
    cdef void free_producer(self, kc_producer_t *p) noexcept
    cdef str _blocked_text(self, str op)
    cdef object call(self, ProducerCore core, str op, double timeout_s, list offsets, bytes group_metadata)


cdef class _Topic:
    cdef object name                    # the str it was last looked up with (send()'s one-entry cache)
    cdef rd_kafka_topic_t *rkt          # librdkafka's topic handle
    cdef int partition_count            # partitions known from metadata
    cdef list partitions                # their ids


cdef class TopicCache:
    # _producer_topics.pxi: the topics looked up, and the metadata waits that fill them
    cdef dict by_name                   # str -> _Topic, once its metadata answered; freed with the handle
    cdef _Topic last                    # send()'s one-entry cache: the topic of the previous send()

    cdef _Topic lookup(self, ProducerCore core, str topic, int64_t deadline_us, str who)
    cdef int refresh_partitions(self, ProducerCore core, _Topic t, str topic) except -1
    cdef void destroy_all(self) noexcept


cdef class StatsFeed:
    # _producer_stats.pxi: librdkafka's statistics, served on a calling thread
    cdef object callback                # the user's stats_cb(json: str), or None
    cdef object summary                 # of the last statistics document (kipconsumer._stats), or None

    cdef serve(self, kc_producer_t *p)
    cdef dict metrics(self, kc_producer_t *p, bint closed, const _BatchCtx *ctx, Py_ssize_t topics_known)


@cython.final
cdef class ProducerCore:
    # _producer.pyx; owns the units' objects above (created in __cinit__, never replaced). The units
    # (TxnCalls, TopicCache) get the core as their handle and use only its narrow interface below,
    # the names without a leading underscore: p, max_block_ms, is_open(), enter()/leave(),
    # check_signals(), security_exc() (tests/test_producer_structure.py); StatsFeed gets values only.
    cdef kc_producer_t *p             # the C core (its rd_kafka_t: p.rk); NULL once released
    cdef pid_t pid                    # the process p belongs to: elsewhere it is leaked (_process.pxd)
    cdef _BatchCtx *ctx
    cdef TopicCache _topics           # the topics looked up (send()'s one-entry cache: _topics.last)
    cdef ProducerState _state         # see ProducerState: each transition is written in one place
    cdef unsigned long _closing_thread  # PRODUCER_CLOSING: the thread running close() (threading.get_ident())
    cdef int _active
    cdef readonly int max_block_ms
    cdef readonly int delivery_timeout_ms
    cdef readonly int request_timeout_ms
    cdef readonly long long buffer_memory
    cdef readonly str queue_limits
    cdef readonly str message_max_bytes
    cdef readonly object _key_serializer
    cdef readonly object _value_serializer
    cdef StatsFeed _stats             # librdkafka's statistics: their summary and stats_cb
    cdef TxnCalls _txn                # the transactional calls (txn(), transaction_blocked)

    # -- the units' interface
    cdef int enter(self, str who) except -1      # counts a call using the handle; refused once closing
    cdef void leave(self) noexcept               # ends it (the last one out may release the handle)
    cdef int check_signals(self) except -1       # runs pending signal handlers (may raise)
    cdef object security_exc(self, int err, str what, tuple topics=*)  # the typed security error, or None

    cdef inline bint is_open(self) noexcept:
        """send() and the other calls are accepted (not closing or closed)."""
        return self._state == PRODUCER_OPEN

    # -- the core's own
    cdef void _release(self) noexcept
    cdef object _admit(self, topic, value, key, partition, headers, timestamp, callback, int block_ms)
    cdef object _send(self, topic, value, key, partition, headers, timestamp, callback, int block_ms)
    cdef int _wait_for_space(self, rd_kafka_topic_t *rkt, int32_t part, const char *vptr, Py_ssize_t vlen,
                             const char *kptr, Py_ssize_t klen, int64_t ts, rd_kafka_headers_t *hdrs,
                             kc_producer_rec_t *rec, int64_t deadline_us) except? -1
    cdef object _send_error(self, int err, str topic, int64_t start_us)
    cdef int64_t _flush_until(self, int64_t deadline_us) except? -2
