"""subscribe() with ``group.protocol=consumer`` against a broker that does not serve KIP-848 as
librdkafka speaks it raises ``UnsupportedVersionError`` at once (librdkafka alone polls empty for ever,
as on Kafka 3.7: tests/test_kafka_versions.py). Here the broker is a TCP listener that answers only
kipconsumer's ApiVersions v0 probe, with the API versions a Kafka 3.7-3.9 broker lists; the
embedded broker (which serves KIP-848) shows the check does not refuse a broker that has it."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from kipconsumer import KafkaConsumer
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import KafkaError, UnsupportedFeatureError, UnsupportedVersionError

_API_VERSIONS, _CONSUMER_GROUP_HEARTBEAT = 18, 68


def _serve(listener: socket.socket, versions: dict[int, tuple[int, int]], stop: threading.Event) -> None:
    listener.settimeout(0.1)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        with conn:
            conn.settimeout(2.0)
            try:
                size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
                request = conn.recv(size, socket.MSG_WAITALL)
                key, version, correlation = struct.unpack_from(">hhi", request, 0)
                if (key, version) != (_API_VERSIONS, 0):
                    continue  # librdkafka's own connections: closed
                body = struct.pack(">ihi", correlation, 0, len(versions)) + b"".join(
                    struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in versions.items())
                conn.sendall(struct.pack(">i", len(body)) + body)
            except (OSError, struct.error):
                continue


@pytest.fixture
def broker_with(request: pytest.FixtureRequest) -> Iterator[str]:
    """``host:port`` of a listener answering ApiVersions v0 with ``request.param``'s versions."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=_serve, args=(listener, request.param, stop), daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def _consumer(bootstrap: str) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "g", "group.protocol": "consumer",
                          "reconnect.backoff.max.ms": 1000})


# Kafka 3.7-3.9 list ConsumerGroupHeartbeat v0 only (their preview); older releases none
@pytest.mark.parametrize("broker_with", [{_API_VERSIONS: (0, 3), _CONSUMER_GROUP_HEARTBEAT: (0, 0)},
                                         {_API_VERSIONS: (0, 3)}], indirect=True, ids=["3.7-3.9", "3.6"])
def test_consumer_protocol_on_a_broker_without_it_is_refused_at_subscribe(broker_with: str) -> None:
    with _consumer(broker_with) as c:
        started = time.monotonic()
        with pytest.raises(UnsupportedVersionError, match=r"^group\.protocol=consumer: .*Kafka >= 4\.0") as e:
            c.subscribe(["t"])
        assert time.monotonic() - started < 5
        assert e.value.code == "UNSUPPORTED_VERSION" and isinstance(e.value, KafkaError)
        assert isinstance(e.value, UnsupportedFeatureError)  # API.md's name for a feature the broker lacks
        assert c.subscription() == set()


@pytest.mark.parametrize("broker_with", [{_API_VERSIONS: (0, 3), _CONSUMER_GROUP_HEARTBEAT: (0, 1)}],
                         indirect=True)
def test_a_broker_with_consumer_group_heartbeat_v1_passes_the_check(broker_with: str) -> None:
    with _consumer(broker_with) as c:
        c.subscribe(["t"])
        assert c.subscription() == {"t"}


def test_the_embedded_broker_serves_the_consumer_protocol() -> None:
    with EmbeddedBroker(num_brokers=1) as b, _consumer(b.bootstrap_servers) as c:
        c.subscribe(["t"])
        assert c.subscription() == {"t"}
