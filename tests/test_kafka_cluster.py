"""kipconsumer.testing.KafkaCluster: real Apache Kafka nodes as JVM processes, their faults and their
clean-up; and what a client sees across those faults (an idempotent producer through a leader kill)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.errors import ConfigError
from kipconsumer.testing import KafkaCluster, KafkaClusterError

pytestmark = pytest.mark.kafka


def _jvm_pids_under(base: Path) -> list[int]:
    """PIDs of processes whose command line names a file under ``base`` (the nodes' configs)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if str(base).encode() in cmdline and b"kafka.Kafka" in cmdline:
            pids.append(int(entry))
    return pids


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[KafkaCluster]:
    with KafkaCluster(brokers=3) as cluster:
        yield cluster


def test_arguments_and_missing_tools_are_typed_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for bad in (0, 10, "3", True):
        with pytest.raises(ConfigError, match="brokers"):
            KafkaCluster(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="oauth_jwks_url: needs sasl_ssl=True"):
        KafkaCluster(oauth_jwks_url="http://127.0.0.1:1/jwks")
    with pytest.raises(ConfigError, match="oauth_jwks_url: expected an http"):
        KafkaCluster(sasl_ssl=True, oauth_jwks_url="file:///tmp/jwks.json")
    with pytest.raises(KafkaClusterError, match="Kafka 4.x or later"):
        KafkaCluster(version="3.9.0").start()
    with pytest.raises(KafkaClusterError, match="version"):
        KafkaCluster(version="latest").start()
    with pytest.raises(KafkaClusterError, match="not an Apache Kafka installation"):
        KafkaCluster(kafka_home=tmp_path).start()
    # no Maven and nothing cached: says what to install
    monkeypatch.setenv("KIPCONSUMER_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    java_home = Path(
        os.path.realpath(
            subprocess.run(
                ["sh", "-c", "command -v java"],
                capture_output=True,
                text=True,
                env={"PATH": os.defpath + ":/usr/bin"},
            ).stdout.strip()
        )
    )
    monkeypatch.setenv("JAVA_HOME", str(java_home.parent.parent))
    with pytest.raises(KafkaClusterError, match="Maven"):
        KafkaCluster().start()
    # no Java: says what to install
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(KafkaClusterError, match="Java 17"):
        KafkaCluster().start()


def test_a_stopped_cluster_leaves_no_jvm_and_keeps_its_logs() -> None:
    cluster = KafkaCluster()
    with cluster:
        base = cluster.base_dir
        assert cluster.version.startswith("4.")
        assert cluster.node_ids == [1]
        assert len(_jvm_pids_under(base)) == 1
        cluster.create_topic("kc-topic", 3)
        assert "KafkaCluster(brokers=1, 127.0.0.1:" in repr(cluster)
    assert _jvm_pids_under(base) == []
    assert "Kafka Server started" in cluster.log_path(1).read_text()
    assert not (base / "node-1" / "data").exists()
    with pytest.raises(Exception, match="stopped"):
        cluster.create_topic("again", 1)


def test_the_jvms_die_with_a_killed_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        from kipconsumer.testing import KafkaCluster
        k = KafkaCluster(base_dir={str(tmp_path)!r}).start()
        print("UP", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "UP"
        assert len(_jvm_pids_under(tmp_path)) == 1
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while _jvm_pids_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _jvm_pids_under(tmp_path) == []


def test_command_line_prints_bootstrap_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kipconsumer.testing",
            "kafka",
            "--topic",
            "cli:2",
            "--base-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("BOOTSTRAP=127.0.0.1:"), line
        with KafkaConsumer({"bootstrap.servers": line.split("=", 1)[1]}) as c:
            assert c.end_offsets([TopicPartition("cli", 0), TopicPartition("cli", 1)], timeout=10) == {
                TopicPartition("cli", 0): 0,
                TopicPartition("cli", 1): 0,
            }
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    assert rc == 0
    assert _jvm_pids_under(tmp_path) == []


def test_pause_and_kill_and_restart_a_node(three_nodes: KafkaCluster, unique_name) -> None:
    k = three_nodes
    assert k.node_ids == [1, 2, 3]
    assert len(k.bootstrap_servers.split(",")) == 3
    topic = unique_name("nodes")
    k.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    with KafkaProducer({"bootstrap.servers": k.bootstrap_servers, "acks": "all"}) as p:
        k.pause_broker(3)
        k.resume_broker(3)
        k.kill_broker(2)
        futures = [p.send(topic, value=b"%d" % i, partition=i % 3) for i in range(30)]
        p.flush(60)
        assert sorted(f.result(0).partition for f in futures) == sorted(i % 3 for i in range(30))
        k.start_broker(2)
    with pytest.raises(ConfigError, match="node_id"):
        k.kill_broker(7)


def test_idempotent_producer_through_a_leader_kill_loses_and_duplicates_nothing(
    three_nodes: KafkaCluster, unique_name
) -> None:
    """acks=all + idempotence: the leader of the partition is SIGKILLed and restarted while records
    flow; every future resolves, and the partition holds each record exactly once, in order."""
    k = three_nodes
    topic = unique_name("idem")
    k.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = k.admin().list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    n = 20_000
    errors: list[BaseException] = []
    with KafkaProducer(
        {"bootstrap.servers": k.bootstrap_servers, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    ) as p:
        futures = []
        killer = threading.Timer(0.5, k.kill_broker, args=(leader,))
        killer.start()
        for i in range(n):
            futures.append(p.send(topic, value=b"%d" % i, partition=0))
            if i % 1000 == 0:
                time.sleep(0.05)
        killer.join()
        k.start_broker(leader)
        p.flush(120)
        for f in futures:
            try:
                f.result(0)
            except BaseException as e:  # reported below
                errors.append(e)
    assert errors == []
    values: list[bytes] = []
    with KafkaConsumer({"bootstrap.servers": k.bootstrap_servers, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 60
        while len(values) < n and time.monotonic() < deadline:
            values.extend(r.value for r in c.poll(0.5))
    counts = Counter(values)
    assert len(values) == n and not [v for v, c in counts.items() if c > 1]
    assert values == [b"%d" % i for i in range(n)]


def test_cluster_ids_never_look_like_an_option() -> None:
    from kipconsumer.testing.kafka_cluster import _new_cluster_id

    ids = [_new_cluster_id() for _ in range(2000)]  # about 31 of 2000 random ids start with '-'
    assert not [i for i in ids if i.startswith("-")]
    assert len(set(ids)) == 2000 and all(len(i) == 22 for i in ids)
