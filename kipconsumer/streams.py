"""A consume-process-produce pipeline with KIP-572 task timeouts (see docs/tasks.md and docs/timeouts.md).

Contract
--------
``Pipeline(config, source_topics, process, sink_topic)`` consumes ``source_topics`` with a consumer
group, calls ``process(record)`` once per record (in offset order within a partition) and sends every
``(key, value)`` it returns to ``sink_topic``. By default the outputs of source partition ``p`` go to
sink partition ``p % sink partitions`` (``sink_partitioning="source"``), so that one slow sink partition
only holds back the source partitions that feed it; ``"key"`` leaves the choice to the producer's
partitioner instead.

* At least once, no loss: the offset committed for a source partition never passes a record whose
  outputs are not all acknowledged by the sink. Outputs of one source partition reach the sink in
  order, re-sends included.
* ``"processing.guarantee": "exactly_once_v2"``: the outputs and source offsets of each commit interval
  are committed in one transaction (``kipconsumer._eos``); an aborted transaction rewinds its records,
  so a read_committed reader of the sink sees each record's outputs once (docs/tasks.md).
* A record counts as processed only once ``process()`` returned valid outputs (``(key, value)`` pairs of
  bytes, str or None) and they were sent: otherwise ``run()`` raises ``ProcessingError`` naming the
  record, nothing of it was sent and no offset past it is committed (docs/tasks.md).
* One :class:`~kipconsumer.tasks.TaskExecutor` task per assigned partition (named ``topic-partition``),
  created and removed with the assignment by the rebalance listener. A revoked task first flushes its
  outputs and commits what is acknowledged; a lost one is dropped without commit.
* A partition whose outputs time out (``KafkaTimeoutError`` from ``send()`` or from an output's future)
  is skipped: its fetching is paused, its unprocessed records and unacknowledged outputs are kept, and
  once its earlier sends are all resolved the failed outputs are sent again, in order. It resumes when
  they are acknowledged. Other partitions keep flowing meanwhile. A partition that keeps timing out
  for ``task.timeout.ms`` makes :meth:`Pipeline.run` raise ``TaskTimeoutError``.
* Offsets are committed every ``commit.interval.ms`` by a task of its own (``<commit>``), so commit
  timeouts follow the same rules.
* Metadata calls made inside the poll loop (the sink's partition count) retry timeouts for at most
  half of ``max.poll.interval.ms`` (KIP-572's 50% rule); ``max.block.ms`` is capped to that as well, and
  revocation (flush + commit) is bounded by it. So no retry loop pushes the member out of its group.

Configuration: one dict. ``consumer.<key>`` / ``producer.<key>`` go to that client only.
Unprefixed keys go where they are known: task keys (``task.timeout.ms``, ``retry.backoff.ms``,
``retries``) to the executor, ``commit.interval.ms`` to the pipeline, consumer keys to the consumer,
producer keys to the producer; keys both clients know (``bootstrap.servers``, ``client.id``,
``request.timeout.ms``, ``retry.backoff.ms``, ``reconnect.backoff*``, ...) and other librdkafka
properties go to both. ``retries`` is deprecated and ignored (KIP-572): use ``producer.retries``.
Unknown keys raise ``ConfigError`` naming the key and the closest known one. ``group.id`` is required;
``enable.auto.commit`` must stay false; ``auto.offset.reset`` defaults to ``earliest``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from kipconsumer._eos import Transaction
from kipconsumer._records import ConsumerRecord
from kipconsumer._timeouts import timeout_seconds
from kipconsumer._validate import suggest
from kipconsumer.config import (
    CONSUMER_SPECS,
    PIPELINE_SPECS,
    PRODUCER_SPECS,
    TASK_SPECS,
    consumer_settings,
    exactly_once_configs,
    librdkafka_names,
    pipeline_settings,
    producer_settings,
    task_settings,
)
from kipconsumer.consumer import KafkaConsumer
from kipconsumer.errors import (
    CommitFailedError,
    ConfigError,
    KafkaError,
    KafkaTimeoutError,
    ProcessingError,
    TransactionAbortableError,
)
from kipconsumer.producer import KafkaProducer
from kipconsumer.structs import OffsetAndMetadata, RecordMetadata, TopicPartition
from kipconsumer.tasks import TaskExecutor

__all__ = ["Pipeline", "PipelineConfig", "split_config", "Output", "Process"]

log = logging.getLogger("kipconsumer.streams")

Key = bytes | str | None
#: One output record: ``(key, value)``.
Output = tuple[Key, bytes | str | None]
#: ``process(record)`` -> the records to send to the sink topic.
Process = Callable[[ConsumerRecord], Iterable[Output]]
T = TypeVar("T")
# what KafkaProducer.send() takes as a key or value (besides None)
_OUTPUT_TYPES = (bytes, bytearray, memoryview, str)

#: Keys only the pipeline uses (validated by config.pipeline_settings).
PIPELINE_KEYS = frozenset(PIPELINE_SPECS)
EXACTLY_ONCE = "exactly_once_v2"
_COMMIT_TASK = "<commit>"  # '<' is not valid in topic names, so no partition task can clash
_DEFAULT_MAX_BLOCK_MS = 60_000
#: librdkafka codes of a transaction aborted because an output timed out
_TIMEOUT_CODES = frozenset({"_MSG_TIMED_OUT", "_TIMED_OUT", "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE"})
# a transactional call returns up to 1 s after its timeout (it waits in slices, kipconsumer._producer)
_CALL_OVERRUN_S = 1.0
_MIN_CALL_S = 0.1
#: A partition's task is paused (its partition too) once it holds this many polls' worth
#: (``max.poll.records``) of unprocessed records, and resumed below it: the pipeline's memory bound
#: per partition. Not the fetch buffer's bound (config.py's ``queued.min.messages`` default).
PAUSE_AFTER_POLLS = 4


def _names(specs: Mapping[str, Any]) -> set[str]:
    out = set(specs)
    for spec in specs.values():
        out.update(spec.aliases)
    return out


_CONSUMER_KEYS = _names(CONSUMER_SPECS)
_PRODUCER_KEYS = _names(PRODUCER_SPECS)
_TASK_KEYS = set(TASK_SPECS)


@dataclass(frozen=True)
class PipelineConfig:
    """A pipeline config split per client (see the module docstring for the routing rules)."""

    consumer: dict[str, object]
    producer: dict[str, object]
    task: dict[str, object]
    commit_interval_ms: int
    max_poll_interval_ms: int
    processing_guarantee: str = "at_least_once"


def split_config(config: Mapping[str, object]) -> PipelineConfig:
    """Splits and validates a pipeline config; raises ``ConfigError`` (see the module docstring)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"config must be a mapping of str to value, got {type(config).__name__}")
    consumer: dict[str, object] = {}
    producer: dict[str, object] = {}
    task: dict[str, object] = {}
    pipeline: dict[str, object] = {}
    rdkafka = librdkafka_names()
    for key, value in config.items():
        if not isinstance(key, str):
            raise ConfigError(f"config keys must be str, got {type(key).__name__} {key!r}")
        if key.startswith("consumer."):
            consumer[key[len("consumer."):]] = value
        elif key.startswith("producer."):
            producer[key[len("producer."):]] = value
        elif key in PIPELINE_KEYS:
            pipeline[key] = value
        elif key == "retries":
            task[key] = value  # KIP-572: deprecated, ignored; the producer's is producer.retries
        else:
            routed = False
            if key in _TASK_KEYS:
                task[key] = value
                routed = True
            if key in _CONSUMER_KEYS:
                consumer[key] = value
                routed = True
            if key in _PRODUCER_KEYS:
                producer[key] = value
                routed = True
            if not routed and key in rdkafka:
                consumer[key] = value
                producer[key] = value
                routed = True
            if not routed:
                known = [*PIPELINE_KEYS, *_TASK_KEYS, *_CONSUMER_KEYS, *_PRODUCER_KEYS, *rdkafka]
                raise ConfigError(f"unknown pipeline config {key!r}{suggest(key, known)} (use "
                                  "consumer.<key> or producer.<key> for one client only)")
    if not consumer.get("group.id"):
        raise ConfigError("pipeline config 'group.id' is required (the pipeline consumes with a group)")
    auto = consumer.get("enable.auto.commit", consumer.get("auto.commit.enable"))
    if auto is not None and str(auto).strip().lower() not in ("false", "0"):
        raise ConfigError(f"config enable.auto.commit={auto!r} is not allowed: the pipeline commits an "
                          "offset only once the outputs of the records before it are acknowledged "
                          "(must be false)")
    consumer["enable.auto.commit"] = False
    consumer.pop("auto.commit.enable", None)
    consumer.setdefault("auto.offset.reset", "earliest")
    psettings = pipeline_settings(pipeline)
    if psettings.processing_guarantee == EXACTLY_ONCE:
        consumer, producer = exactly_once_configs(consumer, producer,
                                                  f"{consumer['group.id']}-{uuid.uuid4().hex[:12]}")
    if str(consumer.get("group.protocol", "classic")).strip().lower() != "consumer":
        # Incremental rebalances: only the moved partitions are revoked, after the new assignment is
        # agreed, so their commit in on_partitions_revoked is accepted (and the others keep flowing).
        # (KIP-848 has no client-side assignor: the broker's reconciliation is incremental.)
        consumer.setdefault("partition.assignment.strategy", "cooperative-sticky")
    csettings = consumer_settings(consumer)
    half_mpi = csettings.max_poll_interval_ms // 2
    if producer.get("max.block.ms") is None:
        producer["max.block.ms"] = min(_DEFAULT_MAX_BLOCK_MS, half_mpi)
    elif producer_settings(producer).max_block_ms > half_mpi:
        log.warning("producer max.block.ms=%s is capped to %d, half of max.poll.interval.ms (KIP-572)",
                    producer["max.block.ms"], half_mpi)
        producer["max.block.ms"] = half_mpi
    producer_settings(producer)
    task_settings({k: v for k, v in task.items() if k != "retries"})
    return PipelineConfig(consumer, producer, task, psettings.commit_interval_ms,
                          csettings.max_poll_interval_ms, psettings.processing_guarantee)


class _Out:
    """One output record of source offset ``offset``; ``future`` None = not sent (yet, or again)."""

    __slots__ = ("offset", "key", "value", "future")

    def __init__(self, offset: int, key: Key, value: bytes | str | None) -> None:
        self.offset = offset
        self.key = key
        self.value = value
        self.future: Future[RecordMetadata] | None = None


class _PartitionTask:
    """The task of one assigned source partition (its ``step`` runs in the executor)."""

    __slots__ = ("pipeline", "tp", "name", "pending", "inflight", "processed_upto", "committed", "stalled",
                 "reported", "paused", "sink_partition", "sink_known", "processed", "acked", "resent",
                 "stalls", "txn_base", "rewinds")

    def __init__(self, pipeline: Pipeline, tp: TopicPartition) -> None:
        self.pipeline = pipeline
        self.tp = tp
        self.name = f"{tp.topic}-{tp.partition}"
        self.pending: deque[ConsumerRecord] = deque()
        self.inflight: deque[_Out] = deque()
        self.processed_upto = -1  # offset after the last processed record (-1: none yet)
        self.committed = -1
        self.stalled = False  # outputs timed out: fetching paused, no new records processed
        self.reported = False  # the timeout of the current stall round was raised to the executor
        self.paused = False
        self.sink_partition: int | None = None
        self.sink_known = False
        self.processed = 0
        self.acked = 0
        self.resent = 0
        self.stalls = 0
        self.txn_base = -1  # exactly_once_v2: offset of the first record processed in the open transaction
        self.rewinds = 0

    def committable(self) -> int:
        """Next offset to consume such that every earlier record's outputs are acknowledged (-1: none)."""
        return self.inflight[0].offset if self.inflight else self.processed_upto

    def _reap(self) -> tuple[bool, BaseException | None]:
        """Drops acknowledged outputs from the head; returns (head moved, exception of a failed head)."""
        inflight = self.inflight
        moved = False
        while inflight:
            fut = inflight[0].future
            if fut is None or not fut.done():
                break
            exc = fut.exception()
            if exc is not None:
                return moved, exc
            inflight.popleft()
            self.acked += 1
            moved = True
        return moved, None

    def _timeout(self, exc: BaseException | None, what: str) -> KafkaTimeoutError:
        self.stalled = True
        self.reported = True
        self.stalls += 1
        self.pipeline._pause(self)
        return KafkaTimeoutError(f"{what} for source {self.name} timed out: {exc}")

    def step(self) -> bool:
        """Reaps acknowledgements, re-sends or processes; raises KafkaTimeoutError on a send timeout."""
        if self.pipeline._txn is not None:
            return self._step_transactional()
        moved, exc = self._reap()
        if self.stalled:
            return self._step_stalled(moved)
        if exc is not None:
            if not isinstance(exc, TimeoutError):
                raise exc
            head = self.inflight[0]
            raise self._timeout(exc, f"send to {self.pipeline.sink_topic} (output of offset {head.offset})") \
                from exc
        if not self.pending:
            return moved
        self._know_sink()
        self._process()
        return True

    def _process(self) -> None:
        """Processes up to ``max.poll.records`` pending records and sends their outputs. A record is
        taken (and counts as processed) only once ``process()`` returned and every output is a valid
        ``(key, value)`` pair: otherwise ``ProcessingError`` is raised with the record still pending
        and nothing of it sent. At least once: each output is tracked (``inflight``) until
        acknowledged. exactly_once_v2: outputs belong to the open transaction; the task remembers its
        first record in it (``txn_base``); a send failing other than by a timeout after part of the
        record's outputs was sent aborts the transaction (every task rewinds), so no partial output
        is ever committed."""
        pending, inflight = self.pending, self.inflight
        pipeline = self.pipeline
        transactional = pipeline._txn is not None
        send, topic, part = pipeline._producer.send, pipeline.sink_topic, self.sink_partition
        budget = pipeline._budget
        while pending and budget > 0:
            budget -= 1
            rec = pending[0]
            off = rec.offset
            outs = self._outputs(rec)
            pending.popleft()
            self.processed += 1
            self.processed_upto = off + 1
            tracked: list[_Out] | None = None
            if transactional:
                if self.txn_base < 0:
                    self.txn_base = off
            elif outs:
                tracked = [_Out(off, k, v) for k, v in outs]
                inflight.extend(tracked)  # all of them first: a timed-out send leaves the rest to re-send
            for i, (key, value) in enumerate(outs):
                try:
                    future = send(topic, value=value, key=key, partition=part)
                except TimeoutError as exc:
                    raise self._send_timed_out(exc, f"send to {topic} (output {i} of offset {off})") from exc
                except BaseException as exc:
                    if transactional:  # the transaction may hold part of this record's outputs
                        pipeline._abort(f"send to {topic} (output {i} of offset {off}) for source "
                                        f"{self.name} failed: {exc!r}")
                    raise
                if tracked is not None:
                    tracked[i].future = future

    def _outputs(self, rec: ConsumerRecord) -> list[Output]:
        """``process(rec)`` as a list of validated ``(key, value)`` pairs, else ``ProcessingError``
        naming the record (its cause: what process() raised, or the malformed output)."""
        where = f"record {rec.topic}-{rec.partition}@{rec.offset}"
        try:
            outs = list(self.pipeline.process(rec))
        except Exception as exc:
            raise ProcessingError(f"process() raised {type(exc).__name__} for {where}: {exc}",
                                  topic=rec.topic, partition=rec.partition, offset=rec.offset) from exc
        checked: list[Output] = []
        for i, item in enumerate(outs):
            problem = None
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                size = f" of {len(item)} items" if isinstance(item, (tuple, list)) else ""
                problem = f"is a {type(item).__name__}{size}, not a (key, value) pair"
            else:
                for name, field in zip(("key", "value"), item, strict=True):
                    if field is not None and not isinstance(field, _OUTPUT_TYPES):
                        problem = f"has a {name} of type {type(field).__name__} (bytes, str or None expected)"
                        break
            if problem is not None:
                raise ProcessingError(f"process() returned a malformed output for {where}: output {i} "
                                      f"{problem}; nothing of the record was sent",
                                      topic=rec.topic, partition=rec.partition, offset=rec.offset)
            checked.append((item[0], item[1]))
        return checked

    def _send_timed_out(self, exc: TimeoutError, what: str) -> KafkaTimeoutError:
        """At least once: the partition stalls (see ``_timeout``). exactly_once_v2: the transaction is
        aborted and every task rewinds."""
        if self.pipeline._txn is None:
            return self._timeout(exc, what)
        self.stalls += 1
        self.pipeline._abort(f"{what} for source {self.name} timed out: {exc}")
        return KafkaTimeoutError(f"{what} for source {self.name} timed out; the transaction was aborted: "
                                 f"{exc}")

    def _step_transactional(self) -> bool:
        """exactly_once_v2: processes into the open transaction (none while it commits or aborts). A
        send that times out aborts the transaction (every task rewinds) and raises KafkaTimeoutError."""
        txn = self.pipeline._txn
        assert txn is not None
        if not self.pending or txn.busy:
            return False
        self._know_sink()
        txn.begin_if_needed()
        self._process()
        return True

    def _know_sink(self) -> None:
        if not self.sink_known:
            self.sink_partition = self.pipeline._sink_partition_for(self.tp.partition)
            self.sink_known = True

    def rewind(self) -> None:
        """exactly_once_v2, after an abort: the records processed in the aborted transaction (and the
        fetched ones after them) are fetched and processed again, from ``txn_base``."""
        if self.txn_base < 0:
            return
        self.pending.clear()
        self.processed_upto = self.txn_base
        self.pipeline._consumer.seek(self.tp, self.txn_base)
        self.txn_base = -1
        self.rewinds += 1

    def _step_stalled(self, moved: bool) -> bool:
        busy = False
        needs_send = False
        failed: BaseException | None = None
        for out in self.inflight:
            fut = out.future
            if fut is None:
                needs_send = True
            elif not fut.done():
                busy = True
            else:
                exc = fut.exception()
                if exc is not None:
                    if not isinstance(exc, TimeoutError):
                        raise exc
                    needs_send = True
                    if failed is None:
                        failed = exc
        if failed is not None and not self.reported:
            self.reported = True
            raise KafkaTimeoutError(f"send to {self.pipeline.sink_topic} for source {self.name} timed out "
                                    f"again: {failed}") from failed
        if busy:
            return moved  # wait until every earlier send resolved: re-sending now could reorder
        if needs_send:
            self.reported = False
            self._resend()
            return moved
        # Every output acknowledged: the producer recovered.
        log.info("source partition %s recovered: resuming it", self.name)
        self.stalled = False
        self.pipeline._resume_if_drained(self)
        return True

    def _resend(self) -> None:
        send, topic, part = self.pipeline._producer.send, self.pipeline.sink_topic, self.sink_partition
        for out in self.inflight:
            fut = out.future
            if fut is not None and fut.exception() is None:
                continue
            out.future = None
            try:
                out.future = send(topic, value=out.value, key=out.key, partition=part)
            except TimeoutError as exc:
                self.reported = True
                raise KafkaTimeoutError(f"re-send to {topic} (output of offset {out.offset}) for source "
                                        f"{self.name} timed out: {exc}") from exc
            self.resent += 1

    def snapshot(self) -> dict[str, Any]:
        return {"pending": len(self.pending), "inflight": len(self.inflight), "processed": self.processed,
                "acked": self.acked, "resent": self.resent, "stalls": self.stalls, "stalled": self.stalled,
                "paused": self.paused, "committable": self.committable(), "committed": self.committed,
                "rewinds": self.rewinds}


class _Listener:
    """Rebalance listener: creates and closes partition tasks with the assignment."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._p = pipeline

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self._p._assigned(partitions)

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self._p._revoked(partitions, commit=True)

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None:
        self._p._revoked(partitions, commit=False)


class Pipeline:
    """Consume ``source_topics``, ``process`` each record, produce the outputs to ``sink_topic``.

    See the module docstring for the contract and the config routing. ``run()`` drives it on the
    calling thread; ``close()`` flushes, commits what is acknowledged and closes both clients. Not
    thread-safe (``metrics()`` excepted, best effort).
    """

    def __init__(self, config: Mapping[str, object], source_topics: str | Iterable[str], process: Process,
                 sink_topic: str, *, sink_partitioning: Literal["source", "key"] = "source") -> None:
        if not callable(process):
            raise TypeError(f"process must be callable(record) -> iterable of (key, value), got {process!r}")
        if not isinstance(sink_topic, str) or not sink_topic:
            raise ValueError(f"sink_topic must be a topic name, got {sink_topic!r}")
        if sink_partitioning not in ("source", "key"):
            raise ValueError(f"sink_partitioning must be 'source' or 'key', got {sink_partitioning!r}")
        topics = [source_topics] if isinstance(source_topics, str) else list(source_topics)
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise ValueError(f"source_topics must be a topic name or a non-empty list of them, "
                             f"got {topics!r}")
        self.config = split_config(config)
        self.process = process
        self.sink_topic = sink_topic
        self.source_topics = topics
        self._sink_partitioning = sink_partitioning
        self._executor = TaskExecutor(self.config.task)
        self._backoff_s = self._executor.settings.retry_backoff_ms / 1000.0
        self._half_mpi_s = self.config.max_poll_interval_ms / 2000.0
        self._commit_interval_s = self.config.commit_interval_ms / 1000.0
        self._producer = KafkaProducer(self.config.producer)
        try:
            self._consumer = KafkaConsumer(self.config.consumer)
        except BaseException:
            self._producer.close(0)
            raise
        self._txn: Transaction | None = None
        if self.config.processing_guarantee == EXACTLY_ONCE:
            try:
                self._init_transactions()
            except BaseException:
                self._consumer.close()
                self._producer.close(0)
                raise
            self._txn = Transaction(self._producer, self._consumer, self._bounded, self._replace_producer,
                                    self._held, self._call_budget_s)
        cs = self._consumer.settings
        self._budget = cs.max_poll_records
        self._high_water = PAUSE_AFTER_POLLS * cs.max_poll_records
        self._group_call_s = min(cs.default_api_timeout_ms / 1000.0, self._half_mpi_s)
        self._tasks: dict[TopicPartition, _PartitionTask] = {}
        self._sink_count: int | None = None
        self._next_commit = 0.0
        self._last_poll = time.monotonic()
        self._producer_replacements = 0
        self._commits = 0
        self._commit_failures = 0
        self._closed = False
        self._executor.add_task(_COMMIT_TASK, self._commit_step)
        self._consumer.subscribe(topics, _Listener(self))

    # -- introspection -------------------------------------------------------------------------------
    @property
    def consumer(self) -> KafkaConsumer:
        """The pipeline's consumer (do not poll or commit it yourself)."""
        return self._consumer

    @property
    def producer(self) -> KafkaProducer:
        """The pipeline's producer."""
        return self._producer

    @property
    def executor(self) -> TaskExecutor:
        """The task executor running one task per assigned partition plus ``<commit>``."""
        return self._executor

    def metrics(self) -> dict[str, Any]:
        """``partitions``: per assigned source partition ``{pending, inflight, processed, acked, resent,
        stalls, stalled, paused, committable, committed}`` keyed by TopicPartition; totals
        ``records_processed``, ``outputs_acked``, ``outputs_resent``, ``stalls``, ``commits``,
        ``commit_failures``; ``stalled`` (partitions skipped now); ``executor`` counters. With
        exactly_once_v2 also ``transactions_committed``, ``transactions_aborted``, ``producer_replacements``
        (a stuck abort replaces the producer, see kipconsumer._eos) and ``rewinds`` (records
        re-read after an abort start over at the transaction's first record; outputs are not acked one
        by one, ``outputs_acked`` stays 0)."""
        parts = {tp: t.snapshot() for tp, t in list(self._tasks.items())}
        return {
            "partitions": parts,
            "records_processed": sum(p["processed"] for p in parts.values()),
            "outputs_acked": sum(p["acked"] for p in parts.values()),
            "outputs_resent": sum(p["resent"] for p in parts.values()),
            "stalls": sum(p["stalls"] for p in parts.values()),
            "stalled": sorted(tp for tp, p in parts.items() if p["stalled"]),
            "commits": self._commits,
            "commit_failures": self._commit_failures,
            "processing_guarantee": self.config.processing_guarantee,
            "transactions_committed": 0 if self._txn is None else self._txn.commits,
            "transactions_aborted": 0 if self._txn is None else self._txn.aborts,
            "rewinds": sum(p["rewinds"] for p in parts.values()),
            "producer_replacements": self._producer_replacements,
            "executor": self._executor.metrics(),
        }

    # -- the poll loop -------------------------------------------------------------------------------
    def run(self, until: Callable[[], bool] | None = None, timeout: float | None = None) -> None:
        """Polls and processes until ``until()`` is True (checked every loop) or ``timeout`` seconds
        passed (None: forever). Raises ``TaskTimeoutError`` when a partition (or the commit) made no
        progress within ``task.timeout.ms`` after a timeout; other errors of ``process``, the consumer
        or the producer propagate. The pipeline stays usable for ``close()`` after an error."""
        if self._closed:
            raise KafkaError("Pipeline.run() after close()")
        end = None if timeout is None else time.monotonic() + timeout_seconds(timeout, 0)
        consumer, executor, tasks = self._consumer, self._executor, self._tasks
        while True:
            if until is not None and until():
                return
            now = time.monotonic()
            if end is not None and now >= end:
                return
            if any(t.pending and not t.stalled and not executor.waiting(t.name) for t in tasks.values()):
                wait = 0.0  # records to process now: just collect what is already fetched
            else:
                nxt = executor.next_retry_in()
                wait = 0.1 if nxt is None else min(0.1, nxt)
                if self._next_commit > now:  # a due commit that waits to retry: next_retry_in covers it
                    wait = min(wait, self._next_commit - now + 0.001)
                if end is not None:
                    wait = max(0.0, min(wait, end - now))
            self._abort_if_held()
            # from the start of the poll: a process stopped inside poll() (SIGSTOP, a VM pause) was
            # held as long as one stopped in process(), and its heartbeats stopped with it
            self._last_poll = time.monotonic()
            records = consumer.poll(wait)
            if records:
                for tp in records.partitions():
                    task = tasks.get(tp)
                    if task is None:  # not announced by the listener: adopt it
                        self._assigned([tp])
                        task = tasks[tp]
                    task.pending.extend(records.records(tp))
            executor.run_once()
            for task in tasks.values():
                if not task.paused:
                    if len(task.pending) >= self._high_water:
                        self._pause(task)
                elif not task.stalled and len(task.pending) < self._budget:
                    self._resume_if_drained(task)

    # -- flow control ---------------------------------------------------------------------------------
    def _pause(self, task: _PartitionTask) -> None:
        if not task.paused:
            task.paused = True
            self._consumer.pause([task.tp])

    def _resume_if_drained(self, task: _PartitionTask) -> None:
        if task.paused and not task.stalled and len(task.pending) < self._high_water:
            task.paused = False
            self._consumer.resume([task.tp])

    # -- bounded calls (KIP-572's 50% rule) ------------------------------------------------------------
    def _call_budget_s(self) -> float:
        """Timeout for the next blocking call of the loop pass: what is left of half of
        ``max.poll.interval.ms`` since the start of the last poll (less the second a transactional
        call may overrun its timeout by), at most ``default.api.timeout.ms``, at least 0.1 s (a call
        that cannot finish in time times out and is retried after the next poll). Every call of one
        loop pass shares this budget, so together they cannot hold the loop past it."""
        left = self._half_mpi_s - (time.monotonic() - self._last_poll) - _CALL_OVERRUN_S
        return max(_MIN_CALL_S, min(self._group_call_s, left))

    def _bounded(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, retrying timeouts after ``retry.backoff.ms`` while another attempt fits in half of
        ``max.poll.interval.ms`` counted from the start of the last poll (the budget every call of the
        loop pass shares); then raises ``KafkaTimeoutError`` (the last timeout as its cause)."""
        longest = 0.0
        while True:
            t0 = time.monotonic()
            try:
                return call()
            except TimeoutError as exc:
                now = time.monotonic()
                longest = max(longest, now - t0)
                elapsed = now - self._last_poll
                # Another attempt only if it can finish in the budget, if it takes as long as the
                # longest one so far (each is bounded by _call_budget_s()).
                if elapsed + self._backoff_s + longest > self._half_mpi_s:
                    raise KafkaTimeoutError(
                        f"{what} timed out; gave up {elapsed * 1000:.0f} ms after the last poll to stay "
                        f"within half of max.poll.interval.ms={self.config.max_poll_interval_ms}: {exc}"
                    ) from exc
                log.info("%s timed out (%s); retrying in %.0f ms", what, exc, self._backoff_s * 1000)
                time.sleep(self._backoff_s)

    def _sink_partition_for(self, source_partition: int) -> int | None:
        if self._sink_partitioning == "key":
            return None
        if self._sink_count is None:
            parts = self._bounded(f"metadata of sink topic {self.sink_topic!r}",
                                  lambda: self._producer.partitions_for(self.sink_topic))
            self._sink_count = len(parts)
        return source_partition % self._sink_count

    # -- commits -----------------------------------------------------------------------------------------
    def _due_offsets(self, tasks: Iterable[_PartitionTask]) -> dict[TopicPartition, OffsetAndMetadata]:
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in tasks:
            c = t.committable()
            if c > t.committed:
                offsets[t.tp] = OffsetAndMetadata(c)
        return offsets

    def _commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], timeout: float) -> None:
        self._consumer.commit_sync(offsets, timeout=timeout)
        self._commits += 1
        for tp, om in offsets.items():
            task = self._tasks.get(tp)
            if task is not None:
                task.committed = max(task.committed, om.offset)

    def _commit_step(self) -> bool:
        """The ``<commit>`` task: commits acknowledged positions every ``commit.interval.ms``."""
        if self._txn is not None:
            return self._commit_step_transactional()
        now = time.monotonic()
        if now < self._next_commit:
            return False
        for task in self._tasks.values():
            task._reap()
        offsets = self._due_offsets(self._tasks.values())
        if not offsets:
            self._next_commit = now + self._commit_interval_s
            return False
        try:
            self._commit(offsets, self._call_budget_s())
        except TimeoutError:
            raise
        except KafkaError as exc:  # CommitFailedError & co: the rebalance that follows sorts it out
            self._commit_failures += 1
            log.warning("offset commit of %d partition(s) failed: %s", len(offsets), exc)
            self._next_commit = now + self._commit_interval_s
            return False
        self._next_commit = now + self._commit_interval_s
        return True

    def _abort(self, reason: str) -> None:
        """exactly_once_v2: aborts the open transaction; every task rewinds to its first record in it."""
        assert self._txn is not None
        self._txn.abort(list(self._tasks.values()), reason)

    def _commit_step_transactional(self) -> bool:
        """The ``<commit>`` task with exactly_once_v2: commits the open transaction (outputs and source
        offsets) every ``commit.interval.ms``. A timeout is raised to the executor and the commit is
        resumed on its retry (``task.timeout.ms`` bounds it); an abort caused by a timed-out output is
        raised as ``KafkaTimeoutError`` too."""
        txn = self._txn
        assert txn is not None
        if txn.resume_abort():
            return True
        now = time.monotonic()
        if txn.committing is None and now < self._next_commit:
            return False
        self._next_commit = now + self._commit_interval_s
        if txn.committing is None:
            # held since the last poll (a slow process() or a stop in this very loop pass): the
            # group may have moved the partitions on; abort rather than commit (KIP-572's 50% rule)
            self._abort_if_held()
        if not txn.open:
            return False
        try:
            txn.commit(list(self._tasks.values()), self._call_budget_s)
        except TransactionAbortableError as exc:
            self._commit_failures += 1
            if exc.code in _TIMEOUT_CODES:
                raise KafkaTimeoutError(f"the transaction was aborted: an output timed out: {exc}",
                                        code=exc.code) from exc
            log.warning("transaction aborted: %s", exc)  # e.g. a stale generation: the rebalance follows
            return False
        self._commits += 1
        return True

    def _init_transactions(self) -> None:
        """Registers the transactional.id (fencing an older producer of it and aborting its open
        transaction). Not in the poll loop yet (the consumer has not subscribed): timeouts are retried
        after ``retry.backoff.ms`` for up to ``task.timeout.ms``, then ``KafkaTimeoutError``."""
        end = time.monotonic() + self._executor.settings.task_timeout_ms / 1000.0
        while True:
            try:
                self._producer.init_transactions()
                return
            except TimeoutError as exc:
                if time.monotonic() + self._backoff_s >= end:
                    raise KafkaTimeoutError(f"init_transactions did not complete within task.timeout.ms="
                                            f"{self._executor.settings.task_timeout_ms}: {exc}") from exc
                log.info("init_transactions timed out (%s); retrying in %.0f ms", exc, self._backoff_s * 1000)
                time.sleep(self._backoff_s)

    def _replace_producer(self) -> KafkaProducer:
        """exactly_once_v2: closes the producer (pending records fail) and creates a new one with the
        same config and transactional.id (see kipconsumer._eos)."""
        self._producer.close(0)
        self._producer = KafkaProducer(self.config.producer)
        self._producer_replacements += 1
        return self._producer

    def _held(self) -> str | None:
        """Why the loop may have been dropped from the group (held longer than half of
        ``max.poll.interval.ms`` since the start of the last poll), or None."""
        held = time.monotonic() - self._last_poll
        if held > self._half_mpi_s:
            return (f"the poll loop was held {held:.1f} s, more than half of "
                    f"max.poll.interval.ms={self.config.max_poll_interval_ms}")
        return None

    def _abort_if_held(self) -> None:
        """exactly_once_v2: a loop held longer than half of ``max.poll.interval.ms`` since the last poll
        (a process() call, a GC pause, a stopped process) may have been dropped from the group, which
        then gave its partitions to another member: its open transaction is aborted before the next
        poll or commit, not committed (the 50% rule of KIP-572; checked again between the offsets and
        the commit of the transaction, see kipconsumer._eos)."""
        txn = self._txn
        if txn is None or not txn.open or txn.busy:
            return
        held = self._held()
        if held is not None:
            self._commit_failures += 1
            try:
                self._abort(held)
            except TimeoutError as exc:  # stays pending (no processing meanwhile): <commit> resumes it
                log.warning("abort of the transaction timed out: %s", exc)

    def _end_transaction(self, budget_s: float) -> None:
        """exactly_once_v2, on revoke and close: commits the open transaction within ``budget_s``
        (timeouts retried), else aborts it (every task rewinds)."""
        txn = self._txn
        assert txn is not None
        try:
            txn.resume_abort()
            if not txn.open:
                return
            try:
                tasks = list(self._tasks.values())
                self._bounded("commit of the transaction",
                              lambda: txn.commit(tasks, lambda: min(budget_s, self._call_budget_s())))
                self._commits += 1
                return
            except TransactionAbortableError as exc:  # already aborted and rewound
                failure: Exception = exc
            except (KafkaTimeoutError, CommitFailedError) as exc:
                failure = exc
                self._abort(f"commit on revoke/close failed: {exc}")
        except TimeoutError as exc:  # the abort stays pending: the <commit> task resumes it
            failure = exc
        self._commit_failures += 1
        log.warning("transaction not committed: %s (its records are processed again)", failure)

    # -- assignment -------------------------------------------------------------------------------------
    def _assigned(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            if tp in self._tasks:
                continue
            task = _PartitionTask(self, tp)
            self._tasks[tp] = task
            self._executor.add_task(task.name, task.step)
            log.debug("task %s created", task.name)

    def _revoked(self, partitions: list[TopicPartition], *, commit: bool) -> None:
        tasks = [self._tasks[tp] for tp in partitions if tp in self._tasks]
        if self._txn is not None:
            self._revoked_transactional(tasks, commit=commit)
            return
        if tasks:
            self._finish(tasks, self._half_mpi_s, commit=commit)

    def _revoked_transactional(self, tasks: list[_PartitionTask], *, commit: bool) -> None:
        """Revoked: the open transaction (of every task) is committed first. Lost: it is aborted (the
        generation is gone, its offsets would be refused) and the remaining tasks rewind."""
        assert self._txn is not None
        try:
            if commit:
                self._end_transaction(self._half_mpi_s)
            elif self._txn.open or self._txn.aborting:
                gone = {t.tp for t in tasks}
                try:
                    self._txn.abort([t for t in self._tasks.values() if t.tp not in gone],
                                    f"partitions lost: {sorted(gone)}")
                except TimeoutError as exc:  # stays pending: the <commit> task resumes it
                    log.warning("abort of the transaction on lost partitions timed out: %s", exc)
        finally:
            self._remove(tasks)

    def _remove(self, tasks: list[_PartitionTask]) -> None:
        for t in tasks:
            self._tasks.pop(t.tp, None)
            if t.name in self._executor:
                self._executor.remove_task(t.name)

    def _finish(self, tasks: list[_PartitionTask], budget_s: float, *, commit: bool,
                closing: bool = False) -> None:
        """Flushes the tasks' outputs and commits what is acknowledged (within ``budget_s``), then
        removes the tasks. ``closing``: outside ``poll()``, a commit refused because the group is
        rebalancing is retried after polling to complete the rebalance."""
        end = time.monotonic() + budget_s
        try:
            if commit:
                if any(t.inflight for t in tasks):
                    try:
                        self._producer.flush(max(0.0, end - time.monotonic()))
                    except KafkaTimeoutError as exc:
                        log.warning("flush of %d task(s) incomplete: %s", len(tasks), exc)
                for t in tasks:
                    t._reap()
                self._final_commit(tasks, end, closing)
        finally:
            self._remove(tasks)

    def _final_commit(self, tasks: list[_PartitionTask], end: float, closing: bool) -> None:
        while True:
            offsets = self._due_offsets(tasks)
            if not offsets:
                return
            try:
                self._commit(offsets, max(0.0, min(self._group_call_s, end - time.monotonic())))
                return
            except CommitFailedError as exc:  # RebalanceInProgressError, ILLEGAL_GENERATION, ...
                if closing and time.monotonic() + self._backoff_s < end:
                    log.info("commit on close refused (%s): completing the rebalance first", exc.code)
                    self._consumer.poll(self._backoff_s)  # records returned now are not processed
                    # The listener may have revoked some (and committed or dropped them) meanwhile.
                    tasks = [t for t in tasks if self._tasks.get(t.tp) is t]
                    continue
                failure: KafkaError = exc
            except KafkaError as exc:
                failure = exc
            self._commit_failures += 1
            log.warning("commit of revoked partition(s) %s failed: %s (their records after the last "
                        "commit will be processed again)", sorted(offsets), failure)
            return

    # -- lifecycle ---------------------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Flushes outputs for at most ``timeout`` seconds (None: half of ``max.poll.interval.ms``),
        commits every offset whose records' outputs are acknowledged, leaves the group and closes
        both clients (outputs still pending then fail). Idempotent."""
        if self._closed:
            return
        self._closed = True
        budget = timeout_seconds(timeout, self._half_mpi_s * 1000.0)
        try:
            if self._txn is not None:
                try:
                    self._abort_if_held()
                    self._end_transaction(budget)
                finally:
                    self._remove(list(self._tasks.values()))
            else:
                self._finish(list(self._tasks.values()), budget, commit=True, closing=True)
        finally:
            try:
                self._consumer.close()
            finally:
                self._producer.close(0)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
