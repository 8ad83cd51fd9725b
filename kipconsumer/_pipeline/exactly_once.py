"""A Pipeline's exactly-once guarantee (``processing.guarantee=exactly_once_v2``, docs/tasks.md).

Contract
--------
* The outputs and source offsets of each commit interval are committed in one transaction
  (:class:`kipconsumer._pipeline.transaction.Transaction`, one transactional producer for every
  partition task), so a read_committed reader of the sink sees each record's outputs once.
* A task processes records only into an open transaction, and none while it commits or aborts
  (``Transaction.busy``). It remembers its first record in the transaction (``txn_base``).
* Abort (an output that fails or times out, a commit refused, a loop held past half of
  ``max.poll.interval.ms``, lost partitions): every task rewinds to its ``txn_base`` and its records
  are fetched and processed again, so no partial output is ever committed. A send that times out
  aborts and raises ``KafkaTimeoutError`` to the executor (``task.timeout.ms`` bounds the retries).
* :meth:`ExactlyOnce.commit_step` (the ``<commit>`` task) commits the transaction every
  ``commit.interval.ms``; a commit that timed out is resumed on the executor's retry.
* Revoked partitions: the open transaction (of every task) is committed first (within half of
  ``max.poll.interval.ms``), else aborted. Lost ones: it is aborted (the generation is gone, its offsets
  would be refused) and the remaining tasks rewind. ``close()``: aborted if the loop was held past half
  of ``max.poll.interval.ms``, else committed within the close budget, else aborted.
* A stuck abort replaces the producer (same ``transactional.id``; counted in
  ``producer_replacements``): the pipeline's ``producer`` is the new one from then on.
* A commit whose outcome is unknown (``TransactionOutcomeUnknownError``) replaces the producer too; then
  every task resumes from the group's committed offsets (counted in ``transactions_outcome_unknown``;
  see kipconsumer._pipeline.transaction). Raised to the executor as ``KafkaTimeoutError``.
* What to do about an error is decided by its category (``KafkaError.category``, KIP-1050): a
  retriable send aborts and is retried by the executor, an abortable commit is counted and redone,
  an application_recoverable one (fenced) replaces the producer only where the broker ended the
  transaction (it outlived ``transaction.timeout.ms``), else propagates.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

from kipconsumer._pipeline.context import PipelineContext
from kipconsumer._pipeline.task import PartitionTask
from kipconsumer._pipeline.transaction import Transaction
from kipconsumer.errors import KafkaError, KafkaTimeoutError
from kipconsumer.structs import TopicPartition

__all__ = ["ExactlyOnce", "ExactlyOnceTask"]

log = logging.getLogger("kipconsumer.streams")

#: librdkafka codes of a transaction aborted because an output timed out
_TIMEOUT_CODES = frozenset({"_MSG_TIMED_OUT", "_TIMED_OUT", "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE",
                            "_TXN_TIMED_OUT", "_TXN_OUTCOME_UNKNOWN"})


class ExactlyOnceTask(PartitionTask):
    """A source partition's task under exactly_once_v2: processes into the pipeline's open
    transaction, rewinds when it aborts (see the module docstring)."""

    __slots__ = ("eos", "txn", "txn_base", "rewinds")

    def __init__(self, ctx: PipelineContext, tp: TopicPartition, eos: ExactlyOnce) -> None:
        super().__init__(ctx, tp)
        self.eos = eos
        self.txn = eos.txn
        self.txn_base = -1  # offset of the first record processed in the open transaction (-1: none)
        self.rewinds = 0

    def step(self) -> bool:
        """Processes into the open transaction (none while it commits or aborts). A send that times
        out aborts the transaction (every task rewinds) and raises KafkaTimeoutError."""
        txn = self.txn
        if not self.pending or txn.busy:
            return False
        self._know_sink()
        txn.begin_if_needed()
        self._process()
        return True

    def _process(self) -> None:
        """Processes up to ``max.poll.records`` pending records and sends their outputs into the open
        transaction. A record is taken (and counts as processed) only once ``process()`` returned and
        every output is a valid ``(key, value)`` pair: otherwise ``ProcessingError`` is raised with the
        record still pending and nothing of it sent. A send failing after part of the record's outputs
        was sent aborts the transaction (every task rewinds), so no partial output is ever committed."""
        pending = self.pending
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
            if self.txn_base < 0:
                self.txn_base = off
            for i, (key, value) in enumerate(outs):
                try:
                    send(topic, value=value, key=key, partition=part)
                except KafkaError as exc:
                    if exc.retriable:
                        raise self._send_timed_out(exc, f"send to {topic} (output {i} of offset {off})") \
                            from exc
                    if (exc.category not in ("application_recoverable", "fatal")
                            or not self.txn.outlived_timeout()):
                        # the transaction may hold part of this record's outputs; another producer
                        # (fenced, not by the broker's timeout) is fatal, as any other failure.
                        # librdkafka may report the coordinator's epoch bump as a bare _FATAL before
                        # it names it fenced: past transaction.timeout.ms that is the broker's abort too
                        self._abort_after_failed_send(topic, i, off, exc)
                        raise
                    err = self.txn.fenced_by_timeout(self.eos.tasks(), exc)
                    raise KafkaTimeoutError(f"send to {topic} (output {i} of offset {off}) for source "
                                            f"{self.name}: {err}", code=err.code) from exc
                except BaseException as exc:  # the transaction may hold part of this record's outputs
                    self._abort_after_failed_send(topic, i, off, exc)
                    raise

    def _abort_after_failed_send(self, topic: str, i: int, off: int, exc: BaseException) -> None:
        self.eos.abort(f"send to {topic} (output {i} of offset {off}) for source {self.name} failed: {exc!r}")

    def _send_timed_out(self, exc: BaseException, what: str) -> KafkaTimeoutError:
        self.stalls += 1
        self.eos.abort(f"{what} for source {self.name} timed out: {exc}")
        return KafkaTimeoutError(f"{what} for source {self.name} timed out; the transaction was aborted: "
                                 f"{exc}")

    def rewind(self) -> None:
        """After an abort: the records processed in the aborted transaction (and the fetched ones after
        them) are fetched and processed again, from ``txn_base``."""
        if self.txn_base < 0:
            return
        self.pending.clear()
        self.processed_upto = self.txn_base
        self.ctx.consumer.seek(self.tp, self.txn_base)
        self.txn_base = -1
        self.rewinds += 1

    def rewind_to(self, offset: int) -> None:
        """After a commit whose outcome is unknown: records from ``offset`` (the group's committed
        offset) on are fetched and processed again."""
        self.txn_base = offset
        self.rewind()

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        snap["rewinds"] = self.rewinds
        return snap


class ExactlyOnce:
    """The exactly_once_v2 guarantee of one pipeline (see the module docstring). Owns the
    :class:`~kipconsumer._pipeline.transaction.Transaction` (``txn``), the commit schedule
    (``next_commit``) and the counters; constructing it registers the ``transactional.id``
    (``init_transactions``)."""

    def __init__(self, ctx: PipelineContext) -> None:
        self._ctx = ctx
        self.next_commit = 0.0
        self.commits = 0
        self.commit_failures = 0
        self._init_transactions()
        self.txn: Transaction = Transaction(ctx, tasks=self.tasks)

    def tasks(self) -> list[ExactlyOnceTask]:
        """The pipeline's current tasks."""
        # every task of this pipeline was made by new_task()
        return cast("list[ExactlyOnceTask]", list(self._ctx.tasks.values()))

    def new_task(self, tp: TopicPartition) -> ExactlyOnceTask:
        return ExactlyOnceTask(self._ctx, tp, self)

    def metrics(self) -> dict[str, int]:
        return {"commits": self.commits, "commit_failures": self.commit_failures,
                "transactions_committed": self.txn.commits, "transactions_aborted": self.txn.aborts,
                "transactions_timed_out": self.txn.timeouts,
                "transactions_outcome_unknown": self.txn.unknown_outcomes,
                "producer_replacements": self._ctx.producer_replacements}

    # -- the producer --------------------------------------------------------------------------------------
    def _init_transactions(self) -> None:
        """Registers the transactional.id (fencing an older producer of it and aborting its open
        transaction). Not in the poll loop yet (the consumer has not subscribed): timeouts are retried
        after ``retry.backoff.ms`` for up to ``task.timeout.ms``, then ``KafkaTimeoutError``."""
        ctx = self._ctx
        task_timeout_ms = ctx.task_timeout_ms
        backoff_s = ctx.budget.backoff_s
        end = time.monotonic() + task_timeout_ms / 1000.0
        while True:
            try:
                ctx.producer.init_transactions()
                return
            except TimeoutError as exc:
                if time.monotonic() + backoff_s >= end:
                    raise KafkaTimeoutError(f"init_transactions did not complete within task.timeout.ms="
                                            f"{task_timeout_ms}: {exc}") from exc
                log.info("init_transactions timed out (%s); retrying in %.0f ms", exc, backoff_s * 1000)
                time.sleep(backoff_s)

    # -- commit and abort ----------------------------------------------------------------------------------
    def abort(self, reason: str) -> None:
        """Aborts the open transaction; every task rewinds to its first record in it."""
        self.txn.abort(self.tasks(), reason)

    def commit_step(self) -> bool:
        """The ``<commit>`` task: commits the open transaction (outputs and source offsets) every
        ``commit.interval.ms``. A timeout is raised to the executor and the commit is resumed on its
        retry (``task.timeout.ms`` bounds it); an abort caused by a timed-out output is raised as
        ``KafkaTimeoutError`` too."""
        txn = self.txn
        if txn.resume_abort():
            return True
        now = time.monotonic()
        if txn.committing is None and now < self.next_commit:
            return False
        self.next_commit = now + self._ctx.commit_interval_s
        if txn.committing is None:
            # held since the last poll (a slow process() or a stop in this very loop pass): the
            # group may have moved the partitions on; abort rather than commit (KIP-572's 50% rule)
            self._abort_if_held()
        if not txn.open:
            return False
        try:
            txn.commit(self.tasks(), self._ctx.budget.call_budget_s)
        except KafkaError as exc:
            if exc.category != "abortable":
                raise  # retriable: resumed on the executor's retry; else fatal for the pipeline
            self.commit_failures += 1
            if exc.code in _TIMEOUT_CODES:
                what = {"_TXN_TIMED_OUT": "it outlived transaction.timeout.ms",
                        "_TXN_OUTCOME_UNKNOWN": "the commit's outcome was unknown"}.get(exc.code,
                                                                                  "an output timed out")
                raise KafkaTimeoutError(f"the transaction was aborted: {what}: {exc}", code=exc.code) from exc
            log.warning("transaction aborted: %s", exc)  # e.g. a stale generation: the rebalance follows
            return False
        self.commits += 1
        return True

    def _abort_if_held(self) -> None:
        """A loop held longer than half of ``max.poll.interval.ms`` since the last poll (a process()
        call, a GC pause, a stopped process) may have been dropped from the group, which then gave its
        partitions to another member: its open transaction is aborted before the next poll or commit,
        not committed (the 50% rule of KIP-572; checked again between the offsets and the commit of
        the transaction, see kipconsumer._pipeline.transaction)."""
        txn = self.txn
        if not txn.open or txn.busy:
            return
        held = self._ctx.budget.held()
        if held is not None:
            self.commit_failures += 1
            try:
                self.abort(held)
            except TimeoutError as exc:  # stays pending (no processing meanwhile): <commit> resumes it
                log.warning("abort of the transaction timed out: %s", exc)

    before_poll = _abort_if_held

    def _end_transaction(self, budget_s: float) -> None:
        """On revoke and close: commits the open transaction within ``budget_s`` (timeouts retried),
        else aborts it (every task rewinds)."""
        txn = self.txn
        budget = self._ctx.budget
        try:
            txn.resume_abort()
            if not txn.open:
                return
            try:
                tasks = self.tasks()
                budget.bounded("commit of the transaction",
                               lambda: txn.commit(tasks, lambda: min(budget_s, budget.call_budget_s())))
                self.commits += 1
                return
            except KafkaError as exc:
                if exc.category == "abortable" and not txn.open:  # already aborted and rewound
                    failure: Exception = exc
                elif exc.category in ("abortable", "retriable"):
                    failure = exc
                    self.abort(f"commit on revoke/close failed: {exc}")
                else:
                    raise
        except TimeoutError as exc:  # the abort stays pending: the <commit> task resumes it
            failure = exc
        self.commit_failures += 1
        log.warning("transaction not committed: %s (its records are processed again)", failure)

    # -- revoke and close ----------------------------------------------------------------------------------
    def revoke(self, tasks: list[PartitionTask], *, commit: bool) -> None:
        """Revoked: the open transaction (of every task) is committed first. Lost: it is aborted (the
        generation is gone, its offsets would be refused) and the remaining tasks rewind."""
        txn = self.txn
        if commit:
            self._end_transaction(self._ctx.budget.half_mpi_s)
        elif txn.open or txn.aborting:
            gone = {t.tp for t in tasks}
            try:
                txn.abort([t for t in self.tasks() if t.tp not in gone], f"partitions lost: {sorted(gone)}")
            except TimeoutError as exc:  # stays pending: the <commit> task resumes it
                log.warning("abort of the transaction on lost partitions timed out: %s", exc)

    def close(self, tasks: list[PartitionTask], budget_s: float) -> None:
        """Aborts the transaction if the loop was held too long, else commits it within ``budget_s``
        (else aborts it)."""
        self._abort_if_held()
        self._end_transaction(budget_s)
