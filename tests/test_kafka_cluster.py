"""kipconsumer.testing.KafkaCluster: real Apache Kafka nodes as JVM processes, their faults and their
clean-up; and what a client sees across those faults (an idempotent producer through a leader kill)."""

from __future__ import annotations

import json
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
from typing import Any

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


_FORK_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    from kipconsumer import KafkaProducer
    from kipconsumer.errors import IllegalStateError
    from kipconsumer.testing import KafkaCluster

    PARENT = os.getpid()
    k = KafkaCluster().start()  # not a `with` block: the child's sys.exit() must not unwind one
    k.create_topic("t", 1)
    jvm, data = k.pid(1), k.base_dir / "node-1" / "data"

    def child_calls():
        ok = True
        for name, call in [("start", k.start), ("kill_broker", lambda: k.kill_broker(1)),
                           ("pause_broker", lambda: k.pause_broker(1)), ("pid", lambda: k.pid(1)),
                           ("start_broker", lambda: k.start_broker(1)), ("admin", k.admin),
                           ("create_topic", lambda: k.create_topic("c", 1)), ("enter", k.__enter__)]:
            try:
                call()
                print("CHILD-NO-ERROR", name, flush=True); ok = False
            except IllegalStateError as e:
                if f"process {PARENT}" not in str(e):
                    print("CHILD-BAD-MESSAGE", name, e, flush=True); ok = False
        ok = ok and k.node_ids == [1] and k.bootstrap_servers.startswith("127.0.0.1:")
        ok = ok and k.log_path(1).exists() and str(PARENT) in repr(k)
        with KafkaProducer({"bootstrap.servers": k.bootstrap_servers}) as p:  # the child's own client
            p.send("t", b"from-child").result(30)
        return ok

    for how in ("with", "exit", "calls"):
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)
            if how == "with":
                k.__exit__(None, None, None)  # what leaving `with KafkaCluster()` does in the child
            elif how == "calls":
                print("CHILD-OK" if child_calls() else "CHILD-FAILED", flush=True)
            sys.exit(0)  # the interpreter's exit: atexit stops every cluster it knows
        _, status = os.waitpid(pid, 0)
        print(how, "CHILD-STATUS", os.waitstatus_to_exitcode(status), flush=True)
        time.sleep(1)
        alive = os.path.exists(f"/proc/{jvm}") and k.pid(1) == jvm
        with KafkaProducer({"bootstrap.servers": k.bootstrap_servers}) as p:
            p.send("t", b"after").result(30)
        print(how, "PARENT-HEALTHY" if alive and data.exists() else "PARENT-BROKEN", flush=True)
    k.stop()
    print("DONE", flush=True)
""")


def test_a_forked_child_leaves_the_parents_cluster_alone() -> None:
    """Issue #38 (probe3 D4): a child leaving ``with``, exiting (atexit), or calling the node controls
    used to remove the parent's running node's data (its Popen could not wait for a JVM that is not
    its child: "exited", so stop() removed the data) and kill it. Now the child's stop() returns at
    once, its controls raise IllegalStateError naming the parent, its reads and its own clients work."""
    proc = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True, timeout=300)
    out = proc.stdout
    for how in ("with", "exit", "calls"):
        assert f"{how} CHILD-STATUS 0" in out, (out, proc.stderr[-3000:])
        assert f"{how} PARENT-HEALTHY" in out, (out, proc.stderr[-3000:])
    assert "CHILD-OK" in out and "DONE" in out and proc.returncode == 0, (out, proc.stderr[-3000:])


_OWNER_SCRIPT = textwrap.dedent("""
    import gc, json, sys, time
    from kipconsumer.testing import KafkaCluster
    k = KafkaCluster().start()
    k.create_topic("t", 1)
    print(json.dumps({"base": str(k.base_dir), "jvm": k.pid(1)}), flush=True)
    if sys.argv[1] == "drop":
        del k
        gc.collect()
        sys.exit(0)
    time.sleep(600)
""")


def _owner(tmp_path: Path, how: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", _OWNER_SCRIPT, how], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def _gone(pid: int, within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
                return True
        except (FileNotFoundError, IndexError):
            return True
        time.sleep(0.1)
    return False


def test_what_a_killed_or_careless_owner_leaves_is_removed(tmp_path: Path) -> None:
    """Issue #38 (probe3 L1): the data of a cluster whose process was SIGKILLed stayed in the temp folder
    for ever, and so did a cluster's dropped without stop() (the exit handler knew clusters through a
    WeakSet). Now a dropped cluster is stopped at exit, and the next cluster started removes the data
    a dead owner left (its logs stay for a day: tests/test_kafka_cluster_hygiene.py has the rule)."""
    killed, first = _owner(tmp_path, "sleep")
    killed.kill()
    killed.wait()
    assert _gone(first["jvm"])  # the parent-death signal
    killed_base = Path(first["base"])
    assert (killed_base / "node-1" / "data").exists()  # nobody could remove it yet

    dropped, second = _owner(tmp_path, "drop")  # its start sweeps the temp folder
    assert dropped.wait(120) == 0
    assert _gone(second["jvm"])
    assert not (killed_base / "node-1" / "data").exists()
    assert "Kafka Server started" in (killed_base / "node-1" / "server.log").read_text()
    assert not (Path(second["base"]) / "node-1" / "data").exists()
    assert (Path(second["base"]) / "node-1" / "server.log").exists()
