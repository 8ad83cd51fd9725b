"""The transaction of an ``exactly_once_v2`` Pipeline (KIP-98 / KIP-447, as Kafka Streams' EOS v2).

Contract
--------
One transactional producer serves every partition task of a pipeline; one transaction holds the
outputs of every record processed since the last commit and the source offsets after them. The
transaction holds no producer of its own: it reads the pipeline's
(:attr:`~kipconsumer._pipeline.context.PipelineContext.producer`) at each call and replaces it through
:meth:`~kipconsumer._pipeline.context.PipelineContext.replace_producer`, the slot's one writer.

* :meth:`Transaction.begin_if_needed` opens the transaction before the first record of a commit
  interval is processed; a task records the offset of its first record in it (``txn_base``).
* :meth:`Transaction.commit` sends the next offsets of every task that processed records (with the
  consumer's current group metadata, so the coordinator refuses a member of a stale generation) and
  commits. A ``KafkaTimeoutError`` leaves the commit in progress: calling ``commit`` again resumes it
  (KIP-19); meanwhile no task processes records. ``TransactionAbortableError`` aborts (see below)
  and is raised again. ``ProducerFencedError`` is fatal and propagates.
* Right before ``commit_transaction()`` the loop's hold is checked again (``held``: KIP-572's 50% rule):
  a process stopped while the offsets were sent may have been dropped from the group, whose new owner
  then read the last stable offsets; committing would put older offsets over the new owner's (a
  broker without KIP-447's stable-offset fetch, as Tansu 0.6, lets that through). It aborts instead.
* :meth:`Transaction.abort` rewinds every task that processed records in the transaction (its
  consumer position goes back to ``txn_base`` and its fetched but unprocessed records are dropped: they
  are fetched again, so every record whose outputs were discarded is processed again, in order) and
  aborts. An abort whose call timed out stays pending (:attr:`Transaction.busy`): no task processes
  records until :meth:`Transaction.resume_abort` completed it. As librdkafka's abort after timed-out
  records can stay stuck for good (measured on Tansu: the epoch bump never completes), a timed-out
  abort replaces the producer: the new one, with the same ``transactional.id``, fences the old one
  and its ``init_transactions()`` aborts the open transaction at the coordinator.
* A call blocked inside librdkafka past its timeout (``TransactionBlockedError``: librdkafka 2.16's
  ``send_offsets_to_transaction()`` after a broker freeze, docs/reliability.md) is not waited for
  again: the commit turns into an abort that replaces the producer at once (the blocked call keeps
  the old handle until it returns), raised as ``TransactionAbortableError`` (code ``_TXN_BLOCKED``).
* A ``commit_transaction()`` without a result (``TransactionOutcomeUnknownError``: it timed out or
  stayed blocked while the coordinator was unreachable or moving) is neither retried nor taken as
  failed or done: no more work goes on that producer epoch (librdkafka 2.16 has no KIP-890). The
  producer is replaced (the new one's ``init_transactions()`` completes or aborts the transaction at the
  coordinator and fences the old epoch), then every task rewinds to its group's committed offset
  (read_committed, so a stable one: KIP-447), or to its ``txn_base`` where the group has none; raised
  as ``TransactionAbortableError`` (code ``_TXN_OUTCOME_UNKNOWN``; counted in ``unknown_outcomes``).
* Errors are told apart by their category (``KafkaError.category``, KIP-1050): abortable aborts, a
  retriable one leaves the call to be resumed, application_recoverable replaces the producer where the
  transaction is the broker's to end (it outlived ``transaction.timeout.ms``, or its outcome is unknown)
  and propagates otherwise (another producer of the ``transactional.id`` took over).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from kipconsumer._pipeline.context import PipelineContext
from kipconsumer.errors import (
    KafkaError,
    TransactionAbortableError,
    TransactionBlockedError,
    TransactionOutcomeUnknownError,
)
from kipconsumer.structs import OffsetAndMetadata, TopicPartition

__all__ = ["Transaction", "TxnTask"]

log = logging.getLogger("kipconsumer.streams")


class TxnTask(Protocol):
    """What a transaction needs of a partition task."""

    tp: TopicPartition
    txn_base: int  # offset of the task's first record in the open transaction (-1: none)
    processed_upto: int
    committed: int

    def rewind(self) -> None: ...

    def rewind_to(self, offset: int) -> None: ...


class Transaction:
    """The open transaction of a pipeline's producer (see the module docstring)."""

    def __init__(self, ctx: PipelineContext, tasks: Callable[[], Iterable[TxnTask]] = lambda: ()) -> None:
        self._ctx = ctx  # the producer slot, the consumer and the loop's call budget (KIP-572)
        self._tasks = tasks  # the current tasks (to rewind once an unknown outcome is resolved)
        #: a commit's outcome is unknown: rewind every task to the committed offsets once the new
        #: producer's init_transactions() ended the transaction
        self._resolve_outcome = False
        self._transaction_timeout_s = ctx.transaction_timeout_s  # the producer's transaction.timeout.ms
        self._opened_at: float | None = None  # time.monotonic() of the last begin_transaction()
        self._uninitialized = False
        self._must_replace = False  # a call of the producer is blocked in librdkafka
        self.open = False
        #: offsets being committed; not None from the first commit attempt until it ends
        self.committing: dict[TopicPartition, OffsetAndMetadata] | None = None
        self._offsets_sent = False
        self.aborting = False
        self.commits = 0
        self.aborts = 0
        self.timeouts = 0  # transactions the broker aborted after transaction.timeout.ms
        self.unknown_outcomes = 0  # commits without a result, resolved by replacing the producer

    @property
    def busy(self) -> bool:
        """A commit or an abort is in progress: no record may be processed now."""
        return self.committing is not None or self.aborting

    def begin_if_needed(self) -> None:
        if not self.open:
            self._ctx.producer.begin_transaction()
            self.open = True
            self._opened_at = time.monotonic()

    def outlived_timeout(self) -> bool:
        """The last transaction begun has been open for ``transaction.timeout.ms`` or longer: a fencing
        now is the coordinator's abort of it (an epoch bump), not another producer."""
        opened = self._opened_at
        return opened is not None and time.monotonic() - opened >= self._transaction_timeout_s

    def fenced_by_timeout(self, tasks: Iterable[TxnTask], exc: KafkaError) -> TransactionAbortableError:
        """After a ``ProducerFencedError`` of a transaction that :meth:`outlived_timeout`: rewinds the
        tasks, replaces the producer (the abort is the broker's) and returns the error to raise."""
        self.timeouts += 1
        self._must_replace = True
        self.abort(tasks, f"the broker aborted it: open longer than transaction.timeout.ms="
                          f"{self._transaction_timeout_s * 1000:.0f} ({exc})")
        return TransactionAbortableError(
            f"the transaction was open longer than transaction.timeout.ms="
            f"{self._transaction_timeout_s * 1000:.0f} and the broker aborted it; its records are processed "
            f"again with a new producer: {exc}", code="_TXN_TIMED_OUT")
    def commit(self, tasks: Iterable[TxnTask], timeout: Callable[[], float]) -> bool:
        """Commits the open transaction with the tasks' next offsets; False if none is open.
        ``timeout()`` is read before each call (sending the offsets, committing): they share one
        budget."""
        if not self.open:
            return False
        tasks = list(tasks)
        if self.committing is None:
            self.committing = {t.tp: OffsetAndMetadata(t.processed_upto) for t in tasks if t.txn_base >= 0}
            self._offsets_sent = False
        ctx = self._ctx
        try:
            if self.committing and not self._offsets_sent:
                ctx.producer.send_offsets_to_transaction(self.committing, ctx.consumer.group_metadata(),
                                                         timeout=timeout())
                self._offsets_sent = True
            held = ctx.budget.held()
            if held is not None:  # stopped since the offsets were sent (or while): do not commit
                raise TransactionAbortableError(f"not committed: {held}", code="_HELD")
            ctx.producer.commit_transaction(timeout=timeout())
        except TransactionOutcomeUnknownError as exc:
            raise self._outcome_unknown(exc) from exc
        except TransactionBlockedError as exc:  # send_offsets_to_transaction() blocked: nothing committed
            self._must_replace = True
            self.abort(tasks, f"commit blocked in librdkafka: {exc}")
            raise TransactionAbortableError(f"the transaction was aborted and the producer replaced: {exc}",
                                            code="_TXN_BLOCKED") from exc
        except KafkaError as exc:
            if exc.category == "abortable":
                self.abort(tasks, f"commit failed: {exc}")
                raise
            if exc.category == "application_recoverable" and self.outlived_timeout():
                raise self.fenced_by_timeout(tasks, exc) from exc
            raise  # retriable: the next commit() resumes it; else (another producer took over): fatal
        for t in tasks:
            om = self.committing.get(t.tp)
            if om is not None:
                t.committed = max(t.committed, om.offset)
            t.txn_base = -1
        self.open = False
        self.committing = None
        self.commits += 1
        return True

    def _outcome_unknown(self, exc: TransactionOutcomeUnknownError) -> TransactionAbortableError:
        """A commit without a result: replaces the producer, and once its init_transactions() ended the
        transaction, rewinds every task to the committed offsets (:meth:`resume_abort`; a timeout leaves
        that pending, ``busy``). Returns the error to raise."""
        log.warning("the outcome of the transaction's commit is unknown (%s): replacing the producer, then "
                    "resuming from the committed offsets", exc)
        self.unknown_outcomes += 1
        self.open = False
        self.committing = None
        self.aborting = True
        self._must_replace = True
        self._resolve_outcome = True
        self.resume_abort()
        return TransactionAbortableError(
            f"the commit's outcome was unknown; the producer was replaced and every task resumed from the "
            f"committed offsets: {exc}", code="_TXN_OUTCOME_UNKNOWN")

    def _rewind_to_committed(self) -> None:
        """Every task goes back to its group's committed offset (a stable one: the consumer reads
        read_committed), or to its first record in the transaction where the group has none."""
        tasks = list(self._tasks())
        found: dict[TopicPartition, OffsetAndMetadata | None] = {}
        ctx = self._ctx

        def fetch() -> None:
            found.update(ctx.consumer.committed([t.tp for t in tasks], timeout=ctx.budget.call_budget_s()))

        if tasks:
            ctx.budget.bounded("fetch of the committed offsets", fetch)
        for t in tasks:
            om = found.get(t.tp)
            if om is not None:
                t.committed = om.offset
                t.rewind_to(om.offset)
            elif t.txn_base >= 0:
                t.rewind()
            t.txn_base = -1

    def abort(self, tasks: Iterable[TxnTask], reason: str) -> None:
        """Rewinds the tasks that processed records in the open transaction and aborts it (bounded by
        half of ``max.poll.interval.ms``; a ``KafkaTimeoutError`` leaves the abort pending). While an
        unknown outcome is being resolved the tasks rewind to the committed offsets instead."""
        for t in tasks if not self._resolve_outcome else ():
            t.rewind()
        if self.open:
            log.warning("aborting the transaction: %s", reason)
            self.open = False
            self.committing = None
            self.aborting = True
        self.resume_abort()

    def resume_abort(self) -> bool:
        """Completes a pending abort (see :meth:`abort`); False if none was pending."""
        if not self.aborting:
            return False
        ctx = self._ctx
        budget = ctx.budget
        if not self._uninitialized and not self._must_replace:
            try:
                budget.bounded("abort of the transaction",
                               lambda: ctx.producer.abort_transaction(timeout=budget.call_budget_s()))
            except KafkaError as exc:
                if exc.category == "application_recoverable" and not self.outlived_timeout():
                    raise  # another producer owns the transactional.id: replacing ours would fence it
                # a timeout, or a fatal error (seen on real Kafka after the transaction coordinator
                # moved: CONCURRENT_TRANSACTIONS, then INVALID_TXN_STATE): the producer is replaced
                log.warning("abort of the transaction did not complete (%s): replacing the producer; the "
                            "new one (same transactional.id) aborts the open transaction", exc)
                self._must_replace = True
        if self._must_replace:
            ctx.replace_producer()
            self._must_replace = False
            self._uninitialized = True
        if self._uninitialized:
            try:
                budget.bounded("init_transactions",
                               lambda: ctx.producer.init_transactions(timeout=budget.call_budget_s()))
            except TransactionBlockedError:
                self._must_replace = True  # the next resume replaces this producer too
                raise
            self._uninitialized = False
        if self._resolve_outcome:
            self._rewind_to_committed()
            self._resolve_outcome = False
        else:
            self.aborts += 1
        self.aborting = False
        return True
