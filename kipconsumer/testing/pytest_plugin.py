"""pytest fixtures for testing applications against Kafka without Docker.

Opt-in: installing kipconsumer registers no plugin. Load it with ``pytest -p
kipconsumer.testing.pytest_plugin`` (or ``addopts`` in your pytest configuration), or with
``pytest_plugins = ["kipconsumer.testing.pytest_plugin"]`` in your top-level ``conftest.py``:

* ``kafka_cluster``: one real Apache Kafka cluster per test session (``--kafka-brokers N``, default 1;
  ``--kafka-version X.Y.Z``, 3.7 to 4.4), started on first use;
* ``embedded_broker``: one embedded broker (librdkafka's mock cluster, 3 brokers) per test session;
* ``--group-protocol consumer`` (or ``$KIP_GROUP_PROTOCOL=consumer``): every kipconsumer consumer the
  session creates with a ``group.id`` and no ``group.protocol`` uses the consumer group protocol
  (KIP-848); tests marked ``classic_only`` are skipped then, with the marker's reason.

Both are shared by the session's tests: give each test its own topics and groups. A cluster that
cannot start (no Java, no Maven, no network to Maven Central) fails the tests that use it with a
:class:`~kipconsumer.testing.KafkaClusterError` that says what to install.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kipconsumer import config as _config
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import ConfigError
from kipconsumer.testing.kafka_cluster import KafkaCluster

_PROTOCOLS = ("classic", "consumer")
_ENV_PROTOCOL = "KIP_GROUP_PROTOCOL"
_previous_protocol = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kipconsumer", "kipconsumer test clusters")
    group.addoption(
        "--kafka-brokers", type=int, default=1, help="nodes of the kafka_cluster fixture (default 1)"
    )
    group.addoption(
        "--kafka-version", default=None,
        help="Apache Kafka release of the kafka_cluster fixture: 3.7.0 to 4.4.x, X.Y for that line's newest "
        "patch (default $KIPCONSUMER_KAFKA_VERSION, $KAFKA_VERSION or kipconsumer's default)")
    group.addoption(
        "--group-protocol", choices=_PROTOCOLS, default=None,
        help="group protocol of every consumer with a group.id whose config does not set group.protocol "
        f"(default ${_ENV_PROTOCOL}, else classic); with consumer, tests marked classic_only are skipped")


def group_protocol(config: pytest.Config) -> str:
    """The session's group protocol: ``--group-protocol``, else ``$KIP_GROUP_PROTOCOL``, else classic."""
    chosen = config.getoption("--group-protocol")
    if chosen is None:
        chosen = os.environ.get(_ENV_PROTOCOL, "").strip().lower() or "classic"
        if chosen not in _PROTOCOLS:
            raise ConfigError(f"${_ENV_PROTOCOL}={os.environ[_ENV_PROTOCOL]!r} is not a group protocol: "
                              f"allowed {'|'.join(_PROTOCOLS)}")
    return str(chosen)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "classic_only(reason): the test sets or checks what only the classic group protocol has "
        "(session.timeout.ms, heartbeat.interval.ms, an assignor, JoinGroup's behaviour); skipped with "
        "--group-protocol consumer")
    protocol = group_protocol(config)
    # before collection, so a consumer made at import time follows it too; restored at unconfigure
    config.stash[_previous_protocol] = _config.set_implicit_group_protocol(protocol)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _previous_protocol in config.stash:
        _config.set_implicit_group_protocol(config.stash[_previous_protocol])


def pytest_report_header(config: pytest.Config) -> str:
    return f"kipconsumer group protocol (consumers with a group.id that set none): {group_protocol(config)}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if group_protocol(config) != "consumer":
        return
    for item in items:
        marker = item.get_closest_marker("classic_only")
        if marker is not None:
            why = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "classic protocol only")
            item.add_marker(pytest.mark.skip(reason=f"classic group protocol only: {why}"))



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
