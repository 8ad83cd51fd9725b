# Transactions: the producer's transactional calls, each run on a native helper thread
# (csrc/txn_call.c) so that its caller's wait is bounded, the one call whose caller gave up on it,
# and the typed errors of a failed call (included by _producer.pyx; fields in _producer.pxd).
#
#   IDLE --the caller gives up on its call (timeout, signal, close(), refused credentials): _park()--> PARKED
#   PARKED --the same op resumes it, another op finds it returned, or the handle is freed: _take()--> IDLE
#
# The state is the `parked` pointer (NULL: IDLE); _park() and _take() are its only writers.


cdef enum:
    _TXN_INIT = 0
    _TXN_BEGIN = 1
    _TXN_SEND_OFFSETS = 2
    _TXN_COMMIT = 3
    _TXN_ABORT = 4
    _TXN_GRACE_US = 1000000  # after the caller's timeout, librdkafka's own timeout may still return

_TXN_NAMES = {0: "init_transactions", 1: "begin_transaction", 2: "send_offsets_to_transaction",
              3: "commit_transaction", 4: "abort_transaction"}

_TXN_OPS = {"init": _TXN_INIT, "begin": _TXN_BEGIN, "send_offsets": _TXN_SEND_OFFSETS,
            "commit": _TXN_COMMIT, "abort": _TXN_ABORT}
# error names that mean "fenced" (also for a transactional producer's refused deliveries, _delivery_error)
_FENCED_NAMES = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})


cdef class TxnCalls:
    """The transactional calls of one ProducerCore and the call parked by a caller that gave up.

    ``call()`` runs one librdkafka transactional call on a helper thread and waits for it in slices
    that let signals out. A call that does not return by its timeout (plus a short grace for
    librdkafka's own timeout), or whose wait is interrupted, is parked: it keeps running in
    librdkafka, ``blocked()`` is True until it returns, the same op called again waits for it
    further and gives its result, and another op raises TransactionBlockedError while it is still
    blocked. ``free_producer()`` hands the handle's destruction to a parked call.
    """

    def __cinit__(self):
        self.parked = NULL
        self.parked_since_us = 0

    cdef void _park(self, kc_txn_call_t *call, int64_t started_us) noexcept:
        """IDLE -> PARKED: the caller gave up waiting for ``call`` (started at ``started_us``)."""
        self.parked = call
        self.parked_since_us = started_us

    cdef kc_txn_call_t *_take(self) noexcept:
        """PARKED -> IDLE: the parked call (NULL if none), now the caller's to finish or release."""
        cdef kc_txn_call_t *call = self.parked
        self.parked = NULL
        return call

    cdef bint blocked(self) noexcept:
        """A parked call is still blocked in librdkafka."""
        return self.parked != NULL and not kc_txn_call_wait(self.parked, 0)

    cdef void free_producer(self, kc_producer_t *p) noexcept:
        """Destroys ``p`` now, or once the parked call (which uses its handle) returns."""
        cdef kc_txn_call_t *call = self._take()
        if call != NULL:
            kc_txn_call_release(call, _destroy_producer, p)
        else:
            with nogil:
                kc_producer_destroy(p)

    cdef str _blocked_text(self, str op):
        cdef kc_txn_call_t *c = self.parked
        pending = _TXN_NAMES[kc_txn_call_op(c)] if c != NULL else op
        since = (kc_now_us() - self.parked_since_us) / 1e6
        return (f"librdkafka's {pending} call has been blocked for {since:.1f} s. Call {pending} again to "
                f"keep waiting for it, or close this producer (its handle is freed once the call returns) "
                f"and create a new one with the same transactional.id: its init_transactions() fences "
                f"this one and aborts its open transaction.")

    cdef object call(self, ProducerCore core, str op, double timeout_s, list offsets, bytes group_metadata):
        """See ProducerCore.txn(). ``core``: the producer whose handle the call uses; counted in its
        ``_active`` while the call runs."""
        cdef rd_kafka_error_t *error = NULL
        cdef rd_kafka_topic_partition_list_t *lst = NULL
        cdef rd_kafka_consumer_group_metadata_t *cgmd = NULL
        cdef kc_txn_call_t *call = NULL
        cdef rd_kafka_t *rk
        cdef int64_t deadline_us, give_up_us, until_us, started_us
        cdef int timeout_ms, done = 0
        cdef int which = _TXN_OPS.get(op, -1)
        if which < 0:
            raise ValueError(f"unknown transactional operation {op!r}")
        if not core.is_open():
            raise IllegalStateError(f"{op} transaction called after close()")
        if kc_producer_on_dr_thread(core.p):
            raise IllegalStateError(f"{op} transaction cannot be called from a send() callback")
        deadline_us = kc_deadline_us(timeout_s)
        timeout_ms = kc_ms_until_us(deadline_us)  # librdkafka's own bound, from the one deadline
        # librdkafka's own timeout may return a little after ours: the wait gives it this grace
        give_up_us = (deadline_us + _TXN_GRACE_US if deadline_us < KC_NO_DEADLINE - _TXN_GRACE_US
                      else deadline_us)
        rk = core.p.rk
        if self.parked != NULL:
            if kc_txn_call_op(self.parked) != which:
                if not kc_txn_call_wait(self.parked, 0):
                    raise TransactionBlockedError(self._blocked_text(op), code="_TIMED_OUT")
                # it returned meanwhile; its caller gave it up and a different call follows
                error = kc_txn_call_finish(self._take())
                if error != NULL:
                    rd_kafka_error_destroy(error)
                    error = NULL
        if which == _TXN_BEGIN:
            core.enter(f"{op} transaction")
            try:
                with nogil:
                    error = rd_kafka_begin_transaction(rk)
            finally:
                core.leave()
            if error != NULL:
                raise _txn_error(error, op, timeout_s)
            return
        if self.parked == NULL and which == _TXN_SEND_OFFSETS:
            lst = rd_kafka_topic_partition_list_new(max(1, len(offsets)))
            try:
                for topic, partition, offset in offsets:
                    rd_kafka_topic_partition_list_add(lst, _c_topic(topic), partition).offset = offset
            except BaseException:
                rd_kafka_topic_partition_list_destroy(lst)
                raise
            if rd_kafka_consumer_group_metadata_read(&cgmd, PyBytes_AS_STRING(group_metadata),
                                                     <size_t>PyBytes_GET_SIZE(group_metadata)) != NULL:
                rd_kafka_topic_partition_list_destroy(lst)
                raise ValueError("send_offsets_to_transaction(): group_metadata is not a consumer's "
                                 "group metadata (use KafkaConsumer.group_metadata())")
        try:
            core.enter(f"{op} transaction")
        except BaseException:
            if lst != NULL:
                rd_kafka_topic_partition_list_destroy(lst)
            if cgmd != NULL:
                rd_kafka_consumer_group_metadata_destroy(cgmd)
            raise
        try:
            if self.parked != NULL:  # the same op: wait for the call made before
                started_us = self.parked_since_us
                call = self._take()
            else:
                call = kc_txn_call_start(rk, which, lst, cgmd, timeout_ms)  # owns lst and cgmd now
                if call == NULL:
                    raise KafkaError(f"{op} transaction: could not start its thread", code="_FAIL")
                started_us = kc_now_us()
            while True:
                until_us = kc_slice_end_us(give_up_us)
                with nogil:
                    done = kc_txn_call_wait(call, until_us)
                if done:
                    break
                if kc_now_us() >= give_up_us:
                    self._park(call, started_us)
                    raise TransactionBlockedError(
                        f"{op} transaction did not return within its timeout ({timeout_s:.3f} s): "
                        + self._blocked_text(op), code="_TIMED_OUT")
                try:
                    PyErr_CheckSignals()
                except BaseException:
                    self._park(call, started_us)
                    raise
                if not core.is_open():
                    self._park(call, started_us)
                    raise IllegalStateError(f"{op} transaction: the producer was closed meanwhile")
                if kc_producer_auth_error(core.p, NULL, 0):
                    # librdkafka retries the connection for ever: give up the call (it stays parked)
                    self._park(call, started_us)
                    raise core.security_exc(kc_producer_auth_error(core.p, NULL, 0), f"{op} transaction")
            error = kc_txn_call_finish(call)
        finally:
            core.leave()
        if error != NULL:
            raise _txn_error(error, op, timeout_s)


cdef bytes _c_topic(object topic):
    return c_string(topic, "offsets: topic")


cdef object _txn_error(rd_kafka_error_t *error, str op, double timeout_s):
    """The typed error for a failed transactional call; destroys `error`."""
    cdef str name = rd_kafka_error_name(error).decode("utf-8", "replace")
    cdef str msg = rd_kafka_error_string(error).decode("utf-8", "replace")
    cdef bint fatal = rd_kafka_error_is_fatal(error)
    cdef bint abortable = rd_kafka_error_txn_requires_abort(error)
    cdef bint retriable = rd_kafka_error_is_retriable(error)
    rd_kafka_error_destroy(error)
    sec = security_error(name, msg, what=f"{op} transaction failed")
    if sec is not None:
        return sec
    what = f"{op} transaction failed: {name}: {msg}"
    # fenced, whether librdkafka flags it fatal or (seen when the epoch is bumped meanwhile) abortable,
    # or reports it as _FATAL after the fact: fatal for this producer in every case
    if name in _FENCED_NAMES or (fatal and "fenced" in msg.lower()):
        return ProducerFencedError(f"{what}. Another producer with the same transactional.id took over; "
                                   f"this producer can only be closed.", code=name)
    category = category_of(name, fatal=fatal, abortable=abortable, retriable=None)
    if fatal:
        return KafkaError(f"{what}. The error is fatal: close this producer and create a new one.",
                          code=name, category=category)
    if abortable:
        return TransactionAbortableError(f"{what}. Call abort_transaction(), then retry the transaction.",
                                         code=name)
    if name == "_TIMED_OUT" or retriable:
        return KafkaTimeoutError(f"{what} (timeout {timeout_s:.3f} s). Call the same method again: it resumes.",
                                 code=name)
    if name == "_STATE":
        return IllegalStateError(what, code=name)
    return KafkaError(what, code=name, category=category)


cdef void _destroy_producer(void *p) noexcept nogil:
    kc_producer_destroy(<kc_producer_t *>p)


def _set_txn_test_hold_ms(int ms):
    """Test hook: transactional calls started afterwards hold their result ``ms`` more milliseconds
    after librdkafka returned (as a call blocked in librdkafka does). 0: off."""
    kc_txn_call_set_test_hold_ms(ms)
