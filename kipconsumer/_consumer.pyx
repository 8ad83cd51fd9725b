# cython: language_level=3, boundscheck=False, wraparound=False
"""NativeConsumer: the librdkafka consumer handle and its C core, driven from Python.

Everything per record (taking messages off librdkafka, the fetch buffer, the drain,
offset bookkeeping) happens in csrc/ without the GIL. This module owns the handle's
lifetime, the rebalance protocol (partition queues, listener calls on the poll thread)
and the translation of librdkafka results into kipconsumer's typed errors. The public,
typed facade is kipconsumer.consumer.KafkaConsumer.
"""

import logging

from cpython.exc cimport PyErr_CheckSignals
from libc.math cimport ceil, isinf
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, strcmp
from posix.unistd cimport usleep

from kipconsumer._core cimport *
from kipconsumer._cstr cimport c_string
from kipconsumer._logring cimport drain_logs, kc_log_cb
from kipconsumer._rdk cimport *
from kipconsumer._records cimport ConsumerRecords, records_take

from kipconsumer.errors import (CommitFailedError, ConfigError, IllegalStateError, KafkaError,
                                KafkaTimeoutError, RebalanceInProgressError, WakeupError)
from kipconsumer._stats import summary as stats_summary
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


cdef enum:
    # Longest wait without the GIL in a call that may block for long (poll, commit_sync, close):
    # between two waits the call checks for signals, so Ctrl+C interrupts it within this bound.
    _SIGNAL_SLICE_MS = 50
    _MAX_FINITE_MS = 2147483646  # kipconsumer._timeouts.MAX_FINITE_MS


cdef int _ms(double seconds) noexcept nogil:
    """Milliseconds for a checked timeout in seconds (kipconsumer._timeouts): -1 (librdkafka's
    infinite) for inf, else rounded up and clamped below C int overflow."""
    if isinf(seconds):
        return -1
    if seconds <= 0:
        return 0
    if seconds * 1000.0 >= _MAX_FINITE_MS:
        return _MAX_FINITE_MS
    return <int>ceil(seconds * 1000.0)


cdef int64_t _deadline_ms(double seconds) noexcept nogil:
    """kc_now_ms() deadline for a checked timeout in seconds; INT64 max for inf."""
    cdef int ms = _ms(seconds)
    if ms < 0:
        return 0x7FFFFFFFFFFFFFFF
    return kc_now_ms() + ms


cdef int _slice(int64_t deadline) noexcept nogil:
    """The next wait in ms towards `deadline`: at most _SIGNAL_SLICE_MS, 0 once it has passed."""
    cdef int64_t left = deadline - kc_now_ms()
    if left <= 0:
        return 0
    return <int>(left if left < _SIGNAL_SLICE_MS else _SIGNAL_SLICE_MS)


cdef str _err_name(rd_kafka_resp_err_t err):
    return rd_kafka_err2name(err).decode()


cdef int _STALE_EPOCH_BACKOFF_MS = 50


cdef bint _stale_member_epoch(rd_kafka_event_t *ev):
    """A commit result refused with STALE_MEMBER_EPOCH (KIP-848), as a whole or for a partition."""
    cdef rd_kafka_topic_partition_list_t *res = rd_kafka_event_topic_partition_list(ev)
    cdef int i
    if _err_name(rd_kafka_event_error(ev)) == "STALE_MEMBER_EPOCH":
        return True
    if res != NULL:
        for i in range(res.cnt):
            if res.elems[i].err and _err_name(res.elems[i].err) == "STALE_MEMBER_EPOCH":
                return True
    return False


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
    if self._closed or self.core == NULL:
        return 0
    try:
        self._on_stats(json_buf[:json_len].decode(errors="replace"))
    except BaseException as exc:  # the user's stats_cb: raised from poll(), as a listener's
        if self._pending_exc is None:
            self._pending_exc = exc
        self.core.abort_poll = 1
    return 0


cdef void _rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                        rd_kafka_topic_partition_list_t *parts, void *opaque) noexcept with gil:
    cdef NativeConsumer self = <NativeConsumer>opaque
    if self.core == NULL:  # not expected (callbacks are served by poll() only): answer librdkafka
        _close_assign_call(rk, err, parts, self._cooperative_cfg)
        return
    try:
        self._on_rebalance(err, parts)
    except BaseException as exc:  # never let an exception cross into librdkafka
        if self._pending_exc is None:
            self._pending_exc = exc
        self.core.abort_poll = 1
    if self._close_requested:  # close() was called meanwhile: hand out no record (see request_close)
        self.core.abort_poll = 1


# ---------------------------------------------------------------- close: librdkafka's termination
# The close path uses librdkafka's asynchronous close (rd_kafka_consumer_close_queue) so that close()
# can serve the group's last rebalance events itself and stop waiting at its deadline. Declared here
# (they are in Debian's 2.0.2 headers too) because only close() uses them.
cdef extern from "rdk.h" nogil:
    rd_kafka_error_t *rd_kafka_consumer_close_queue(rd_kafka_t *rk, rd_kafka_queue_t *rkqu)
    int rd_kafka_consumer_closed(rd_kafka_t *rk)
    void rd_kafka_destroy_flags(rd_kafka_t *rk, int flags)
    enum:
        RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE

cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    ctypedef struct pthread_attr_t:
        pass
    int pthread_create(pthread_t *thread, const pthread_attr_t *attr,
                       void *(*start)(void *) noexcept nogil, void *arg)
    int pthread_detach(pthread_t thread)

cdef enum:
    _REAPER_GIVE_UP_MS = 600000  # how long _reaper_main serves librdkafka's close before giving up


cdef void _close_assign_call(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t *parts, bint cooperative) noexcept nogil:
    """The *assign() call librdkafka waits for after a rebalance event served during close.

    Once the group handle is terminating, librdkafka turns any application *assign() call into a full
    unassign (rdkafka_cgrp.c, rd_kafka_cgrp_handle_assign_op: "treating assign as unassign"), whatever
    it names; the call still has to match the protocol, or it is refused before that."""
    cdef rd_kafka_error_t *error = NULL
    if cooperative:
        if err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            error = rd_kafka_incremental_assign(rk, parts)
        else:
            error = rd_kafka_incremental_unassign(rk, parts)
        if error != NULL:
            rd_kafka_error_destroy(error)
    elif err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        rd_kafka_assign(rk, parts)
    else:
        rd_kafka_assign(rk, NULL)


cdef int _close_drain_stale(rd_kafka_queue_t *q) noexcept nogil:
    """Drops every event already on the close queue right after close's full unassign; returns the
    number of rebalance events among them.

    They were queued before that unassign (librdkafka serves the application's *assign() after the
    TERMINATE op that close_queue posted, and posts the rebalance events of the termination while
    handling it), so they name partitions already given back, and librdkafka does not wait for a
    call on them: the cooperative protocol posts a "revoke all" while an assign event is still
    pending (rdkafka_cgrp.c rd_kafka_cgrp_revoke_all_rejoin has no WAIT_ASSIGN_CALL check for
    COOPERATIVE), and one application call answers both. Answering such an event again, or
    committing from its listener, reaches librdkafka after the group handle may have reached its TERM
    state: a commit then raises wait_commit_cnt and rd_kafka_cgrp_terminated() aborts the process
    (assert !rd_kafka_assignment_in_progress); any other request can be dropped unanswered once the
    handle is terminated (rd_kafka_cgrp_op_serve), which blocks the caller for ever."""
    cdef rd_kafka_event_t *ev
    cdef int n = 0
    while True:
        ev = rd_kafka_queue_poll(q, 0)
        if ev == NULL:
            return n
        if rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE:
            n += 1
        rd_kafka_event_destroy(ev)


ctypedef struct _reaper_t:
    rd_kafka_t *rk
    rd_kafka_queue_t *q          # the close queue; NULL: librdkafka's close is not started yet
    kc_consumer_t *core          # freed once librdkafka is closed, before rd_kafka_destroy
    kc_heartbeat_monitor_t *hb   # freed after rd_kafka_destroy (librdkafka's threads write to it)
    int cooperative
    int unassigned               # the full unassign of the close was made
    int64_t give_up_ms


cdef void *_reaper_main(void *arg) noexcept nogil:
    """Finishes librdkafka's close without Python, then frees the core and destroys the handle.

    Runs on its own thread for a consumer whose close() reached its deadline, or that was dropped
    without close() (it then starts the close: commits stored offsets if auto-commit, leaves the group,
    no listener). Rebalance events get the *assign() call librdkafka waits for; the wait is bounded by
    librdkafka itself (session.timeout.ms for commits waiting for a coordinator, request timeouts),
    and by _REAPER_GIVE_UP_MS."""
    cdef _reaper_t *r = <_reaper_t *>arg
    cdef rd_kafka_error_t *error
    cdef rd_kafka_event_t *ev
    r.give_up_ms = kc_now_ms() + _REAPER_GIVE_UP_MS
    if r.q == NULL:
        r.q = rd_kafka_queue_new(r.rk)
        error = rd_kafka_consumer_close_queue(r.rk, r.q)
        if error != NULL:  # already closed, or a fatal error (then destroy skips the close)
            rd_kafka_error_destroy(error)
            r.give_up_ms = 0
    while kc_now_ms() < r.give_up_ms and not rd_kafka_consumer_closed(r.rk):
        ev = rd_kafka_queue_poll(r.q, 100)
        if ev == NULL:
            continue
        if rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE and not (
                r.unassigned and rd_kafka_consumer_closed(r.rk)):
            _close_assign_call(r.rk, rd_kafka_event_error(ev), rd_kafka_event_topic_partition_list(ev),
                               r.cooperative)
            if not r.unassigned:
                r.unassigned = 1
                _close_drain_stale(r.q)
        rd_kafka_event_destroy(ev)
    if r.core != NULL:
        kc_consumer_free(r.core)
    rd_kafka_queue_destroy(r.q)
    rd_kafka_destroy_flags(r.rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE)
    kc_hb_free(r.hb)
    free(r)
    return NULL


# What librdkafka writes to the consumer's eventfd when a commit result arrives (see __cinit__).
cdef uint64_t _COMMIT_EVENT = 1


cdef inline bint _seek_again(rd_kafka_resp_err_t err) noexcept:
    return err == RD_KAFKA_RESP_ERR__STATE or err == RD_KAFKA_RESP_ERR__OUTDATED


cdef class _Handle:
    """Owns the rd_kafka_t; destroys it when the consumer and every batch holding its
    messages are gone (rd_kafka_destroy blocks until all messages are released).

    With a `reaper` (close() timed out, or the consumer was dropped without close()), the rest of
    librdkafka's close and the destruction run on a detached thread instead (_reaper_main)."""

    cdef rd_kafka_t *rk
    cdef _reaper_t *reaper
    cdef kc_heartbeat_monitor_t *hb  # the core's heartbeat monitor, freed after rd_kafka_destroy

    def __dealloc__(self):
        cdef pthread_t tid
        cdef _reaper_t *r = self.reaper
        self.reaper = NULL
        if r != NULL:
            self.rk = NULL
            r.hb = self.hb
            self.hb = NULL
            if pthread_create(&tid, NULL, _reaper_main, r) == 0:
                pthread_detach(tid)
            else:
                with nogil:
                    _reaper_main(r)
        elif self.rk != NULL:
            with nogil:
                rd_kafka_destroy(self.rk)
            self.rk = NULL
        kc_hb_free(self.hb)
        self.hb = NULL


cdef class NativeConsumer:
    """One librdkafka consumer and its fetch buffer. Not thread-safe, except wakeup()
    and metrics(), which any thread may call."""

    cdef rd_kafka_t *rk
    cdef _Handle _handle
    cdef kc_consumer_t *core
    cdef rd_kafka_queue_t *commit_q
    cdef rd_kafka_message_t **out
    cdef readonly int64_t max_poll_interval_ms
    cdef readonly int64_t default_api_timeout_ms
    cdef readonly bint auto_commit
    cdef readonly bint has_group
    cdef object _listener
    cdef object _pending_exc
    cdef object _commit_callbacks
    cdef long _commit_seq
    cdef bint _closed
    cdef bint _closing              # inside close(): listeners may still commit
    cdef int64_t _close_deadline_ms  # inside close(): when close() must return (kc_now_ms clock)
    cdef bint _left_group
    cdef set _subscription
    cdef readonly long rebalances
    cdef readonly long poll_interval_expiries
    cdef readonly long stale_epoch_retries  # commit_sync() retries after STALE_MEMBER_EPOCH (KIP-848)
    cdef readonly long revoked_records_dropped
    cdef int _in_rebalance
    cdef bint _cooperative_cfg      # cooperative-sticky, or group.protocol=consumer (KIP-848)
    cdef rd_kafka_queue_t *_close_q  # inside close(): the queue librdkafka's close posts events to
    cdef set _stale_parts            # partitions of a discarded assignment (see _stale_assignment)
    cdef bint _rejoin_pending        # leave and join again at the next poll() (_rejoin_if_stale_parts_kept)
    cdef bint _close_unassigned     # inside close(): the full unassign was made (see _close_drain_stale)
    cdef int _in_callback            # inside a commit_async() callback
    cdef bint _in_poll               # inside poll()'s wait loop (a signal handler may run there)
    cdef bytes _group_id             # group.id (or the private one of an assign-only consumer)
    cdef bint _close_requested       # close() from another thread waits for the running call (request_close)
    cdef int64_t _session_timeout_ms     # for the close settle's bound (_settle_rebalance)
    cdef object _stats_cb            # the user's stats_cb(json: str), or None
    cdef object _stats               # summary of the last statistics (kipconsumer._stats), or None
    cdef int64_t _heartbeat_interval_ms

    def __cinit__(self, dict rdkafka, int max_poll_records, str fairness,
                  long max_poll_interval_ms, bint auto_commit, long default_api_timeout_ms,
                  stats_cb=None):
        cdef char errstr[512]
        cdef rd_kafka_conf_t *conf = rd_kafka_conf_new()
        cdef kc_fairness_t mode = KC_FAIRNESS_GREEDY if fairness == "greedy" else KC_FAIRNESS_PROPORTIONAL
        self._commit_callbacks = {}
        self._stats_cb = stats_cb
        self._subscription = set()
        self._stale_parts = set()
        self.max_poll_interval_ms = max_poll_interval_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.auto_commit = auto_commit
        self.has_group = bool(rdkafka.get("group.id"))
        self._session_timeout_ms = int(rdkafka.get("session.timeout.ms", 45_000))
        self._heartbeat_interval_ms = int(rdkafka.get("heartbeat.interval.ms", 3_000))
        # KIP-848 (group.protocol=consumer) ignores the assignor setting: its reconciliation is incremental
        self._cooperative_cfg = ("cooperative" in str(rdkafka.get("partition.assignment.strategy", "")).lower()
                                 or str(rdkafka.get("group.protocol", "")).lower() == "consumer")
        if not self.has_group:
            # librdkafka's assign() needs a group handle; a private id that is never joined
            # or committed to (commits are refused without the user's group.id).
            rdkafka = dict(rdkafka)
            rdkafka["group.id"] = f"kipconsumer-assign-only-{id(self):x}"
            rdkafka["enable.auto.commit"] = "false"
            self.auto_commit = False
        for key, value in rdkafka.items():
            try:
                bkey = c_string(key, "configuration key", ConfigError)
                bvalue = c_string(str(value), f"configuration {key!r}: the value", ConfigError, False)
            except BaseException:
                rd_kafka_conf_destroy(conf)
                raise
            if rd_kafka_conf_set(conf, bkey, bvalue, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK:
                rd_kafka_conf_destroy(conf)
                raise ConfigError(f"librdkafka rejected {key!r}: {errstr.decode(errors='replace')}")
        self._group_id = str(rdkafka["group.id"]).encode()
        rd_kafka_conf_set_rebalance_cb(conf, _rebalance_cb)
        rd_kafka_conf_set_log_cb(conf, kc_log_cb)
        rd_kafka_conf_set_stats_cb(conf, _stats_cb)  # only called with statistics.interval.ms > 0
        rd_kafka_conf_set_opaque(conf, <void *>self)
        self.core = kc_consumer_new(conf, max_poll_records, mode, max_poll_interval_ms,
                                    errstr, sizeof(errstr))
        if self.core == NULL:
            rd_kafka_conf_destroy(conf)
            raise KafkaError(errstr.decode(errors="replace"))
        # the buffer's hard bound is librdkafka's own prefetch bound (its defaults if unset)
        self.core.ring_max_records = int(rdkafka.get("queued.min.messages", 100_000))
        self.core.ring_max_bytes = int(rdkafka.get("queued.max.messages.kbytes", 65_536)) * 1024
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
        if kc_consumer_attach(self.core, self.rk) != 0:
            raise KafkaError("cannot attach to librdkafka's consumer queue")
        self.commit_q = rd_kafka_queue_new(self.rk)
        # commit results wake the eventfd too, so an event loop waiting on it (kipconsumer.aio)
        # learns of them without polling
        rd_kafka_queue_io_event_enable(self.commit_q, self.core.wake_fd, &_COMMIT_EVENT, sizeof(_COMMIT_EVENT))
        drain_logs()

    def __dealloc__(self):
        if self.rk != NULL and not self._closed:
            # Dropped without close(): rd_kafka_destroy() would close the consumer itself and run the
            # rebalance callback on this object while it is being freed (a segfault). Finish the close
            # without Python in the background instead: auto-commit of stored offsets, LeaveGroup.
            self._abandon(NULL)
        self._destroy()

    cdef bint _abandon(self, rd_kafka_queue_t *q) noexcept:
        """Hands the unfinished librdkafka close (started on `q`; NULL: not started), the core and the
        handle's destruction to a background finisher (_reaper_main), which starts when the handle is
        released: at once, or when the last batch holding messages of this consumer is freed."""
        cdef _reaper_t *r
        if self.rk == NULL or self._handle is None or self._handle.reaper != NULL:
            return False
        r = <_reaper_t *>calloc(1, sizeof(_reaper_t))
        if r == NULL:
            return False
        self._detach_commit_queue()
        r.rk = self.rk
        r.q = q
        r.core = self.core
        r.cooperative = self._cooperative_cfg
        r.unassigned = self._close_unassigned
        self.core = NULL
        self._handle.reaper = r
        return True

    cdef void _detach_commit_queue(self) noexcept:
        """Stops commit results from writing to the eventfd, which the core closes when freed."""
        if self.commit_q != NULL:
            rd_kafka_queue_io_event_enable(self.commit_q, -1, NULL, 0)

    cdef void _destroy(self) noexcept:
        self._detach_commit_queue()
        if self.commit_q != NULL:
            rd_kafka_queue_destroy(self.commit_q)
            self.commit_q = NULL
        if self.core != NULL:
            kc_consumer_free(self.core)
            self.core = NULL
        if self.rk != NULL:
            self.rk = NULL
            # destroys rk now, or when the last batch holding its messages is freed
            self._handle = None
        if self.out != NULL:
            free(self.out)
            self.out = NULL

    cdef int _check_open(self) except -1:
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")
        return 0

    cdef int _check_not_in_callback(self, str method) except -1:
        """poll(), subscribe(), unsubscribe(), assign() and close() serve or change what the callbacks run
        inside of: not allowed from a rebalance listener or a commit_async() callback."""
        if self._in_rebalance or self._in_callback:
            where = "a rebalance listener" if self._in_rebalance else "a commit_async() callback"
            raise IllegalStateError(
                f"{method}() cannot be called from {where}: listeners and commit callbacks run inside "
                f"poll() (or close()), and may call the consumer's other methods, but not poll(), "
                f"subscribe(), unsubscribe(), assign() or close(); call it after poll() returns")
        return 0

    cdef object _raise(self, rd_kafka_resp_err_t err, str what):
        if err == RD_KAFKA_RESP_ERR__TIMED_OUT:
            raise KafkaTimeoutError(f"{what}: {_err_str(err)}", code=_err_name(err))
        raise KafkaError(f"{what}: {_err_str(err)}", code=_err_name(err))

    # ---------------------------------------------------------------- rebalance
    cdef bint _cooperative(self) noexcept:
        """The group's rebalance protocol is COOPERATIVE. Inside close() the configured assignor decides
        without asking librdkafka: rd_kafka_rebalance_protocol() is a request to the group handle,
        which may be dropped unanswered (blocking for ever) once the handle has terminated, and it
        returns NULL (or "NONE") while the handle terminates (strcmp(NULL) crashed here, and an eager
        assign() in a cooperative group trips librdkafka's assertions)."""
        if self._closing:
            return self._cooperative_cfg
        cdef const char *proto = rd_kafka_rebalance_protocol(self.rk)
        if proto == NULL or strcmp(proto, b"NONE") == 0:
            return self._cooperative_cfg
        return strcmp(proto, b"COOPERATIVE") == 0

    cdef void _on_rebalance(self, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts) except *:
        if self._closing:
            self._on_rebalance_closing(err, parts)
            return
        cdef bint cooperative = self._cooperative()
        cdef rd_kafka_error_t *error
        cdef kc_partition_t *p
        cdef int i
        tps = _tp_list(parts)
        listener = self._listener
        self._in_rebalance = 1
        self.core.last_rebalance_ms = kc_now_ms()
        try:
            if err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS and self._subscription and self._left_before_assign():
                self._stale_assignment(parts, tps, cooperative)
            elif err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
                if not cooperative:
                    self._stale_parts.clear()
                self._stale_parts.difference_update(tps)
                self._buffer_partitions(parts)
                self._start_at_committed(parts)
                if cooperative:
                    _raise_error(rd_kafka_incremental_assign(self.rk, parts), "incremental assign")
                    if self._stale_parts:
                        self._rejoin_if_stale_parts_kept()
                else:
                    rd_kafka_assign(self.rk, parts)
                self._left_group = False
                self.rebalances += 1
                log.info("partitions assigned: %s", tps)
                if listener is not None:
                    listener.on_partitions_assigned(tps)
            else:
                lost = rd_kafka_assignment_lost(self.rk)
                for i in range(parts.cnt):
                    p = kc_fb_find(&self.core.fb, parts.elems[i].topic, parts.elems[i].partition)
                    if p != NULL:
                        self.revoked_records_dropped += p.len
                        kc_fb_purge(&self.core.fb, p)
                # partitions of a discarded assignment (_stale_assignment) were never reported, or were
                # already reported lost
                report = [tp for tp in tps if tp not in self._stale_parts] if self._stale_parts else tps
                self._stale_parts.difference_update(tps)
                try:
                    if not lost and self.auto_commit:
                        self._store_positions(tps)
                    if listener is not None and (report or not tps):
                        if lost and hasattr(listener, "on_partitions_lost"):
                            listener.on_partitions_lost(report)
                        else:
                            listener.on_partitions_revoked(report)
                finally:
                    if cooperative:
                        error = rd_kafka_incremental_unassign(self.rk, parts)
                        if error != NULL:
                            rd_kafka_error_destroy(error)
                    else:
                        rd_kafka_assign(self.rk, NULL)
                    for i in range(parts.cnt):
                        kc_fb_remove(&self.core.fb, parts.elems[i].topic, parts.elems[i].partition)
                    log.info("partitions %s: %s", "lost" if lost else "revoked", tps)
        finally:
            self._in_rebalance = 0

    cdef bint _left_before_assign(self) except -1:
        """True if this member has no member id while an assignment is being served: librdkafka left the
        group (max.poll.interval.ms expired while the application was away, or the coordinator forgot the
        member) after the SyncGroup that produced the assignment and before the application polled. It
        still waits for the *assign() call (rdkafka_cgrp.c rd_kafka_cgrp_max_poll_interval_check_tmr_cb
        leaves and resets the member id, but skips the revoke while an assign call is pending), and
        would start fetching a generation that is gone: the partitions already belong to other members."""
        cdef char *mid = rd_kafka_memberid(self.rk)
        if mid == NULL:
            return False
        empty = mid[0] == 0
        rd_kafka_mem_free(self.rk, mid)
        return empty

    cdef _stale_assignment(self, rd_kafka_topic_partition_list_t *parts, list tps, bint cooperative):
        """Serves an assignment of a generation this member has left (see _left_before_assign): librdkafka
        gets its *assign() call, but nothing is fetched or handed out, the listener is not told, and the
        partitions the member still holds are lost (on_partitions_lost, or on_partitions_revoked without
        it): as in Java, after the poll interval expired the member gives up its assignment and rejoins
        (librdkafka does on its next heartbeat). Without this, a member stalled past the poll interval
        processed the partitions of the stale assignment next to their new owners (the chaos suite's
        ownership overlap with eager assignors) and, with cooperative-sticky, went on with the partitions
        it held before until it closed."""
        cdef rd_kafka_error_t *error
        cdef kc_partition_t *p
        owned = sorted(self.assignment())
        listener = self._listener
        # librdkafka gets exactly the call it waits for: an unassign instead leaves it waiting for the
        # assign call (eager), and an unassign of its own makes the call for the "lost" revoke that
        # follows on the next heartbeat fail (cooperative: "Can't subtract from empty assignment"),
        # which leaves it waiting for ever. Until that revoke, the records fetched for partitions that
        # are not in the buffer are dropped.
        if cooperative:
            error = rd_kafka_incremental_assign(self.rk, parts)
            if error != NULL:
                rd_kafka_error_destroy(error)
        else:
            rd_kafka_assign(self.rk, parts)
        self._stale_parts.update(tps)
        self._stale_parts.update(owned)
        while self.core.fb.n:
            p = self.core.fb.parts[0]
            self.revoked_records_dropped += p.len
            topic = <bytes>p.topic
            kc_fb_remove(&self.core.fb, topic, p.partition)
        self._left_group = True
        log.warning("assignment %s discarded: the member left the group (max.poll.interval.ms exceeded, or "
                    "its session expired) before it was served; partitions lost: %s; rejoining", tps, owned)
        if owned and listener is not None:
            if hasattr(listener, "on_partitions_lost"):
                listener.on_partitions_lost(owned)
            else:
                listener.on_partitions_revoked(owned)

    cdef int _buffer_partitions(self, const rd_kafka_topic_partition_list_t *lst) except -1:
        """Adds lst's partitions to the fetch buffer (see kc_consumer_add_partition)."""
        cdef int i
        for i in range(lst.cnt):
            if kc_consumer_add_partition(self.core, lst.elems[i].topic, lst.elems[i].partition) == NULL:
                raise MemoryError()
        return 0

    cdef int _start_at_committed(self, const rd_kafka_topic_partition_list_t *lst) except -1:
        """Sets the floor of lst's newly assigned partitions to their committed offsets (see
        below_committed in consumer_core.c): as in Java, where a new assignment starts at the
        committed offsets and fetched data of other positions is discarded, records below the
        committed offset are not taken, whatever librdkafka's fetcher delivers. librdkafka still
        looks the offsets up itself to start its fetchers; this lookup costs one more round trip
        to the coordinator per assignment, bounded by a quarter of max.poll.interval.ms (at most
        2 s): without an answer, nothing is filtered."""
        cdef rd_kafka_topic_partition_list_t *q
        cdef rd_kafka_resp_err_t err
        cdef kc_partition_t *p
        cdef int i
        cdef int tmo = <int>min(2000, max(100, self.max_poll_interval_ms // 4))
        if lst.cnt == 0:
            return 0
        q = rd_kafka_topic_partition_list_copy(lst)
        if q == NULL:
            raise MemoryError()
        try:
            for i in range(q.cnt):
                q.elems[i].offset = RD_KAFKA_OFFSET_INVALID
            with nogil:
                err = rd_kafka_committed(self.rk, q, tmo)
            if err:
                log.debug("committed offsets of the new assignment not known (%s): not filtered",
                          _err_name(err))
                return 0
            for i in range(q.cnt):
                if q.elems[i].err or q.elems[i].offset < 0:
                    continue
                p = kc_fb_find(&self.core.fb, q.elems[i].topic, q.elems[i].partition)
                if p != NULL and p.position == KC_POSITION_UNKNOWN and p.len == 0:
                    p.floor = q.elems[i].offset
        finally:
            rd_kafka_topic_partition_list_destroy(q)
        return 0

    cdef _rejoin_if_stale_parts_kept(self):
        """Cooperative: partitions dropped by _stale_assignment that librdkafka still holds once a new
        generation is assigned. librdkafka's "lost" revoke for them does not always come (answering the
        stale assignment clears its lost flag), it rejoins owning them, and the sticky assignor gives them
        back: the group says this member owns them, but nothing would ever fetch them for the application
        (their records were dropped as foreign; the partitions stalled for good in chaos runs).
        Restarting them in place (incremental unassign + assign inside the callback) left them
        unfetched in a chaos run, so the member rejoins instead, from the next poll() (_rejoin): a
        clean leave and join through librdkafka's ordinary paths, the partitions go to whoever the
        assignor picks and start from the committed offsets."""
        cdef rd_kafka_topic_partition_list_t *held = NULL
        if rd_kafka_assignment(self.rk, &held) != RD_KAFKA_RESP_ERR_NO_ERROR or held == NULL:
            return
        try:
            kept = sorted(tp for tp in _tp_list(held) if tp in self._stale_parts)
        finally:
            rd_kafka_topic_partition_list_destroy(held)
        if kept:
            self._rejoin_pending = True
            log.warning("partitions %s were kept by the group for this member after a discarded "
                        "assignment, but are not fetched: rejoining the group", kept)

    cdef _rejoin(self):
        """Leaves the group and joins it again with the same subscription (see
        _rejoin_if_stale_parts_kept): the listener gets on_partitions_revoked for what the member
        holds (it may commit), no record is handed out meanwhile, and the next poll()s join."""
        cdef rd_kafka_resp_err_t err
        self._rejoin_pending = False
        topics = sorted(self._subscription)
        if not topics:
            return
        if self.auto_commit:
            self._store_positions(None)
        with nogil:
            err = rd_kafka_unsubscribe(self.rk)
        if err:
            self._raise(err, "rejoin (unsubscribe)")
        self._serve_revoke_held()
        self._rdk_subscribe(topics, "rejoin (subscribe)")
        self._stale_parts.clear()

    cdef _serve_revoke_held(self):
        """After rd_kafka_unsubscribe(): serves the revoke now (the listener runs inside the caller,
        as in Java), handing out no record meanwhile (it would be lost to the application, its
        position advanced past)."""
        deadline = kc_now_ms() + self.default_api_timeout_ms
        self.core.hold_records = 1
        try:
            while self.core.fb.n and kc_now_ms() < deadline:
                self._poll_core(_SIGNAL_SLICE_MS)
                PyErr_CheckSignals()  # interrupted, the revoke is served by the next poll()
        finally:
            self.core.hold_records = 0

    cdef _rdk_subscribe(self, list topics, str what):
        cdef rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new(len(topics))
        cdef rd_kafka_resp_err_t err
        try:
            for t in topics:
                rd_kafka_topic_partition_list_add(lst, c_string(t, "topic"), RD_KAFKA_PARTITION_UA)
        except BaseException:
            rd_kafka_topic_partition_list_destroy(lst)
            raise
        err = rd_kafka_subscribe(self.rk, lst)
        rd_kafka_topic_partition_list_destroy(lst)
        if err:
            self._raise(err, what)

    cdef void _on_rebalance_closing(self, rd_kafka_resp_err_t err,
                                    rd_kafka_topic_partition_list_t *parts) except *:
        """The first rebalance event served inside close(), whatever it is (the "revoke all" of the
        termination, or an assignment or revocation that was pending when close() began).

        librdkafka turns the *assign() call that answers it into a full unassign, and nothing in the
        group handle waits for the application after that: it commits (auto-commit), leaves the group
        and terminates. So everything this member owns is revoked here, before that call, while
        librdkafka still waits for it: positions stored (auto-commit), buffers dropped, and the
        listener's on_partitions_revoked (on_partitions_lost if the assignment was lost) gets every
        owned partition, so its commit completes before the handle can terminate. An assignment that
        completes now is not reported (as in Java). Events still queued after the call are stale and
        dropped (_close_drain_stale); no listener runs after it."""
        cdef bint cooperative = self._cooperative()
        cdef bint lost = rd_kafka_assignment_lost(self.rk)
        cdef kc_partition_t *p
        cdef size_t i
        cdef int stale = 0
        owned = sorted(self.assignment())
        listener = self._listener
        self._in_rebalance = 1
        try:
            if not lost and self.auto_commit:
                self._store_positions(None)
            for i in range(self.core.fb.n):
                p = self.core.fb.parts[i]
                self.revoked_records_dropped += p.len
                kc_fb_purge(&self.core.fb, p)
            if owned and listener is not None:
                if lost and hasattr(listener, "on_partitions_lost"):
                    listener.on_partitions_lost(owned)
                else:
                    listener.on_partitions_revoked(owned)
        finally:
            with nogil:
                _close_assign_call(self.rk, err, parts, cooperative)
            self._close_unassigned = True
            while self.core.fb.n:
                topic = <bytes>self.core.fb.parts[0].topic
                kc_fb_remove(&self.core.fb, topic, self.core.fb.parts[0].partition)
            if self._close_q != NULL:
                with nogil:
                    stale = _close_drain_stale(self._close_q)
            self._in_rebalance = 0
            log.info("close: partitions %s: %s%s", "lost" if lost else "revoked", owned,
                     f" ({stale} stale rebalance event(s) dropped)" if stale else "")

    # ---------------------------------------------------------------- subscribe / assign
    def subscribe(self, list topics, listener):
        self._check_open()
        self._check_not_in_callback("subscribe")
        if not self._subscription and self.core.fb.n:
            raise IllegalStateError("subscribe() on a consumer with partitions given to assign(): "
                                    "subscription to topics and manual assignment are mutually exclusive "
                                    "(as in Java); call unsubscribe() first")
        self._rdk_subscribe(topics, "subscribe")
        self._listener = listener
        self._subscription = set(topics)

    def subscription(self):
        return set(self._subscription)

    def unsubscribe(self):
        self._check_open()
        self._check_not_in_callback("unsubscribe")
        cdef rd_kafka_resp_err_t err
        cdef bint subscribed = bool(self._subscription)
        if self.auto_commit:
            self._store_positions(None)
        with nogil:
            err = rd_kafka_unsubscribe(self.rk)
        self._subscription = set()
        if err:
            self._raise(err, "unsubscribe")
        if subscribed:
            self._serve_revoke_held()
        else:  # as in Java, unsubscribe() also clears partitions given to assign()
            self.assign([])

    def assign(self, list tps):
        self._check_open()
        self._check_not_in_callback("assign")
        if self._subscription:
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
            kc_fb_remove(&self.core.fb, c_string(tp.topic, "topic"), tp.partition)
        for i in range(lst.cnt):
            lst.elems[i].offset = RD_KAFKA_OFFSET_STORED
        try:
            self._buffer_partitions(lst)
        except MemoryError:
            rd_kafka_topic_partition_list_destroy(lst)
            raise
        with nogil:
            err = rd_kafka_assign(self.rk, lst if lst.cnt else NULL)
        rd_kafka_topic_partition_list_destroy(lst)
        if err:
            self._raise(err, "assign")

    def assignment(self):
        cdef size_t i
        if self.core == NULL:
            return set()
        return {TopicPartition(self.core.fb.parts[i].topic.decode(), self.core.fb.parts[i].partition)
                for i in range(self.core.fb.n)}

    # ---------------------------------------------------------------- poll
    cdef kc_poll_status_t _poll_core(self, int timeout_ms) except *:
        cdef kc_poll_status_t st
        cdef size_t n = 0
        with nogil:
            st = kc_consumer_poll(self.core, timeout_ms, self.out, &n)
        return st

    def poll(self, double timeout):
        """Up to max.poll.records records; waits up to `timeout` seconds (inf: no bound) for some.

        Waits in slices of _SIGNAL_SLICE_MS and checks for signals between them: a KeyboardInterrupt
        raised there leaves every record not yet returned buffered. Returns an empty batch at once
        when close() is requested from another thread (request_close)."""
        self._check_open()
        if self._closing:
            raise IllegalStateError("poll() cannot be called while close() is in progress "
                                    "(e.g. from a rebalance listener)")
        self._check_not_in_callback("poll")
        if self._in_poll:
            raise IllegalStateError("poll() cannot be called while poll() runs on this thread (e.g. "
                                    "from a signal handler); call wakeup() there instead")
        self._in_poll = True
        try:
            return self._poll(timeout)
        finally:
            self._in_poll = False

    cdef _poll(self, double timeout):
        cdef kc_poll_status_t st
        cdef size_t n = 0
        cdef int64_t deadline = _deadline_ms(timeout)
        cdef bint again = False
        if self._rejoin_pending:
            self._rejoin()
        if self.auto_commit:
            self._store_positions(None)
        self._serve_commit_callbacks()
        while True:
            if self._close_requested:
                return records_take(self.out, 0, None)
            with nogil:
                st = kc_consumer_poll(self.core, _slice(deadline), self.out, &n)
            drain_logs()
            if again:
                self.core.polls -= 1  # a slice that continues this poll() is not another poll
            again = True
            if st == KC_POLL_OK:
                if n or self._pending_exc is not None:
                    batch = records_take(self.out, n, self._handle)
                    self._raise_pending()
                    return batch
                self._serve_commit_callbacks()
                if kc_now_ms() >= deadline or self._close_requested:
                    return records_take(self.out, 0, None)
                PyErr_CheckSignals()
                continue
            if st == KC_POLL_WAKEUP:
                if self._close_requested:
                    return records_take(self.out, 0, None)
                raise WakeupError("poll() interrupted by wakeup()")
            if st == KC_POLL_ABORT:
                self._raise_pending()
            if st == KC_POLL_EVENT:
                self._handle_errors()
            if kc_now_ms() >= deadline:
                return records_take(self.out, 0, None)
            PyErr_CheckSignals()

    @property
    def in_callback(self):
        """True inside a rebalance listener or a commit_async() callback."""
        return bool(self._in_rebalance or self._in_callback)

    def request_close(self):
        """close() was called from another thread while this consumer's owner thread is in a call: a
        blocked or later poll() returns an empty batch at once (no WakeupError, no record handed out),
        so that the owner's call returns and close() can run. Any thread."""
        self._close_requested = True
        if self.core != NULL:
            kc_consumer_wakeup(self.core)

    cdef _raise_pending(self):
        exc = self._pending_exc
        if exc is not None:
            self._pending_exc = None
            raise exc

    cdef _handle_errors(self):
        cdef rd_kafka_message_t *m
        while True:
            m = kc_consumer_take_error(self.core)
            if m == NULL:
                break
            err = m.err
            where = ""
            if m.rkt != NULL:
                where = f" ({rd_kafka_topic_name(m.rkt).decode()}-{m.partition})"
            detail = rd_kafka_message_errstr(m).decode(errors="replace")
            rd_kafka_message_destroy(m)
            if err == RD_KAFKA_RESP_ERR__MAX_POLL_EXCEEDED:
                self.poll_interval_expiries += 1
                self._left_group = True
                kc_fb_purge_all(&self.core.fb)
                log.warning("consumer left the group: poll() was not called within "
                            "max.poll.interval.ms (%d ms); rejoining", self.max_poll_interval_ms)
            elif err == RD_KAFKA_RESP_ERR__FATAL:
                raise KafkaError(f"fatal consumer error: {detail}", code=_err_name(err))
            else:
                log.warning("consumer error %s%s: %s", _err_name(err), where, detail)

    # ---------------------------------------------------------------- offsets
    cdef _store_positions(self, object only):
        """Hands positions of returned records to librdkafka's offset store (auto-commit)."""
        cdef rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new(max(1, self.core.fb.n))
        cdef kc_partition_t *p
        cdef size_t i
        for i in range(self.core.fb.n):
            p = self.core.fb.parts[i]
            if p.position == KC_POSITION_UNKNOWN or p.position == p.stored:
                continue
            if only is not None and TopicPartition(p.topic.decode(), p.partition) not in only:
                continue
            rd_kafka_topic_partition_list_add(lst, p.topic, p.partition).offset = p.position
            p.stored = p.position
        if lst.cnt:
            rd_kafka_offsets_store(self.rk, lst)
        rd_kafka_topic_partition_list_destroy(lst)

    def positions(self):
        """TopicPartition -> next offset to return, for partitions with returned records."""
        self._check_open()
        cdef size_t i
        cdef kc_partition_t *p
        out = {}
        for i in range(self.core.fb.n):
            p = self.core.fb.parts[i]
            if p.position != KC_POSITION_UNKNOWN:
                out[TopicPartition(p.topic.decode(), p.partition)] = p.position
        return out

    cdef rd_kafka_topic_partition_list_t *_offsets_list(self, dict offsets) except NULL:
        cdef rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new(max(1, len(offsets)))
        cdef rd_kafka_topic_partition_t *e
        cdef bytes md
        for tp, om in offsets.items():
            e = rd_kafka_topic_partition_list_add(lst, c_string(tp.topic, "topic"), tp.partition)
            e.offset = om.offset
            if om.metadata:
                md = om.metadata.encode()
                e.metadata = malloc(len(md))  # freed by rd_kafka_topic_partition_list_destroy
                if e.metadata == NULL:
                    rd_kafka_topic_partition_list_destroy(lst)
                    raise MemoryError()
                memcpy(e.metadata, <char *>md, len(md))
                e.metadata_size = len(md)
        return lst

    cdef int _check_commit_allowed(self) except -1:
        if not self.has_group:
            raise CommitFailedError("commit requires group.id to be set")
        # max.poll.interval.ms governs group membership only: a consumer with a manual
        # assign() is no member and may take as long as it likes between polls (as in Java).
        if self._subscription and (self._left_group or kc_poll_timer_expired(&self.core.poll_timer)
                                   or rd_kafka_assignment_lost(self.rk)):
            raise CommitFailedError(COMMIT_FAILED_MESSAGE.format(interval=self.max_poll_interval_ms),
                                    code="_MAX_POLL_EXCEEDED")
        return 0

    def commit_sync(self, dict offsets, double timeout):
        """Commits `offsets` ({TopicPartition: OffsetAndMetadata}) and waits for the result."""
        self._check_open()
        self._check_commit_allowed()
        if not offsets:
            return {}
        cdef rd_kafka_topic_partition_list_t *lst = self._offsets_list(offsets)
        cdef rd_kafka_queue_t *q = rd_kafka_queue_new(self.rk)
        cdef rd_kafka_event_t *ev = NULL
        cdef rd_kafka_resp_err_t err
        cdef int64_t deadline = _deadline_ms(timeout)
        cdef bint capped = self._closing and self._close_deadline_ms < deadline
        cdef int64_t tmo = 0
        if capped:  # a listener inside close(): close(timeout) bounds the commit too
            deadline = self._close_deadline_ms
            tmo = max(<int64_t>0, deadline - kc_now_ms())
        try:
            while True:
                err = rd_kafka_commit_queue(self.rk, lst, q, NULL, NULL)
                if err:
                    self._commit_error(err, "commit")
                while True:  # in slices, checking for signals (the commit goes on if one interrupts)
                    with nogil:
                        ev = rd_kafka_queue_poll(q, _slice(deadline))
                    if ev != NULL or kc_now_ms() >= deadline:
                        break
                    PyErr_CheckSignals()
                if (ev == NULL or not _stale_member_epoch(ev)
                        or kc_now_ms() + _STALE_EPOCH_BACKOFF_MS >= deadline):
                    break
                # KIP-848: the coordinator bumped this member's epoch (a reconciliation is under way) and
                # the commit carried the old one. As the Java client does, retry within the timeout:
                # librdkafka sends the epoch its latest heartbeat answer gave.
                rd_kafka_event_destroy(ev)
                ev = NULL
                self.stale_epoch_retries += 1
                with nogil:
                    ev = rd_kafka_queue_poll(q, _STALE_EPOCH_BACKOFF_MS)  # a pause: nothing else is posted to q
                if ev != NULL:
                    rd_kafka_event_destroy(ev)
                    ev = NULL
                PyErr_CheckSignals()
            if ev == NULL:
                if capped:
                    raise KafkaTimeoutError(
                        f"commit_sync() inside close() did not complete before close()'s deadline "
                        f"({tmo / 1000.0:.3f} s were left of its timeout); the commit is still sent and "
                        f"librdkafka's close waits for it in the background")
                raise KafkaTimeoutError(f"commit_sync() did not complete within {timeout:.3f} s")
            self._commit_result(ev, "commit_sync")
            return offsets
        finally:
            if ev != NULL:
                rd_kafka_event_destroy(ev)
            rd_kafka_topic_partition_list_destroy(lst)
            rd_kafka_queue_destroy(q)

    cdef _commit_error(self, rd_kafka_resp_err_t err, str what):
        if (err in (RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION,
                    RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID)
                and self._subscription and not self._closing):
            # The group is rebalancing, or has moved on without this member: hold records back
            # until the rebalance is served (kc_consumer_rebalance_pending), as when a heartbeat
            # learns it. Records handed out now could not be committed, and partitions about to
            # move would be processed again by their next owner.
            self.core.commit_refused_ms = kc_now_ms()
        if (err == RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION and self._subscription and not self._left_group
                and self._cooperative()
                and not rd_kafka_assignment_lost(self.rk)):
            # Cooperative: the commit carried the generation before a rebalance this member takes
            # part in (it keeps its partitions). As in Java, retriable: poll() completes the
            # rebalance (on_partitions_assigned runs with the new generation), then commit again.
            raise RebalanceInProgressError(
                f"{what} failed: the consumer's generation is stale because the group is completing "
                f"a rebalance this member takes part in. Call poll() to complete the rebalance, "
                f"then retry the commit.", code=_err_name(err))
        if _err_name(err) == "STALE_MEMBER_EPOCH":
            raise RebalanceInProgressError(
                f"{what} failed: the member epoch it carried is stale because the group is reconciling "
                f"this member's assignment (KIP-848). Call poll(), then retry the commit.",
                code=_err_name(err))
        if err == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS:
            if self._in_rebalance:
                hint = ("The coordinator refused it while the group is joining (Kafka accepts "
                        "commits from current members then; librdkafka's mock cluster does not): "
                        "records after the last successful commit will be redelivered.")
            else:
                hint = ("Call poll() to complete the rebalance (commit in on_partitions_revoked), "
                        "then retry.")
            raise RebalanceInProgressError(
                f"{what} failed: offset commit cannot be completed since the consumer group is "
                f"rebalancing. {hint}", code=_err_name(err))
        if err in _GROUP_GONE_ERRORS or err == RD_KAFKA_RESP_ERR__STATE:
            if self._left_group or self.poll_interval_expiries or kc_poll_timer_expired(&self.core.poll_timer):
                why = COMMIT_FAILED_MESSAGE.format(interval=self.max_poll_interval_ms)
            else:
                why = ("The group rebalanced (a member joined, left or was evicted) and this "
                       "member's generation is no longer current; its partitions may have moved "
                       "to another member. Commit in on_partitions_revoked to avoid redelivery.")
            raise CommitFailedError(
                f"{what} failed with {_err_name(err)}: the member is no longer part of the "
                f"group's current generation. {why}", code=_err_name(err))
        self._raise(err, what)

    cdef _commit_result(self, rd_kafka_event_t *ev, str what):
        cdef rd_kafka_resp_err_t err = rd_kafka_event_error(ev)
        cdef rd_kafka_topic_partition_list_t *res = rd_kafka_event_topic_partition_list(ev)
        cdef int i
        if err:
            self._commit_error(err, what)
        if res != NULL:
            for i in range(res.cnt):
                if res.elems[i].err:
                    self._commit_error(res.elems[i].err,
                                       f"{what} of {res.elems[i].topic.decode()}-{res.elems[i].partition}")

    def commit_async(self, dict offsets, callback):
        self._check_open()
        self._check_commit_allowed()
        if not offsets:
            if callback is not None:
                self._commit_seq += 1
                self._commit_callbacks[-self._commit_seq] = (callback, {}, None)
            return
        cdef rd_kafka_topic_partition_list_t *lst = self._offsets_list(offsets)
        cdef rd_kafka_resp_err_t err
        self._commit_seq += 1
        key = self._commit_seq
        self._commit_callbacks[key] = (callback, offsets, None)
        err = rd_kafka_commit_queue(self.rk, lst, self.commit_q, NULL, <void *>key)
        rd_kafka_topic_partition_list_destroy(lst)
        if err:
            del self._commit_callbacks[key]
            self._commit_error(err, "commit_async")

    cdef _serve_commit_callbacks(self, int timeout_ms=0):
        cdef rd_kafka_event_t *ev
        cdef long key
        # completions librdkafka reported
        while self._commit_callbacks:
            with nogil:
                ev = rd_kafka_queue_poll(self.commit_q, timeout_ms)
            if ev == NULL:
                break
            key = <long>rd_kafka_event_opaque(ev)
            entry = self._commit_callbacks.pop(key, None)
            exc = None
            try:
                self._commit_result(ev, "commit_async")
            except KafkaError as e:
                exc = e
            finally:
                rd_kafka_event_destroy(ev)
            if entry is not None and entry[0] is not None:
                self._run_commit_callback(entry[0], entry[1], exc)
        # empty commits complete at once
        for key in [k for k in self._commit_callbacks if k < 0]:
            cb, offs, _ = self._commit_callbacks.pop(key)
            self._run_commit_callback(cb, offs, None)

    cdef _run_commit_callback(self, cb, offsets, exc):
        self._in_callback += 1
        try:
            cb(offsets, exc)
        finally:
            self._in_callback -= 1

    def committed(self, list tps, double timeout):
        """The group's committed offsets of `tps` (None where nothing is committed), within `timeout`
        seconds (inf: no bound). Asked with librdkafka's ListConsumerGroupOffsets on a queue of its
        own (the group's OffsetFetch, as rd_kafka_committed() sends), so that the wait goes in slices
        and a signal interrupts it."""
        self._check_open()
        cdef rd_kafka_topic_partition_list_t *lst
        cdef rd_kafka_ListConsumerGroupOffsets_t *req = NULL
        cdef rd_kafka_AdminOptions_t *opts = NULL
        cdef rd_kafka_queue_t *q = NULL
        cdef rd_kafka_event_t *ev = NULL
        cdef const rd_kafka_group_result_t **groups
        cdef const rd_kafka_topic_partition_list_t *res
        cdef const rd_kafka_error_t *gerr
        cdef rd_kafka_resp_err_t err
        cdef int64_t deadline = _deadline_ms(timeout)
        cdef int tmo = _ms(timeout)
        cdef size_t cnt = 0
        cdef char errstr[256]
        cdef int i
        unique = list(dict.fromkeys(tps))  # the request refuses duplicates
        out = dict.fromkeys(tps)
        if not unique:
            return out
        lst = _c_list(unique)
        try:
            req = rd_kafka_ListConsumerGroupOffsets_new(self._group_id, lst)
            opts = rd_kafka_AdminOptions_new(self.rk, RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS)
            if req == NULL or opts == NULL:
                raise MemoryError()
            # The wait below is ours; librdkafka's own bound on the request (at most an hour) ends well
            # after it, and never under 30 s: librdkafka 2.16 aborts the process
            # (rd_kafka_enq_once_del_source_return: eonce->refcnt > 0) when its admin request timer
            # fires as the response arrives, which short request timeouts made frequent
            # (tests/test_consumer_api.py::test_committed_with_short_timeouts_does_not_abort).
            rd_kafka_AdminOptions_set_request_timeout(
                opts, 3600000 if tmo < 0 or tmo > 3595000 else max(30000, tmo + 5000), errstr, sizeof(errstr))
            q = rd_kafka_queue_new(self.rk)
            rd_kafka_ListConsumerGroupOffsets(self.rk, &req, 1, opts, q)
            while True:  # in slices, checking for signals
                with nogil:
                    ev = rd_kafka_queue_poll(q, _slice(deadline))
                if ev != NULL or kc_now_ms() >= deadline:
                    break
                PyErr_CheckSignals()
            if ev == NULL:
                self._raise(RD_KAFKA_RESP_ERR__TIMED_OUT, "committed")
            err = rd_kafka_event_error(ev)
            if err:
                self._raise(err, "committed")
            groups = rd_kafka_ListConsumerGroupOffsets_result_groups(
                rd_kafka_event_ListConsumerGroupOffsets_result(ev), &cnt)
            if cnt < 1:
                raise KafkaError("committed: librdkafka returned no result for the group")
            gerr = rd_kafka_group_result_error(groups[0])
            if gerr != NULL:
                self._raise(rd_kafka_error_code(gerr), "committed")
            res = rd_kafka_group_result_partitions(groups[0])
            for i in range(res.cnt if res != NULL else 0):
                tp = TopicPartition(res.elems[i].topic.decode(), res.elems[i].partition)
                if tp in out and res.elems[i].offset >= 0:
                    md = b"" if res.elems[i].metadata == NULL else (<char *>res.elems[i].metadata)[:res.elems[i].metadata_size]
                    out[tp] = OffsetAndMetadata(res.elems[i].offset, md.decode(errors="replace"))
            return out
        finally:
            if ev != NULL:
                rd_kafka_event_destroy(ev)
            if q != NULL:
                rd_kafka_queue_destroy(q)
            if opts != NULL:
                rd_kafka_AdminOptions_destroy(opts)
            if req != NULL:
                rd_kafka_ListConsumerGroupOffsets_destroy(req)
            rd_kafka_topic_partition_list_destroy(lst)

    def watermarks(self, str topic, int partition, double timeout):
        self._check_open()
        cdef int64_t low = 0, high = 0
        cdef rd_kafka_resp_err_t err
        cdef bytes t = c_string(topic, "topic")
        cdef const char *ct = t
        cdef int tmo = _ms(timeout)
        with nogil:
            err = rd_kafka_query_watermark_offsets(self.rk, ct, partition, &low, &high, tmo)
        if err:
            self._raise(err, f"watermark offsets of {topic}-{partition}")
        return low, high

    cdef kc_partition_t *_assigned(self, tp) except NULL:
        cdef kc_partition_t *p = kc_fb_find(&self.core.fb, c_string(tp.topic, "topic"), tp.partition)
        if p == NULL:
            raise IllegalStateError(f"No current assignment for partition {tp.topic}-{tp.partition}")
        return p

    def seek(self, tp, int64_t offset, double timeout, bint _fetcher_only=False):
        """Next poll() returns records of tp from `offset` (or BEGINNING/END sentinels).
        `_fetcher_only` (tests) moves librdkafka's fetcher and leaves the fetch buffer, position
        and floor alone, as when librdkafka restarts a fetcher by itself."""
        self._check_open()
        cdef kc_partition_t *p = self._assigned(tp)
        cdef rd_kafka_topic_partition_list_t *lst = _c_list([tp])
        cdef rd_kafka_error_t *error
        cdef int tmo = <int>(timeout * 1000)
        lst.elems[0].offset = offset
        if not _fetcher_only:
            kc_fb_purge(&self.core.fb, p)
            p.position = offset if offset >= 0 else KC_POSITION_UNKNOWN
            p.floor = KC_POSITION_UNKNOWN  # the application chose where to read from
            if offset >= 0:
                kc_consumer_seek_guard(p, offset)  # the seek wins over a fetch librdkafka started
        cdef int64_t seek_deadline = kc_now_ms() + tmo
        while True:
            with nogil:
                error = rd_kafka_seek_partitions(self.rk, lst, tmo)
            # Right after assign() (or in on_partitions_assigned) librdkafka has not started
            # the partition's fetcher yet (it first looks up the committed offset) and
            # refuses the seek with _STATE, or the fetcher's start overtakes the seek, which
            # then fails with _OUTDATED: retry until the seek is applied.
            if (error == NULL and _seek_again(lst.elems[0].err)
                    and kc_now_ms() < seek_deadline):
                lst.elems[0].err = RD_KAFKA_RESP_ERR_NO_ERROR
                with nogil:
                    usleep(5000)
                continue
            if (error != NULL and _seek_again(rd_kafka_error_code(error))
                    and kc_now_ms() < seek_deadline):
                rd_kafka_error_destroy(error)
                with nogil:
                    usleep(5000)
                continue
            break
        try:
            if error != NULL:
                msg = rd_kafka_error_string(error).decode()
                code = _err_name(rd_kafka_error_code(error))
                rd_kafka_error_destroy(error)
                raise KafkaError(f"seek({tp.topic}-{tp.partition}, {offset}) failed: {msg}", code=code)
            if lst.elems[0].err:
                self._raise(lst.elems[0].err, f"seek({tp.topic}-{tp.partition}, {offset})")
        finally:
            rd_kafka_topic_partition_list_destroy(lst)
        # records already queued by librdkafka before the seek are older than the barrier
        kc_fb_purge(&self.core.fb, p)

    def position_or_none(self, tp):
        self._check_open()
        cdef kc_partition_t *p = self._assigned(tp)
        if p.position != KC_POSITION_UNKNOWN:
            return p.position
        return None

    def buffered_first_offset(self, tp):
        """Offset of the oldest buffered record of tp, or None (used by position())."""
        self._check_open()
        cdef int64_t off = kc_fb_first_offset(self._assigned(tp))
        return None if off == KC_POSITION_UNKNOWN else off

    def librdkafka_position(self, tp):
        self._check_open()
        cdef rd_kafka_topic_partition_list_t *lst = _c_list([tp])
        cdef int64_t off
        rd_kafka_position(self.rk, lst)
        off = lst.elems[0].offset
        rd_kafka_topic_partition_list_destroy(lst)
        return off if off >= 0 else None

    cdef _set_paused(self, list tps, bint paused):
        """Pauses/resumes fetching in librdkafka and returning in the fetch buffer; every
        partition must be assigned (checked before anything changes)."""
        self._check_open()
        cdef rd_kafka_topic_partition_list_t *lst
        for tp in tps:
            self._assigned(tp)
        lst = _c_list(tps)
        if paused:
            rd_kafka_pause_partitions(self.rk, lst)
        else:
            rd_kafka_resume_partitions(self.rk, lst)
        rd_kafka_topic_partition_list_destroy(lst)
        for tp in tps:
            self._assigned(tp).paused = paused

    def pause(self, list tps):
        self._set_paused(tps, True)

    def resume(self, list tps):
        self._set_paused(tps, False)

    def paused(self):
        self._check_open()
        cdef size_t i
        return {TopicPartition(self.core.fb.parts[i].topic.decode(), self.core.fb.parts[i].partition)
                for i in range(self.core.fb.n) if self.core.fb.parts[i].paused}

    def wakeup(self):
        if self.core != NULL:
            kc_consumer_wakeup(self.core)

    @property
    def wake_fd(self):
        """The eventfd that becomes readable when records, rebalance or error events, commit results
        or a wakeup() arrive; -1 once closed. poll() (any timeout) and serve_commits() consume it."""
        return self.core.wake_fd if self.core != NULL and not self._closed else -1

    def serve_commits(self):
        """Runs the callbacks of completed commit_async() calls, without waiting (any poll() does too)."""
        self._check_open()
        self._serve_commit_callbacks(0)

    cdef _on_stats(self, str doc):
        try:
            self._stats = stats_summary(doc)
        except (ValueError, TypeError, AttributeError) as exc:
            log.debug("librdkafka statistics not understood: %s", exc)
        if self._stats_cb is not None:
            self._stats_cb(doc)

    def metrics(self):
        cdef int64_t now = kc_now_ms()
        cdef int64_t hb = self.core.heartbeat.last_ok_ms if self.core != NULL else 0
        if self.core == NULL:
            return {"closed": True}
        return {
            "assigned_partitions": self.core.fb.n,
            "buffered_records": self.core.fb.records,
            "buffered_bytes": self.core.fb.bytes,
            "time_since_last_poll_ms": kc_poll_timer_since(&self.core.poll_timer),
            "last_heartbeat_ms_ago": (now - hb) if hb else -1,
            "heartbeats": self.core.heartbeat.ok,
            "heartbeat_errors": self.core.heartbeat.errors,
            "rebalances": self.rebalances,
            "records_returned": self.core.records_returned,
            "polls": self.core.polls,
            "poll_interval_expiries": self.poll_interval_expiries,
            "revoked_records_dropped": self.revoked_records_dropped,
            "refetched_records_dropped": self.core.dropped_refetched,
            "below_committed_records_dropped": self.core.dropped_below_committed,
            "seek_superseded_records_dropped": self.core.dropped_before_seek,
            "seek_retries": self.core.seek_retries,
            "max_poll_interval_ms": self.max_poll_interval_ms,
            "rebalance_barrier_polls": self.core.barrier_polls,
            "prefetched_records": rd_kafka_queue_length(self.core.fetchq) if self.core.fetchq != NULL else 0,
            "paused_partitions": sum(1 for i in range(self.core.fb.n) if self.core.fb.parts[i].paused),
            "statistics": self._stats,
        }

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

    def close(self, double timeout=-1.0):
        """Commits stored positions (auto-commit), revokes the assignment (listener), leaves the group
        and frees everything, within `timeout` seconds (< 0: default.api.timeout.ms).

        Uses librdkafka's asynchronous close (rd_kafka_consumer_close_queue) and serves its events
        here until rd_kafka_consumer_closed() or the deadline. Returns True if librdkafka completed its
        close in time. Past the deadline the consumer is closed for the application all the same (a
        WARNING is logged): librdkafka's remaining work (a commit or LeaveGroup waiting for an
        unreachable coordinator) finishes on a background thread (_reaper_main), without listeners."""
        cdef int64_t deadline
        cdef rd_kafka_queue_t *q = NULL
        cdef bint done = False
        if self._closed or self._closing:
            return True
        if self._in_rebalance:
            raise IllegalStateError("close() cannot be called from a rebalance listener; leave the "
                                    "poll loop and close the consumer after poll() returns")
        self._check_not_in_callback("close")
        deadline = (_deadline_ms(timeout) if timeout >= 0
                    else kc_now_ms() + self.default_api_timeout_ms)
        self._close_deadline_ms = deadline
        if self._subscription and not self._left_group and self.core.fb.n and self._cooperative():
            self._settle_rebalance(kc_now_ms() + min((deadline - kc_now_ms()) // 2, 10_000))
        # Not closed yet while librdkafka leaves the group: the revoke listener runs inside and may
        # still commit (Java allows commitSync() there).
        self._closing = True
        try:
            if self.auto_commit and not self._left_group:
                self._store_positions(None)
            q = rd_kafka_queue_new(self.rk)
            self._close_q = q
            done = self._close_group(q, deadline)
            if done:
                self._close_unreported()
            self._finish_commit_callbacks(done)
        finally:
            self._close_q = NULL
            if not done and q != NULL and self._abandon(q):
                q = NULL
            if q != NULL:
                rd_kafka_queue_destroy(q)
            self._closed = True
            self._closing = False
            self._destroy()
            drain_logs()
        if not done:
            log.warning("close() did not complete within %.3f s (librdkafka was still committing or "
                        "leaving the group, e.g. waiting for an unreachable coordinator): the consumer is "
                        "closed, librdkafka finishes in the background and the group may wait up to "
                        "session.timeout.ms for this member", max(timeout, 0.0) if timeout >= 0
                        else self.default_api_timeout_ms / 1000.0)
        self._raise_pending()
        return done

    cdef _settle_rebalance(self, int64_t until):
        """Cooperative close: lets a rebalance this member already takes part in complete before the
        final revoke, so that the listener's commit in on_partitions_revoked reaches a group that
        accepts it. A broker that refuses commits while a group joins (the embedded broker refuses
        every commit then; Kafka refuses them while the group completes a rebalance) otherwise
        refuses the closing member's last commit whenever another member has just joined, and its
        partitions' next owners process again what it did since its previous commit.

        Bounded so that it never makes close() take longer than librdkafka's own close would: a
        member whose JoinGroup is pending cannot leave before the join round answers it (librdkafka
        waits for it), so letting that round complete first costs nothing. A probe
        (_probe_rebalance: re-commits offsets the group already has) tells whether the group
        rebalances (again: with cooperative-sticky a second round follows the first); if librdkafka's
        heartbeat has seen it too, this member is rejoining (_rejoining) and the round is waited
        for. A member that has not started to rejoin waits for its heartbeat to notice only if the
        round it then joins fits in what is left of the settle (session.timeout.ms + heartbeat.interval.ms: the embedded broker's round
        takes about session.timeout.ms - 1 s; Kafka's ends when every member rejoined); otherwise it
        leaves at once, as without the settle (with the defaults, waiting made close() take 41 s
        instead of 0 s: the settle's 10 s, then the 45 s session's round librdkafka waited for).
        Until `until` at the latest; no record is handed out meanwhile (listeners run). close goes
        on regardless of how it ends."""
        cdef int64_t now
        cdef bint waiting = False  # a round this member takes part in is being waited for
        cdef rd_kafka_message_t *m
        self.core.hold_records = 1
        try:
            while True:
                now = kc_now_ms()
                if now >= until or not self.core.fb.n:
                    return
                if kc_consumer_rebalance_pending(self.core):
                    if (not waiting and not self._rejoining()
                            and self._session_timeout_ms + self._heartbeat_interval_ms > until - now):
                        log.debug("close(): the group rebalances, this member has not rejoined and the "
                                  "round may outlast the settle: leaving without waiting for it")
                        return
                    waiting = True
                    if self._poll_core(<int>min(100, until - now)) == KC_POLL_EVENT:
                        # consumer errors are not raised from close(); without this, poll would
                        # return at once for as long as they are pending
                        while True:
                            m = kc_consumer_take_error(self.core)
                            if m == NULL:
                                break
                            log.debug("close(): %s", rd_kafka_err2str(m.err).decode(errors="replace"))
                            rd_kafka_message_destroy(m)
                elif not self._probe_rebalance(until):
                    return
                else:
                    waiting = False
        finally:
            self.core.hold_records = 0

    cdef bint _rejoining(self) noexcept:
        """librdkafka's heartbeat has been answered REBALANCE_IN_PROGRESS since the last rebalance this
        member served: it is rejoining the group (it does so by itself, without the application)."""
        cdef kc_heartbeat_monitor_t *hb = self.core.heartbeat
        cdef int64_t since = max(hb.last_ok_ms, self.core.last_rebalance_ms)
        return hb.last_any_ms > since and hb.last_error == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS

    cdef bint _probe_rebalance(self, int64_t until) except -1:
        """Looks up the offsets the group has committed for the partitions this member holds and
        commits exactly those again: nothing changes for the group (offsets this member remembers
        could be older than the group's: it may have lost a partition and got it back, or
        auto-commit committed without it). True if the coordinator refused the commit because the
        group rebalances (the barrier is then engaged)."""
        cdef rd_kafka_topic_partition_list_t *lst
        cdef rd_kafka_queue_t *q
        cdef rd_kafka_event_t *ev = NULL
        cdef rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR
        cdef rd_kafka_topic_partition_list_t *res
        cdef int i
        # The answer can take a whole join round: the coordinator (the embedded broker at least)
        # serves this member's requests in order, after its pending JoinGroup.
        cdef int tmo = <int>max(0, until - kc_now_ms())
        cdef rd_kafka_topic_partition_list_t *mine
        if self.core.fb.n == 0 or tmo <= 0:
            return False
        mine = rd_kafka_topic_partition_list_new(<int>self.core.fb.n)
        try:
            for i in range(self.core.fb.n):
                rd_kafka_topic_partition_list_add(mine, self.core.fb.parts[i].topic,
                                                  self.core.fb.parts[i].partition)
            with nogil:
                err = rd_kafka_committed(self.rk, mine, tmo)
            if err:
                return False
            held = {(<bytes>mine.elems[i].topic, mine.elems[i].partition): mine.elems[i].offset
                    for i in range(mine.cnt) if not mine.elems[i].err and mine.elems[i].offset >= 0}
        finally:
            rd_kafka_topic_partition_list_destroy(mine)
        tmo = <int>max(0, until - kc_now_ms())
        if not held or tmo <= 0:
            return False
        lst = rd_kafka_topic_partition_list_new(len(held))
        for (topic, partition), off in held.items():
            rd_kafka_topic_partition_list_add(lst, topic, partition).offset = off
        q = rd_kafka_queue_new(self.rk)
        try:
            err = rd_kafka_commit_queue(self.rk, lst, q, NULL, NULL)
            if not err:
                with nogil:
                    ev = rd_kafka_queue_poll(q, tmo)
                if ev == NULL:
                    return False
                err = rd_kafka_event_error(ev)
                res = rd_kafka_event_topic_partition_list(ev)
                if not err and res != NULL:
                    for i in range(res.cnt):
                        if res.elems[i].err:
                            err = res.elems[i].err
                            break
        finally:
            if ev != NULL:
                rd_kafka_event_destroy(ev)
            rd_kafka_topic_partition_list_destroy(lst)
            rd_kafka_queue_destroy(q)
        if err in (RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION):
            self.core.commit_refused_ms = kc_now_ms()
            log.debug("close(): the group is rebalancing (%s); completing it before the final revoke",
                      _err_name(err))
            return True
        return False

    cdef bint _close_group(self, rd_kafka_queue_t *q, int64_t deadline) except *:
        """Starts librdkafka's close on `q` and serves its events until the group handle is terminated
        (True) or the deadline (False)."""
        cdef rd_kafka_error_t *error = rd_kafka_consumer_close_queue(self.rk, q)
        cdef rd_kafka_resp_err_t code
        cdef rd_kafka_event_t *ev
        cdef int64_t left
        if error != NULL:
            code = rd_kafka_error_code(error)
            msg = rd_kafka_error_string(error).decode(errors="replace")
            rd_kafka_error_destroy(error)
            if code != RD_KAFKA_RESP_ERR__DESTROY:  # __DESTROY: closed already
                # a fatal error: rd_kafka_destroy() then skips the close
                log.warning("consumer close: %s", msg)
            return True
        while not rd_kafka_consumer_closed(self.rk):
            left = deadline - kc_now_ms()
            if left <= 0:
                return False
            with nogil:
                ev = rd_kafka_queue_poll(q, _slice(deadline))
            if ev == NULL:
                # a signal's exception ends close() as a timeout does: librdkafka finishes in the
                # background (see close())
                PyErr_CheckSignals()
                continue
            try:
                self._close_event(ev)
            except BaseException as exc:  # a listener's: raised once closed
                if self._pending_exc is None:
                    self._pending_exc = exc
            finally:
                rd_kafka_event_destroy(ev)
        return True

    cdef _close_event(self, rd_kafka_event_t *ev):
        cdef int etype = rd_kafka_event_type(ev)
        cdef rd_kafka_resp_err_t err = rd_kafka_event_error(ev)
        if etype == RD_KAFKA_EVENT_REBALANCE:
            if not self._close_unassigned:
                self._on_rebalance(err, rd_kafka_event_topic_partition_list(ev))
            elif not rd_kafka_consumer_closed(self.rk):
                # posted after close's full unassign (the stale ones were dropped): librdkafka waits
                # for this call
                with nogil:
                    _close_assign_call(self.rk, err, rd_kafka_event_topic_partition_list(ev),
                                       self._cooperative_cfg)
        elif etype == RD_KAFKA_EVENT_ERROR and err:
            log.debug("consumer error during close: %s: %s", _err_name(err),
                      rd_kafka_event_error_string(ev).decode(errors="replace"))

    cdef _close_unreported(self):
        """After librdkafka's close: partitions never revoked by an event (librdkafka sends none when
        the assignment was lost, e.g. after max.poll.interval.ms) go to on_partitions_lost. The group
        handle is terminated, so a commit from the listener fails instead of racing it."""
        listener = self._listener
        owned = sorted(self.assignment())
        if not owned or listener is None or not self._subscription:
            return
        try:
            if rd_kafka_assignment_lost(self.rk) and hasattr(listener, "on_partitions_lost"):
                listener.on_partitions_lost(owned)
            else:
                listener.on_partitions_revoked(owned)
        except BaseException as exc:
            if self._pending_exc is None:
                self._pending_exc = exc

    cdef _finish_commit_callbacks(self, bint done):
        """Runs the callbacks of commit_async() calls: their results are all in once librdkafka's close
        is done (it waits for commits in flight); after a timed-out close, the ones still missing get
        a KafkaTimeoutError, so every callback runs once."""
        self._serve_commit_callbacks(0)
        for key in list(self._commit_callbacks):
            cb, offsets, _ = self._commit_callbacks.pop(key)
            if cb is not None:
                try:
                    self._run_commit_callback(
                        cb, offsets, KafkaTimeoutError("the commit did not complete before close() returned"))
                except BaseException as exc:
                    if self._pending_exc is None:
                        self._pending_exc = exc

    @property
    def closed(self):
        return self._closed
