"""The Java peer's benchmark modes behind bench/java_bench.py's latency, fairness, KIP-62 and memory rows
(tests/java/KafkaPeer.java ``poll-latency``, ``fairness``, ``poll-gap``, ``stall``), on real Kafka, at a
size that runs in well under a minute: each mode runs, reports what java_bench reads, and the KIP-62
mode tells a gap under ``max.poll.interval.ms`` (stays in the group) from one past it (leaves and
rejoins, no duplicate). Also: java_bench's ``--only`` refuses an unknown section before starting Kafka."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import java_peer
import pytest

from kipconsumer import KafkaProducer
from kipconsumer.testing import KafkaCluster

ROOT = Path(__file__).resolve().parent.parent


def _fill(servers: str, topic: str, counts: list[int]) -> None:
    with KafkaProducer({"bootstrap.servers": servers}) as p:
        for part, n in enumerate(counts):
            for i in range(n):
                p.send(topic, value=b"v" * 100, key=b"%d" % i, partition=part)
        p.flush(30)


def test_java_bench_only_refuses_an_unknown_section() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "java_bench.py"), "--only", "latency,bogus"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "bogus" in proc.stderr


@pytest.mark.kafka
def test_java_peer_latency_fairness_and_stall_modes(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    servers = kafka_cluster.bootstrap_servers
    topic = unique_name("jbench")
    counts = [3000, 200, 200, 200]
    kafka_cluster.create_topic(topic, len(counts), 1)
    _fill(servers, topic, counts)

    # 2 rounds of 2 timed polls each (3,600 records: K = max(1, 3600 // 1000 - 1)), after an untimed one
    (lat,) = java_peer.run("poll-latency", servers, topic, "3600", "--rounds", "2", "--pause-ms", "200",
                           "--warmup-records", "1000")
    assert lat["polls"] == 4
    assert 0 < lat["records"] <= 5 * 500
    assert 0 < lat["buffered_p50_us"] <= lat["buffered_p99_us"] <= lat["buffered_max_us"]
    assert lat["first_max_us"] <= lat["buffered_max_us"]

    (fair,) = java_peer.run("fairness", servers, topic, ",".join(map(str, counts)),
                            "--max-poll-records", "100", "--settle", "0.2")
    timeline = fair["timeline"]
    assert all(0 < sum(row) <= 100 for row in timeline)
    assert [sum(row[p] for row in timeline) for p in range(len(counts))] == counts

    proc = subprocess.Popen(java_peer.command("stall", servers, topic, "--stall", "1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    start, end = (json.loads(line) for line in out.splitlines())
    assert start["event"] == "stall_start" and 0 < start["records"] <= 500
    assert end == {"event": "stall_end"}


@pytest.mark.kafka
def test_java_peer_poll_gap_under_and_over_max_poll_interval(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    servers = kafka_cluster.bootstrap_servers
    topic = unique_name("jgap")
    kafka_cluster.create_topic(topic, 2, 1)
    _fill(servers, topic, [300, 300])
    common = ["--max-poll-interval-ms", "3000", "--session-timeout-ms", "3000", "--max-poll-records", "50"]

    (under,) = java_peer.run("poll-gap", servers, topic, unique_name("g-under"), "600", "--gap-ms", "2000",
                             *common, timeout=60)
    assert under["records"] == 600 and under["duplicates"] == 0
    assert under["events"] == []  # no revoke, no loss, no new assignment: still in the group
    assert under["commit_failures"] == 0
    assert under["records_after_gap_s"] is not None and under["records_after_gap_s"] < 2

    (over,) = java_peer.run("poll-gap", servers, topic, unique_name("g-over"), "600", "--gap-ms", "5000",
                            *common, timeout=60)
    assert over["records"] == 600 and over["duplicates"] == 0
    kinds = [e["event"] for e in over["events"]]
    assert {"revoked", "lost"} & set(kinds), over  # it left the group ...
    assert "assigned" in kinds, over  # ... and rejoined on its next poll
    assert over["records_after_gap_s"] is not None
