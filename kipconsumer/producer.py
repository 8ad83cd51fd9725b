"""KafkaProducer: asynchronous sends with KIP-19's three time bounds, on librdkafka.

Contract (see docs/producer.md):

* ``send()`` returns a ``concurrent.futures.Future[RecordMetadata]`` at once, or blocks at most
  ``max.block.ms`` (waiting for the topic's metadata or for buffer space) and then raises
  ``KafkaTimeoutError`` without enqueueing the record.
* Each request waits at most ``request.timeout.ms`` for its response and is retried while
  ``delivery.timeout.ms`` (counted from ``send()``) allows; after that the record's future fails with
  ``KafkaTimeoutError`` ("Expiring N record(s) for t-p: X ms has passed since batch creation").
* Every future is completed exactly once (acknowledged or failed with a typed error), by a native
  delivery thread: callbacks run without the application polling. ``close()`` fails what is still
  pending after its timeout; no future is ever left unresolved.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from kipconsumer import _fork, _loader

_loader.load()

from kipconsumer._producer import ProducerCore  # noqa: E402
from kipconsumer._timeouts import timeout_seconds  # noqa: E402
from kipconsumer.config import producer_settings  # noqa: E402
from kipconsumer.errors import (  # noqa: E402
    IllegalStateError,
    InvalidTopicError,
    KafkaTimeoutError,
    TransactionBlockedError,
    TransactionOutcomeUnknownError,
)
from kipconsumer.structs import (  # noqa: E402
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
)

__all__ = ["KafkaProducer", "DeliveryCallback", "Headers", "InvalidTopicError"]

_INT64_MAX = 2**63 - 1

#: ``callback(metadata, exception)``: exactly one of the two is None.
DeliveryCallback = Callable[[RecordMetadata | None, Exception | None], object]
#: Record headers: ``[(name, value), ...]`` or ``{name: value}``; values bytes, str or None.
HeaderValue = bytes | bytearray | memoryview | str | None
Headers = Sequence[tuple[str, HeaderValue]] | Mapping[str, HeaderValue]
#: ``serializer(obj)`` -> bytes, bytearray, memoryview, str or None.
Serializer = Callable[[Any], bytes | bytearray | memoryview | str | None]


def _close_core(core: ProducerCore, timeout_s: float) -> None:
    """Finalizer: releases the native producer of a KafkaProducer that was never closed."""
    try:
        core.close(timeout_s)
    except Exception:  # pragma: no cover - best effort at garbage collection / exit
        pass


class KafkaProducer:
    """A thread-safe Kafka producer with bounded ``send()`` and delivery timeouts (KIP-19).

    Every method may be called from any thread, also while another thread closes the producer;
    serializers may call ``send()``, ``flush()`` and ``close()`` on their own producer, delivery
    callbacks ``send()`` (``flush()`` / ``close()`` there raise ``IllegalStateError``). Blocking
    calls (``send()``, ``partitions_for()``, ``flush()``, ``close()``) run signal handlers within
    about 50 ms and propagate their exception (``KeyboardInterrupt``) without losing a record.

    ``config`` uses Kafka's dotted names (``bootstrap.servers``, ``max.block.ms``,
    ``request.timeout.ms``, ``delivery.timeout.ms``, ``linger.ms``, ``buffer.memory``, ``acks``,
    ``enable.idempotence``, ``compression.type``, ...); librdkafka property names are passed
    through. Invalid keys or values raise ``ConfigError``, as does
    ``delivery.timeout.ms < linger.ms + request.timeout.ms``. Defaults: ``acks=all``,
    ``enable.idempotence=true``.

    ``key_serializer`` / ``value_serializer`` are applied to ``key`` / ``value`` before
    anything else; they must return bytes, bytearray, memoryview, str or None.

    Use it as a context manager or call :meth:`close`; a producer that is garbage-collected
    (or still open at interpreter exit) is closed with timeout 0: records not yet acknowledged
    then fail with ``KafkaError`` (``_PURGE_QUEUE`` / ``_PURGE_INFLIGHT``).

    Not inherited through ``os.fork()``: in a child process every call (``close()`` included) raises
    ``IllegalStateError`` naming the process that created it; the child never flushes nor destroys it
    (docs/producer.md, "fork()"). A fenced transactional producer always gets ``ProducerFencedError``
    (from transactional calls and from the futures of records the broker refused for it).
    """

    def __init__(self, config: Mapping[str, object], *, key_serializer: Serializer | None = None,
                 value_serializer: Serializer | None = None) -> None:
        settings = producer_settings(config)
        self._settings = settings
        self._transactions = {"commit": 0, "abort": 0}  # completed, for metrics()
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._core = ProducerCore(settings, key_serializer, value_serializer)
        self._finalizer = weakref.finalize(self, _close_core, self._core, 0.0)
        #: why the last commit_transaction()'s outcome is unknown (None: it is known); see _condemn()
        self._outcome_unknown: str | None = None
        if type(self).send is KafkaProducer.send:
            # Fast path: ``p.send`` is the native method itself (same parameters, serializers
            # applied natively), which saves a Python frame per record. Subclasses that override
            # send() keep their own.
            self.__dict__["send"] = self._core.send
        if type(self)._send_nowait is KafkaProducer._send_nowait:
            self.__dict__["_send_nowait"] = self._core.send_nowait  # likewise, for kipconsumer.aio
        _fork.register(self)

    def _mark_foreign(self, pid: int) -> None:
        """In a child made by ``fork()``: every later call raises ``IllegalStateError``; the inherited
        librdkafka handle is leaked, never flushed or destroyed here (kipconsumer._fork)."""
        core = self._core
        self._core = _fork.ForeignHandle("KafkaProducer", pid)  # type: ignore[assignment]
        self.__dict__.pop("send", None)
        self.__dict__.pop("_send_nowait", None)
        self._finalizer.detach()
        _fork.leak(core)

    # -- sending ---------------------------------------------------------------------------------
    def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
             headers: Headers | None = None, timestamp: int | None = None,
             callback: DeliveryCallback | None = None) -> Future[RecordMetadata]:
        """Enqueue a record and return a future of its :class:`RecordMetadata`.

        ``topic``: a str following Kafka's rule (1..249 characters of ``[a-zA-Z0-9._-]``, not
        ``.`` or ``..``), else :class:`InvalidTopicError` (a ``KafkaError`` with code
        ``TOPIC_EXCEPTION`` and a ``ValueError``); a name is checked once, on its first send.
        ``value`` / ``key``: bytes, bytearray, memoryview, str (UTF-8) or None, after the
        serializers; anything else raises ``SerializationError`` (a ``TypeError``) naming the
        argument. ``headers``: None, or a list/tuple of ``(str, bytes | str | None)`` pairs or a
        dict; anything else (including ``''``, ``b''`` or ``0``) raises ``SerializationError``.
        ``partition``: None lets the partitioner choose (by key); a number the topic does not
        have raises ``KafkaError`` (code ``_UNKNOWN_PARTITION``). ``timestamp``: epoch
        milliseconds in 0..2**63-1 (None: now), else ``ValueError`` (``TypeError`` for a
        non-number). ``callback(metadata, exception)`` runs on the producer's delivery thread
        once the record is acknowledged or failed; its exceptions are logged.

        Blocks at most ``max.block.ms`` in total, for the topic's metadata (first send to a
        topic) and for buffer space (``buffer.memory`` / ``queue.buffering.max.messages``),
        with the GIL released; then raises ``KafkaTimeoutError`` saying which it waited for, and
        the record is not enqueued. The future fails with ``KafkaTimeoutError`` if the record is
        not acknowledged within ``delivery.timeout.ms``, or with ``KafkaError`` (librdkafka's
        error name in ``.code``) for other delivery errors. Raises ``IllegalStateError`` after
        :meth:`close`, also when ``close()`` ran (in another thread, or in a serializer) while this
        call was in a serializer or waiting: nothing of the record is enqueued then. While it
        waits, signal handlers run within about 50 ms; their exception (``KeyboardInterrupt``)
        propagates and the record is not enqueued. A header name containing a NUL character
        raises ``ValueError``.
        """
        if self._outcome_unknown is not None:
            raise self._outcome_unknown_error("send()")
        # the serializers are applied by the native core (and wrap their errors the same way)
        fut: Future[RecordMetadata] = self._core.send(topic, value, key, partition, headers, timestamp,
                                                      callback)
        return fut

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic``; waits at most ``max.block.ms`` for its metadata, then
        raises ``KafkaTimeoutError``. An invalid topic name raises :class:`InvalidTopicError`."""
        result: list[int] = self._core.partitions_for(topic)
        return result

    # -- the non-blocking forms AsyncKafkaProducer (kipconsumer.aio) needs ------------------------
    def _send_nowait(self, topic: str, value: Any, key: Any, partition: int | None, headers: Any,
                     timestamp: int | None,
                     callback: Callable[[RecordMetadata | None, Exception | None], object] | None
                     ) -> Future[RecordMetadata]:
        """For ``kipconsumer.aio``: :meth:`send` that never waits (``max.block.ms`` 0 for this call).
        Where send() would wait it raises ``KafkaTimeoutError`` at once: code ``_QUEUE_FULL`` for
        buffer space, another code for the topic's first metadata (then the record is not enqueued)."""
        if self._outcome_unknown is not None:
            raise self._outcome_unknown_error("send()")
        fut: Future[RecordMetadata] = self._core.send_nowait(topic, value, key, partition, headers,
                                                             timestamp, callback)
        return fut

    def _flush_nowait(self) -> int:
        """For ``kipconsumer.aio``: sends what is buffered now (ignoring ``linger.ms``) and returns how
        many records are still pending, without waiting."""
        left: int = self._core.flush(0.0)
        return left

    # -- transactions (KIP-98 / KIP-447, as in the Java client) -----------------------------------
    # Each call but begin_transaction() runs in librdkafka on a native helper thread and is waited
    # for at most its timeout (+1 s for librdkafka's own timeout): a call still blocked inside
    # librdkafka then raises TransactionBlockedError (a KafkaTimeoutError; see its docstring).
    # A commit_transaction() without a result condemns the producer (TransactionOutcomeUnknownError).
    def _txn(self, op: str, timeout: float | None, offsets: list[tuple[str, int, int]] | None = None,
             group_metadata: bytes | None = None) -> None:
        if not self._settings.rdkafka.get("transactional.id"):
            raise IllegalStateError(f"{op} transaction: the producer has no transactional.id configured")
        if self._outcome_unknown is not None:
            raise self._outcome_unknown_error(f"{op}_transaction()" if op != "send_offsets"
                                              else "send_offsets_to_transaction()")
        seconds = timeout_seconds(timeout, self._settings.max_block_ms)
        # another call blocked in librdkafka (not a commit: that would have condemned the producer)
        # makes the core refuse this one before it starts: no outcome to lose then
        refused_if_blocked = op == "commit" and self._core.transaction_blocked
        # math.inf stays unbounded (the core clamps it); the core reads a negative value as None
        try:
            self._core.txn(op, seconds, offsets, group_metadata)
        except KafkaTimeoutError as exc:  # librdkafka's timeout, a retriable error, or a blocked call
            if op != "commit" or (refused_if_blocked and isinstance(exc, TransactionBlockedError)):
                raise
            self._condemn(str(exc))
            raise TransactionOutcomeUnknownError(
                f"commit_transaction() gave no result: {exc}. The transaction may be committed or aborted; "
                f"this producer allows only close(), flush() and metrics() from now on. Close it and create "
                f"a new one with the same transactional.id: its init_transactions() completes or aborts the "
                f"transaction; then resume from the group's committed offsets.") from exc
        if op in self._transactions:
            self._transactions[op] += 1

    def _condemn(self, reason: str) -> None:
        """After a commit without a result: every later send() or transactional call raises
        TransactionOutcomeUnknownError (no more work on this producer epoch, KIP-890's hazard)."""
        self._outcome_unknown = reason
        self.__dict__.pop("send", None)  # the native fast path would not check
        self.__dict__.pop("_send_nowait", None)

    def _outcome_unknown_error(self, call: str) -> TransactionOutcomeUnknownError:
        return TransactionOutcomeUnknownError(
            f"{call} refused: this producer's last commit_transaction() gave no result "
            f"({self._outcome_unknown}); it allows only close(), flush() and metrics(). Create a new "
            f"producer with the same transactional.id.")

    @property
    def transaction_blocked(self) -> bool:
        """A transactional call raised ``TransactionBlockedError`` and is still blocked inside
        librdkafka: replace this producer (see :class:`~kipconsumer.errors.TransactionBlockedError`)."""
        return bool(self._core.transaction_blocked)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Registers ``transactional.id`` with the coordinator, fencing older producers of that id
        and completing or aborting their open transaction. Call once, before the first transaction.

        Waits at most ``timeout`` seconds (None: ``max.block.ms``), then raises
        ``KafkaTimeoutError``: call it again, it resumes. ``ProducerFencedError`` if a newer
        producer of this id exists; ``IllegalStateError`` without ``transactional.id``."""
        self._txn("init", timeout)

    def begin_transaction(self) -> None:
        """Starts a transaction: records sent until ``commit_transaction()`` / ``abort_transaction()``
        belong to it. Raises ``IllegalStateError`` before ``init_transactions()`` or while one is open."""
        self._txn("begin", None)

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
                                    group_metadata: ConsumerGroupMetadata,
                                    timeout: float | None = None) -> None:
        """Adds consumer offsets (the *next* offsets to read) to the transaction: they are committed
        for the consumer's group if and only if the transaction commits (exactly-once
        consume-transform-produce). ``group_metadata`` from ``KafkaConsumer.group_metadata()``: the
        coordinator refuses offsets of a member whose generation is stale (KIP-447).

        Raises ``TransactionAbortableError`` (abort, then retry the transaction), ``KafkaTimeoutError``
        after ``timeout`` (None: ``max.block.ms``; call it again), ``ProducerFencedError``. Invalid
        arguments raise at once, before anything is sent: ``TypeError`` (``offsets`` not a mapping,
        a key not a TopicPartition), ``ValueError`` naming the partition (an offset not an int in
        0..2**63-1)."""
        if not isinstance(group_metadata, ConsumerGroupMetadata):
            raise TypeError("group_metadata must come from KafkaConsumer.group_metadata(), not "
                            f"{type(group_metadata).__name__}")
        if not isinstance(offsets, Mapping):
            raise TypeError("offsets must be a dict of TopicPartition -> OffsetAndMetadata or int, got "
                            f"{type(offsets).__name__}")
        triples = []
        for tp, om in offsets.items():
            if not isinstance(tp, tuple) or len(tp) != 2:
                raise TypeError(f"offsets keys must be TopicPartition, got {tp!r}")
            off = om.offset if isinstance(om, OffsetAndMetadata) else om
            if isinstance(off, bool) or not isinstance(off, int) or not 0 <= off <= _INT64_MAX:
                raise ValueError(f"offsets[{tp}]: the next offset to consume must be an int in "
                                 f"0..{_INT64_MAX}, got {om!r}")
            triples.append((tp[0], int(tp[1]), off))
        self._txn("send_offsets", timeout, triples, group_metadata.serialized)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flushes the transaction's records and commits it (records and offsets become visible to
        ``read_committed`` consumers together). Errors as ``send_offsets_to_transaction``; on
        ``TransactionAbortableError`` call ``abort_transaction()``. A commit that gives no result within
        ``timeout`` (None: ``max.block.ms``) raises ``TransactionOutcomeUnknownError`` instead of
        ``KafkaTimeoutError``: it may have committed or not, and the producer allows only ``close()``,
        ``flush()`` and ``metrics()`` from then on (see that error)."""
        self._txn("commit", timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Aborts the open transaction: its records are never shown to ``read_committed``
        consumers and its offsets are not committed. Records not yet sent fail their futures with a
        ``KafkaError`` (code ``_PURGE_QUEUE``); every future resolves. ``KafkaTimeoutError`` after
        ``timeout`` (None: ``max.block.ms``): call it again."""
        self._txn("abort", timeout)

    # -- flush / close ---------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now (ignoring ``linger.ms``) and wait until every record
        sent before the call is completed (its future is done and its callback has run).

        ``timeout`` in seconds; None (or ``math.inf``) waits until all are completed, which every
        record is within ``delivery.timeout.ms``. NaN, a negative number or a non-number raises
        ``ValueError``. Raises ``KafkaTimeoutError`` if records are still pending when the timeout
        expires (they stay pending; nothing is dropped). A signal handler's exception
        (``KeyboardInterrupt`` on Ctrl+C) is raised within about 50 ms; the records stay pending
        and ``flush()`` can be called again. Raises ``IllegalStateError`` from a send() callback.
        """
        timeout_s = math.inf if timeout is None else timeout_seconds(timeout, 0, "timeout")
        left = self._core.flush(timeout_s)
        if left:
            raise KafkaTimeoutError(
                f"flush() timed out after {timeout} s with {left} record(s) still pending")

    def close(self, timeout: float | None = None) -> None:
        """Flush for at most ``timeout`` seconds, then purge what is still pending and free the
        producer.

        ``timeout`` None means ``delivery.timeout.ms`` (+1 s), within which every record is
        acknowledged or expired anyway; ``math.inf`` waits without bound; NaN, a negative number
        or a non-number raises ``ValueError`` (and nothing is closed). Records still pending after
        the timeout fail with ``KafkaError`` (code ``_PURGE_QUEUE`` if never sent,
        ``_PURGE_INFLIGHT`` if sent but not acknowledged); when ``close()`` returns, every future
        is done. It returns within ``timeout`` plus a fraction of a second whatever other threads
        do: their blocked ``send()`` / ``flush()`` / ``partitions_for()`` calls end with
        ``IllegalStateError`` (``flush()`` returns once every record is completed).

        Idempotent and thread-safe: a call racing another ``close()`` waits for it; any later call
        other than ``close()`` / ``metrics()`` raises ``IllegalStateError``. Raises
        ``IllegalStateError`` from a send() callback (it would wait for its own thread). A signal
        handler's exception (``KeyboardInterrupt``) interrupts the flush part within about 50 ms:
        the producer then takes no new records, its records stay pending, and a later ``close()``
        finishes the job.
        """
        timeout_s = timeout_seconds(timeout, self._settings.delivery_timeout_ms + 1000, "timeout")
        self._core.close(timeout_s)
        self._finalizer.detach()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        core = getattr(self, "_core", None)  # None: the constructor failed
        closed: bool = True if core is None else core.closed
        return closed

    def metrics(self) -> dict[str, Any]:
        """Counters: ``in_flight`` (sent records whose future is not done yet), ``records_sent``,
        ``records_delivered``, ``records_failed``, ``records_timed_out``, ``buffer_full_waits``,
        ``buffer_full_timeouts``, ``delivery_batches``, ``callback_errors``, ``client_errors``,
        ``fatal_error``, ``last_error``, ``librdkafka_queue_len``, ``topics_known``, ``statistics`` (a summary
        of the last ``statistics.interval.ms`` document, or None), ``transactions_committed`` /
        ``transactions_aborted`` (completed ``commit_transaction()`` / ``abort_transaction()`` calls),
        plus the effective ``max_block_ms``, ``request_timeout_ms``, ``delivery_timeout_ms``."""
        m: dict[str, Any] = self._core.metrics()
        m["transactions_committed"] = self._transactions["commit"]
        m["transactions_aborted"] = self._transactions["abort"]
        m["max_block_ms"] = self._settings.max_block_ms
        m["request_timeout_ms"] = self._settings.request_timeout_ms
        m["delivery_timeout_ms"] = self._settings.delivery_timeout_ms
        return m

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> KafkaProducer:
        if self._core.closed:
            raise IllegalStateError("KafkaProducer used as a context manager after close()")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        if getattr(self, "_core", None) is None or getattr(self, "_settings", None) is None:
            return "<KafkaProducer (constructor failed)>"
        state = "closed" if self.closed else "open"
        servers = self._settings.rdkafka.get("bootstrap.servers")
        return f"<KafkaProducer {state} bootstrap.servers={servers!r}>"
