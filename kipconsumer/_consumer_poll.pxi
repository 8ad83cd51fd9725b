# The poll loop around csrc/consumer_core.c: waits in slices (signals, wakeup(), close() from another
# thread), serves commit callbacks and consumer errors, hands out one batch; the refused logins and
# groups poll() and the other calls raise, kept by the consumer's SecurityHold (kipconsumer._security_hold)
# (included by _consumer.pyx; fields in _consumer.pxd).


cdef ConsumerRecords _poll(NativeConsumer c, double timeout):
    cdef kc_poll_status_t st
    cdef size_t n = 0
    cdef int64_t deadline = _deadline_ms(timeout)
    c._last_batch = None  # the last poll's records reached the caller: this is its next call
    _raise_held_auth(c, None)
    _raise_fetch_stopped(c)
    if c._membership.rejoin_pending():
        _member_rejoin(c)
    if c.auto_commit:
        c._store_positions(None)
    _serve_commit_callbacks(c)
    c.core.polls += 1  # one poll() counts once, whatever number of slices it waits in
    while True:
        if c._close.requested:
            return records_take(c.out, 0, None, c.pid)
        with nogil:
            st = kc_consumer_poll(c.core, _slice(deadline), c.out, &n)
        # Own the records before any Python code runs: a signal's exception raised there (logging in
        # drain_logs() is Python) left their messages in c.out, lost to the application and never
        # destroyed, and rd_kafka_destroy() in a later close() waited for them forever (issue #38
        # item 7). With records in hand the logs wait for the next call.
        batch = records_take(c.out, n, c._handle, c.pid) if n else None
        if not n:
            drain_logs()
        if c._security.reports and not n:
            _handle_errors(c)
        if st == KC_POLL_OK:
            if n and c._membership.has_left() and c._membership.subscription:
                # fetched before the member left (KIP-62): its partitions belong to others now, and
                # the lost assignment's event may come polls later (real Kafka; the mock sends it at once)
                batch = None  # their messages go with it
                c._membership.records_dropped(n + c.core.fb.records)
                kc_ps_purge_all(&c.core.fb)
                n = 0
            if n or c._pending_exc is not None:
                if batch is None:
                    batch = records_take(c.out, 0, c._handle, c.pid)
                if c._pending_exc is not None:
                    if n:
                        # a callback's exception goes out instead of the records: the next poll()
                        # returns them again (main lost them, their positions already past)
                        try:
                            _rewind(c, batch)
                        except Exception:  # the callback's exception is the one to raise
                            log.warning("the records of a poll() that raised a callback's exception "
                                        "could not be given back; the next poll() continues after them",
                                        exc_info=True)
                    c._raise_pending()
                if c._key_deser is not None or c._value_deser is not None:
                    records_set_deserializers(batch, c._key_deser, c._value_deser)
                if n:
                    c._last_batch = batch
                    c._last_gen = c.core.polls
                return batch
            _serve_commit_callbacks(c)
            if kc_now_ms() >= deadline or c._close.requested:
                return records_take(c.out, 0, None, c.pid)
            PyErr_CheckSignals()
            continue
        if st == KC_POLL_WAKEUP:
            if c._close.requested:
                return records_take(c.out, 0, None, c.pid)
            raise WakeupError("poll() interrupted by wakeup()")
        if st == KC_POLL_ABORT:
            c._raise_pending()
        if st == KC_POLL_EVENT:
            _handle_errors(c)
        if kc_now_ms() >= deadline:
            return records_take(c.out, 0, None, c.pid)
        PyErr_CheckSignals()


cdef _raise_held_auth(NativeConsumer c, str what):
    """Raises the held AuthenticationError (_raise_security) again, within AUTH_HOLD_S of it;
    ``what`` (another call than poll()) prefixes it."""
    security = c._security
    if security.auth_failure is not None:  # poll()'s path: one attribute read when nothing is held
        security.raise_held(what)


cdef _check_security(NativeConsumer c, str what):
    """The one place where calls other than poll() that talk to the broker (commits, committed(),
    watermarks, offsets_for_times(), position()) learn of a refused login or group, before they start
    and when they fail: raises the held AuthenticationError, or the first security error librdkafka
    reported and poll() has not raised yet. A consumer without a subscription (assign() or nothing)
    serves librdkafka's consumer queue for it first (kc_consumer_serve: no records handed out), so one
    that never polled learns of it too; with a subscription, poll() serves it (a rebalance listener
    must not run inside another call)."""
    if (not c._membership.subscription and not c._in_poll and not c._commits.in_callback
            and not c._membership.listener.running
            and c._close.is_open() and c.core != NULL):
        kc_consumer_serve(c.core)
        drain_logs()
    _raise_held_auth(c, what)
    if c._security.reports or c.core.n_errors:
        _handle_errors(c, what)


cdef _handle_errors(NativeConsumer c, str what="poll()"):
    cdef rd_kafka_message_t *m
    while c._security.reports:  # error_cb's: only authentication / TLS failures are kept
        err, detail = c._security.take()
        _raise_security(c, err, what, detail, ())
    while True:
        m = kc_consumer_take_error(c.core)
        if m == NULL:
            break
        err = m.err
        where = ""
        topics = ()
        if m.rkt != NULL:
            topics = (rd_kafka_topic_name(m.rkt).decode(),)
            where = f" ({topics[0]}-{m.partition})"
        detail = rd_kafka_message_errstr(m).decode(errors="replace")
        rd_kafka_message_destroy(m)
        if err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET:
            # the partition's fetch_stopped (consumer_core.c) carries it: poll() raises it
            log.debug("consumer error %s%s: %s", _err_name(err), where, detail)
        elif err == RD_KAFKA_RESP_ERR__MAX_POLL_EXCEEDED:
            c._membership.poll_interval_expired()
            kc_ps_purge_all(&c.core.fb)
            log.warning("consumer left the group: poll() was not called within "
                        "max.poll.interval.ms (%d ms); rejoining", c.max_poll_interval_ms)
        elif is_security_error(_err_name(err), detail):
            _raise_security(c, err, f"{what}{where}", detail, topics)
        elif err == RD_KAFKA_RESP_ERR__FATAL:
            raise KafkaError(f"fatal consumer error: {detail}", code=_err_name(err))
        else:
            log.warning("consumer error %s%s: %s", _err_name(err), where, detail)
    if what == "poll()":
        _raise_fetch_stopped(c)

# ---------------------------------------------------------------- offsets


cdef _raise_fetch_stopped(NativeConsumer c):
    """As Java's poll(): while librdkafka has stopped fetching assigned partitions because
    auto.offset.reset=none left them without a position (_AUTO_OFFSET_RESET), raises
    NoOffsetForPartitionError (no committed offset to start from) or OffsetOutOfRangeError (the broker
    refused the position), naming every such partition, on every poll() until seek() gives each a
    position (_seek restarts its fetcher)."""
    cdef kc_partition_t *p
    cdef size_t i
    no_offset, out_of_range = [], {}
    for i in range(c.core.fb.n):
        p = kc_ps_at(&c.core.fb, i)
        if p.fetch_stopped:
            tp = TopicPartition(p.topic.decode(), p.partition)
            if p.stopped_offset >= 0:
                out_of_range[tp] = p.stopped_offset
            else:
                no_offset.append(tp)
    if no_offset:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(no_offset))
        raise NoOffsetForPartitionError(
            f"Undefined offset with no reset policy for partitions: {names} (no committed offset and "
            f"auto.offset.reset=none); seek() each to a position", partitions=no_offset,
            code="_AUTO_OFFSET_RESET")
    if out_of_range:
        names = ", ".join(f"{tp.topic}-{tp.partition} at {off}" for tp, off in sorted(out_of_range.items()))
        raise OffsetOutOfRangeError(
            f"Fetch position out of range with no reset policy for partitions: {names} "
            f"(auto.offset.reset=none); seek() each to a valid position", offsets=out_of_range,
            code="_AUTO_OFFSET_RESET")


cdef _raise_security(NativeConsumer c, rd_kafka_resp_err_t err, str what, str detail, tuple topics):
    """Raises the typed security error. An AuthenticationError holds for AUTH_HOLD_S: every poll()
    in that time raises it again at once, as librdkafka reports a refusal only when it reconnects."""
    try:
        c._raise(err, what, detail, topics)
    except (AuthenticationError, GroupAuthorizationError) as e:
        c._security.hold(e)
        raise


cdef Py_ssize_t _rewind(NativeConsumer c, ConsumerRecords batch) except -1:
    """The next poll() returns `batch`'s records again: each of its partitions still assigned is
    sought back to its first record (a batch holds a partition's records in offset order; the
    buffered records after them are dropped and fetched again). For records that never reached the
    application (an exception raised after they were taken). Returns how many records that covers."""
    cdef Py_ssize_t i, covered = 0
    cdef rd_kafka_message_t *m
    cdef const char *topic
    cdef dict first = {}   # TopicPartition -> its first offset in the batch
    for i in range(batch.n):
        m = batch.msgs[i]
        topic = rd_kafka_topic_name(m.rkt)
        if kc_ps_find(&c.core.fb, topic, m.partition) == NULL:
            continue  # revoked meanwhile: another member's now
        first.setdefault(TopicPartition(topic.decode(errors="replace"), m.partition), m.offset)
        covered += 1
    for tp, offset in first.items():
        _seek(c, tp, offset, c.default_api_timeout_ms / 1000.0, False)
    return covered
