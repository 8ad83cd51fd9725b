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
  order, re-sends included (``kipconsumer._pipeline.at_least_once``).
* ``"processing.guarantee": "exactly_once_v2"``: the outputs and source offsets of each commit interval
  are committed in one transaction (``kipconsumer._pipeline.exactly_once``); an aborted transaction
  rewinds its records, so a read_committed reader of the sink sees each record's outputs once
  (docs/tasks.md).
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
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal

from kipconsumer._pipeline.at_least_once import AtLeastOnce
from kipconsumer._pipeline.budget import CallBudget
from kipconsumer._pipeline.context import FlowControl, PipelineContext
from kipconsumer._pipeline.exactly_once import ExactlyOnce
from kipconsumer._pipeline.task import DeliveryGuarantee, Output, PartitionTask, Process
from kipconsumer._timeouts import timeout_seconds
from kipconsumer.config import (  # the pipeline config's rules live in config.py; re-exported here
    EXACTLY_ONCE,
    PIPELINE_KEYS,  # noqa: F401 - kipconsumer.streams.PIPELINE_KEYS stays importable
    PipelineConfig,
    split_config,
)
from kipconsumer.consumer import KafkaConsumer
from kipconsumer.errors import KafkaError
from kipconsumer.producer import KafkaProducer
from kipconsumer.structs import TopicPartition
from kipconsumer.tasks import TaskExecutor

__all__ = ["Pipeline", "PipelineConfig", "split_config", "Output", "Process"]

log = logging.getLogger("kipconsumer.streams")

_COMMIT_TASK = "<commit>"  # '<' is not valid in topic names, so no partition task can clash
#: A partition's task is paused (its partition too) once it holds this many polls' worth
#: (``max.poll.records``) of unprocessed records, and resumed below it: the pipeline's memory bound
#: per partition. Not the fetch buffer's bound (config.py's ``queued.min.messages`` default).
PAUSE_AFTER_POLLS = 4



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

    The pipeline owns the clients, the poll loop, flow control (pause/resume), the KIP-572 call budget
    and the assignment (its tasks); what is committed when, and what a revoke, a lost partition or
    ``close()`` does, is its delivery guarantee's (``kipconsumer._pipeline.task.DeliveryGuarantee``:
    ``AtLeastOnce`` or ``ExactlyOnce``, picked once here from ``processing.guarantee``). It builds one
    ``kipconsumer._pipeline.context.PipelineContext`` (sink, flow control, call budget, the producer
    slot, the consumer, a read-only view of the tasks) and hands it to the guarantee's constructor.
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
        self._executor = TaskExecutor(self.config.task)
        producer = KafkaProducer(self.config.producer)
        try:
            self._consumer = KafkaConsumer(self.config.consumer)
        except BaseException:
            producer.close(0)
            raise
        cs = self._consumer.settings
        self._budget = CallBudget(max_poll_interval_ms=self.config.max_poll_interval_ms,
                                  default_api_timeout_ms=cs.default_api_timeout_ms,
                                  retry_backoff_ms=self._executor.settings.retry_backoff_ms)
        self._flow = FlowControl(self._consumer, cs.max_poll_records, PAUSE_AFTER_POLLS * cs.max_poll_records)
        self._tasks: dict[TopicPartition, PartitionTask] = {}  # written by _assigned and _remove only
        self._context = PipelineContext(
            producer=producer, producer_config=self.config.producer, consumer=self._consumer, process=process,
            sink_topic=sink_topic, sink_partitioning=sink_partitioning, flow=self._flow, budget=self._budget,
            tasks=MappingProxyType(self._tasks), commit_interval_s=self.config.commit_interval_ms / 1000.0,
            task_timeout_ms=self._executor.settings.task_timeout_ms,
            transaction_timeout_s=self.config.transaction_timeout_ms / 1000.0)
        # chosen once: nothing below asks which guarantee it is
        guarantee = ExactlyOnce if self.config.processing_guarantee == EXACTLY_ONCE else AtLeastOnce
        try:
            # exactly_once_v2: init_transactions
            self._guarantee: DeliveryGuarantee = guarantee(self._context)
        except BaseException:
            self._consumer.close()
            self._context.producer.close(0)
            raise
        self._budget.poll_started()
        self._closed = False
        self._executor.add_task(_COMMIT_TASK, self._guarantee.commit_step)
        self._consumer.subscribe(topics, _Listener(self))

    # -- introspection -------------------------------------------------------------------------------
    @property
    def consumer(self) -> KafkaConsumer:
        """The pipeline's consumer (do not poll or commit it yourself)."""
        return self._consumer

    @property
    def producer(self) -> KafkaProducer:
        """The pipeline's producer (exactly_once_v2: a new one after a replacement)."""
        return self._context.producer

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
        (a stuck abort replaces the producer, see kipconsumer._pipeline.transaction),
        ``transactions_timed_out`` (aborted by the broker after ``transaction.timeout.ms``: redone with
        a new producer),
        ``transactions_outcome_unknown`` (commits without a result: the producer was replaced and every
        partition resumed from its committed offset) and ``rewinds`` (records
        re-read after an abort start over at the transaction's first record; outputs are not acked one
        by one, ``outputs_acked`` stays 0)."""
        parts = {tp: t.snapshot() for tp, t in list(self._tasks.items())}
        guarantee = self._guarantee.metrics()
        return {
            "partitions": parts,
            "records_processed": sum(p["processed"] for p in parts.values()),
            "outputs_acked": sum(p["acked"] for p in parts.values()),
            "outputs_resent": sum(p["resent"] for p in parts.values()),
            "stalls": sum(p["stalls"] for p in parts.values()),
            "stalled": sorted(tp for tp, p in parts.items() if p["stalled"]),
            "commits": guarantee["commits"],
            "commit_failures": guarantee["commit_failures"],
            "processing_guarantee": self.config.processing_guarantee,
            "transactions_committed": guarantee["transactions_committed"],
            "transactions_aborted": guarantee["transactions_aborted"],
            "rewinds": sum(p["rewinds"] for p in parts.values()),
            "producer_replacements": guarantee["producer_replacements"],
            "transactions_timed_out": guarantee["transactions_timed_out"],
            "transactions_outcome_unknown": guarantee["transactions_outcome_unknown"],
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
        guarantee, flow, budget = self._guarantee, self._flow, self._budget
        before_poll = guarantee.before_poll
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
                if guarantee.next_commit > now:  # a due commit that waits to retry: next_retry_in covers it
                    wait = min(wait, guarantee.next_commit - now + 0.001)
                if end is not None:
                    wait = max(0.0, min(wait, end - now))
            before_poll()
            budget.poll_started()
            records = consumer.poll(wait)
            if records:
                for tp in records.partitions():
                    task = tasks.get(tp)
                    if task is None:  # not announced by the listener: adopt it
                        self._assigned([tp])
                        task = tasks[tp]
                    task.pending.extend(records.records(tp))
            executor.run_once()
            flow.after_pass(tasks.values())

    # -- assignment -------------------------------------------------------------------------------------
    def _assigned(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            if tp in self._tasks:
                continue
            task = self._guarantee.new_task(tp)
            self._tasks[tp] = task
            self._executor.add_task(task.name, task.step)
            log.debug("task %s created", task.name)

    def _revoked(self, partitions: list[TopicPartition], *, commit: bool) -> None:
        """Revoked (``commit``) or lost partitions: the guarantee commits or drops their work (see
        its docstring), then their tasks are removed."""
        tasks = [self._tasks[tp] for tp in partitions if tp in self._tasks]
        try:
            self._guarantee.revoke(tasks, commit=commit)
        finally:
            self._remove(tasks)

    def _remove(self, tasks: list[PartitionTask]) -> None:
        for t in tasks:
            self._tasks.pop(t.tp, None)
            if t.name in self._executor:
                self._executor.remove_task(t.name)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Flushes outputs for at most ``timeout`` seconds (None: half of ``max.poll.interval.ms``),
        commits every offset whose records' outputs are acknowledged, leaves the group and closes
        both clients (outputs still pending then fail). Idempotent."""
        if self._closed:
            return
        self._closed = True
        budget = timeout_seconds(timeout, self._budget.half_mpi_s * 1000.0)
        try:
            tasks = list(self._tasks.values())
            try:
                self._guarantee.close(tasks, budget)
            finally:
                self._remove(tasks)
        finally:
            try:
                self._consumer.close()
            finally:
                self._context.producer.close(0)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
