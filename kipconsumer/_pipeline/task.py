"""A Pipeline's partition task and what the pipeline asks of its delivery guarantee.

Contract
--------
* :class:`PartitionTask` holds the state of one assigned source partition that does not depend on the
  guarantee: the fetched records not processed yet (``pending``, filled by the poll loop), the offset
  after the last processed record, the last committed offset, the flow-control flags the loop reads
  (``paused``, ``stalled``) and the counters of ``metrics()``. It validates what ``process()`` returns.
  Its ``step`` (run by the executor, one task per partition) is the guarantee's: see
  ``kipconsumer._pipeline.at_least_once`` and ``kipconsumer._pipeline.exactly_once``. It reaches the
  sink, the producer, the consumer and flow control through the pipeline's
  :class:`~kipconsumer._pipeline.context.PipelineContext` (``ctx``), given to its constructor.
* :class:`DeliveryGuarantee` is what the pipeline asks of a guarantee. The pipeline picks one at
  construction (``processing.guarantee``) and never asks which one it holds again: the guarantee makes
  the partition tasks, runs the ``<commit>`` task, and decides what a revoke, a lost partition and
  ``close()`` commit or abort. It owns its commit state and counters; the pipeline owns the assignment
  (only the pipeline adds and removes tasks; the guarantee reads ``PipelineContext.tasks``), the
  clients and the loop's budget. A guarantee is constructed with the context alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from kipconsumer._records import ConsumerRecord
from kipconsumer.errors import ProcessingError
from kipconsumer.structs import TopicPartition

if TYPE_CHECKING:
    from kipconsumer._pipeline.context import PipelineContext

__all__ = ["DeliveryGuarantee", "Key", "Output", "PartitionTask", "Process"]

Key = bytes | str | None
#: One output record: ``(key, value)``.
Output = tuple[Key, bytes | str | None]
#: ``process(record)`` -> the records to send to the sink topic.
Process = Callable[[ConsumerRecord], Iterable[Output]]
# what KafkaProducer.send() takes as a key or value (besides None)
_OUTPUT_TYPES = (bytes, bytearray, memoryview, str)


class PartitionTask:
    """The task of one assigned source partition, less what its guarantee adds (see the module docstring).

    ``processed_upto`` (next offset after the last processed record, -1: none yet) and ``committed``
    are written by the guarantee's step and commits; ``pending`` is appended to by the poll loop and
    consumed by ``step``; ``paused`` is written by flow control only (``PipelineContext.flow``)."""

    __slots__ = ("ctx", "tp", "name", "pending", "processed_upto", "committed", "stalled", "paused",
                 "sink_partition", "sink_known", "processed", "stalls")

    def __init__(self, ctx: PipelineContext, tp: TopicPartition) -> None:
        self.ctx = ctx
        self.tp = tp
        self.name = f"{tp.topic}-{tp.partition}"
        self.pending: deque[ConsumerRecord] = deque()
        self.processed_upto = -1  # offset after the last processed record (-1: none yet)
        self.committed = -1
        # outputs timed out: fetching paused, no new records processed (set by at-least-once only:
        # exactly-once aborts the transaction instead)
        self.stalled = False
        self.paused = False
        self.sink_partition: int | None = None
        self.sink_known = False
        self.processed = 0
        self.stalls = 0

    def step(self) -> bool:
        """One executor step: True if it made progress. Defined by the guarantee's task class."""
        raise NotImplementedError

    def committable(self) -> int:
        """Next offset to consume such that every earlier record's outputs are acknowledged (-1: none)."""
        return self.processed_upto

    def _know_sink(self) -> None:
        if not self.sink_known:
            self.sink_partition = self.ctx.sink.partition_for(self.tp.partition)
            self.sink_known = True

    def _outputs(self, rec: ConsumerRecord) -> list[Output]:
        """``process(rec)`` as a list of validated ``(key, value)`` pairs, else ``ProcessingError``
        naming the record (its cause: what process() raised, or the malformed output)."""
        where = f"record {rec.topic}-{rec.partition}@{rec.offset}"
        try:
            outs = list(self.ctx.process(rec))
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

    def snapshot(self) -> dict[str, Any]:
        """This partition's entry of ``Pipeline.metrics()["partitions"]`` (the same keys under either
        guarantee: what one does not count stays 0)."""
        return {"pending": len(self.pending), "inflight": 0, "processed": self.processed,
                "acked": 0, "resent": 0, "stalls": self.stalls, "stalled": self.stalled,
                "paused": self.paused, "committable": self.committable(), "committed": self.committed,
                "rewinds": 0}


class DeliveryGuarantee(Protocol):
    """A pipeline's delivery guarantee (see the module docstring). Every method runs on the thread
    that drives the pipeline (``run()``, the rebalance listener inside ``poll()``, ``close()``)."""

    #: monotonic time of the next periodic commit; written by ``commit_step`` only (``run()`` polls no
    #: longer than until then)
    next_commit: float

    def new_task(self, tp: TopicPartition) -> PartitionTask:
        """The task of newly assigned partition ``tp`` (the pipeline registers it)."""
        ...

    def before_poll(self) -> None:
        """Called before each poll of the loop."""
        ...

    def commit_step(self) -> bool:
        """The ``<commit>`` task: commits every ``commit.interval.ms``; True if it made progress."""
        ...

    def revoke(self, tasks: list[PartitionTask], *, commit: bool) -> None:
        """``tasks``' partitions were revoked (``commit``) or lost (not ``commit``); the pipeline removes
        the tasks afterwards, whatever this raises."""
        ...

    def close(self, tasks: list[PartitionTask], budget_s: float) -> None:
        """``Pipeline.close()``: commits what may be committed within ``budget_s``; the pipeline removes
        ``tasks`` (all of them) afterwards, whatever this raises."""
        ...

    def metrics(self) -> dict[str, int]:
        """``commits``, ``commit_failures``, ``transactions_committed``, ``transactions_aborted``,
        ``producer_replacements`` (0 where the guarantee has none)."""
        ...
