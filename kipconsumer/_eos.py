"""The transaction of an ``exactly_once_v2`` Pipeline (KIP-98 / KIP-447, as Kafka Streams' EOS v2).

Contract
--------
One transactional producer serves every partition task of a pipeline; one transaction holds the
outputs of every record processed since the last commit and the source offsets after them.

* :meth:`Transaction.begin_if_needed` opens the transaction before the first record of a commit
  interval is processed; a task records the offset of its first record in it (``txn_base``).
* :meth:`Transaction.commit` sends the next offsets of every task that processed records (with the
  consumer's current group metadata, so the coordinator refuses a member of a stale generation) and
  commits. A ``KafkaTimeoutError`` leaves the commit in progress: calling ``commit`` again resumes it
  (KIP-19); meanwhile no task processes records. ``TransactionAbortableError`` aborts (see below)
  and is raised again. ``ProducerFencedError`` is fatal and propagates.
* :meth:`Transaction.abort` aborts and rewinds every task that processed records in the
  transaction: its consumer position goes back to ``txn_base`` and its fetched but unprocessed
  records are dropped (they are fetched again), so every record whose outputs were discarded is
  processed again, in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from kipconsumer.consumer import KafkaConsumer
from kipconsumer.errors import TransactionAbortableError
from kipconsumer.producer import KafkaProducer
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


class Transaction:
    """The open transaction of a pipeline's producer (see the module docstring)."""

    def __init__(self, producer: KafkaProducer, consumer: KafkaConsumer,
                 bounded: Callable[[str, Callable[[], None]], None]) -> None:
        self._producer = producer
        self._consumer = consumer
        self._bounded = bounded  # retries timeouts within half of max.poll.interval.ms (KIP-572)
        self.open = False
        #: offsets being committed; not None from the first commit attempt until it ends
        self.committing: dict[TopicPartition, OffsetAndMetadata] | None = None
        self._offsets_sent = False
        self.commits = 0
        self.aborts = 0

    def begin_if_needed(self) -> None:
        if not self.open:
            self._producer.begin_transaction()
            self.open = True

    def commit(self, tasks: Iterable[TxnTask], timeout: float) -> bool:
        """Commits the open transaction with the tasks' next offsets; False if none is open."""
        if not self.open:
            return False
        tasks = list(tasks)
        if self.committing is None:
            self.committing = {t.tp: OffsetAndMetadata(t.processed_upto) for t in tasks if t.txn_base >= 0}
            self._offsets_sent = False
        try:
            if self.committing and not self._offsets_sent:
                self._producer.send_offsets_to_transaction(self.committing, self._consumer.group_metadata(),
                                                           timeout=timeout)
                self._offsets_sent = True
            self._producer.commit_transaction(timeout=timeout)
        except TransactionAbortableError as exc:
            self.abort(tasks, f"commit failed: {exc}")
            raise
        for t in tasks:
            om = self.committing.get(t.tp)
            if om is not None:
                t.committed = max(t.committed, om.offset)
            t.txn_base = -1
        self.open = False
        self.committing = None
        self.commits += 1
        return True

    def abort(self, tasks: Iterable[TxnTask], reason: str) -> None:
        """Aborts the open transaction (bounded by half of ``max.poll.interval.ms``) and rewinds the
        tasks that processed records in it."""
        if self.open:
            log.warning("aborting the transaction: %s", reason)
            self._bounded("abort of the transaction", lambda: self._producer.abort_transaction())
            self.aborts += 1
        self.open = False
        self.committing = None
        for t in tasks:
            t.rewind()
