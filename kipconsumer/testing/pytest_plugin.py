"""pytest fixtures for testing applications against Kafka without Docker.

Opt-in: installing kipconsumer registers no plugin. Load it with ``pytest -p
kipconsumer.testing.pytest_plugin`` (or ``addopts`` in your pytest configuration), or with
``pytest_plugins = ["kipconsumer.testing.pytest_plugin"]`` in your top-level ``conftest.py``:

* ``kafka_cluster``: one real Apache Kafka cluster per test session (``--kafka-brokers N``, default 1;
  ``--kafka-version X.Y.Z``), started on first use;
* ``embedded_broker``: one embedded broker (librdkafka's mock cluster, 3 brokers) per test session.

Both are shared by the session's tests: give each test its own topics and groups. A cluster that
cannot start (no Java, no Maven, no network to Maven Central) fails the tests that use it with a
:class:`~kipconsumer.testing.KafkaClusterError` that says what to install.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kipconsumer.broker import EmbeddedBroker
from kipconsumer.testing.kafka_cluster import KafkaCluster


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kipconsumer", "kipconsumer test clusters")
    group.addoption(
        "--kafka-brokers", type=int, default=1, help="nodes of the kafka_cluster fixture (default 1)"
    )
    group.addoption("--kafka-version", default=None, help="Apache Kafka release of the kafka_cluster fixture")


@pytest.fixture(scope="session")
def kafka_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A real Apache Kafka cluster shared by the test session."""
    brokers = request.config.getoption("--kafka-brokers")
    version = request.config.getoption("--kafka-version")
    with KafkaCluster(brokers, version=version) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def embedded_broker() -> Iterator[EmbeddedBroker]:
    """An EmbeddedBroker of 3 brokers shared by the test session (inject faults into one of your own)."""
    with EmbeddedBroker(num_brokers=3) as broker:
        yield broker
