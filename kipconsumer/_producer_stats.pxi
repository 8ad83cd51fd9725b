# librdkafka's statistics (statistics.interval.ms), taken from the C core and served on a calling
# thread, and the producer's counters for metrics() (included by _producer.pyx; fields in _producer.pxd).


cdef class StatsFeed:
    """The statistics of one producer: the summary of the last JSON document for metrics() and the
    user's stats_cb. ``serve()`` runs on the threads that call send() (when a document is ready),
    flush() and metrics(); the C core only stores the latest document."""

    def __cinit__(self):
        self.callback = None
        self.summary = None

    cdef serve(self, kc_producer_t *p):
        """Hands the latest statistics JSON (statistics.interval.ms) to metrics() and stats_cb, on the
        calling thread (send(), flush(), metrics()); the callback's exceptions are logged, as a
        delivery callback's are."""
        cdef char *doc
        if p == NULL:
            return
        doc = kc_producer_take_stats(p)
        if doc == NULL:
            return
        try:
            text = (<bytes>doc).decode("utf-8", "replace")
        finally:
            free(doc)
        try:
            self.summary = stats_summary(text)
        except (ValueError, TypeError, AttributeError) as exc:
            _log.debug("librdkafka statistics not understood: %s", exc)
        if self.callback is not None:
            try:
                self.callback(text)
            except Exception:
                _log.exception("stats_cb raised an exception (ignored)")

    cdef dict metrics(self, kc_producer_t *p, bint closed, const _BatchCtx *ctx, Py_ssize_t topics_known):
        """The producer's counters (see KafkaProducer.metrics()) from its C core ``p`` (NULL: released),
        its delivery context ``ctx`` and its topics known; serves the latest statistics first."""
        cdef kc_producer_stats_t st
        cdef char last_error[512]
        if p == NULL:
            return {"closed": True, "in_flight": 0}
        self.serve(p)
        kc_producer_get_stats(p, &st, last_error, sizeof(last_error))
        return {
            "closed": closed,
            "in_flight": st.in_flight,
            "records_sent": st.sent,
            "records_delivered": st.delivered,
            "records_failed": st.failed,
            "records_timed_out": st.timed_out,
            "buffer_full_waits": st.buffer_waits,
            "buffer_full_timeouts": st.buffer_timeouts,
            "delivery_batches": st.dr_batches,
            "callback_errors": ctx.callback_errors if ctx != NULL else 0,
            "delivery_gil_us": ctx.work_us if ctx != NULL else 0,
            "client_errors": st.errors,
            "fatal_error": bool(st.fatal),
            "last_error": last_error.decode("utf-8", "replace"),
            "librdkafka_queue_len": st.outq_len,
            "topics_known": topics_known,
            "statistics": self.summary,
        }
