# cython: language_level=3, boundscheck=False, wraparound=False
"""NativeConsumer: the librdkafka consumer handle and its C core, driven from Python.

Everything per record (taking messages off librdkafka, the fetch buffer, the drain, offset
bookkeeping) happens in csrc/ without the GIL. This extension owns the handle's lifetime and
translates librdkafka's results into kipconsumer's typed errors. Each concept's state is owned by a
class declared with its fields and methods in _consumer.pxd (the table of contents), the only
writer of that state; NativeConsumer holds one of each. The files included below hold each class's
method bodies and the consumer's operations of that concern (functions taking the NativeConsumer):

- _consumer_assignment.pxi  AssignmentChanges: the owner's *assign() calls, and when metrics() may
                            look partitions up in librdkafka
- _consumer_listener.pxi    ListenerInvoker: the one place the rebalance listener is called
- _consumer_membership.pxi  Membership (MemberState transitions), subscribe/unsubscribe/rejoin, and
                            the rebalance events served by poll()
- _consumer_commits.pxi     AsyncCommits (commit_async()'s queue and callbacks), offset store,
                            commit-and-wait, committed lookup, refused commits' errors
- _consumer_close.pxi       CloseControl (ClosePhase transitions): settle, librdkafka's close, the
                            final revoke, the hand-over to the reaper
- _consumer_poll.pxi        the poll loop around csrc/consumer_core.c, consumer errors, the security
                            errors (SecurityHold: kipconsumer._security_hold, shared by every client)
- _consumer_offsets.pxi     seek, pause/resume, watermarks, offsets by time, StableOffsets

The public, typed facade is kipconsumer.consumer.KafkaConsumer; docs/design.md maps the layers.
"""

import logging

cimport cython
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, strcmp, strdup
from posix.unistd cimport usleep

from kipconsumer._conf cimport conf_from_dict
from kipconsumer._core cimport *
from kipconsumer._cstr cimport c_string
from kipconsumer._logring cimport drain_logs, kc_log_cb
from kipconsumer._process cimport foreign_process, this_process
from kipconsumer._rdk cimport *
from kipconsumer._topic_metadata cimport kc_topic_partition_ids
from kipconsumer._records cimport ConsumerRecords, records_set_deserializers, records_take

from kipconsumer.errors import (AuthenticationError, CommitFailedError, ConfigError, GroupAuthorizationError,
                                IllegalStateError, KafkaError, KafkaTimeoutError, NoOffsetForPartitionError,
                                OffsetOutOfRangeError, RebalanceInProgressError, WakeupError)
from kipconsumer._rdklog import emit as rdklog_emit
from kipconsumer._loader import allocator_mallctl
from kipconsumer._security_errors import is_security_error, security_error
from kipconsumer._security_hold import SecurityHold
from kipconsumer._stats import summary as stats_summary
from kipconsumer._transition import IllegalTransitionError
from kipconsumer.structs import OffsetAndMetadata, TopicPartition

log = logging.getLogger("kipconsumer.consumer")

COMMIT_FAILED_MESSAGE = (
    "Commit cannot be completed since the group has already rebalanced and assigned the "
    "partitions to another member. This means that the time between subsequent calls to "
    "poll() was longer than the configured max.poll.interval.ms ({interval} ms), which "
    "typically implies that the poll loop is spending too much time processing messages. "
    "You can address this either by increasing max.poll.interval.ms or by reducing the "
    "maximum size of batches returned in poll() with max.poll.records."
)

_GROUP_GONE_ERRORS = frozenset([
    RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID, RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION,
    RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID,
    RD_KAFKA_RESP_ERR__ASSIGNMENT_LOST,
])


cdef int _ms(double seconds) noexcept nogil:
    """Milliseconds for librdkafka's own bound on a wait of a checked timeout in seconds
    (kipconsumer._timeouts): derived from its deadline (csrc/clock.h: rounded up, clamped)."""
    return kc_ms_until(kc_deadline_ms(seconds))


cdef int64_t _deadline_ms(double seconds) noexcept nogil:
    """kc_now_ms() deadline for a checked timeout in seconds; KC_NO_DEADLINE for inf."""
    return kc_deadline_ms(seconds)


cdef int _slice(int64_t deadline) noexcept nogil:
    """The next wait in ms towards `deadline`: at most KC_WAIT_SLICE_MS, 0 once it has passed.
    Between two waits a call checks for signals, so Ctrl+C interrupts it within a slice."""
    return kc_slice_ms(deadline)


cdef str _err_name(rd_kafka_resp_err_t err):
    return rd_kafka_err2name(err).decode()


cdef str _err_str(rd_kafka_resp_err_t err):
    return rd_kafka_err2str(err).decode()


cdef list _tp_list(rd_kafka_topic_partition_list_t *parts):
    cdef int i
    return [TopicPartition(parts.elems[i].topic.decode(), parts.elems[i].partition)
            for i in range(parts.cnt)]


cdef rd_kafka_topic_partition_list_t *_c_list(object tps) except NULL:
    """TopicPartitions -> a new librdkafka list (caller destroys)."""
    cdef rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new(max(1, len(tps)))
    try:
        for tp in tps:
            rd_kafka_topic_partition_list_add(lst, c_string(tp.topic, "topic"), tp.partition)
    except BaseException:
        rd_kafka_topic_partition_list_destroy(lst)
        raise
    return lst


cdef rd_kafka_event_t *_await_event(rd_kafka_queue_t *q, int64_t deadline, bint interruptible) except? NULL:
    """The next event on `q`, or NULL once `deadline` (kc_now_ms clock) passed. Waits without the GIL in
    slices of KC_WAIT_SLICE_MS; between them a signal's exception is raised when `interruptible`."""
    cdef rd_kafka_event_t *ev
    while True:
        with nogil:
            ev = rd_kafka_queue_poll(q, _slice(deadline))
        if ev != NULL or kc_now_ms() >= deadline:
            return ev
        if interruptible:
            PyErr_CheckSignals()


cdef int _admin_request_timeout_ms(int64_t deadline) noexcept:
    """librdkafka's own bound on an admin request whose answer is awaited until `deadline`: past our
    wait (at most an hour), and never under 30 s: librdkafka 2.16 aborts the process
    (rd_kafka_enq_once_del_source_return: eonce->refcnt > 0) when its admin request timer fires as the
    response arrives, which short request timeouts made frequent."""
    cdef int64_t left = deadline - kc_now_ms()
    if left > 3595000:
        return 3600000
    return <int>max(30000, left + 5000)


cdef void _drop_error(rd_kafka_error_t *error) noexcept nogil:
    """Destroys a librdkafka error object nobody needs to see (NULL: nothing)."""
    if error != NULL:
        rd_kafka_error_destroy(error)


cdef int _raise_error(rd_kafka_error_t *error, str what) except -1:
    """Raises KafkaError("<what> failed: ...") for a non-NULL librdkafka error object (destroying it)."""
    if error == NULL:
        return 0
    msg = rd_kafka_error_string(error).decode()
    rd_kafka_error_destroy(error)
    raise KafkaError(f"{what} failed: {msg}")


cdef int _stats_cb(rd_kafka_t *rk, char *json_buf, size_t json_len, void *opaque) noexcept with gil:
    """statistics.interval.ms: served by poll() (the consumer queue), on the thread calling it."""
    cdef NativeConsumer self = <NativeConsumer>opaque
    if self._close.is_done() or self.core == NULL:
        return 0
    try:
        self._on_stats(json_buf[:json_len].decode(errors="replace"))
    except BaseException as exc:  # the application's stats_cb: raised from poll(), as a listener's
        self._keep_exception(exc)
        self.core.abort_poll = 1
    return 0


cdef void _error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) noexcept with gil:
    """librdkafka's client-level errors (a broker connection failed, ...), served by poll() on its
    thread. Without this callback librdkafka only logs them, so a consumer with wrong credentials
    would retry for ever in silence: authentication and TLS failures (kipconsumer._security_errors)
    are kept for poll() to raise. Every error is still logged as librdkafka logs it (facility ERROR)."""
    cdef NativeConsumer self = <NativeConsumer>opaque
    try:
        name = rd_kafka_name(rk).decode(errors="replace")
        text = reason.decode(errors="replace") if reason != NULL else ""
        rdklog_emit(3, name, "ERROR", f"{name}: {text}")
        if not self._close.is_done() and is_security_error(_err_name(<rd_kafka_resp_err_t>err), text):
            self._security.report(err, text)
    except BaseException as exc:  # nothing may propagate into librdkafka: poll() raises it (a signal
        self._keep_exception(exc)  # handler's KeyboardInterrupt, run inside this callback, is not lost)


cdef void _rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                        rd_kafka_topic_partition_list_t *parts, void *opaque) noexcept with gil:
    cdef NativeConsumer self = <NativeConsumer>opaque
    if self.core == NULL:  # not expected (callbacks are served by poll() only): answer librdkafka
        _drop_error(kc_answer_rebalance(rk, err, parts, self._cooperative_cfg))
        return
    try:
        _on_rebalance(self, err, parts)
    except BaseException as exc:  # never let an exception cross into librdkafka
        self._keep_exception(exc)
        self.core.abort_poll = 1
    if self._close.requested:  # close() was called meanwhile: hand out no record (see request_close)
        self.core.abort_poll = 1


# What librdkafka writes to the consumer's eventfd when a commit result arrives (see __cinit__).
cdef uint64_t _COMMIT_EVENT = 1


# auto.offset.reset (NativeConsumer._reset_policy)
cdef enum:
    RESET_LATEST = 0
    RESET_EARLIEST = 1
    RESET_NONE = 2


cdef inline bint _coordinator_moving(rd_kafka_resp_err_t err) noexcept:
    """The group coordinator is moving or loading: an OffsetFetch asked again soon is answered."""
    return (err == RD_KAFKA_RESP_ERR_NOT_COORDINATOR or err == RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE
            or err == RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS)


cdef inline bint _seek_again(rd_kafka_resp_err_t err) noexcept:
    return err == RD_KAFKA_RESP_ERR__STATE or err == RD_KAFKA_RESP_ERR__OUTDATED


cdef class _Handle:
    """Owns the rd_kafka_t; destroys it when the consumer and every batch holding its messages are
    gone (rd_kafka_destroy blocks until all messages are released). With a `reaper` (close() timed
    out, or the consumer was dropped without close()), the rest of librdkafka's close and the
    destruction run on the reaper's thread instead (csrc/consumer_close.c). In a process other than
    the one that created it (a child made by fork()), everything is leaked (_process.pxd)."""

    def __dealloc__(self):
        cdef kc_reaper_t *r = self.reaper
        if foreign_process(self.pid):
            return
        self.reaper = NULL
        if r != NULL:
            self.rk = NULL
            r.hb = self.hb
            self.hb = NULL
            kc_reaper_start(r)
        elif self.rk != NULL:
            with nogil:
                rd_kafka_destroy(self.rk)
            self.rk = NULL
        kc_hb_free(self.hb)
        self.hb = NULL


ctypedef struct _PartCopy:
    char *topic
    int32_t partition
    int64_t position
    size_t len


ctypedef struct _MetricsCopy:
    size_t records, bytes, paused
    int64_t since_poll, hb_ok_ms
    uint64_t hb_ok, hb_errors, records_returned, polls, poll_time_us, dropped_refetched
    uint64_t dropped_below_committed, dropped_before_seek, seek_retries, seek_resets, barrier_polls
    uint64_t prefetch_moved, poll_moved
    int prefetch_running
    size_t prefetched
    uint64_t stall_pauses, stall_released, stall_refetched
    int stall_paused


cdef void _copy_metrics(kc_consumer_t *core, _MetricsCopy *m, _PartCopy *parts, size_t n,
                        int64_t now) noexcept:
    """Copies what metrics() shows of `core` (and of its first `n` partitions) without running Python
    code, so no other thread runs meanwhile."""
    cdef size_t i
    cdef kc_partition_t *p
    m.records = core.fb.records
    m.bytes = core.fb.bytes
    m.since_poll = kc_poll_timer_since(&core.poll_timer)
    m.hb_ok_ms = core.heartbeat.last_ok_ms
    m.hb_ok = core.heartbeat.ok
    m.hb_errors = core.heartbeat.errors
    m.records_returned = core.records_returned
    m.polls = core.polls
    m.poll_time_us = core.poll_time_us
    m.dropped_refetched = core.dropped_refetched
    m.dropped_below_committed = core.dropped_below_committed
    m.dropped_before_seek = core.dropped_before_seek
    m.seek_retries = core.seek_retries
    m.seek_resets = core.resets_after_seek
    m.barrier_polls = core.barrier_polls
    m.prefetched = rd_kafka_queue_length(core.fetchq) if core.fetchq != NULL else 0
    m.prefetch_running = core.prefetch.running
    m.prefetch_moved = core.prefetch.moved
    m.poll_moved = core.poll_moved
    m.stall_pauses = core.stall.pauses
    m.stall_released = core.stall.released
    m.stall_refetched = core.stall.refetched
    m.stall_paused = core.stall.paused
    m.paused = 0
    for i in range(n):
        p = kc_ps_at(&core.fb, i)
        parts[i].topic = strdup(p.topic)
        parts[i].partition = p.partition
        parts[i].position = p.position
        parts[i].len = p.len
        if kc_ps_paused(p):
            m.paused += 1


cdef object _copied_partition_lag(NativeConsumer c, _Handle handle, _PartCopy *p, unsigned long mark):
    """_partition_lag() of a copied partition (metrics(), any thread): None when the copy failed, the
    position or end offset is unknown, or librdkafka may no longer be asked about the partition
    (_may_look_up: close() began, or the assignment changed since the copy was taken at `mark`)."""
    cdef rd_kafka_topic_partition_list_t *lst
    cdef int64_t low = -1, high = -1, pos
    if p.topic == NULL or handle is None or handle.rk == NULL:
        return None
    if p.position != KC_POSITION_UNKNOWN:
        pos = p.position
    elif p.len == 0:
        if not _may_look_up(c, mark):  # C only from here to the lookup
            return None
        lst = rd_kafka_topic_partition_list_new(1)
        rd_kafka_topic_partition_list_add(lst, p.topic, p.partition)
        rd_kafka_position(handle.rk, lst)
        pos = lst.elems[0].offset
        rd_kafka_topic_partition_list_destroy(lst)
        if pos < 0:
            return None
    else:
        return None
    if c._read_committed:  # ListOffsets requests (StableOffsets): no partition lookup
        if c.rk == NULL or not c._close.is_open():
            return None
        end = _cached_end_offset(c, p.topic, p.partition)
        return None if end is None else end - pos
    if (not _may_look_up(c, mark)  # C only from here to the lookup
            or rd_kafka_get_watermark_offsets(handle.rk, p.topic, p.partition, &low, &high)
            != RD_KAFKA_RESP_ERR_NO_ERROR or high < 0):
        return None
    return high - pos


include "_consumer_assignment.pxi"
include "_consumer_listener.pxi"
include "_consumer_membership.pxi"
include "_consumer_commits.pxi"
include "_consumer_close.pxi"
include "_consumer_poll.pxi"
include "_consumer_offsets.pxi"
include "_oauth_cb.pxi"


# The cycle collector must not clear the members first (tp_clear, e.g. a rebalance listener holding
# its consumer): __dealloc__ and librdkafka's callbacks read the state classes (CloseControl,
# AsyncCommits...) and hand the unfinished close to the reaper through the handle.
@cython.no_gc_clear
cdef class NativeConsumer:
    """One librdkafka consumer and its fetch buffer. Not thread-safe, except wakeup(), request_close()
    and metrics(), which any thread may call."""

    def __cinit__(self, settings):
        """``settings``: a ``kipconsumer.config.ConsumerSettings``, the one source of every value
        (librdkafka's dict and the derived bounds); nothing here falls back to a default of its own."""
        cdef dict rdkafka = settings.rdkafka
        cdef int max_poll_records = settings.max_poll_records
        cdef long max_poll_interval_ms = settings.max_poll_interval_ms
        cdef bint auto_commit = settings.enable_auto_commit
        cdef long default_api_timeout_ms = settings.default_api_timeout_ms
        stats_cb = settings.stats_cb
        cdef bint prefetch_thread = settings.poll_prefetch_thread
        cdef int64_t stall_pause_ms = settings.poll_stall_fetch_pause_ms
        key_deserializer = settings.key_deserializer
        value_deserializer = settings.value_deserializer
        oauth_cb = settings.oauth_cb
        cdef char errstr[512]
        cdef rd_kafka_conf_t *conf
        cdef kc_fairness_t mode = (KC_FAIRNESS_GREEDY if settings.poll_fairness == "greedy"
                                   else KC_FAIRNESS_PROPORTIONAL)
        self.pid = this_process()  # first: __dealloc__ reads it
        self._close = CloseControl.__new__(CloseControl)  # __dealloc__ and the callbacks read it
        self._commits = AsyncCommits()
        self._security = SecurityHold()
        self._stats_cb = stats_cb
        self._key_deser = key_deserializer
        self._value_deser = value_deserializer
        self._lso = StableOffsets()
        self._assignment = AssignmentChanges()
        self._membership = Membership()
        self.max_poll_interval_ms = max_poll_interval_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.auto_commit = auto_commit
        self.has_group = bool(rdkafka.get("group.id"))
        self._session_timeout_ms = settings.session_timeout_ms
        self._heartbeat_interval_ms = settings.heartbeat_interval_ms
        self._cooperative_cfg = settings.cooperative
        self._read_committed = settings.read_committed
        self._reset_policy = {"earliest": RESET_EARLIEST, "error": RESET_NONE}.get(
            str(rdkafka.get("auto.offset.reset", "latest")), RESET_LATEST)
        if not self.has_group:
            # librdkafka's assign() needs a group handle; a private id that is never joined
            # or committed to (commits are refused without the user's group.id).
            rdkafka = dict(rdkafka)
            rdkafka["group.id"] = f"kipconsumer-assign-only-{id(self):x}"
            rdkafka["enable.auto.commit"] = "false"
            self.auto_commit = False
        conf = conf_from_dict(rdkafka)
        self._group_id = str(rdkafka["group.id"]).encode()
        rd_kafka_conf_set_rebalance_cb(conf, _rebalance_cb)
        rd_kafka_conf_set_log_cb(conf, kc_log_cb)
        rd_kafka_conf_set_error_cb(conf, _error_cb)
        _oauth_install(conf, oauth_cb)
        rd_kafka_conf_set_stats_cb(conf, _stats_cb)  # only called with statistics.interval.ms > 0
        rd_kafka_conf_set_opaque(conf, <void *>self)
        self.core = kc_consumer_new(conf, max_poll_records, mode, max_poll_interval_ms,
                                    errstr, sizeof(errstr))
        if self.core == NULL:
            rd_kafka_conf_destroy(conf)
            raise KafkaError(errstr.decode(errors="replace"))
        self.core.ring_max_records = settings.fetch_buffer_max_records
        self.core.ring_max_bytes = settings.fetch_buffer_max_bytes
        self.out = <rd_kafka_message_t **>malloc(max_poll_records * sizeof(rd_kafka_message_t *))
        self.rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr))
        if self.rk == NULL:
            rd_kafka_conf_destroy(conf)
            kc_hb_free(self.core.heartbeat)  # no handle ever used it
            kc_consumer_free(self.core)
            self.core = NULL
            drain_logs()
            raise ConfigError(errstr.decode(errors="replace"))
        self._handle = _Handle.__new__(_Handle)
        self._handle.rk = self.rk
        self._handle.hb = self.core.heartbeat
        self._handle.pid = self.pid
        if kc_consumer_attach(self.core, self.rk) != 0:
            raise KafkaError("cannot attach to librdkafka's consumer queue")
        _oauth_start(self.rk, oauth_cb)
        self._commits.open(self.rk, self.core.wake_fd)
        if prefetch_thread:
            kc_consumer_prefetch_start(self.core)  # if it cannot start, poll() moves the records itself
        if stall_pause_ms > 0:
            # librdkafka's allocator gives back what a stall released (the bundled jemalloc: purged)
            self.core.stall.mallctl = <kc_mallctl_fn><uintptr_t>allocator_mallctl()
            kc_consumer_stall_start(self.core, stall_pause_ms)  # if it cannot start, fetching goes on as without it
        drain_logs()

    def __dealloc__(self):
        if foreign_process(self.pid):
            return  # inherited through fork(): the handle, the core and its threads are leaked
        if self.rk != NULL and not self._close.is_done():
            # Dropped without close(): rd_kafka_destroy() would close the consumer itself and run the
            # rebalance callback on this object while it is being freed. The reaper finishes the
            # close without Python instead: auto-commit of stored offsets, LeaveGroup.
            _abandon(self, NULL)
        self._destroy()

    cdef void _destroy(self) noexcept:
        self._last_batch = None  # the caller has it, or nobody: either way not ours to keep alive
        if self._commits is not None:  # None: __cinit__ failed before it
            self._commits.destroy()
        if self._lso is not None:
            self._lso.destroy()
        cdef kc_consumer_t *core = self.core
        self.core = NULL
        if core != NULL:
            # joins the prefetch thread and takes librdkafka's queue locks: never with the GIL held
            # (a librdkafka thread inside a callback waiting for the GIL would wait for ever)
            with nogil:
                kc_consumer_free(core)
        if self.rk != NULL:
            _oauth_stop(self.rk)
            self.rk = NULL
            # destroys rk now, or when the last batch holding its messages is freed
            self._handle = None
        if self.out != NULL:
            free(self.out)
            self.out = NULL

    # ---------------------------------------------------------------- state checks and errors
    cdef int _check_open(self) except -1:
        if self._close.is_done():
            raise IllegalStateError("This consumer has already been closed.")
        return 0

    cdef int _check_not_in_callback(self, str method) except -1:
        """poll(), subscribe(), unsubscribe(), assign() and close() serve or change what the callbacks run
        inside of: not allowed from a rebalance listener or a commit_async() callback."""
        cdef bint in_listener = self._membership.listener.running != 0
        if in_listener or self._commits.in_callback:
            where = "a rebalance listener" if in_listener else "a commit_async() callback"
            raise IllegalStateError(
                f"{method}() cannot be called from {where}: listeners and commit callbacks run inside "
                f"poll() (or close()), and may call the consumer's other methods, but not poll(), "
                f"subscribe(), unsubscribe(), assign() or close(); call it after poll() returns")
        return 0

    cdef object _raise(self, rd_kafka_resp_err_t err, str what, str detail=None, tuple topics=()):
        sec = security_error(_err_name(err), detail or _err_str(err), what=what, topics=topics,
                             group_id=self._group_id.decode(errors="replace") if self._group_id else None)
        if sec is not None:
            raise sec
        _check_security(self, what)  # e.g. a timeout because the login was refused
        if err == RD_KAFKA_RESP_ERR__TIMED_OUT:
            raise KafkaTimeoutError(f"{what}: {_err_str(err)}", code=_err_name(err))
        raise KafkaError(f"{what}: {_err_str(err)}", code=_err_name(err))

    cdef _keep_exception(self, BaseException exc):
        """Keeps the first exception of a callback run where it cannot propagate, for _raise_pending."""
        if self._pending_exc is None:
            self._pending_exc = exc

    cdef _raise_pending(self):
        exc = self._pending_exc
        if exc is not None:
            self._pending_exc = None
            raise exc

    cdef bint _cooperative(self) noexcept:
        """The group's rebalance protocol is COOPERATIVE. Inside close() the configured assignor decides
        without asking librdkafka: rd_kafka_rebalance_protocol() is a request to the group handle,
        which may be dropped unanswered once the handle has terminated, and it returns NULL (or
        "NONE") while the handle terminates."""
        if self._close.closing():
            return self._cooperative_cfg
        cdef const char *proto = rd_kafka_rebalance_protocol(self.rk)
        if proto == NULL or strcmp(proto, b"NONE") == 0:
            return self._cooperative_cfg
        return strcmp(proto, b"COOPERATIVE") == 0

    # membership counters (Membership), for metrics() and the tests
    @property
    def rebalances(self):
        return self._membership.rebalances

    @property
    def poll_interval_expiries(self):
        return self._membership.poll_interval_expiries

    @property
    def stale_epoch_retries(self):
        return self._membership.stale_epoch_retries

    @property
    def revoked_records_dropped(self):
        return self._membership.revoked_records_dropped

    @property
    def in_callback(self):
        """True inside a rebalance listener or a commit_async() callback."""
        return bool(self._membership.listener.running or self._commits.in_callback)

    # ---------------------------------------------------------------- subscribe / assign
    def subscribe(self, list topics, listener):
        self._check_open()
        self._check_not_in_callback("subscribe")
        if not self._membership.subscription and self.core.fb.n:
            raise IllegalStateError("subscribe() on a consumer with partitions given to assign(): "
                                    "subscription to topics and manual assignment are mutually exclusive "
                                    "(as in Java); call unsubscribe() first")
        _member_subscribed(self, topics, listener)

    def subscription(self):
        return set(self._membership.subscription)

    def unsubscribe(self):
        self._check_open()
        self._check_not_in_callback("unsubscribe")
        _member_unsubscribed(self)

    def assign(self, list tps):
        self._check_open()
        self._check_not_in_callback("assign")
        if self._membership.subscription:
            if not tps:  # Java: assign() of no partitions is unsubscribe()
                return self.unsubscribe()
            raise IllegalStateError("assign() on a subscribed consumer: subscription to topics and manual "
                                    "assignment are mutually exclusive (as in Java); call unsubscribe() first")
        cdef rd_kafka_topic_partition_list_t *lst = _c_list(tps)
        cdef rd_kafka_resp_err_t err
        cdef int i
        # Java semantics: assign() replaces the assignment.
        current = set(self.assignment())
        for tp in current - set(tps):
            kc_ps_remove(&self.core.fb, c_string(tp.topic, "topic"), tp.partition)
        for i in range(lst.cnt):
            lst.elems[i].offset = RD_KAFKA_OFFSET_STORED
        try:
            _buffer_partitions(self, lst)
        except MemoryError:
            rd_kafka_topic_partition_list_destroy(lst)
            raise
        self._assignment.begin()
        with nogil:
            err = rd_kafka_assign(self.rk, lst if lst.cnt else NULL)
        self._assignment.end()
        rd_kafka_topic_partition_list_destroy(lst)
        if err:
            self._raise(err, "assign")

    def assignment(self):
        cdef size_t i
        if self.core == NULL:
            return set()
        return {TopicPartition(kc_ps_at(&self.core.fb, i).topic.decode(), kc_ps_at(&self.core.fb, i).partition)
                for i in range(self.core.fb.n)}

    def controller_id(self):
        """The cluster's controller id from librdkafka's last Metadata answer, without waiting; -1 when
        none is known (no answer yet, or an answer that listed no broker: a fenced single broker)."""
        cdef int32_t ctrl
        if self.rk == NULL:
            return -1
        with nogil:
            ctrl = rd_kafka_controllerid(self.rk, 0)
        return ctrl

    def add_brokers(self, str brokers):
        """Adds ``brokers`` (a bootstrap.servers list) to librdkafka's brokers: a broker of the same
        address that is being decommissioned is not reused, so a fresh one connects and asks for
        metadata (kipconsumer._rebootstrap). Returns how many were added or found."""
        cdef bytes b = brokers.encode()
        cdef const char *c = b
        cdef int n
        if self.rk == NULL:
            return 0
        with nogil:
            n = rd_kafka_brokers_add(self.rk, c)
        return n

    # ---------------------------------------------------------------- poll

    cdef kc_poll_status_t _poll_core(self, int timeout_ms) except *:
        cdef kc_poll_status_t st
        cdef size_t n = 0
        self.core.polls += 1  # kc_consumer_poll() counts none: a poll() counts once, whatever its slices
        with nogil:
            st = kc_consumer_poll(self.core, timeout_ms, self.out, &n)
        return st

    def hold(self):
        """Takes the owner lock (csrc/owner_lock.h) for a consumer call; nests on one thread.
        Waits without the GIL (the prefetch thread holds it for one chunk at most, the stall thread
        for one pause). Nothing to take without either thread."""
        if self.core != NULL and (self.core.prefetch.locking or self.core.stall.locking):
            with nogil:
                kc_consumer_hold(self.core)

    def release(self):
        """Releases one level of hold()."""
        if self.core != NULL:
            kc_consumer_release(self.core)

    def poll(self, double timeout):
        """Up to max.poll.records records; waits up to `timeout` seconds (inf: no bound) for some.

        Waits in slices of KC_WAIT_SLICE_MS and checks for signals between them: a KeyboardInterrupt
        raised there leaves every record not yet returned buffered. Returns an empty batch at once
        when close() is requested from another thread (request_close). The caller holds the owner
        lock (hold(): KafkaConsumer's thread contract takes it for the call), so a poll() takes two
        levels of it, the facade's and kc_consumer_poll()'s, not three."""
        self._check_open()
        if self._close.closing():
            raise IllegalStateError("poll() cannot be called while close() is in progress "
                                    "(e.g. from a rebalance listener)")
        self._check_not_in_callback("poll")
        if self._in_poll:
            raise IllegalStateError("poll() cannot be called while poll() runs on this thread (e.g. "
                                    "from a signal handler); call wakeup() there instead")
        self._in_poll = True
        try:
            return _poll(self, timeout)
        finally:
            self._in_poll = False

    @property
    def polls(self):
        """poll() calls so far: the generation unreturn() compares."""
        return self.core.polls if self.core != NULL else 0

    def unreturn(self, int64_t since):
        """The records the last poll() returned never reached the application (an exception raised
        after the native poll, e.g. a signal's KeyboardInterrupt): the next poll() returns them again
        (their partitions are sought back, _rewind). Only a poll that started after `since` (a `polls`
        value) and before any other call of poll(); returns how many records that covers (0: none)."""
        batch = self._last_batch
        if batch is None or self._last_gen <= since or self.core == NULL or not self._close.is_open():
            return 0
        self._last_batch = None
        return _rewind(self, batch)

    def request_close(self):
        """close() was called from another thread while this consumer's owner thread is in a call: a
        blocked or later poll() returns an empty batch at once (no WakeupError, no record handed out),
        so that the owner's call returns and close() can run. Any thread."""
        self._close.request()
        if self.core != NULL:
            kc_consumer_wakeup(self.core)

    cdef _store_positions(self, object only):
        """Hands positions of returned records to librdkafka's offset store (auto-commit)."""
        cdef rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new(max(1, self.core.fb.n))
        cdef kc_partition_t *p
        cdef size_t i
        for i in range(self.core.fb.n):
            p = kc_ps_at(&self.core.fb, i)
            kc_consumer_step_over_markers(self.core, p)
            if p.position == KC_POSITION_UNKNOWN or p.position == p.stored:
                continue
            if only is not None and TopicPartition(p.topic.decode(), p.partition) not in only:
                continue
            rd_kafka_topic_partition_list_add(lst, p.topic, p.partition).offset = p.position
            kc_ps_mark_stored(p)
        if lst.cnt:
            rd_kafka_offsets_store(self.rk, lst)
        rd_kafka_topic_partition_list_destroy(lst)

    def positions(self):
        """TopicPartition -> next offset to return, for partitions with returned records."""
        self._check_open()
        cdef size_t i
        cdef kc_partition_t *p
        out = {}
        self.hold()
        try:
            for i in range(self.core.fb.n):
                p = kc_ps_at(&self.core.fb, i)
                kc_consumer_step_over_markers(self.core, p)
                if p.position != KC_POSITION_UNKNOWN:
                    out[TopicPartition(p.topic.decode(), p.partition)] = p.position
        finally:
            self.release()
        return out

    def commit_sync(self, dict offsets, double timeout):
        """Commits `offsets` ({TopicPartition: OffsetAndMetadata}) and waits for the result, in slices
        checking for signals (the commit goes on if one interrupts). Inside close() (a listener's
        commit), close()'s deadline bounds it too."""
        self._check_open()
        _check_commit_allowed(self)
        if not offsets:
            return {}
        _check_security(self, "commit_sync")
        cdef rd_kafka_topic_partition_list_t *lst = _offsets_list(offsets)
        cdef rd_kafka_event_t *ev = NULL
        cdef rd_kafka_resp_err_t err
        cdef int64_t deadline = _deadline_ms(timeout)
        cdef bint capped = self._close.closing() and self._close.deadline_ms < deadline
        cdef int64_t tmo = 0
        if capped:
            deadline = self._close.deadline_ms
            tmo = max(<int64_t>0, deadline - kc_now_ms())
        try:
            while True:
                err = _commit_and_wait(self, lst, deadline, True, &ev)
                if err:
                    _commit_error(self, err, "commit")
                if (ev == NULL or not _stale_member_epoch(ev)
                        or kc_now_ms() + _STALE_EPOCH_BACKOFF_MS >= deadline):
                    break
                # KIP-848: the coordinator bumped this member's epoch (a reconciliation is under way) and
                # the commit carried the old one. As the Java client does, retry within the timeout:
                # librdkafka sends the epoch its latest heartbeat answer gave.
                rd_kafka_event_destroy(ev)
                ev = NULL
                self._membership.stale_epoch_retried()
                with nogil:
                    usleep(_STALE_EPOCH_BACKOFF_MS * 1000)
                PyErr_CheckSignals()
            if ev == NULL:
                if capped:
                    raise KafkaTimeoutError(
                        f"commit_sync() inside close() did not complete before close()'s deadline "
                        f"({tmo / 1000.0:.3f} s were left of its timeout); the commit is still sent and "
                        f"librdkafka's close waits for it in the background")
                _check_security(self, "commit_sync")
                raise KafkaTimeoutError(f"commit_sync() did not complete within {timeout:.3f} s")
            _commit_result(self, ev, "commit_sync")
            return offsets
        finally:
            if ev != NULL:
                rd_kafka_event_destroy(ev)
            rd_kafka_topic_partition_list_destroy(lst)

    def commit_async(self, dict offsets, callback):
        self._check_open()
        _check_commit_allowed(self)
        if not offsets:
            if callback is not None:
                self._commits.completed(callback)
            return
        _check_security(self, "commit_async")
        cdef rd_kafka_topic_partition_list_t *lst = _offsets_list(offsets)
        cdef rd_kafka_resp_err_t err
        cdef long key = self._commits.sent(callback, offsets)
        err = rd_kafka_commit_queue(self.rk, lst, self._commits.q, NULL, <void *>key)
        rd_kafka_topic_partition_list_destroy(lst)
        if err:
            self._commits.forget(key)
            _commit_error(self, err, "commit_async")

    def committed(self, list tps, double timeout):
        """The group's committed offsets of `tps` (None where nothing is committed), within `timeout`
        seconds (inf: no bound), interruptible by signals (_committed_lookup)."""
        self._check_open()
        cdef rd_kafka_topic_partition_list_t *lst
        cdef rd_kafka_resp_err_t err
        cdef int i
        unique = list(dict.fromkeys(tps))  # the request refuses duplicates
        out = dict.fromkeys(tps)
        if not unique:
            return out
        _check_security(self, "committed")
        cdef int64_t deadline = _deadline_ms(timeout)
        lst = _c_list(unique)
        try:
            while True:
                err = _committed_lookup(self, lst, deadline, True)
                if not _coordinator_moving(err) or kc_now_ms() + KC_WAIT_SLICE_MS >= deadline:
                    break
                # the group's coordinator is moving or loading (a broker died, or is restarting): ask
                # again until the deadline, as Java's committed() does
                with nogil:
                    usleep(KC_WAIT_SLICE_US)
                PyErr_CheckSignals()
            if _coordinator_moving(err):
                raise KafkaTimeoutError(f"committed: the group coordinator did not answer within the timeout "
                                        f"(last: {_err_str(err)})", code=_err_name(err))
            if err:
                self._raise(err, "committed")
            for i in range(lst.cnt):
                if lst.elems[i].err or lst.elems[i].offset < 0:
                    continue
                md = (b"" if lst.elems[i].metadata == NULL
                      else (<char *>lst.elems[i].metadata)[:lst.elems[i].metadata_size])
                out[TopicPartition(lst.elems[i].topic.decode(), lst.elems[i].partition)] = OffsetAndMetadata(
                    lst.elems[i].offset, md.decode(errors="replace"))
            return out
        finally:
            rd_kafka_topic_partition_list_destroy(lst)

    def watermarks(self, str topic, int partition, double timeout):
        return _watermarks(self, topic, partition, timeout)

    def partitions_for(self, str topic, double timeout):
        return _partitions_for(self, topic, timeout)

    def offsets_for_times(self, list queries, double timeout):
        return _offsets_for_times(self, queries, timeout)

    def seek(self, tp, int64_t offset, double timeout, bint _fetcher_only=False):
        _seek(self, tp, offset, timeout, _fetcher_only)

    def position_or_none(self, tp, double timeout=0.0):
        """The position poll() has reached (past returned records, or a seek()), or None. Right after
        a seek() it is the seek's offset, as Java's (whose position() resets only a position a fetch
        was refused for); a seek outside the log is reset by librdkafka's auto.offset.reset when its
        fetch is refused, and the position follows the first record from there (route_run)."""
        self._check_open()
        cdef kc_partition_t *p = _assigned(self, tp)
        kc_consumer_step_over_markers(self.core, p)
        if p.position != KC_POSITION_UNKNOWN:
            return p.position
        return None

    def current_lag(self, tp):
        """Java's ``currentLag(tp)``: the cached end offset minus the position, or None if unknown."""
        self._check_open()
        return _partition_lag(self, _assigned(self, tp), True)

    def buffered_first_offset(self, tp):
        """Offset of the oldest buffered record of tp, or None (used by position())."""
        self._check_open()
        cdef int64_t off = kc_ps_first_offset(_assigned(self, tp))
        return None if off == KC_POSITION_UNKNOWN else off

    def librdkafka_position(self, tp):
        self._check_open()
        cdef rd_kafka_topic_partition_list_t *lst = _c_list([tp])
        cdef int64_t off
        rd_kafka_position(self.rk, lst)
        off = lst.elems[0].offset
        rd_kafka_topic_partition_list_destroy(lst)
        return off if off >= 0 else None

    def pause(self, list tps):
        _set_paused(self, tps, True)

    def resume(self, list tps):
        _set_paused(self, tps, False)

    def paused(self):
        self._check_open()
        cdef size_t i
        return {TopicPartition(kc_ps_at(&self.core.fb, i).topic.decode(), kc_ps_at(&self.core.fb, i).partition)
                for i in range(self.core.fb.n) if kc_ps_paused(kc_ps_at(&self.core.fb, i))}

    def wakeup(self):
        if self.core != NULL:
            kc_consumer_wakeup(self.core)

    @property
    def wake_fd(self):
        """The eventfd that becomes readable when records, rebalance or error events, commit results
        or a wakeup() arrive; -1 once closed. poll() (any timeout) and serve_commits() consume it."""
        return self.core.wake_fd if self.core != NULL and not self._close.is_done() else -1

    def serve_commits(self):
        """Runs the callbacks of completed commit_async() calls, without waiting (any poll() does too)."""
        self._check_open()
        _serve_commit_callbacks(self, 0)

    cdef _on_stats(self, str doc):
        try:
            self._stats = stats_summary(doc)
        except (ValueError, TypeError, AttributeError) as exc:
            log.debug("librdkafka statistics not understood: %s", exc)
        if self._stats_cb is not None:
            self._stats_cb(doc)

    def metrics(self):
        """The counters of KafkaConsumer.metrics(); any thread, any moment (also during another
        thread's close() or rebalance). What the core holds is copied first by C code alone: Python
        code may switch threads, and the owner may then free the core or change the buffer's
        partitions. The partitions' lag is computed from the copies, librdkafka's handle kept alive by
        a reference to its owner; librdkafka is asked about them only while no close() and no change of
        the assignment came since (_may_look_up), else their lag is None."""
        cdef kc_consumer_t *core = self.core
        cdef _MetricsCopy snap
        cdef _PartCopy *parts = NULL
        cdef size_t i, n = 0
        cdef int64_t now = kc_now_ms()
        cdef unsigned long mark = self._assignment.seq
        if core == NULL:
            return {"closed": True}
        handle = self._handle  # keeps the rd_kafka_t alive while the lag is computed
        n = core.fb.n
        parts = <_PartCopy *>calloc(n if n else 1, sizeof(_PartCopy))
        if parts == NULL:
            raise MemoryError()
        try:
            _copy_metrics(core, &snap, parts, n, now)
            return {
                "assigned_partitions": n,
                "buffered_records": snap.records,
                "buffered_bytes": snap.bytes,
                "time_since_last_poll_ms": snap.since_poll,
                "last_heartbeat_ms_ago": (now - snap.hb_ok_ms) if snap.hb_ok_ms else -1,
                "heartbeats": snap.hb_ok,
                "heartbeat_errors": snap.hb_errors,
                "rebalances": self._membership.rebalances,
                "records_returned": snap.records_returned,
                "polls": snap.polls,
                "poll_time_ms": snap.poll_time_us / 1000.0,
                "rebalance_time_ms": self._membership.rebalance_us / 1000.0,
                "commit_failures": self._membership.commit_failures,
                "poll_interval_expiries": self._membership.poll_interval_expiries,
                "revoked_records_dropped": self._membership.revoked_records_dropped,
                "refetched_records_dropped": snap.dropped_refetched,
                "below_committed_records_dropped": snap.dropped_below_committed,
                "seek_superseded_records_dropped": snap.dropped_before_seek,
                "seek_retries": snap.seek_retries,
                "seek_resets": snap.seek_resets,
                "max_poll_interval_ms": self.max_poll_interval_ms,
                "rebalance_barrier_polls": snap.barrier_polls,
                "prefetched_records": snap.prefetched,
                "prefetch_thread": bool(snap.prefetch_running),
                "prefetch_thread_records": snap.prefetch_moved,
                "poll_moved_records": snap.poll_moved,
                "stall_fetch_pauses": snap.stall_pauses,
                "stall_fetch_paused": bool(snap.stall_paused),
                "stall_released_records": snap.stall_released,
                "stall_refetch_records": snap.stall_refetched,
                "paused_partitions": snap.paused,
                "statistics": self._stats,
                "partition_lag": {TopicPartition(parts[i].topic.decode(), parts[i].partition):
                                  _copied_partition_lag(self, handle, &parts[i], mark) for i in range(n)},
            }
        finally:
            for i in range(n):
                free(parts[i].topic)
            free(parts)

    def group_metadata(self):
        """librdkafka's serialized consumer group metadata (group id, generation, member id, instance
        id) for a transactional producer's send_offsets_to_transaction()."""
        self._check_open()
        if not self.has_group:
            raise IllegalStateError("group_metadata() needs a consumer with a group.id")
        cdef rd_kafka_consumer_group_metadata_t *md = rd_kafka_consumer_group_metadata(self.rk)
        cdef void *buf = NULL
        cdef size_t size = 0
        cdef rd_kafka_error_t *error
        if md == NULL:
            raise IllegalStateError("group_metadata(): librdkafka has no group metadata for this consumer")
        error = rd_kafka_consumer_group_metadata_write(md, &buf, &size)
        rd_kafka_consumer_group_metadata_destroy(md)
        if error != NULL:
            _raise_error(error, "group_metadata")
        try:
            return (<char *>buf)[:size]
        finally:
            rd_kafka_mem_free(self.rk, buf)

    def member_id(self):
        self._check_open()
        cdef char *mid = rd_kafka_memberid(self.rk)
        if mid == NULL:
            return None
        s = mid.decode()
        rd_kafka_mem_free(self.rk, mid)
        return s or None

    def close(self, double timeout):
        """Commits stored positions (auto-commit), revokes the assignment (listener), leaves the group
        and frees everything, within `timeout` seconds (checked; the facade resolves None to
        default.api.timeout.ms). Returns True if
        librdkafka completed its close in time. Past the deadline the consumer is closed for the
        application all the same (a WARNING is logged): librdkafka's remaining work (a commit or
        LeaveGroup waiting for an unreachable coordinator) finishes on the reaper's thread, without
        listeners (_consumer_close.pxi)."""
        if self._close.is_done() or self._close.closing():
            return True
        if self._membership.listener.running:
            raise IllegalStateError("close() cannot be called from a rebalance listener; leave the "
                                    "poll loop and close the consumer after poll() returns")
        self._check_not_in_callback("close")
        done = _close_consumer(self, timeout)
        self._raise_pending()
        return done

    @property
    def closed(self):
        return self._close.is_done()
