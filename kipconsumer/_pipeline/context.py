"""What a :class:`~kipconsumer.streams.Pipeline` shares with its delivery guarantee and partition tasks.

Contract
--------
* :class:`PipelineContext` is built once by the pipeline and handed to the guarantee's constructor,
  which hands it to every task it makes: the collaborators come in through constructors, nothing
  reaches back into the pipeline (``tests/test_pipeline_structure.py`` checks it).
* The producer slot has one writer, :meth:`PipelineContext.replace_producer`; everyone else reads
  :attr:`PipelineContext.producer` at the time of each call, so a replaced producer is seen at once.
* :attr:`PipelineContext.tasks` is a read-only view of the assignment: only the pipeline adds and
  removes tasks.
* :class:`Sink` is the sink topic and the choice of a sink partition; :class:`FlowControl` pauses a
  partition whose task holds too many unprocessed records and resumes it once drained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from kipconsumer._pipeline.budget import CallBudget
from kipconsumer.consumer import KafkaConsumer
from kipconsumer.producer import KafkaProducer
from kipconsumer.structs import TopicPartition

if TYPE_CHECKING:
    from kipconsumer._pipeline.task import PartitionTask, Process

__all__ = ["FlowControl", "PipelineContext", "Sink"]


class Sink:
    """The sink topic; with ``partitioning="source"`` the outputs of source partition ``p`` go to sink
    partition ``p % sink partitions`` (the count is read once, within the call budget), with ``"key"``
    the producer's partitioner picks (None)."""

    __slots__ = ("topic", "partitioning", "_budget", "_partitions_for", "_count")

    def __init__(self, topic: str, partitioning: Literal["source", "key"], budget: CallBudget,
                 partitions_for: Callable[[str], list[int]]) -> None:
        self.topic = topic
        self.partitioning = partitioning
        self._budget = budget
        self._partitions_for = partitions_for  # the current producer's partitions_for()
        self._count: int | None = None

    def partition_for(self, source_partition: int) -> int | None:
        if self.partitioning == "key":
            return None
        if self._count is None:
            parts = self._budget.bounded(f"metadata of sink topic {self.topic!r}",
                                         lambda: self._partitions_for(self.topic))
            self._count = len(parts)
        return source_partition % self._count


class FlowControl:
    """Pause and resume of source partitions. A task is paused (its partition too) once it holds
    ``high_water`` unprocessed records and resumed below it, unless it is stalled; ``records_per_step``
    (``max.poll.records``) is how many records a task processes in one step. Writes ``task.paused``."""

    __slots__ = ("_consumer", "records_per_step", "high_water")

    def __init__(self, consumer: KafkaConsumer, records_per_step: int, high_water: int) -> None:
        self._consumer = consumer
        self.records_per_step = records_per_step
        self.high_water = high_water

    def pause(self, task: PartitionTask) -> None:
        if not task.paused:
            task.paused = True
            self._consumer.pause([task.tp])

    def resume_if_drained(self, task: PartitionTask) -> None:
        if task.paused and not task.stalled and len(task.pending) < self.high_water:
            task.paused = False
            self._consumer.resume([task.tp])

    def after_pass(self, tasks: Iterable[PartitionTask]) -> None:
        """End of a loop pass: pauses the tasks at ``high_water``, resumes the drained ones."""
        for task in tasks:
            if not task.paused:
                if len(task.pending) >= self.high_water:
                    self.pause(task)
            elif not task.stalled and len(task.pending) < self.records_per_step:
                self.resume_if_drained(task)


class PipelineContext:
    """The collaborators of one pipeline (see the module docstring). ``commit_interval_s``
    (``commit.interval.ms``), ``task_timeout_ms`` and ``transaction_timeout_s`` (the producer's
    ``transaction.timeout.ms``) are the settings the guarantees read; ``producer_replacements`` counts
    :meth:`replace_producer` calls."""

    __slots__ = ("consumer", "process", "sink", "flow", "budget", "tasks", "commit_interval_s",
                 "task_timeout_ms", "transaction_timeout_s", "producer_replacements", "_producer",
                 "_producer_config")

    def __init__(self, *, producer: KafkaProducer, producer_config: Mapping[str, object],
                 consumer: KafkaConsumer, process: Process, sink_topic: str,
                 sink_partitioning: Literal["source", "key"], flow: FlowControl, budget: CallBudget,
                 tasks: Mapping[TopicPartition, PartitionTask], commit_interval_s: float,
                 task_timeout_ms: int, transaction_timeout_s: float) -> None:
        self._producer = producer
        self._producer_config = producer_config
        self.producer_replacements = 0
        self.consumer = consumer
        self.process = process
        self.sink = Sink(sink_topic, sink_partitioning, budget,
                         lambda topic: self._producer.partitions_for(topic))
        self.flow = flow
        self.budget = budget
        self.tasks = tasks
        self.commit_interval_s = commit_interval_s
        self.task_timeout_ms = task_timeout_ms
        self.transaction_timeout_s = transaction_timeout_s

    @property
    def producer(self) -> KafkaProducer:
        """The pipeline's producer now (read it at each use: :meth:`replace_producer` swaps it)."""
        return self._producer

    def replace_producer(self) -> KafkaProducer:
        """Closes the producer (its pending records fail) and puts a new one with the same config (so
        the same ``transactional.id``, not initialized) in its place; returns it. The only writer of
        the slot."""
        self._producer.close(0)
        self._producer = KafkaProducer(self._producer_config)
        self.producer_replacements += 1
        return self._producer
