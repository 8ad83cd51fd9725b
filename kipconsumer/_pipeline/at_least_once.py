"""A Pipeline's at-least-once guarantee (``processing.guarantee=at_least_once``, the default).

Contract
--------
* No loss: the offset committed for a source partition never passes a record whose outputs are not
  all acknowledged by the sink (:meth:`AtLeastOnceTask.committable`). Outputs of one source partition
  reach the sink in order, re-sends included. A record processed again after a failure or a rebalance
  sends its outputs again (duplicates, never gaps).
* Each output is tracked (``inflight``) from its send until acknowledged. A partition whose output
  fails with a retriable error (``KafkaError.category``, KIP-1050: a timeout) stalls: its fetching
  is paused, no record of it is processed, and once every earlier send
  resolved the failed outputs are sent again, in order; it resumes when they are acknowledged.
* :meth:`AtLeastOnce.commit_step` (the ``<commit>`` task) commits every ``commit.interval.ms`` what is
  acknowledged; a commit refused by the group (a rebalance) is counted and left to the rebalance.
* Revoked partitions: their outputs are flushed and what is acknowledged is committed (within half of
  ``max.poll.interval.ms``). Lost ones: nothing is committed (their generation is gone). ``close()``:
  the same as a revoke of every partition within its budget; a commit refused because the group is
  rebalancing is retried after polling to complete the rebalance.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any, cast

from kipconsumer._pipeline.context import PipelineContext
from kipconsumer._pipeline.task import Key, PartitionTask
from kipconsumer.errors import CommitFailedError, KafkaError, KafkaTimeoutError
from kipconsumer.structs import OffsetAndMetadata, RecordMetadata, TopicPartition

__all__ = ["AtLeastOnce", "AtLeastOnceTask"]

log = logging.getLogger("kipconsumer.streams")


def _send_again(exc: BaseException) -> bool:
    """Whether an output that failed with ``exc`` is sent again (its category is retriable); any other
    failure propagates out of ``run()``."""
    return isinstance(exc, KafkaError) and exc.retriable


class _Out:
    """One output record of source offset ``offset``; ``future`` None = not sent (yet, or again)."""

    __slots__ = ("offset", "key", "value", "future")

    def __init__(self, offset: int, key: Key, value: bytes | str | None) -> None:
        self.offset = offset
        self.key = key
        self.value = value
        self.future: Future[RecordMetadata] | None = None


class AtLeastOnceTask(PartitionTask):
    """A source partition's task under at least once: outputs tracked until acknowledged, a timed-out
    one stalls the partition and is sent again (see the module docstring)."""

    __slots__ = ("inflight", "reported", "acked", "resent")

    def __init__(self, ctx: PipelineContext, tp: TopicPartition) -> None:
        super().__init__(ctx, tp)
        self.inflight: deque[_Out] = deque()
        self.reported = False  # the timeout of the current stall round was raised to the executor
        self.acked = 0
        self.resent = 0

    def committable(self) -> int:
        return self.inflight[0].offset if self.inflight else self.processed_upto

    def reap(self) -> tuple[bool, BaseException | None]:
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
        """The partition stalls: its fetching is paused until its failed outputs are re-sent and acked."""
        self.stalled = True
        self.reported = True
        self.stalls += 1
        self.ctx.flow.pause(self)
        return KafkaTimeoutError(f"{what} for source {self.name} timed out: {exc}")

    def step(self) -> bool:
        """Reaps acknowledgements, re-sends or processes; raises KafkaTimeoutError on a send timeout."""
        moved, exc = self.reap()
        if self.stalled:
            return self._step_stalled(moved)
        if exc is not None:
            if not _send_again(exc):
                raise exc
            head = self.inflight[0]
            raise self._timeout(exc, f"send to {self.ctx.sink.topic} (output of offset {head.offset})") \
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
        and nothing of it sent. Each output is tracked (``inflight``) until acknowledged."""
        pending, inflight = self.pending, self.inflight
        ctx = self.ctx
        send, topic, part = ctx.producer.send, ctx.sink.topic, self.sink_partition
        budget = ctx.flow.records_per_step
        while pending and budget > 0:
            budget -= 1
            rec = pending[0]
            off = rec.offset
            outs = self._outputs(rec)
            pending.popleft()
            self.processed += 1
            self.processed_upto = off + 1
            if not outs:
                continue
            tracked = [_Out(off, k, v) for k, v in outs]
            inflight.extend(tracked)  # all of them first: a timed-out send leaves the rest to re-send
            for i, (key, value) in enumerate(outs):
                try:
                    future = send(topic, value=value, key=key, partition=part)
                except TimeoutError as exc:
                    raise self._timeout(exc, f"send to {topic} (output {i} of offset {off})") from exc
                tracked[i].future = future

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
                    if not _send_again(exc):
                        raise exc
                    needs_send = True
                    if failed is None:
                        failed = exc
        if failed is not None and not self.reported:
            self.reported = True
            raise KafkaTimeoutError(f"send to {self.ctx.sink.topic} for source {self.name} timed out "
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
        self.ctx.flow.resume_if_drained(self)
        return True

    def _resend(self) -> None:
        send, topic, part = self.ctx.producer.send, self.ctx.sink.topic, self.sink_partition
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
        snap = super().snapshot()
        snap["inflight"] = len(self.inflight)
        snap["acked"] = self.acked
        snap["resent"] = self.resent
        return snap


class AtLeastOnce:
    """The at-least-once guarantee of one pipeline (see the module docstring). Owns the commit
    schedule (``next_commit``) and the commit counters; commits with the consumer's ``commit_sync``."""

    def __init__(self, ctx: PipelineContext) -> None:
        self._ctx = ctx
        self.next_commit = 0.0
        self.commits = 0
        self.commit_failures = 0

    def _tasks(self) -> list[AtLeastOnceTask]:
        # every task of this pipeline was made by new_task()
        return cast("list[AtLeastOnceTask]", list(self._ctx.tasks.values()))

    def new_task(self, tp: TopicPartition) -> AtLeastOnceTask:
        return AtLeastOnceTask(self._ctx, tp)

    def before_poll(self) -> None:
        pass

    def metrics(self) -> dict[str, int]:
        return {"commits": self.commits, "commit_failures": self.commit_failures,
                "transactions_committed": 0, "transactions_aborted": 0, "producer_replacements": 0,
                "transactions_timed_out": 0, "transactions_outcome_unknown": 0}

    # -- commits -----------------------------------------------------------------------------------------
    def _due_offsets(self, tasks: Iterable[PartitionTask]) -> dict[TopicPartition, OffsetAndMetadata]:
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in tasks:
            c = t.committable()
            if c > t.committed:
                offsets[t.tp] = OffsetAndMetadata(c)
        return offsets

    def _commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], timeout: float) -> None:
        ctx = self._ctx
        ctx.consumer.commit_sync(offsets, timeout=timeout)
        self.commits += 1
        for tp, om in offsets.items():
            task = ctx.tasks.get(tp)
            if task is not None:
                task.committed = max(task.committed, om.offset)

    def commit_step(self) -> bool:
        """The ``<commit>`` task: commits acknowledged positions every ``commit.interval.ms``. A timeout
        is raised to the executor (retried, bounded by ``task.timeout.ms``); a refused commit is counted
        and waits for the next interval."""
        ctx = self._ctx
        now = time.monotonic()
        if now < self.next_commit:
            return False
        tasks = self._tasks()
        for task in tasks:
            task.reap()
        offsets = self._due_offsets(tasks)
        if not offsets:
            self.next_commit = now + ctx.commit_interval_s
            return False
        try:
            self._commit(offsets, ctx.budget.call_budget_s())
        except TimeoutError:
            raise
        except KafkaError as exc:  # CommitFailedError & co: the rebalance that follows sorts it out
            self.commit_failures += 1
            log.warning("offset commit of %d partition(s) failed: %s", len(offsets), exc)
            self.next_commit = now + ctx.commit_interval_s
            return False
        self.next_commit = now + ctx.commit_interval_s
        return True

    # -- revoke and close ----------------------------------------------------------------------------------
    def revoke(self, tasks: list[PartitionTask], *, commit: bool) -> None:
        """Revoked: flushes the tasks' outputs and commits what is acknowledged, within half of
        ``max.poll.interval.ms``. Lost: nothing to do (the pipeline drops the tasks)."""
        if commit and tasks:
            self._flush_and_commit(tasks, self._ctx.budget.half_mpi_s, closing=False)

    def close(self, tasks: list[PartitionTask], budget_s: float) -> None:
        """Flushes every task's outputs and commits what is acknowledged, within ``budget_s``."""
        self._flush_and_commit(tasks, budget_s, closing=True)

    def _flush_and_commit(self, tasks: list[PartitionTask], budget_s: float, *, closing: bool) -> None:
        """Flushes the tasks' outputs and commits what is acknowledged (within ``budget_s``).
        ``closing``: outside ``poll()``, a commit refused because the group is rebalancing is retried
        after polling to complete the rebalance."""
        end = time.monotonic() + budget_s
        own = cast("list[AtLeastOnceTask]", tasks)
        if any(t.inflight for t in own):
            try:
                self._ctx.producer.flush(max(0.0, end - time.monotonic()))
            except KafkaTimeoutError as exc:
                log.warning("flush of %d task(s) incomplete: %s", len(tasks), exc)
        for t in own:
            t.reap()
        self._final_commit(tasks, end, closing)

    def _final_commit(self, tasks: list[PartitionTask], end: float, closing: bool) -> None:
        ctx = self._ctx
        budget = ctx.budget
        while True:
            offsets = self._due_offsets(tasks)
            if not offsets:
                return
            try:
                self._commit(offsets, max(0.0, min(budget.group_call_s, end - time.monotonic())))
                return
            except CommitFailedError as exc:  # RebalanceInProgressError, ILLEGAL_GENERATION, ...
                if closing and time.monotonic() + budget.backoff_s < end:
                    log.info("commit on close refused (%s): completing the rebalance first", exc.code)
                    ctx.consumer.poll(budget.backoff_s)  # records returned now are not processed
                    # The listener may have revoked some (and committed or dropped them) meanwhile.
                    tasks = [t for t in tasks if ctx.tasks.get(t.tp) is t]
                    continue
                failure: KafkaError = exc
            except KafkaError as exc:
                failure = exc
            self.commit_failures += 1
            log.warning("commit of revoked partition(s) %s failed: %s (their records after the last "
                        "commit will be processed again)", sorted(offsets), failure)
            return
