"""Test clusters for users' tests and our own: real Apache Kafka, and the embedded broker.

* :class:`KafkaCluster`: a real Apache Kafka 4.x cluster (KRaft, 1 to 9 combined broker+controller
  JVM processes on 127.0.0.1, jars fetched once from Maven Central), for Kafka's exact semantics,
  broker kills and pauses.
* :class:`EmbeddedBroker`: librdkafka's mock cluster inside this process (also
  ``kipconsumer.broker``), for request-level fault injection and speed.

``python -m kipconsumer.testing kafka --brokers 3`` runs a cluster from the shell; the opt-in pytest plugin
``kipconsumer.testing.pytest_plugin`` (``pytest -p kipconsumer.testing.pytest_plugin``) gives the
fixtures ``kafka_cluster`` and ``embedded_broker``.
"""

from __future__ import annotations

from kipconsumer.broker import EmbeddedBroker
from kipconsumer.testing._distribution import DEFAULT_KAFKA_VERSION
from kipconsumer.testing._errors import KafkaClusterError
from kipconsumer.testing.kafka_cluster import KafkaCluster

__all__ = ["DEFAULT_KAFKA_VERSION", "EmbeddedBroker", "KafkaCluster", "KafkaClusterError"]
