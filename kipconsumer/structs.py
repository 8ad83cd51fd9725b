"""Small immutable value types shared by the consumer and the producer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A topic name and a partition number; hashable, usable as a dict key."""

    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """An offset to commit (the *next* offset to consume) with optional metadata."""

    offset: int
    metadata: str = ""


class OffsetAndTimestamp(NamedTuple):
    """The answer of ``KafkaConsumer.offsets_for_times()`` for one partition: the earliest offset
    whose record timestamp is at or after the asked timestamp, and that record's timestamp (ms)."""

    offset: int
    timestamp: int


class RecordMetadata(NamedTuple):
    """Where a produced record was stored, as acknowledged by the broker."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group membership as a transactional producer needs it
    (``KafkaProducer.send_offsets_to_transaction``): opaque, from ``KafkaConsumer.group_metadata()``.

    ``group_id`` is for display; ``serialized`` is librdkafka's encoding of the group id, generation,
    member id and group instance id at the time of the call (KIP-447: the coordinator fences a commit
    from a member of an older generation)."""

    group_id: str
    serialized: bytes


@dataclass(frozen=True)
class ConsumerRecordData:
    """A consumed record as plain data: what a pickled (or copied) ``ConsumerRecord`` becomes.

    Same attributes and ``topic_partition()`` as ``ConsumerRecord``; holds no librdkafka memory.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    timestamp_type: int
    headers: list[tuple[str, bytes | None]]
    serialized_key_size: int
    serialized_value_size: int
    #: a share consumer's record (KafkaShareConsumer): its delivery count; None for a KafkaConsumer's
    delivery_count: int | None = None

    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __repr__(self) -> str:
        return (f"ConsumerRecordData(topic={self.topic!r}, partition={self.partition}, "
                f"offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value_size={self.serialized_value_size})")


__all__ = ["TopicPartition", "OffsetAndMetadata", "RecordMetadata", "ConsumerGroupMetadata",
           "ConsumerRecordData"]
