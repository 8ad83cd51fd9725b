# The topics the producer looked up (TopicCache): librdkafka's topic handle and the partitions of each,
# send()'s one-entry cache, and the bounded metadata waits that fill them (included by _producer.pyx;
# fields in _producer.pxd).


cdef class _Topic:
    """A topic send() has looked up: librdkafka's handle and its partitions (fields in _producer.pxd)."""


# kept intact by the cycle collector (no tp_clear), like ProducerCore: its __dealloc__ frees the topic
# handles through destroy_all() before the producer handle
@cython.no_gc_clear
cdef class TopicCache:
    """The topics looked up by send() and partitions_for(), by name, and the last one send() used.

    A topic enters once its metadata answered (``lookup``, waiting at most until its deadline) and
    stays until the handle is freed (``destroy_all``); its partitions only grow
    (``refresh_partitions``). ``last`` is send()'s one-entry cache: read and set by send() only.
    """

    def __cinit__(self):
        self.by_name = {}
        self.last = None

    cdef _Topic lookup(self, ProducerCore core, str topic, int64_t deadline_us, str who):
        """Metadata of ``topic``, waiting until deadline_us; cached once known. The caller is
        inside core.enter() (counted as a call using the handle)."""
        cdef _Topic t = self.by_name.get(topic)
        cdef bytes btopic
        cdef rd_kafka_topic_t *rkt
        cdef int err = 0
        cdef int cnt = 0, i
        cdef int32_t *ids = NULL
        cdef int64_t start = kc_now_us(), now
        if t is not None:
            return t
        _check_topic_name(topic, who)
        btopic = c_string(topic, f"{who}: topic", InvalidTopicError)
        rkt = rd_kafka_topic_new(core.p.rk, btopic, NULL)
        if rkt == NULL:
            raise KafkaError(f"invalid topic {topic!r}", code="_INVALID_ARG")
        try:
            err = _metadata_wait(core, rkt, deadline_us, who, True, &cnt, &ids)
            if err != 0:
                name = _errname(err)
                sec = core.security_exc(err, f"{who}: metadata of topic {topic!r}", (topic,))
                if sec is not None:
                    raise sec
                if name in _FATAL_METADATA_ERRORS:
                    raise KafkaError(f"{who}: metadata of topic {topic!r} failed: {name}: "
                                     f"{_errstr(err)}", code=name)
                now = kc_now_us()
                raise KafkaTimeoutError(
                    f"{who} waited {(now - start) // 1000} ms for metadata of topic {topic!r}: "
                    f"topic {topic!r} not present in metadata after max.block.ms="
                    f"{core.max_block_ms} ms (last error: {name}: {_errstr(err)})",
                    code="_TIMED_OUT")
        except BaseException:
            rd_kafka_topic_destroy(rkt)
            raise
        t = _Topic()
        t.rkt = rkt
        t.partition_count = cnt
        t.partitions = sorted(ids[i] for i in range(cnt))
        free(ids)
        old = self.by_name.get(topic)
        if old is not None:  # another thread fetched it meanwhile
            rd_kafka_topic_destroy(rkt)
            return old
        self.by_name[topic] = t
        return t

    cdef int refresh_partitions(self, ProducerCore core, _Topic t, str topic) except -1:
        """Looks ``t``'s partitions up again (send() to a partition beyond those known), for at most
        min(max.block.ms, 5 s); keeps the known ones if that fails."""
        cdef int cnt = 0, i
        cdef int32_t *ids = NULL
        cdef int err
        cdef int timeout_ms = core.max_block_ms if core.max_block_ms < 5000 else 5000
        err = _metadata_wait(core, t.rkt, kc_deadline_us(timeout_ms / 1000.0),
                              "send()", False, &cnt, &ids)
        if err == 0 and cnt > t.partition_count:
            t.partition_count = cnt
            t.partitions = sorted(ids[i] for i in range(cnt))
        free(ids)
        return 0

    cdef void destroy_all(self) noexcept:
        """Frees every topic handle (before the producer handle is destroyed) and empties the cache."""
        self.last = None
        for t in self.by_name.values():
            rd_kafka_topic_destroy((<_Topic>t).rkt)
        self.by_name.clear()


cdef int _metadata_wait(ProducerCore core, rd_kafka_topic_t *rkt, int64_t deadline_us, str who, bint fatal,
                        int *cntp, int32_t **idsp) except? -1:
    """Asks for ``rkt``'s metadata until it answers or ``deadline_us``; returns librdkafka's
    error (0: *cntp / *idsp filled). Each attempt waits at most its slice (100 ms, doubled
    after an attempt that timed out waiting for a response, so a slow broker is still heard);
    between attempts close() (IllegalStateError) and signals are checked. ``fatal``: errors
    that waiting cannot fix return at once."""
    cdef int err = 0
    cdef int64_t now
    cdef int attempt_ms, slice_ms = 100, remaining_ms
    while True:
        now = kc_now_us()
        remaining_ms = kc_ms_until_us(deadline_us)
        attempt_ms = slice_ms if slice_ms < remaining_ms else remaining_ms
        if attempt_ms < 1:
            attempt_ms = 1
        with nogil:
            err = kc_topic_partition_ids(core.p.rk, rkt, attempt_ms, cntp, idsp)
        if err == 0:
            return 0
        if not core.is_open():
            raise IllegalStateError(f"{who}: the producer was closed while it waited for "
                                    f"metadata")
        if kc_producer_auth_error(core.p, NULL, 0):  # librdkafka would retry it for ever
            return kc_producer_auth_error(core.p, NULL, 0)
        core.check_signals()
        if fatal and _errname(err) in _FATAL_METADATA_ERRORS:
            return err
        if err == ERR__TIMED_OUT:
            slice_ms = slice_ms * 2 if slice_ms < 1000000 else slice_ms
        now = kc_now_us()
        if now >= deadline_us:
            return err
        if err != ERR__TIMED_OUT:
            # the attempt failed at once (no broker, unknown topic yet): pause before retrying
            remaining_ms = kc_ms_until_us(deadline_us)
            with nogil:
                usleep(1000 * (50 if remaining_ms > 50 else (remaining_ms if remaining_ms > 0 else 1)))
            if not core.is_open():
                raise IllegalStateError(f"{who}: the producer was closed while it waited for "
                                        f"metadata")
            core.check_signals()
