# Positions and offsets: seek, pause/resume, watermarks, offsets by time, a topic's partitions, and
# StableOffsets (the last stable offsets of read_committed current_lag()) (included by _consumer.pyx;
# fields in _consumer.pxd).


cdef tuple _watermarks(NativeConsumer c, str topic, int partition, double timeout):
    c._check_open()
    cdef int64_t low = 0, high = 0
    cdef rd_kafka_resp_err_t err
    cdef bytes t = c_string(topic, "topic")
    cdef const char *ct = t
    cdef int tmo = _ms(timeout)
    _check_security(c, f"watermark offsets of {topic}-{partition}")
    with nogil:
        err = rd_kafka_query_watermark_offsets(c.rk, ct, partition, &low, &high, tmo)
    if err:
        c._raise(err, f"watermark offsets of {topic}-{partition}")
    return low, high


cdef list _partitions_for(NativeConsumer c, str topic, double timeout):
    """Partition ids of ``topic`` from a metadata request, sorted; [] when the broker does not know the
    topic (Java's partitionsFor). Asks in slices (100 ms, doubled after one that timed out) until
    ``timeout`` (seconds), checking close() and signals between them; a topic still without
    partitions (being created) or no answer by then raises KafkaTimeoutError; a refused credential or
    permission its typed security error."""
    c._check_open()
    cdef bytes t = c_string(topic, "topic")
    cdef int64_t deadline = _deadline_ms(timeout)
    cdef int cnt = 0, slice_ms = 100, attempt_ms, i
    cdef int32_t *ids = NULL
    cdef rd_kafka_resp_err_t err
    cdef rd_kafka_topic_t *rkt = rd_kafka_topic_new(c.rk, t, NULL)
    if rkt == NULL:
        c._raise(rd_kafka_last_error(), f"partitions_for({topic!r})")
    try:
        while True:
            attempt_ms = kc_ms_until(deadline)
            if attempt_ms > slice_ms:
                attempt_ms = slice_ms
            with nogil:
                err = kc_topic_partition_ids(c.rk, rkt, attempt_ms, &cnt, &ids)
            if err == RD_KAFKA_RESP_ERR_NO_ERROR:
                try:
                    return sorted(ids[i] for i in range(cnt))
                finally:
                    free(ids)
            if err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
                return []
            if is_security_error(_err_name(err), _err_str(err)):  # e.g. TOPIC_AUTHORIZATION_FAILED: at once
                c._raise(err, f"partitions_for({topic!r})", None, (topic,))
            _check_security(c, f"partitions_for({topic!r})")
            if kc_ms_until(deadline) <= 0:
                raise KafkaTimeoutError(f"partitions_for({topic!r}): no metadata within the timeout (last "
                                        f"answer: {_err_str(err)})", code=_err_name(err))
            if err == RD_KAFKA_RESP_ERR__TIMED_OUT:
                slice_ms = slice_ms * 2 if slice_ms < 1_000_000 else slice_ms
            else:
                with nogil:
                    usleep(50_000 if kc_ms_until(deadline) > 50 else 1000)
            PyErr_CheckSignals()
            c._check_open()
    finally:
        rd_kafka_topic_destroy(rkt)


cdef class StableOffsets:
    """read_committed current_lag(): the last stable offsets of assigned partitions, asked with
    ListOffsets (LATEST, read_committed) without waiting; answers land on `q` and are taken by the
    next call. At most one request per partition in flight. metrics() calls it from any thread, so
    each method reads `q` right before it uses it: Python code in between (building a TopicPartition)
    may let the owner's close() destroy it."""

    def __cinit__(self):
        self.known = {}
        self.pending = set()

    cdef serve_answers(self):
        """Takes the answers of earlier requests off `q` (never waits)."""
        cdef rd_kafka_event_t *ev
        cdef const rd_kafka_ListOffsets_result_t *res
        cdef const rd_kafka_ListOffsetsResultInfo_t **infos
        cdef const rd_kafka_topic_partition_t *rtp
        cdef size_t cnt = 0, i
        while self.q != NULL:
            ev = rd_kafka_queue_poll(self.q, 0)
            if ev == NULL:
                return
            try:
                res = rd_kafka_event_ListOffsets_result(ev)  # NULL for any other event (none expected)
                if res != NULL:
                    infos = rd_kafka_ListOffsets_result_infos(res, &cnt)
                    for i in range(cnt):
                        rtp = rd_kafka_ListOffsetsResultInfo_topic_partition(infos[i])
                        tp = TopicPartition(rtp.topic.decode(), rtp.partition)
                        self.pending.discard(tp)
                        if rtp.err == RD_KAFKA_RESP_ERR_NO_ERROR and rtp.offset >= 0:
                            self.known[tp] = rtp.offset
                # an event for the whole request (an error): let the next call ask again
                if rd_kafka_event_error(ev):
                    self.pending.clear()
            finally:
                rd_kafka_event_destroy(ev)

    cdef request(self, rd_kafka_t *rk, const char *topic, int32_t partition, object tp):
        """Asks the partition leader for its last stable offset, unless a request is in flight."""
        cdef rd_kafka_topic_partition_list_t *lst
        cdef rd_kafka_AdminOptions_t *opts
        cdef rd_kafka_error_t *error
        cdef char errstr[256]
        if tp in self.pending:
            return
        if self.closed or rk == NULL:  # C only from here to the request
            return
        if self.q == NULL:
            self.q = rd_kafka_queue_new(rk)
        opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_ANY)
        if opts == NULL:
            return
        error = rd_kafka_AdminOptions_set_isolation_level(opts, RD_KAFKA_ISOLATION_LEVEL_READ_COMMITTED)
        if error != NULL:
            rd_kafka_error_destroy(error)
        rd_kafka_AdminOptions_set_request_timeout(opts, 30_000, errstr, sizeof(errstr))
        lst = rd_kafka_topic_partition_list_new(1)
        rd_kafka_topic_partition_list_add(lst, topic, partition).offset = RD_KAFKA_OFFSET_SPEC_LATEST
        rd_kafka_ListOffsets(rk, lst, opts, self.q)
        rd_kafka_topic_partition_list_destroy(lst)
        rd_kafka_AdminOptions_destroy(opts)
        self.pending.add(tp)

    cdef void destroy(self) noexcept:
        self.closed = True
        if self.q != NULL:
            rd_kafka_queue_destroy(self.q)
            self.q = NULL


cdef object _cached_end_offset(NativeConsumer c, const char *topic, int32_t partition):
    """The partition's end offset as Java's currentLag sees it, without waiting: read_uncommitted, the
    high watermark librdkafka last saw in a fetch response; read_committed, the last stable offset of
    the latest answered ListOffsets request, another request being sent (StableOffsets) for the
    next call, as Java asks when its cached one is unknown. None before the first answer."""
    cdef int64_t low = -1, high = -1
    if c._read_committed:
        tp = TopicPartition(topic.decode(), partition)
        if c.rk == NULL:  # closed by another thread meanwhile (metrics())
            return None
        c._lso.serve_answers()
        c._lso.request(c.rk, topic, partition, tp)
        return c._lso.known.get(tp)
    if rd_kafka_get_watermark_offsets(c.rk, topic, partition, &low, &high) != RD_KAFKA_RESP_ERR_NO_ERROR:
        return None
    return high if high >= 0 else None


cdef object _fetch_position(NativeConsumer c, kc_partition_t *p):
    """librdkafka's position of p (the offset after the last message it handed to the fetch buffer),
    or None."""
    cdef rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new(1)
    cdef int64_t off
    rd_kafka_topic_partition_list_add(lst, p.topic, p.partition)
    rd_kafka_position(c.rk, lst)
    off = lst.elems[0].offset
    rd_kafka_topic_partition_list_destroy(lst)
    return off if off >= 0 else None


cdef object _seek_reset_position(NativeConsumer c, kc_partition_t *p):
    """Where p's position is after a seek() to an offset the log does not hold (past its end, or below
    its start) and before any record came: librdkafka resets it by auto.offset.reset (earliest: the
    log start; latest: its end), as Java does, and no record tells (with latest, none may come).
    None if p's position is not such a seek's offset, auto.offset.reset is none (poll() raises
    OffsetOutOfRangeError instead), or the offset is inside the log as far as the cached watermarks
    (of the last fetch response) say."""
    cdef int64_t lo = -1, hi = -1
    cdef int64_t target = p.filters.sought
    if (target == KC_POSITION_UNKNOWN or p.position != target or p.len
            or c._reset_policy == RESET_NONE):
        return None
    if (rd_kafka_get_watermark_offsets(c.rk, p.topic, p.partition, &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR
            or hi < 0 or lo <= target <= hi):
        return None
    return lo if c._reset_policy == RESET_EARLIEST else hi


cdef object _lag_position(NativeConsumer c, kc_partition_t *p, bint owner):
    """The position Java's ``currentLag`` counts from (the offset of the next record ``poll()``
    returns), or None when unknown. ``owner``: called by the thread that owns the consumer (may step
    over transaction markers and read the fetch buffer); otherwise (``metrics()``) only fields a
    single read gives, and None while records that were never returned sit in the buffer with no
    returned position."""
    if owner:
        kc_consumer_step_over_markers(c.core, p)
    if p.position != KC_POSITION_UNKNOWN:
        pos = _seek_reset_position(c, p)
        return p.position if pos is None else pos
    if owner and kc_ps_first_offset(p) != KC_POSITION_UNKNOWN:
        return kc_ps_first_offset(p)
    if p.len == 0:
        return _fetch_position(c, p)
    return None


cdef object _lag_from(NativeConsumer c, bytes topic, int32_t partition, object pos):
    """Java's ``currentLag``: cached end offset - `pos`, without a request; None when either is
    unknown or the consumer was closed meanwhile."""
    if pos is None or c.rk == NULL:
        return None
    end = _cached_end_offset(c, topic, partition)
    return None if end is None else end - pos


cdef object _partition_lag(NativeConsumer c, kc_partition_t *p, bint owner):
    """Java's ``currentLag`` of p (see _lag_position, _lag_from)."""
    return _lag_from(c, <bytes>p.topic, p.partition, _lag_position(c, p, owner))


cdef dict _offsets_for_times(NativeConsumer c, list queries, double timeout):
    """``{TopicPartition: (offset, timestamp) | None}`` for ``queries``, a list of
    ``(TopicPartition, timestamp_ms)``: the earliest offset whose record timestamp is at or after
    the timestamp, and that record's timestamp; None where no record is that late. Asked with
    librdkafka's ListOffsets (the broker's ListOffsets by timestamp, which carries the record's
    timestamp; rd_kafka_offsets_for_times() drops it) on a queue of its own, so the wait goes in
    slices and a signal interrupts it. Raises KafkaError for a partition the broker refuses."""
    c._check_open()
    cdef rd_kafka_topic_partition_list_t *lst
    cdef rd_kafka_AdminOptions_t *opts = NULL
    cdef rd_kafka_queue_t *q = NULL
    cdef rd_kafka_event_t *ev = NULL
    cdef const rd_kafka_ListOffsetsResultInfo_t **infos
    cdef const rd_kafka_topic_partition_t *rtp
    cdef rd_kafka_resp_err_t err
    cdef int64_t deadline = _deadline_ms(timeout)
    cdef size_t cnt = 0, i
    cdef char errstr[256]
    asked = dict(queries)  # the request refuses duplicates; the last timestamp of a partition wins
    out = dict.fromkeys(asked)
    if not asked:
        return out
    _check_security(c, "offsets_for_times")
    lst = _c_list(list(asked))
    try:
        for i in range(lst.cnt):
            lst.elems[i].offset = asked[TopicPartition(lst.elems[i].topic.decode(), lst.elems[i].partition)]
        opts = rd_kafka_AdminOptions_new(c.rk, RD_KAFKA_ADMIN_OP_ANY)
        if opts == NULL:
            raise MemoryError()
        rd_kafka_AdminOptions_set_request_timeout(opts, _admin_request_timeout_ms(deadline),
                                                  errstr, sizeof(errstr))
        q = rd_kafka_queue_new(c.rk)
        rd_kafka_ListOffsets(c.rk, lst, opts, q)
        ev = _await_event(q, deadline, True)
        if ev == NULL:
            c._raise(RD_KAFKA_RESP_ERR__TIMED_OUT, "offsets_for_times")
        err = rd_kafka_event_error(ev)
        if err:
            c._raise(err, "offsets_for_times")
        infos = rd_kafka_ListOffsets_result_infos(rd_kafka_event_ListOffsets_result(ev), &cnt)
        for i in range(cnt):
            rtp = rd_kafka_ListOffsetsResultInfo_topic_partition(infos[i])
            tp = TopicPartition(rtp.topic.decode(), rtp.partition)
            if rtp.err:
                c._raise(rtp.err, f"offsets_for_times of {tp.topic}-{tp.partition}")
            if tp in out and rtp.offset >= 0:
                out[tp] = (rtp.offset, rd_kafka_ListOffsetsResultInfo_timestamp(infos[i]))
        return out
    finally:
        if ev != NULL:
            rd_kafka_event_destroy(ev)
        if q != NULL:
            rd_kafka_queue_destroy(q)
        if opts != NULL:
            rd_kafka_AdminOptions_destroy(opts)
        rd_kafka_topic_partition_list_destroy(lst)


cdef kc_partition_t *_assigned(NativeConsumer c, tp) except NULL:
    cdef kc_partition_t *p = kc_ps_find(&c.core.fb, c_string(tp.topic, "topic"), tp.partition)
    if p == NULL:
        raise IllegalStateError(f"No current assignment for partition {tp.topic}-{tp.partition}")
    return p


cdef _seek(NativeConsumer c, tp, int64_t offset, double timeout, bint _fetcher_only):
    """Next poll() returns records of tp from `offset` (or BEGINNING/END sentinels).
    `_fetcher_only` (tests) moves librdkafka's fetcher and leaves the fetch buffer, position
    and floor alone, as when librdkafka restarts a fetcher by itself. Waits at most `timeout`
    (and, inside close(), not past close()'s deadline) for librdkafka to take the seek."""
    c._check_open()
    cdef kc_partition_t *p = _assigned(c, tp)
    cdef rd_kafka_topic_partition_list_t *lst = _c_list([tp])
    cdef rd_kafka_error_t *error = NULL
    cdef rd_kafka_resp_err_t code
    cdef int64_t seek_deadline = _deadline_ms(timeout)
    cdef int tmo
    # the fetcher usually starts 0.5-2.5 ms after assign() (Kafka 4.4.0): retry soon, backing off to 5 ms
    cdef unsigned int retry_us = 250
    if c._close.closing() and c._close.deadline_ms < seek_deadline:
        seek_deadline = c._close.deadline_ms
    lst.elems[0].offset = offset
    if not _fetcher_only:
        kc_ps_seek(&c.core.fb, p, offset)  # position, floor and seek guard (csrc/partition_state.h)
    try:
        while True:
            if p.fetch_stopped and not _fetcher_only:
                # librdkafka stopped p's fetcher: auto.offset.reset=none and no offset to start from
                # (it reported _AUTO_OFFSET_RESET). Start it at `offset`, as Java's seek() gives such
                # a partition its position (a seek would be refused, or overtaken by the committed
                # offset lookup of an eager group's reassignment, which fails again)
                _restart_fetch(c, p, offset)
                code = RD_KAFKA_RESP_ERR_NO_ERROR
                break
            tmo = <int>max(0, min(seek_deadline - kc_now_ms(), 2_000_000_000))
            with nogil:
                error = rd_kafka_seek_partitions(c.rk, lst, tmo)
            code = rd_kafka_error_code(error) if error != NULL else lst.elems[0].err
            if not _seek_again(code):
                break
            # librdkafka has no fetcher running for tp, or the fetcher's start overtook the seek
            # (_OUTDATED). Right after assign() (or in on_partitions_assigned) it first looks up the
            # committed offset: retry until it has started, or has stopped for want of an offset.
            if not _fetcher_only:
                kc_consumer_refill(c.core, <size_t>-1, 0)  # takes in a stop reported meanwhile
            if error != NULL:
                rd_kafka_error_destroy(error)
                error = NULL
            if p.fetch_stopped and not _fetcher_only:
                continue
            if kc_now_ms() >= seek_deadline:
                break
            lst.elems[0].err = RD_KAFKA_RESP_ERR_NO_ERROR
            with nogil:
                usleep(retry_us)
            retry_us = min(retry_us * 2, 5000)
        if error != NULL:
            msg = rd_kafka_error_string(error).decode()
            raise KafkaError(f"seek({tp.topic}-{tp.partition}, {offset}) failed: {msg}", code=_err_name(code))
        if code:
            c._raise(code, f"seek({tp.topic}-{tp.partition}, {offset})")
    finally:
        if error != NULL:
            rd_kafka_error_destroy(error)
        rd_kafka_topic_partition_list_destroy(lst)
    # records already queued by librdkafka before the seek are older than the barrier
    kc_ps_purge(&c.core.fb, p)


cdef _restart_fetch(NativeConsumer c, kc_partition_t *p, int64_t offset):
    """Starts librdkafka's fetcher of p, which it stopped (auto.offset.reset=none found no offset, or
    the broker refused the position), at `offset`: assigns p again with that offset (incrementally,
    unless the group's protocol is EAGER: then the whole assignment again, each other partition from
    where poll() has reached, so nothing is fetched twice or skipped). p's pending
    _AUTO_OFFSET_RESET errors go: the partition has a position now."""
    cdef rd_kafka_topic_partition_list_t *lst
    cdef rd_kafka_error_t *error = NULL
    cdef rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR
    cdef const char *proto = rd_kafka_rebalance_protocol(c.rk)
    cdef kc_partition_t *q
    cdef int64_t next
    cdef size_t i
    cdef bint eager = proto != NULL and strcmp(proto, b"EAGER") == 0
    lst = rd_kafka_topic_partition_list_new(<int>c.core.fb.n if eager else 1)
    try:
        if eager:
            for i in range(c.core.fb.n):
                q = kc_ps_at(&c.core.fb, i)
                next = kc_ps_next_offset(q)
                rd_kafka_topic_partition_list_add(lst, q.topic, q.partition).offset = (
                    offset if q == p else (next if next >= 0 else RD_KAFKA_OFFSET_STORED))
            c._assignment.begin()
            with nogil:
                err = rd_kafka_assign(c.rk, lst)
            c._assignment.end()
            for i in range(c.core.fb.n):  # every fetcher restarts: each queue is forwarded again
                if kc_ps_at(&c.core.fb, i) != p:
                    kc_consumer_fetch_restarted(c.core, kc_ps_at(&c.core.fb, i), False)
        else:
            rd_kafka_topic_partition_list_add(lst, p.topic, p.partition).offset = offset
            c._assignment.begin()
            with nogil:
                error = rd_kafka_incremental_unassign(c.rk, lst)
                if error == NULL:
                    error = rd_kafka_incremental_assign(c.rk, lst)
            c._assignment.end()
        if error != NULL:
            err = rd_kafka_error_code(error)
            rd_kafka_error_destroy(error)
        if err:
            c._raise(err, f"seek({p.topic.decode()}-{p.partition}, {offset}): restarting the fetch")
    finally:
        rd_kafka_topic_partition_list_destroy(lst)
    kc_consumer_fetch_restarted(c.core, p, True)
    kc_consumer_drop_offset_errors(c.core, p)


cdef _set_paused(NativeConsumer c, list tps, bint paused):
    """Pauses/resumes fetching in librdkafka and returning in the fetch buffer; every
    partition must be assigned (checked before anything changes)."""
    c._check_open()
    cdef rd_kafka_topic_partition_list_t *lst
    for tp in tps:
        _assigned(c, tp)
    cdef kc_partition_t *p
    lst = _c_list(tps)
    if paused:
        rd_kafka_pause_partitions(c.rk, lst)
    else:
        rd_kafka_resume_partitions(c.rk, lst)
    rd_kafka_topic_partition_list_destroy(lst)
    for tp in tps:
        p = _assigned(c, tp)
        if not paused and kc_ps_paused(p):
            kc_ps_wake_fetcher(c.rk, p)  # librdkafka's resume leaves its fetcher idle up to 1 s
        kc_ps_set_paused(p, paused)
