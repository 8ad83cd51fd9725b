"""The counters the metrics exporters need from the clients' ``metrics()`` (issue #40 item 4): poll time,
rebalance time and commit failures of the consumer, completed transactions of the producer, and the
per-broker round trip and throttle time from librdkafka's statistics. Embedded broker."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

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


_CLOSE_WHILE_READ = """
import sys, threading, time
from kipconsumer import KafkaConsumer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
with EmbeddedBroker(1) as b:
    b.create_topic("t", 64)
    end, cycles = time.monotonic() + float(sys.argv[1]), 0
    while time.monotonic() < end:
        c = KafkaConsumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g"})
        c.assign([TopicPartition("t", p) for p in range(64)])
        stop = threading.Event()
        def scrape():
            while not stop.is_set():
                m = c.metrics()
                assert m.get("closed") or len(m["partition_lag"]) <= 64
        threads = [threading.Thread(target=scrape) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.01)
        c.close(0.5)
        stop.set()
        for t in threads:
            t.join()
        cycles += 1
    print("cycles", cycles)
"""


def test_metrics_from_other_threads_while_the_consumer_closes_never_crashes(tmp_path: Path) -> None:
    """A scrape (metrics() on the HTTP server's thread) racing close(): main crashed the interpreter
    (SIGSEGV, within ~1 s of this loop) reading the buffer's partitions the close had freed."""
    script = tmp_path / "close_while_read.py"
    script.write_text(_CLOSE_WHILE_READ)
    r = subprocess.run([sys.executable, str(script), "4"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert int(r.stdout.split()[-1]) >= 5
