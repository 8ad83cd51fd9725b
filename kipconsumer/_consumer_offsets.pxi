# Positions and offsets: seek, pause/resume, watermarks and offsets by time
# (included by _consumer.pyx; fields in _consumer.pxd).


cdef tuple _watermarks(NativeConsumer c, str topic, int partition, double timeout):
    c._check_open()
    cdef int64_t low = 0, high = 0
    cdef rd_kafka_resp_err_t err
    cdef bytes t = c_string(topic, "topic")
    cdef const char *ct = t
    cdef int tmo = _ms(timeout)
    with nogil:
        err = rd_kafka_query_watermark_offsets(c.rk, ct, partition, &low, &high, tmo)
    if err:
        c._raise(err, f"watermark offsets of {topic}-{partition}")
    return low, high


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
    cdef kc_partition_t *p = kc_fb_find(&c.core.fb, c_string(tp.topic, "topic"), tp.partition)
    if p == NULL:
        raise IllegalStateError(f"No current assignment for partition {tp.topic}-{tp.partition}")
    return p


cdef _seek(NativeConsumer c, tp, int64_t offset, double timeout, bint _fetcher_only):
    """Next poll() returns records of tp from `offset` (or BEGINNING/END sentinels).
    `_fetcher_only` (tests) moves librdkafka's fetcher and leaves the fetch buffer, position
    and floor alone, as when librdkafka restarts a fetcher by itself."""
    c._check_open()
    cdef kc_partition_t *p = _assigned(c, tp)
    cdef rd_kafka_topic_partition_list_t *lst = _c_list([tp])
    cdef rd_kafka_error_t *error
    cdef int tmo = <int>(timeout * 1000)
    lst.elems[0].offset = offset
    if not _fetcher_only:
        kc_fb_purge(&c.core.fb, p)
        p.position = offset if offset >= 0 else KC_POSITION_UNKNOWN
        p.floor = KC_POSITION_UNKNOWN  # the application chose where to read from
        if offset >= 0:
            kc_consumer_seek_guard(p, offset)  # the seek wins over a fetch librdkafka started
    cdef int64_t seek_deadline = kc_now_ms() + tmo
    while True:
        with nogil:
            error = rd_kafka_seek_partitions(c.rk, lst, tmo)
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
            c._raise(lst.elems[0].err, f"seek({tp.topic}-{tp.partition}, {offset})")
    finally:
        rd_kafka_topic_partition_list_destroy(lst)
    # records already queued by librdkafka before the seek are older than the barrier
    kc_fb_purge(&c.core.fb, p)


cdef _set_paused(NativeConsumer c, list tps, bint paused):
    """Pauses/resumes fetching in librdkafka and returning in the fetch buffer; every
    partition must be assigned (checked before anything changes)."""
    c._check_open()
    cdef rd_kafka_topic_partition_list_t *lst
    for tp in tps:
        _assigned(c, tp)
    lst = _c_list(tps)
    if paused:
        rd_kafka_pause_partitions(c.rk, lst)
    else:
        rd_kafka_resume_partitions(c.rk, lst)
    rd_kafka_topic_partition_list_destroy(lst)
    for tp in tps:
        _assigned(c, tp).paused = paused
