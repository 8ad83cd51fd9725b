# cython: language_level=3
# distutils: undef_macros = CYTHON_LIMITED_API
"""Native part of KafkaProducer: enqueue, bounded blocking (max.block.ms) and delivery reports.

The C core (csrc/producer_core.c) owns the librdkafka handle, the registry of pending records and
the delivery thread.  This module turns Python arguments into C buffers, creates the futures and
completes them from the delivery thread: the thread takes the GIL once per batch of delivery
reports.  ``kipconsumer.producer.KafkaProducer`` is the typed public facade.

ProducerCore (here) keeps the handle's lifecycle, the topics send() looked up, the send path with
its back-pressure, flush and close. The rest lives in the files it includes, each listed in
_producer.pxd with its fields:

- _producer_records.pxi   record building: serializers, payloads, headers, timestamp, topic names
- _producer_future.pxi    ProduceFuture and its C state (_FutureCore)
- _producer_delivery.pxi  delivery reports -> typed errors, completed futures and callbacks
- _producer_topics.pxi    TopicCache: the topics looked up, their metadata waits
- _producer_stats.pxi     StatsFeed: librdkafka's statistics, stats_cb; metrics()
- _producer_txn.pxi       TxnCalls: transactional calls, the parked call, their typed errors
"""

import logging
import math
import re
import threading
from concurrent.futures import Future
from concurrent.futures import _base as _futures_base

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from posix.unistd cimport usleep

from kipconsumer._cstr cimport c_string
from kipconsumer._rdk cimport (
    rd_kafka_t, rd_kafka_conf_t, rd_kafka_topic_t, rd_kafka_headers_t, rd_kafka_resp_err_t,
    rd_kafka_conf_new, rd_kafka_conf_destroy, rd_kafka_conf_set, RD_KAFKA_CONF_OK,
    RD_KAFKA_CONF_UNKNOWN, rd_kafka_err2name, rd_kafka_err2str, rd_kafka_topic_new,
    rd_kafka_topic_destroy, rd_kafka_headers_new, rd_kafka_headers_destroy, rd_kafka_header_add,
    RD_KAFKA_PARTITION_UA, rd_kafka_conf_set_log_cb,
    rd_kafka_error_t, rd_kafka_error_code, rd_kafka_error_string, rd_kafka_error_name,
    rd_kafka_error_destroy, rd_kafka_error_is_fatal, rd_kafka_error_is_retriable,
    rd_kafka_error_txn_requires_abort, rd_kafka_topic_partition_list_t,
    rd_kafka_topic_partition_list_new, rd_kafka_topic_partition_list_add,
    rd_kafka_topic_partition_list_destroy, rd_kafka_consumer_group_metadata_t,
    rd_kafka_consumer_group_metadata_read, rd_kafka_consumer_group_metadata_destroy,
    rd_kafka_init_transactions, rd_kafka_begin_transaction, rd_kafka_send_offsets_to_transaction,
    rd_kafka_commit_transaction, rd_kafka_abort_transaction,
    rd_kafka_conf_set_oauthbearer_token_refresh_cb, rd_kafka_conf_enable_sasl_queue,
    rd_kafka_sasl_background_callbacks_enable, rd_kafka_oauthbearer_set_token,
    rd_kafka_oauthbearer_set_token_failure, rd_kafka_fatal_error,
)
from kipconsumer._logring cimport drain_logs, kc_log_cb
from kipconsumer._process cimport foreign_process, this_process
from kipconsumer._topic_metadata cimport kc_topic_partition_ids

from kipconsumer.errors import (ConfigError, IllegalStateError, InvalidTopicError, KafkaError, category_of,
                                KafkaTimeoutError, ProducerFencedError, SerializationError,
                                TransactionAbortableError, TransactionBlockedError)
from kipconsumer._fork import foreign_error
from kipconsumer._security_errors import security_error
from kipconsumer._stats import summary as stats_summary
from kipconsumer._validate import check_topic_name
from kipconsumer.structs import RecordMetadata


# librdkafka error codes used here (stable numbers of its public API).
cdef enum:
    ERR_NO_ERROR = 0
    ERR__MSG_TIMED_OUT = -192
    ERR__TIMED_OUT = -185
    ERR__QUEUE_FULL = -184
    ERR__DESTROY = -197
    ERR_MSG_SIZE_TOO_LARGE = 10
    ERR__TIMED_OUT_QUEUE = -166
    ERR_REQUEST_TIMED_OUT = 7

# Blocking calls wait in slices of KC_WAIT_SLICE_US (clock.h), then take the GIL to run signal handlers
# (PyErr_CheckSignals) and to see close(): the bound on how late a KeyboardInterrupt surfaces.
cdef enum:
    # close(): how long it waits for other threads' calls to leave before it defers the final
    # release of the handle to the last of them
    _CLOSE_GRACE_US = 300000
    # close(): bound on the wait for the delivery reports of purged records
    _PURGE_WAIT_US = 5000000

_log = logging.getLogger("kipconsumer.producer")

# Metadata errors that waiting cannot fix: raised at once instead of waiting for max.block.ms.
_FATAL_METADATA_ERRORS = frozenset(("TOPIC_EXCEPTION", "TOPIC_AUTHORIZATION_FAILED",
                                    "_INVALID_ARG", "_FATAL", "CLUSTER_AUTHORIZATION_FAILED"))


cdef inline str _errname(int err):
    return rd_kafka_err2name(<rd_kafka_resp_err_t>err).decode("utf-8", "replace")


cdef inline str _errstr(int err):
    return rd_kafka_err2str(<rd_kafka_resp_err_t>err).decode("utf-8", "replace")


include "_oauth_cb.pxi"
include "_producer_records.pxi"
include "_producer_future.pxi"
include "_producer_delivery.pxi"
include "_producer_topics.pxi"
include "_producer_stats.pxi"
include "_producer_txn.pxi"


# The cycle collector must not clear the members first (tp_clear): __dealloc__ closes the producer with
# them (the topics, the transactional calls that may own the handle's destruction).
@cython.no_gc_clear
cdef class ProducerCore:
    """librdkafka producer handle with native delivery handling. Use ``KafkaProducer``.

    Thread safety: every method may be called from any thread. Calls that use the handle count
    themselves in ``_active`` (under the GIL, after the check that the producer is open), so
    ``close()`` never frees the handle under another call: it waits a short grace for them and
    otherwise leaves the final release to the last one to leave. Blocking waits run without the GIL
    in slices of at most 50 ms, then check signals (``KeyboardInterrupt``) and ``close()``.
    """

    def __cinit__(self):
        self.p = NULL
        self.pid = this_process()
        self._txn = TxnCalls()
        self._topics = TopicCache()
        self._stats = StatsFeed()
        self.ctx = NULL
        self._state = PRODUCER_NEW
        self._active = 0

    def __init__(self, settings, key_serializer=None, value_serializer=None):
        """``settings``: the validated ProducerSettings (kipconsumer.config), read as is."""
        cdef rd_kafka_conf_t *conf = rd_kafka_conf_new()
        cdef char errstr[512]
        cdef bytes bk, bv
        cdef int r
        cdef dict rdkafka = settings.client_rdkafka
        cdef int max_block_ms = settings.max_block_ms
        cdef int delivery_timeout_ms = settings.delivery_timeout_ms
        cdef int request_timeout_ms = settings.request_timeout_ms
        cdef long long buffer_memory = settings.buffer_memory
        oauth_cb = settings.oauth_cb
        self._stats.callback = settings.stats_cb
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self.max_block_ms = max_block_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.buffer_memory = buffer_memory
        self.message_max_bytes = str(rdkafka.get("message.max.bytes", "1000000"))
        self.queue_limits = (f"buffer.memory={buffer_memory} bytes, queue.buffering.max.messages="
                             f"{rdkafka.get('queue.buffering.max.messages', '100000')}")
        try:
            for k, v in rdkafka.items():
                bk = c_string(str(k), "configuration key", ConfigError)
                bv = c_string(str(v), f"configuration {k!r}: the value", ConfigError, False)
                if rd_kafka_conf_set(conf, bk, bv, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK:
                    raise ConfigError(f"invalid producer configuration {k!r}: "
                                      f"{errstr.decode('utf-8', 'replace')}")
        except BaseException:
            rd_kafka_conf_destroy(conf)
            raise
        rd_kafka_conf_set_log_cb(conf, kc_log_cb)  # logs reach Python logging (kipconsumer._rdklog)
        _oauth_install(conf, oauth_cb)
        self.p = kc_producer_new(conf, errstr, sizeof(errstr))
        drain_logs()
        if self.p == NULL:
            rd_kafka_conf_destroy(conf)
            raise KafkaError(f"could not create the producer: {errstr.decode('utf-8', 'replace')}")
        _oauth_start(self.p.rk, oauth_cb)
        self.ctx = <_BatchCtx *>malloc(sizeof(_BatchCtx))
        memset(self.ctx, 0, sizeof(_BatchCtx))
        self.ctx.delivery_timeout_ms = delivery_timeout_ms
        self.ctx.transactional = bool(rdkafka.get("transactional.id"))
        r = kc_producer_start(self.p, _on_batch, self.ctx)
        if r != 0:
            _oauth_stop(self.p.rk)
            with nogil:
                kc_producer_destroy(self.p)
            self.p = NULL
            raise KafkaError(f"could not start the delivery thread (errno {r})")
        self._state = PRODUCER_OPEN

    # -- the calls' lifecycle (all under the GIL) -----------------------------------------------
    cdef int enter(self, str who) except -1:
        """Counts a call that uses the handle; raises IllegalStateError once close() began."""
        if self._state != PRODUCER_OPEN:
            raise IllegalStateError(f"{who} called after close()")
        self._active += 1
        return 0

    cdef void leave(self) noexcept:
        self._active -= 1
        if self._active == 0 and self._state == PRODUCER_RELEASE_PENDING:
            self._release()

    cdef void _release(self) noexcept:
        """Frees the topics, the handle and the batch context (after close() did its work)."""
        cdef kc_producer_t *p = self.p
        self._state = PRODUCER_RELEASED
        self._topics.last = None
        if p == NULL:
            return
        self.p = NULL
        _oauth_stop(p.rk)
        self._topics.destroy_all()
        self._txn.free_producer(p)  # now, or once a transactional call blocked in librdkafka returns
        free(self.ctx)
        self.ctx = NULL

    cdef int check_signals(self) except -1:
        """Runs pending signal handlers (KeyboardInterrupt is raised here, in the main thread)."""
        return PyErr_CheckSignals()

    def partitions_for(self, str topic):
        """Partition ids of ``topic``, waiting at most max.block.ms for its metadata."""
        cdef _Topic t
        self.enter("partitions_for()")
        try:
            t = self._topics.lookup(
                self, topic, kc_now_us() + <int64_t>self.max_block_ms * 1000, "partitions_for()")
            return list(t.partitions)
        finally:
            self.leave()

    # -- send -----------------------------------------------------------------------------------
    def send(self, topic, value=None, key=None, partition=None, headers=None, timestamp=None,
             callback=None):
        """Enqueue one record, waiting at most max.block.ms; returns a ProduceFuture. See
        KafkaProducer.send() (whose parameters these are: it is this method on the fast path)."""
        return self._admit(topic, value, key, partition, headers, timestamp, callback, self.max_block_ms)

    def send_nowait(self, topic, value, key, partition, headers, timestamp, callback):
        """send() that never waits (block_ms 0): raises KafkaTimeoutError at once where send() would
        wait for buffer space or the topic's first metadata. kipconsumer.aio waits without blocking
        its event loop instead."""
        return self._admit(topic, value, key, partition, headers, timestamp, callback, 0)

    cdef object _admit(self, topic, value, key, partition, headers, timestamp, callback, int block_ms):
        """What every send() does around _send(): the closed check, the serializers, the logs and
        statistics served on the caller's thread, and the count in _active."""
        if self._state != PRODUCER_OPEN:
            raise IllegalStateError("send() called after close()")
        if self._key_serializer is not None and key is not None:
            key = _serialize(self._key_serializer, key, "key")
        if self._value_serializer is not None and value is not None:
            value = _serialize(self._value_serializer, value, "value")
        drain_logs()
        if self.p != NULL and self.p.stats_ready:
            self._stats.serve(self.p)
        # a serializer may have closed the producer (or another thread did meanwhile)
        self.enter("send()")
        try:
            return self._send(topic, value, key, partition, headers, timestamp, callback, block_ms)
        finally:
            self.leave()

    cdef object _send(self, topic, value, key, partition, headers, timestamp, callback, int block_ms):
        cdef _Topic t
        cdef int64_t deadline_us = 0, start_us = 0, ts = 0
        cdef const char *vptr = NULL
        cdef const char *kptr = NULL
        cdef Py_ssize_t vlen = 0, klen = 0
        cdef int32_t part = RD_KAFKA_PARTITION_UA
        cdef rd_kafka_headers_t *hdrs = NULL
        cdef kc_producer_rec_t *rec
        cdef _FutureCore fut
        cdef int err
        cdef long long pnum
        cdef int64_t max_block_us = <int64_t>block_ms * 1000  # the caller's bound: max.block.ms, or 0
        t = self._topics.last
        if t is None or t.name is not topic:
            if not isinstance(topic, str):
                raise TypeError(f"topic must be a str, not {type(topic).__name__}")
            t = self._topics.by_name.get(topic)
            if t is None:
                # first send to this name: checked against Kafka's rule once, then cached
                start_us = kc_now_us()
                deadline_us = start_us + max_block_us
                t = self._topics.lookup(self, topic, deadline_us, "send()")
            t.name = topic  # same value; any thread may set it (one store, atomic under the GIL)
            self._topics.last = t
        # value and key: bytes-like or str, referenced (not copied) until librdkafka copies them
        if value is not None:
            value = _payload(value, &vptr, &vlen, "value")
        if key is not None:
            key = _payload(key, &kptr, &klen, "key")
        if partition is not None:
            if isinstance(partition, bool) or not isinstance(partition, int):
                raise TypeError(f"partition must be an int or None, not {type(partition).__name__}")
            try:
                pnum = partition
            except OverflowError:  # beyond a C long long: no such partition either
                pnum = -1
            if pnum < 0 or pnum >= t.partition_count:
                if pnum >= t.partition_count:
                    self._topics.refresh_partitions(self, t, topic)
                if pnum < 0 or pnum >= t.partition_count:
                    raise KafkaError(
                        f"partition {partition} of topic {topic!r} does not exist (the topic has "
                        f"{t.partition_count} partition(s): 0..{t.partition_count - 1})",
                        code="_UNKNOWN_PARTITION")
            part = <int32_t>pnum
        if timestamp is not None:
            ts = _timestamp_ms(timestamp)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable or None, not {type(callback).__name__}")
        if headers is not None:
            # a falsy object that is not a list/tuple/dict ('', b'', 0) is an error, not "no headers"
            if not isinstance(headers, (list, tuple, dict)) or headers:
                hdrs = _build_headers(headers)
        if self._state != PRODUCER_OPEN:  # header or payload conversion ran Python code: close() may have begun
            if hdrs != NULL:
                rd_kafka_headers_destroy(hdrs)
            raise IllegalStateError("send(): the producer was closed before the record was enqueued",
                                    code="_DESTROY")
        fut = <_FutureCore>_tp_new(_ProduceFuture_type, _EMPTY)  # no __init__, no __dict__
        PyObject_GC_UnTrack(fut)
        rec = &fut.rec
        rec.future = <void *>fut
        Py_INCREF(fut)  # the registry's reference, released when the future is completed
        if callback is not None:
            rec.callback = <void *>callback
            Py_INCREF(callback)
        else:
            rec.callback = NULL
        rec.key_size = <int32_t>klen if kptr != NULL else -1
        rec.value_size = <int32_t>vlen if vptr != NULL else -1
        err = kc_producer_produce(self.p, t.rkt, part, vptr, vlen, kptr, klen, ts, hdrs, rec)
        if err == ERR__QUEUE_FULL and kc_producer_on_dr_thread(self.p):
            # only this thread frees buffer space: waiting here could only time out
            pass
        elif err == ERR__QUEUE_FULL:
            if deadline_us == 0:
                start_us = kc_now_us()
                deadline_us = start_us + max_block_us
            try:
                err = self._wait_for_space(t.rkt, part, vptr, vlen, kptr, klen, ts, hdrs, rec,
                                           deadline_us)
            except BaseException:  # KeyboardInterrupt: the record was not enqueued
                _unref_record(fut, rec, hdrs)
                raise
        if err == ERR_NO_ERROR:
            return fut
        _unref_record(fut, rec, hdrs)
        raise self._send_error(err, topic, start_us)

    cdef int _wait_for_space(self, rd_kafka_topic_t *rkt, int32_t part, const char *vptr,
                             Py_ssize_t vlen, const char *kptr, Py_ssize_t klen, int64_t ts,
                             rd_kafka_headers_t *hdrs, kc_producer_rec_t *rec,
                             int64_t deadline_us) except? -1:
        """kc_producer_produce_wait() in slices with signal checks; returns its error."""
        cdef int err
        cdef int counted = 0
        cdef int64_t until
        while True:
            until = kc_slice_end_us(deadline_us)
            with nogil:
                err = kc_producer_produce_wait(self.p, rkt, part, vptr, vlen, kptr, klen, ts,
                                               hdrs, rec, until, &counted)
            if err != ERR__QUEUE_FULL:
                return err
            if kc_now_us() >= deadline_us:
                kc_producer_note_buffer_timeout(self.p)
                return err
            self.check_signals()

    cdef object security_exc(self, int err, str what, tuple topics=()):
        """The typed security error for ``err`` (kipconsumer._security_errors), or None; the text
        of the latched authentication failure when ``err`` is it."""
        cdef char buf[512]
        cdef int latched = kc_producer_auth_error(self.p, buf, sizeof(buf))
        detail = buf.decode("utf-8", "replace") if latched == err and buf[0] else _errstr(err)
        if _errname(err) == "_FATAL":  # librdkafka's fatal error: typed if it is a refusal
            buf[0] = 0
            err = rd_kafka_fatal_error(self.p.rk, buf, sizeof(buf))
            detail = buf.decode("utf-8", "replace")
        return security_error(_errname(err), detail, what=what, topics=topics)

    cdef object _send_error(self, int err, str topic, int64_t start_us):
        cdef str name = _errname(err)
        sec = self.security_exc(err, f"send() to topic {topic!r}", (topic,))
        if sec is not None:
            return sec
        if err == ERR__QUEUE_FULL and kc_producer_on_dr_thread(self.p):
            return KafkaTimeoutError(
                f"send() to topic {topic!r} from a send() callback found the producer's buffer full "
                f"({self.queue_limits}): callbacks run on the thread that frees buffer space, so "
                f"send() cannot wait there for max.block.ms; the record was not sent", code=name)
        if err == ERR__QUEUE_FULL:
            waited = (kc_now_us() - start_us) // 1000
            return KafkaTimeoutError(
                f"send() to topic {topic!r} waited {waited} ms for buffer space: the producer's "
                f"buffer ({self.queue_limits}) stayed full for max.block.ms={self.max_block_ms} ms; "
                f"the record was not sent", code=name)
        if err == ERR__DESTROY:
            return IllegalStateError("send(): the producer was closed before the record was enqueued",
                                     code=name)
        if err == ERR_MSG_SIZE_TOO_LARGE:  # refused by librdkafka itself, before any broker saw it
            return KafkaError(
                f"send() to topic {topic!r}: the record (key + value + headers) is larger than "
                f"message.max.bytes={self.message_max_bytes}, the producer's client-side limit (config "
                f"key 'message.max.bytes'); the record was not sent. Raise message.max.bytes (the broker's "
                f"message.max.bytes and the topic's max.message.bytes must allow it too) or send smaller "
                f"records", code=name)
        return KafkaError(f"send() to topic {topic!r} failed: {name}: {_errstr(err)}", code=name)

    # -- flush / close --------------------------------------------------------------------------
    cdef int64_t _flush_until(self, int64_t deadline_us) except? -2:
        """Flushes in slices until nothing is in flight or deadline_us (KC_NO_DEADLINE: none);
        returns the number still in flight. Raises KeyboardInterrupt (records stay pending)."""
        cdef int64_t left, until
        while True:
            until = kc_slice_end_us(deadline_us)
            with nogil:
                left = kc_producer_flush_until(self.p, until)
            if left == 0 or kc_now_us() >= deadline_us:
                return left
            self.check_signals()

    def flush(self, double timeout_s):
        """Waits until every record sent so far is completed; returns how many are still pending.
        ``timeout_s``: checked seconds (kipconsumer._timeouts), math.inf for no bound."""
        cdef int64_t deadline_us
        if self.p != NULL and kc_producer_on_dr_thread(self.p):
            raise IllegalStateError("flush() cannot be called from a send() callback: callbacks run "
                                    "on the thread that completes the records")
        deadline_us = kc_deadline_us(timeout_s)
        self.enter("flush()")
        try:
            return self._flush_until(deadline_us)
        finally:
            self.leave()
            drain_logs()
            self._stats.serve(self.p)

    def close(self, double timeout_s):
        """Flush up to timeout_s (checked seconds; math.inf: no bound), purge what is left, fail its
        futures, free everything.

        Returns the number of records that had to be purged (0 if everything was delivered
        within the timeout). Idempotent: later calls return 0. A KeyboardInterrupt during the
        flush leaves the producer closed for new records with its records pending; a later
        close() finishes. A close() racing another one waits for it.
        """
        cdef int64_t deadline_us, left = 0, purged = 0, grace_us
        cdef kc_producer_rec_t *rec
        cdef kc_producer_rec_t *nxt
        cdef _FutureCore fut
        if self.p == NULL or self._state == PRODUCER_RELEASE_PENDING:
            return 0
        if foreign_process(self.pid):
            raise foreign_error("KafkaProducer", self.pid)
        if kc_producer_on_dr_thread(self.p):
            raise IllegalStateError("close() cannot be called from a send() callback: close() waits "
                                    "for the thread that runs the callbacks")
        if self._state == PRODUCER_CLOSING and self._closing_thread == threading.get_ident():
            raise IllegalStateError("close() called from within close() on the same thread (a signal "
                                    "handler or a future's done-callback): it would wait for itself")
        while self._state == PRODUCER_CLOSING:  # another thread's close(): wait for it
            with nogil:
                usleep(2000)
            self.check_signals()
        if self.p == NULL or self._state == PRODUCER_RELEASE_PENDING:
            return 0
        deadline_us = kc_deadline_us(timeout_s)
        self._state = PRODUCER_CLOSING
        self._closing_thread = threading.get_ident()
        try:
            left = self._flush_until(deadline_us)
            with nogil:
                # from here on nothing can be enqueued (send() calls blocked for buffer space give up)
                kc_producer_set_closing(self.p)
                left = kc_producer_wait_idle(self.p, 0)
                if left > 0:
                    kc_producer_purge(self.p)
                    # purged records get their reports at once; bound the wait anyway
                    kc_producer_wait_idle(self.p, kc_now_us() + _PURGE_WAIT_US)
                kc_producer_stop_thread(self.p)
            purged = left
            rec = kc_producer_take_all(self.p)
            while rec != NULL:  # never expected: librdkafka reports every record; never leave one pending
                nxt = rec.next
                fut = <_FutureCore>rec.future
                Py_DECREF(fut)  # the registry's reference
                cb = _take_callback(rec)
                _complete(fut, cb, KafkaError(
                    "Record was not acknowledged when the producer was closed (no delivery report)",
                    code="_DESTROY"), self.ctx)
                rec = nxt
            self._topics.last = None
            # other threads' calls see the closed flag within one wait slice and leave
            grace_us = kc_now_us() + _CLOSE_GRACE_US
            while self._active > 0 and kc_now_us() < grace_us:
                with nogil:
                    usleep(2000)
            if self._active > 0:
                self._state = PRODUCER_RELEASE_PENDING
            else:
                self._release()
        finally:
            if self._state == PRODUCER_CLOSING:  # interrupted: a later close() finishes
                self._state = PRODUCER_INTERRUPTED
        drain_logs()
        return purged

    def txn(self, str op, double timeout_s, list offsets=None, bytes group_metadata=None):
        """One transactional call (op: "init", "begin", "send_offsets", "commit", "abort"), waiting at
        most timeout_s seconds (checked; the facade resolves None to max.block.ms) in slices that let signals out. The librdkafka call
        runs on a native helper thread (csrc/txn_call.c): librdkafka can block in it past its timeout
        (docs/reliability.md). A call that timed out inside librdkafka can be made again and resumes
        (librdkafka's rule). A call that did not return by the timeout (plus a short grace for
        librdkafka's own timeout) or was interrupted stays pending and raises TransactionBlockedError
        (a KafkaTimeoutError): the same op called again waits for it further and gives its result;
        another op raises TransactionBlockedError while it is pending. Raises the typed error (see
        KafkaProducer.init_transactions). The calls and their state: TxnCalls (_producer_txn.pxi)."""
        self._txn.call(self, op, timeout_s, offsets, group_metadata)

    @property
    def transaction_blocked(self):
        return self._txn.blocked()

    def __dealloc__(self):
        if self.p != NULL:
            if foreign_process(self.pid):
                return  # inherited through fork(): the handle and its threads are the parent's (leaked)
            if kc_producer_on_dr_thread(self.p):
                # dropped from its own callback: joining ourselves would deadlock; leak instead
                return
            if self._state == PRODUCER_RELEASE_PENDING:
                self._release()
                return
            try:
                self.close(0.0)
            except BaseException:
                pass

    @property
    def closed(self):
        return self._state != PRODUCER_OPEN

    def metrics(self):
        """Counters of the producer (see KafkaProducer.metrics()); any thread, also after close().
        Counted in ``_active`` while it reads the handle: serving the statistics first runs Python
        code (stats_cb), where another thread's close() would otherwise free the handle under it."""
        self._active += 1
        try:
            return self._stats.metrics(self.p, self._state != PRODUCER_OPEN, self.ctx, len(self._topics.by_name))
        finally:
            self.leave()
