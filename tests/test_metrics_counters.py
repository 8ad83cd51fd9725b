"""The counters the metrics exporters need from the clients' ``metrics()`` (issue #40 item 4): poll time,
rebalance time and commit failures of the consumer, completed transactions of the producer, and the
per-broker round trip and throttle time from librdkafka's statistics. Embedded broker."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import CommitFailedError


@pytest.fixture
def cluster() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(1) as b:
        b.create_topic("t", 2)
        yield b


def test_poll_time_sums_the_time_spent_inside_poll(cluster: EmbeddedBroker) -> None:
    with KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g"}) as c:
        c.assign([TopicPartition("t", 0)])
        before = c.metrics()
        assert before["poll_time_ms"] == 0.0
        start = time.monotonic()
        for _ in range(3):
            assert len(c.poll(0.2)) == 0  # an empty topic: each poll waits its whole timeout
        elapsed_ms = (time.monotonic() - start) * 1000
        m = c.metrics()
    assert m["polls"] - before["polls"] == 3
    assert 3 * 200 - 5 <= m["poll_time_ms"] <= elapsed_ms


def test_rebalance_time_includes_the_listener(cluster: EmbeddedBroker) -> None:
    class Slow:
        def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
            time.sleep(0.3)

        def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
            pass

    with KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g"}) as c:
        assert c.metrics()["rebalance_time_ms"] == 0.0
        c.subscribe(["t"], listener=Slow())
        deadline = time.monotonic() + 20
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        m = c.metrics()
    assert m["rebalances"] == 1
    assert 300 <= m["rebalance_time_ms"] < 5_000


def test_commit_failures_counts_refused_commits(cluster: EmbeddedBroker) -> None:
    with KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g",
                        "enable.auto.commit": False}) as c:
        c.assign([TopicPartition("t", 0)])
        c.commit_sync({TopicPartition("t", 0): 0})
        assert c.metrics()["commit_failures"] == 0
        cluster.push_request_errors("OffsetCommit", "UNKNOWN_MEMBER_ID")
        with pytest.raises(CommitFailedError):
            c.commit_sync({TopicPartition("t", 0): 0})
        assert c.metrics()["commit_failures"] == 1


def test_producer_counts_completed_transactions(cluster: EmbeddedBroker) -> None:
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "tx"}) as p:
        p.init_transactions(10)
        for commit in (True, True, False):
            p.begin_transaction()
            p.send("t", b"v", partition=0)
            (p.commit_transaction if commit else p.abort_transaction)(10)
        m = p.metrics()
    assert (m["transactions_committed"], m["transactions_aborted"]) == (2, 1)


def test_statistics_give_each_brokers_round_trip(cluster: EmbeddedBroker) -> None:
    cluster.set_rtt(1, 50)
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers, "statistics.interval.ms": 200,
                        "linger.ms": 0}) as p:
        deadline = time.monotonic() + 10
        brokers: dict[int, dict[str, object]] = {}
        while time.monotonic() < deadline:
            p.send("t", b"v", partition=0).result(10)
            brokers = (p.metrics()["statistics"] or {}).get("brokers", {})
            if brokers.get(1, {}).get("rtt_avg_us"):
                break
    assert set(brokers) == {1}
    b = brokers[1]
    assert b["state"] == "UP" and str(b["name"]).startswith("127.0.0.1:")
    assert 45_000 <= int(b["rtt_avg_us"]) < 1_000_000  # type: ignore[call-overload]
    assert b["throttle_avg_ms"] == 0
