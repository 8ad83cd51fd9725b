"""The error a test cluster raises when it cannot be set up or started."""

from __future__ import annotations

from kipconsumer.errors import KafkaError

__all__ = ["KafkaClusterError"]


class KafkaClusterError(KafkaError):
    """A :class:`~kipconsumer.testing.KafkaCluster` could not be set up or started: Java or Maven
    missing, the jars not fetched, a broker that did not come up (the message names its log file)."""
