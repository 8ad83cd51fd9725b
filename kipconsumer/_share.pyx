# cython: language_level=3, boundscheck=False, wraparound=False
"""NativeShareConsumer: one librdkafka share consumer (KIP-932) and the fair, bounded drain of its
batches.

librdkafka's ``rd_kafka_share_poll()`` hands over a batch (``rd_kafka_messages_t``) whose size
``max.poll.records`` bounds only loosely. The batch's messages are moved, by pointer, into a
kc_fetch_buffer (csrc/fetch_buffer.c, the regular consumer's KIP-41 drain) and every ``poll()``
returns at most ``max.poll.records`` of them, shared over the partitions as ``poll.fairness``
says. librdkafka is asked for a new batch only once the buffer is empty: the messages stay owned
by their batch (``_Batch`` destroys it when the last ConsumerRecords using it is freed) and the
buffer never destroys one (it is emptied by draining, never purged).

The librdkafka handle always runs in explicit acknowledgement mode. The implicit mode is done
here: the records one ``poll()`` returned are accepted (ACCEPT) at the next ``poll()``,
``commit_sync()``, ``commit_async()`` or ``close()``, so a record still buffered here, never
handed out, is never accepted (librdkafka's own implicit mode would accept a whole batch).

Not thread-safe: kipconsumer.share.KafkaShareConsumer serialises the calls.
"""

cimport cython
from libc.stdint cimport int16_t, int32_t, int64_t
from libc.stdlib cimport free, malloc
from posix.types cimport pid_t

from kipconsumer._conf cimport conf_from_dict
from kipconsumer._fetch_buffer cimport (KC_FAIRNESS_GREEDY, KC_FAIRNESS_PROPORTIONAL, kc_fairness_t, kc_fb_add,
                                        kc_fb_destroy, kc_fb_drain, kc_fb_find, kc_fb_init, kc_fb_push,
                                        kc_fb_part_t, kc_fetch_buffer_t)
from kipconsumer._cstr cimport c_string
from kipconsumer._logring cimport drain_logs, kc_log_cb
from kipconsumer._mock cimport MockCluster
from kipconsumer._process cimport foreign_process, this_process
from kipconsumer._rdk cimport *
from kipconsumer._rdk_share cimport *
from kipconsumer._records cimport ConsumerRecords, records_borrow, records_set_deserializers

from kipconsumer._rdklog import emit as rdklog_emit
from kipconsumer._security_errors import is_security_error, security_error
from kipconsumer._security_hold import SecurityHold
from kipconsumer._share_errors import share_error
from kipconsumer.errors import ConfigError, KafkaError
from kipconsumer.structs import TopicPartition



#: RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_* by kipconsumer.share.AcknowledgeType's value
ACCEPT = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_ACCEPT
RELEASE = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_RELEASE
REJECT = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_REJECT
MIN_VERSION = KC_RDK_SHARE_MIN_VERSION


def mock_share_config(MockCluster cluster, int earliest=-1, int lock_ms=-1, int max_attempts=-1,
                      int session_ms=-1, int heartbeat_ms=-1):
    """Sets the embedded broker's share group settings (every share group); -1 leaves one as is."""
    cdef rd_kafka_mock_cluster_t *mc = cluster._mc()
    if earliest >= 0:
        rd_kafka_mock_sharegroup_set_auto_offset_reset(mc, earliest)
    if lock_ms >= 0:
        rd_kafka_mock_sharegroup_set_record_lock_duration(mc, lock_ms)
    if max_attempts >= 0:
        rd_kafka_mock_sharegroup_set_max_delivery_attempts(mc, max_attempts)
    if session_ms >= 0:
        rd_kafka_mock_sharegroup_set_session_timeout(mc, session_ms)
    if heartbeat_ms >= 0:
        rd_kafka_mock_sharegroup_set_heartbeat_interval(mc, heartbeat_ms)


cdef object _error(rd_kafka_error_t *error, str what):
    """The typed exception for a librdkafka error object (destroyed here)."""
    cdef rd_kafka_resp_err_t code = rd_kafka_error_code(error)
    name = rd_kafka_err2name(code).decode()
    msg = rd_kafka_error_string(error).decode(errors="replace")
    fatal = bool(rd_kafka_error_is_fatal(error))
    retriable = bool(rd_kafka_error_is_retriable(error))
    rd_kafka_error_destroy(error)
    return share_error(name, f"{what} failed: {msg}", fatal=fatal, retriable=retriable)


cdef object _err(rd_kafka_resp_err_t code, str what):
    return share_error(rd_kafka_err2name(code).decode(),
                       f"{what} failed: {rd_kafka_err2str(code).decode(errors='replace')}")


cdef void _ack_commit_cb(rd_kafka_share_t *rks, rd_kafka_share_partition_offsets_list_t *parts,
                         rd_kafka_resp_err_t err, void *opaque) noexcept with gil:
    """librdkafka's acknowledgement commit callback (on the thread inside rd_kafka_share_poll(),
    commit_sync() or close()): records (topic, partition, offsets, error name or None) per partition
    in the handle's `acks`; the application's callback runs later, outside librdkafka
    (kipconsumer.share.KafkaShareConsumer)."""
    cdef _Handle h = <_Handle>opaque
    cdef const rd_kafka_share_partition_offsets_t *entry
    cdef const rd_kafka_topic_partition_t *tp
    cdef const int64_t *offs
    cdef int i, j, n, cnt
    cdef rd_kafka_resp_err_t e
    try:
        n = rd_kafka_share_partition_offsets_list_count(parts) if parts != NULL else 0
        for i in range(n):
            entry = rd_kafka_share_partition_offsets_list_get(parts, i)
            if entry == NULL:
                continue
            tp = rd_kafka_share_partition_offsets_partition(entry)
            if tp == NULL or tp.topic == NULL:
                continue
            offs = rd_kafka_share_partition_offsets_offsets(entry)
            cnt = rd_kafka_share_partition_offsets_offsets_cnt(entry)
            e = err if err != RD_KAFKA_RESP_ERR_NO_ERROR else tp.err
            h.acks.append((tp.topic.decode(errors="replace"), tp.partition,
                           [offs[j] for j in range(cnt)] if offs != NULL else [],
                           None if e == RD_KAFKA_RESP_ERR_NO_ERROR else <int>e))
    except BaseException:  # never into librdkafka; an entry lost here is logged
        import logging
        logging.getLogger("kipconsumer.share").exception("acknowledgement commit result dropped")


cdef class _Reports:
    """What librdkafka's client callbacks report, their opaque: the last statistics document
    (statistics.interval.ms) and the security errors error_cb saw. The handle holds it until after
    rd_kafka_share_destroy() returns, so it outlives every callback."""
    cdef public object doc             # str or None
    cdef public long long docs
    cdef public object security        # SecurityHold (kipconsumer._security_hold): the authentication,
                                       # TLS and ACL errors error_cb saw, for poll() and the commits
    cdef public object pending         # an exception raised inside a callback (a signal handler's,
                                       # e.g. KeyboardInterrupt), raised when librdkafka's call returns


cdef int _stats_cb(rd_kafka_t *rk, char *json_buf, size_t json_len, void *opaque) noexcept with gil:
    """Served by rd_kafka_share_poll() on the polling thread; metrics() summarises the last one."""
    cdef _Reports st = <_Reports>opaque
    try:
        st.doc = json_buf[:json_len].decode(errors="replace")
        st.docs += 1
    except BaseException as exc:  # never into librdkafka
        if st.pending is None:
            st.pending = exc
    return 0


cdef void _error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) noexcept with gil:
    """librdkafka's client-level errors, served by rd_kafka_share_poll() on the polling thread.
    Without it librdkafka only logs them and a share consumer with a refused login polls empty for
    ever: security errors (kipconsumer._security_errors) are kept for poll() and the commits to
    raise. Every error is still logged as librdkafka logs it (facility ERROR)."""
    cdef _Reports st = <_Reports>opaque
    try:
        name = rd_kafka_name(rk).decode(errors="replace")
        text = reason.decode(errors="replace") if reason != NULL else ""
        rdklog_emit(3, name, "ERROR", f"{name}: {text}")
        code = rd_kafka_err2name(<rd_kafka_resp_err_t>err).decode()
        if is_security_error(code, text):
            st.security.report(code, text)
    except BaseException as exc:  # nothing may propagate into librdkafka
        if st.pending is None:
            st.pending = exc


cdef class _Handle:
    """Owns the rd_kafka_share_t; destroyed when the consumer and every batch are gone (librdkafka
    waits for every message to be released). Leaked in any other process than its creator's (a child
    made by fork(): _process.pxd)."""
    cdef rd_kafka_share_t *rks
    cdef list acks                     # acknowledgement commit results not yet taken (_ack_commit_cb)
    cdef _Reports reports              # the client callbacks' opaque (released after the destroy)
    cdef pid_t pid                     # the process rks belongs to

    def __dealloc__(self):
        cdef rd_kafka_error_t *error
        if self.rks != NULL and not foreign_process(self.pid):
            # no callback into an object being freed
            with nogil:  # librdkafka's locks: never with the GIL held (a callback may wait for it)
                error = rd_kafka_share_set_acknowledgement_commit_cb(self.rks, NULL, NULL)
                if error != NULL:
                    rd_kafka_error_destroy(error)
                error = rd_kafka_share_destroy(self.rks)
            if error != NULL:
                rd_kafka_error_destroy(error)
            self.rks = NULL


# no_gc_clear: a batch caught in a reference cycle (a record in a stored exception's traceback) must
# destroy its messages before it lets go of the handle: the GC's tp_clear would drop the handle first,
# and rd_kafka_share_destroy() then waits for ever for broker threads those messages keep alive
# (seen: an interpreter hung at exit after a close() that raised a callback's exception).
@cython.no_gc_clear
cdef class _Batch:
    """Owns one rd_kafka_messages_t (every message in it); keeps the handle alive. Leaked in any other
    process than its creator's (a child made by fork(): _process.pxd)."""
    cdef rd_kafka_messages_t *msgs
    cdef _Handle handle
    cdef pid_t pid                     # the process msgs belongs to

    def __dealloc__(self):
        cdef rd_kafka_messages_t *msgs = self.msgs
        if msgs != NULL and not foreign_process(self.pid):
            self.msgs = NULL
            with nogil:
                rd_kafka_messages_destroy(msgs)


cdef class NativeShareConsumer:
    """One librdkafka share consumer. Not thread-safe (the facade serialises calls)."""
    cdef _Handle _handle
    cdef rd_kafka_share_t *rks
    cdef kc_fetch_buffer_t fb
    cdef kc_fairness_t mode
    cdef size_t max_records
    cdef rd_kafka_message_t **out      # the last poll's records (implicit mode accepts them later)
    cdef int16_t *dcount
    cdef size_t out_n                  # records in `out` not yet accepted (implicit mode)
    cdef size_t last_n                 # records in `out` the last poll returned (both modes)
    cdef long long last_gen            # polls_started of that poll
    cdef bint kept                     # out[:last_n] were given back (unreturn): the next poll returns them
    cdef _Batch _last_batch            # the batch of out[:last_n]
    cdef bint implicit
    cdef bint closed
    cdef _Batch _buffered              # the batch the buffered messages belong to
    cdef _Batch _returned              # the batch of the records in `out`
    cdef object _key_deser, _value_deser
    cdef _Reports _reports
    cdef dict _returned_by_partition
    cdef public long long records_returned
    cdef public long long batches_fetched
    cdef public long long record_errors
    cdef public long long acknowledged
    cdef public long long polls_started  # poll() calls that got past the state checks

    def __cinit__(self, settings):
        """``settings``: the validated ShareConsumerSettings (kipconsumer.config), read as is."""
        cdef char errstr[512]
        cdef rd_kafka_conf_t *conf
        cdef dict rdkafka = settings.rdkafka
        cdef int max_poll_records = settings.max_poll_records
        kc_fb_init(&self.fb)
        self._returned_by_partition = {}
        self.mode = KC_FAIRNESS_GREEDY if settings.poll_fairness == "greedy" else KC_FAIRNESS_PROPORTIONAL
        self.max_records = max_poll_records
        self.implicit = settings.acknowledgement_mode != "explicit"
        self._key_deser = settings.key_deserializer
        self._value_deser = settings.value_deserializer
        self.out = <rd_kafka_message_t **>malloc(max_poll_records * sizeof(rd_kafka_message_t *))
        self.dcount = <int16_t *>malloc(max_poll_records * sizeof(int16_t))
        if self.out == NULL or self.dcount == NULL:
            raise MemoryError()
        conf = conf_from_dict(rdkafka)
        rd_kafka_conf_set_log_cb(conf, kc_log_cb)
        reports = _Reports.__new__(_Reports)
        reports.security = SecurityHold()
        self._reports = reports
        rd_kafka_conf_set_opaque(conf, <void *>reports)
        rd_kafka_conf_set_error_cb(conf, _error_cb)
        if int(rdkafka.get("statistics.interval.ms", "0") or 0) > 0:
            rd_kafka_conf_set_stats_cb(conf, _stats_cb)
        self.rks = rd_kafka_share_consumer_new(conf, errstr, sizeof(errstr))
        if self.rks == NULL:
            rd_kafka_conf_destroy(conf)
            drain_logs()
            raise ConfigError(errstr.decode(errors="replace"))
        self._handle = _Handle.__new__(_Handle)
        self._handle.pid = this_process()
        self._handle.rks = self.rks
        self._handle.acks = []
        self._handle.reports = reports
        drain_logs()

    def __dealloc__(self):
        self._empty_buffer()
        kc_fb_destroy(&self.fb)
        free(self.out)
        free(self.dcount)
        self.out = NULL
        self.dcount = NULL

    cdef void _empty_buffer(self) noexcept:
        """Drops the buffered messages (their batch destroys them), leaving the buffer empty."""
        while self.out != NULL and self.fb.records and kc_fb_drain(&self.fb, self.max_records, self.mode, self.out):
            pass
        self.out_n = 0

    cdef int _check_open(self, str what) except -1:
        if self.closed:
            from kipconsumer.errors import IllegalStateError
            raise IllegalStateError(f"{what}() called on a closed KafkaShareConsumer")
        return 0

    cdef int _check_security(self, str what) except -1:
        """Raises the typed error of a refused login, TLS handshake or ACL that librdkafka reported
        (error_cb), the first one not raised yet (the others are dropped); an AuthenticationError is
        raised again by every call for AUTH_HOLD_S (SecurityHold), as librdkafka reports a refusal
        only when it reconnects."""
        security = self._reports.security
        security.raise_held(what)
        first = security.take(discard_rest=True)
        if first is None:
            return 0
        code, text = first
        exc = security_error(code, text, what=f"{what} failed")
        if exc is None:
            return 0
        security.hold(exc)
        raise exc

    def subscribe(self, list topics):
        self._check_open("subscribe")
        cdef rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new(max(1, len(topics)))
        cdef rd_kafka_resp_err_t err
        cdef bytes name
        try:
            for t in topics:
                name = c_string(t, "topic", ValueError)
                rd_kafka_topic_partition_list_add(lst, name, RD_KAFKA_PARTITION_UA)
            err = rd_kafka_share_subscribe(self.rks, lst)
        finally:
            rd_kafka_topic_partition_list_destroy(lst)
        drain_logs()
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            raise _err(err, "subscribe")

    def unsubscribe(self):
        self._check_open("unsubscribe")
        self._release_kept()
        self._accept_returned()
        cdef rd_kafka_resp_err_t err = rd_kafka_share_unsubscribe(self.rks)
        self._empty_buffer()
        drain_logs()
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            raise _err(err, "unsubscribe")

    def buffered(self):
        """Records fetched but not yet returned by poll()."""
        return self.fb.records

    cdef int _accept_returned(self) except -1:
        """Implicit mode: ACCEPT the records the last poll() returned (once)."""
        cdef size_t i, n = self.out_n
        cdef rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR, e
        if not self.implicit or n == 0:
            return 0
        with nogil:
            for i in range(n):
                e = rd_kafka_share_acknowledge_type(self.rks, self.out[i], RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_ACCEPT)
                if e != RD_KAFKA_RESP_ERR_NO_ERROR and err == RD_KAFKA_RESP_ERR_NO_ERROR:
                    err = e
        self.out_n = 0
        self.last_n = 0  # accepted: no longer a batch unreturn() may keep
        self._last_batch = None
        self.acknowledged += n
        self._returned = None
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            raise _err(err, "acknowledging the records of the last poll()")
        return 0

    cdef int _fetch(self, int timeout_ms) except -1:
        """Asks librdkafka for a batch and buffers its records (skipping record-level errors, which
        librdkafka has acknowledged itself). The batch is owned and buffered before any Python code
        runs (drain_logs() logs through Python, where a signal handler's exception may be raised):
        messages left in a local would be lost to the application until their acquisition lock
        expired, and never destroyed, and rd_kafka_share_destroy() then waits for ever for the
        broker threads they keep alive. An exception raised after that leaves them buffered: the
        next poll() returns them."""
        cdef rd_kafka_messages_t *msgs = NULL
        cdef rd_kafka_error_t *error
        cdef rd_kafka_message_t *m
        cdef kc_fb_part_t *p
        cdef size_t i, n
        cdef const char *topic
        with nogil:
            error = rd_kafka_share_poll(self.rks, timeout_ms, &msgs)
        if error != NULL:
            if msgs != NULL:
                with nogil:
                    rd_kafka_messages_destroy(msgs)  # not acknowledged: the broker hands them out again
            exc = _error(error, "poll")  # destroys the error first, then builds the exception
            drain_logs()
            self._raise_pending()
            raise exc
        if msgs != NULL:
            batch = _Batch.__new__(_Batch)
            (<_Batch>batch).pid = self._handle.pid
            (<_Batch>batch).msgs = msgs
            (<_Batch>batch).handle = self._handle
            self.batches_fetched += 1
            n = rd_kafka_messages_count(msgs)
            for i in range(n):
                m = rd_kafka_messages_get(msgs, i)
                if m.err != RD_KAFKA_RESP_ERR_NO_ERROR:
                    self.record_errors += 1
                    continue
                topic = rd_kafka_topic_name(m.rkt)
                p = kc_fb_find(&self.fb, topic, m.partition)
                if p == NULL:
                    p = kc_fb_add(&self.fb, topic, m.partition)
                if p == NULL or kc_fb_push(&self.fb, p, &m, 1) != 0:
                    if self.fb.records:
                        self._buffered = batch
                    raise MemoryError()
            if self.fb.records:
                self._buffered = batch
        drain_logs()
        self._raise_pending()
        return 0

    cdef int _raise_pending(self) except -1:
        """Raises the exception a callback raised inside librdkafka's last call (e.g. a signal
        handler's KeyboardInterrupt), once."""
        if self._reports.pending is not None:
            exc, self._reports.pending = self._reports.pending, None
            raise exc
        return 0

    def poll(self, int timeout_ms):
        """At most max.poll.records records: from the buffer, or from one librdkafka batch (waiting
        up to timeout_ms for it) when the buffer is empty; the records unreturn() kept, if any, first.
        Implicit mode: first accepts the records the previous poll returned."""
        cdef size_t n, i
        self._check_open("poll")
        self._check_security("poll")
        self.polls_started += 1
        if self.kept:
            return self._return_kept()
        self._accept_returned()
        self.last_n = 0
        self._last_batch = None
        if self.fb.records == 0:
            self._buffered = None
            self._fetch(timeout_ms)
            self._check_security("poll")
        if self.fb.records == 0:
            return records_borrow(self.out, self.dcount, 0, None)
        batch = self._buffered
        n = kc_fb_drain(&self.fb, self.max_records, self.mode, self.out)
        for i in range(n):
            self.dcount[i] = rd_kafka_message_delivery_count(self.out[i])
        if self.fb.records == 0:
            self._buffered = None
        return self._hand_out(n, batch)

    cdef ConsumerRecords _hand_out(self, size_t n, _Batch batch):
        """The ConsumerRecords of out[:n] (of `batch`), counted as returned; the last poll's records."""
        cdef ConsumerRecords records = records_borrow(self.out, self.dcount, n, batch)
        if self._key_deser is not None or self._value_deser is not None:
            records_set_deserializers(records, self._key_deser, self._value_deser)
        self._count_runs(n, 1)
        self.records_returned += n
        if self.implicit:
            self.out_n = n
            self._returned = batch
        self.last_n = n
        self.last_gen = self.polls_started
        self._last_batch = batch
        return records

    cdef ConsumerRecords _return_kept(self):
        """The records unreturn() kept, returned again (nothing accepted or fetched before)."""
        self.kept = False
        return self._hand_out(self.last_n, self._last_batch)

    def unreturn(self, long long since):
        """The records the last poll() returned did not reach the application (an exception after the
        native call, e.g. a signal's KeyboardInterrupt, or an asyncio poll nobody took): keeps them for
        the next poll(), which returns them again. Until then no commit accepts them, and close() or
        unsubscribe() RELEASEs them. Only a poll that started after `since` (a `polls_started` value)
        and whose records nothing accepted or acknowledged yet; returns their (topic, partition,
        offset), [] when nothing was kept."""
        cdef size_t i, n = self.last_n
        if self.kept or n == 0 or self.last_gen <= since:
            return []
        self.kept = True
        if self.implicit:
            self.out_n = 0
            self._returned = None
        self._count_runs(n, -1)
        self.records_returned -= n
        return [(rd_kafka_topic_name(self.out[i].rkt).decode(errors="replace"), self.out[i].partition,
                 self.out[i].offset) for i in range(n)]

    cdef int _release_kept(self) except -1:
        """RELEASEs the records unreturn() kept (the group hands them out again)."""
        cdef size_t i, n = self.last_n
        cdef rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR, e
        if not self.kept:
            return 0
        with nogil:
            for i in range(n):
                e = rd_kafka_share_acknowledge_type(self.rks, self.out[i], RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_RELEASE)
                if e != RD_KAFKA_RESP_ERR_NO_ERROR and err == RD_KAFKA_RESP_ERR_NO_ERROR:
                    err = e
        self.kept = False
        self.last_n = 0
        self._last_batch = None
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            raise _err(err, "releasing records never handed out")
        return 0

    cdef _count_runs(self, size_t n, Py_ssize_t sign):
        """Adds (sign 1) or takes back (-1) out[:n] in the per-partition returned counts."""
        cdef size_t i, run = 0
        for i in range(n):
            if i and (self.out[i].rkt != self.out[i - 1].rkt or self.out[i].partition != self.out[i - 1].partition):
                self._count_returned(self.out[i - 1], sign * <Py_ssize_t>(i - run))
                run = i
        if n:
            self._count_returned(self.out[n - 1], sign * <Py_ssize_t>(n - run))

    cdef _count_returned(self, rd_kafka_message_t *m, Py_ssize_t count):
        """Adds `count` records returned for m's partition (a run of the drain's partition-ordered output)."""
        key = (rd_kafka_topic_name(m.rkt).decode(errors="replace"), m.partition)
        self._returned_by_partition[key] = self._returned_by_partition.get(key, 0) + count

    def returned_by_partition(self):
        """{(topic, partition): records returned by poll()} (a copy)."""
        return dict(self._returned_by_partition)

    def acknowledge(self, str topic, int partition, long long offset, int ack_type):
        """Explicit mode: acknowledges one record returned by poll()."""
        self._check_open("acknowledge")
        cdef bytes name = c_string(topic, "topic", ValueError)
        cdef rd_kafka_resp_err_t err = rd_kafka_share_acknowledge_offset(
            self.rks, name, partition, offset, <rd_kafka_share_AcknowledgeType_t>ack_type)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR:
            raise _err(err, f"acknowledge({topic}-{partition}@{offset})")
        self.last_n = 0  # the application has the batch: no longer one unreturn() may keep
        self._last_batch = None
        self.acknowledged += 1

    def enable_commit_results(self):
        """Registers the acknowledgement commit callback: from now on the outcome of every
        acknowledgement commit (with a poll, commit_sync, commit_async or close) is kept for
        take_commit_results()."""
        self._check_open("commit_async")
        cdef rd_kafka_error_t *error = rd_kafka_share_set_acknowledgement_commit_cb(
            self.rks, _ack_commit_cb, <void *>self._handle)
        if error != NULL:
            raise _error(error, "setting the acknowledgement commit callback")

    def take_commit_results(self):
        """[(topic, partition, [offsets], error or None)] reported since the last call."""
        acks = self._handle.acks
        if not acks:
            return []
        self._handle.acks = []
        return [(t, p, offs, None if e is None else _err(<rd_kafka_resp_err_t>e, f"acknowledging {t}-{p}"))
                for t, p, offs, e in acks]

    def commit_sync(self, int timeout_ms):
        """Sends the pending acknowledgements and waits for the broker: {TopicPartition: error|None}."""
        cdef rd_kafka_topic_partition_list_t *parts = NULL
        cdef rd_kafka_error_t *error
        cdef int i
        self._check_open("commit_sync")
        self._check_security("commit_sync")
        self._accept_returned()
        with nogil:
            error = rd_kafka_share_commit_sync(self.rks, timeout_ms, &parts)
        # what librdkafka handed back is released before any Python code runs (see _fetch)
        if error != NULL:
            if parts != NULL:
                rd_kafka_topic_partition_list_destroy(parts)
            exc = _error(error, "commit_sync")
            drain_logs()
            self._check_security("commit_sync")  # a commit that failed because the login was refused
            raise exc
        result = {}
        if parts != NULL:
            try:
                for i in range(parts.cnt):
                    tp = TopicPartition(parts.elems[i].topic.decode(), parts.elems[i].partition)
                    e = parts.elems[i].err
                    result[tp] = None if e == RD_KAFKA_RESP_ERR_NO_ERROR else _err(e, f"acknowledging {tp}")
            finally:
                rd_kafka_topic_partition_list_destroy(parts)
        drain_logs()
        return result

    def commit_async(self):
        cdef rd_kafka_error_t *error
        self._check_open("commit_async")
        self._check_security("commit_async")
        self._accept_returned()
        error = rd_kafka_share_commit_async(self.rks)
        exc = _error(error, "commit_async") if error != NULL else None  # destroyed before Python code runs
        drain_logs()
        if exc is not None:
            raise exc

    def close(self):
        """Accepts (implicit mode) and sends the pending acknowledgements, leaves the share group.
        Buffered records never returned are not acknowledged: the broker hands them out again; records
        kept by unreturn() are released."""
        cdef rd_kafka_error_t *error = NULL
        if self.closed:
            return
        try:
            self._release_kept()
            self._accept_returned()
        finally:
            self._empty_buffer()
            self.closed = True
            self.kept = False
            self.last_n = 0
            self._last_batch = None
            self._buffered = None
            self._returned = None
            with nogil:
                error = rd_kafka_share_consumer_close(self.rks)
            exc = _error(error, "close") if error != NULL else None  # destroyed before Python code runs
            drain_logs()
        if exc is not None:
            raise exc

    def statistics(self):
        """The last statistics document librdkafka reported (statistics.interval.ms), or None."""
        return self._reports.doc

    def metrics(self):
        return {
            "buffered_records": self.fb.records,
            "buffered_bytes": self.fb.bytes,
            "partitions_fetched": self.fb.n,  # partitions records ever came from
            "records_returned": self.records_returned,
            "batches_fetched": self.batches_fetched,
            "record_errors": self.record_errors,
            "acknowledged": self.acknowledged,
        }
