"""The rebalance listener contract (Java's ConsumerRebalanceListener)."""

from __future__ import annotations

from kipconsumer.structs import TopicPartition


class ConsumerRebalanceListener:
    """Called inside ``KafkaConsumer.poll()``, on the polling thread, when the group's
    assignment changes. Subclass it, or pass any object with these methods.

    - ``on_partitions_revoked(partitions)``: before partitions are taken away in a normal
      rebalance. Their buffered records are already dropped (none will be returned
      again); positions are still valid, so ``commit_sync()`` here commits what was
      processed.
    - ``on_partitions_assigned(partitions)``: after new partitions are assigned.
    - ``on_partitions_lost(partitions)``: the partitions were already given to another
      member (session or ``max.poll.interval.ms`` expiry); committing them would fail.
      Defaults to ``on_partitions_revoked``, as in Java.

    An exception raised here propagates out of ``poll()`` after the assignment change
    has been completed.
    """

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        """Partitions about to be revoked (see class docstring)."""

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        """Partitions newly assigned."""

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None:
        """Partitions lost without a clean revoke; by default calls on_partitions_revoked."""
        self.on_partitions_revoked(partitions)


__all__ = ["ConsumerRebalanceListener"]
