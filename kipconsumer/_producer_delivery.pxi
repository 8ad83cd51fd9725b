# The delivery-report path: the delivery thread (csrc/producer_core.c) hands each batch of reports
# to _on_batch(), which takes the GIL once per batch, builds the typed errors and completes the
# records' futures and callbacks; the registry references a record holds until then (included by
# _producer.pyx).


cdef inline bint _is_timeout(int err) noexcept nogil:
    return (err == ERR__MSG_TIMED_OUT or err == ERR__TIMED_OUT or err == ERR__TIMED_OUT_QUEUE
            or err == ERR_REQUEST_TIMED_OUT)


cdef inline object _take_callback(kc_producer_rec_t *rec):
    """The record's delivery callback (or None), taken out of the registry with its reference."""
    if rec.callback == NULL:
        return None
    cb = <object>rec.callback
    Py_DECREF(cb)
    rec.callback = NULL
    return cb


cdef void _unref_record(_FutureCore fut, kc_producer_rec_t *rec, rd_kafka_headers_t *hdrs) noexcept:
    """Releases what a record that was not enqueued held (the registry's references, headers)."""
    Py_DECREF(fut)
    if rec.callback != NULL:
        Py_DECREF(<object>rec.callback)
        rec.callback = NULL
    if hdrs != NULL:
        rd_kafka_headers_destroy(hdrs)


cdef object _delivery_error(kc_producer_dr_t *it, str topic, dict expiries, int delivery_timeout_ms,
                            bint transactional):
    cdef str name = _errname(it.err)
    cdef str detail = it.errstr.decode("utf-8", "replace") if it.errstr != NULL else _errstr(it.err)
    if _is_timeout(it.err):
        count, latency_us = (expiries or {}).get((topic, it.partition), (1, it.latency_us))
        waited = f"{latency_us // 1000} ms" if latency_us >= 0 else "more than delivery.timeout.ms"
        return KafkaTimeoutError(
            f"Expiring {count} record(s) for {topic}-{it.partition}: {waited} has passed since "
            f"batch creation (delivery.timeout.ms={delivery_timeout_ms}; last error: {detail})",
            code=name)
    if name == "_PURGE_QUEUE" or name == "_PURGE_INFLIGHT":
        where = "queued" if name == "_PURGE_QUEUE" else "in flight"
        return KafkaError(
            f"Record for {topic}-{it.partition} was {where} and not acknowledged when the producer "
            f"was closed: purged ({detail})", code=name, retriable=False)
    if name == "_FENCED" or name == "PRODUCER_FENCED" or (transactional and name in _FENCED_NAMES):
        return ProducerFencedError(
            f"Delivery to {topic}-{it.partition} failed: {name}: {detail}. Another producer with the same "
            f"transactional.id took over; this producer can only be closed.", code=name)
    sec = security_error(name, detail, what=f"Delivery to {topic}-{it.partition} failed", topics=(topic,))
    if sec is not None:
        return sec
    return KafkaError(f"Delivery to {topic}-{it.partition} failed: {name}: {detail}", code=name)


cdef inline void _complete(_FutureCore fut, object cb, object exc, _BatchCtx *ctx) noexcept:
    """Runs the callback, then completes fut: delivered (its metadata fields are filled and
    ``md_pending`` set) if exc is None, else failed with exc."""
    cdef object md = None
    try:
        if cb is not None:
            if exc is None:
                md = fut._metadata()
            try:
                cb(md, exc)
            except BaseException:
                ctx.callback_errors += 1
                _log.exception("exception in a send() callback (ignored)")
        if not fut.lazy_ready:
            # nobody waits and no done-callback: complete in place (see ProduceFuture)
            if exc is not None:
                _gc_track(fut)
                fut.exc = exc
            fut.st = _ST_FINISHED
            return
        if exc is None:
            fut.set_result(fut._metadata())
        else:
            fut.set_exception(exc)
    except BaseException:
        _log.exception("could not complete a send() future")
        fut.st = _ST_FINISHED  # never leave it pending


cdef void _on_batch(void *ctxp, kc_producer_dr_t *items, size_t n) noexcept with gil:
    """Completes the futures of one batch of delivery reports (runs on the delivery thread)."""
    cdef _BatchCtx *ctx = <_BatchCtx *>ctxp
    cdef size_t i
    cdef kc_producer_dr_t *it
    cdef kc_producer_rec_t *rec
    cdef const char *last_topic = NULL
    cdef str topic = ""
    cdef dict expiries = None
    cdef _FutureCore fut
    cdef object cb, exc
    cdef int64_t t_start = kc_now_us()
    try:
        for i in range(n):
            it = &items[i]
            if it.err != ERR_NO_ERROR and _is_timeout(it.err):
                if expiries is None:
                    expiries = {}
                k = (it.topic.decode("utf-8", "replace"), it.partition)
                count, latency = expiries.get(k, (0, -1))
                expiries[k] = (count + 1, max(latency, it.latency_us))
    except BaseException:
        _log.exception("delivery report grouping failed")
        expiries = None
    for i in range(n):
        it = &items[i]
        rec = it.rec
        if rec == NULL:
            continue
        # rec is a field of the future: fut (a new reference) keeps it alive from here on
        fut = <_FutureCore>rec.future
        Py_DECREF(fut)  # the registry's reference
        cb = _take_callback(rec)
        exc = None
        try:
            if it.topic != last_topic:
                topic = it.topic.decode("utf-8", "replace")
                last_topic = it.topic
            if it.err == ERR_NO_ERROR:
                fut.topic = topic
                fut.partition = it.partition
                fut.offset = it.offset
                fut.timestamp = it.timestamp
                fut.md_pending = True
            else:
                exc = _delivery_error(it, topic, expiries, ctx.delivery_timeout_ms, ctx.transactional)
        except BaseException as e:  # never leave a future pending
            fut.md_pending = False
            exc = KafkaError(f"could not build the delivery result: {e!r}")
        _complete(fut, cb, exc, ctx)
    ctx.work_us += kc_now_us() - t_start
