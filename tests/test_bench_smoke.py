"""Smoke test of the benchmark harness (bench/): every script parses --help, and fairness.py runs end to
end on a tiny data set for kipconsumer only (EmbeddedBroker), so a broken harness shows up in CI.
No timing or fairness figure is asserted: only that the harness runs and reads every record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = [
    "all.py",
    "run.py",
    "bench_producer.py",
    "fairness.py",
    "liveness.py",
    "memory.py",
    "scaling.py",
    "profile_poll.py",
    "eos_bench.py",
    "queue_layout.py",
    "java_bench.py",
    "share_bench.py",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


def test_fairness_tiny_kipconsumer(tmp_path: Path) -> None:
    out = tmp_path / "fairness.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "fairness.py"),
            "--broker",
            "mock",
            "--deep",
            "600",
            "--shallow",
            "20",
            "--shallow-partitions",
            "3",
            "--max-poll-records",
            "50",
            "--repeat",
            "1",
            "--settle",
            "0.2",
            "--clients",
            "kipconsumer-proportional,kipconsumer-greedy",
            "--no-install",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert set(result["summary"]) == {"kipconsumer-proportional", "kipconsumer-greedy"}
    for runs in result["runs"].values():
        assert len(runs) == 1
        assert runs[0]["records"] == runs[0]["expected_records"] == 660
        assert runs[0]["polls_until_all_served"] is not None


def test_queue_layout_tiny_reads_every_record_in_both_layouts() -> None:
    """bench/c/queue_layout.c compiles against kipconsumer's librdkafka and reads every record
    through the shared consumer queue and through per-partition queues (EmbeddedBroker)."""
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "queue_layout.py"),
            "--broker",
            "mock",
            "--records",
            "3000",
            "--partitions",
            "3",
            "--repeat",
            "1",
            "--modes",
            "throughput",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith(("shared ", "partition "))]
    assert [r[0] for r in rows] == ["shared", "partition", "partition"]
    assert all(r[-1] == "-" and r[1] != "-" for r in rows)  # records/s measured, pause figures not run


def test_share_bench_tiny_on_the_embedded_broker(tmp_path: Path) -> None:
    """bench/share_bench.py end to end on the embedded broker (the two Python clients; Java runs on
    ``--broker kafka`` only): every client read every record and the ratio was computed."""
    out = tmp_path / "share.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "share_bench.py"), "--broker", "mock", "--records", "2000",
         "--partitions", "2", "--repeat", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert set(doc["runs"]) == {"kipconsumer", "confluent"}
    assert all(len(rs) == 1 and rs[0]["records"] == 2000 for rs in doc["runs"].values()), doc["runs"]
    assert "confluent" in doc["summary"]["ratio"]
    out = proc.stdout
    assert "warm-up kipconsumer: done" in out and "warm-up confluent: done" in out, out


@pytest.mark.kafka
def test_java_peer_share_bench_reads_every_record(kafka_cluster) -> None:  # type: ignore[no-untyped-def]
    """The Java peer's share-bench mode (bench/share_bench.py's Java client): two passes, each in a
    fresh share group reading from the earliest offset, the last one reported."""
    import uuid

    import java_peer
    from share_support import produce

    topic = f"share-bench-{uuid.uuid4().hex[:8]}"
    kafka_cluster.create_topic(topic, 2)
    produce(kafka_cluster, topic, 2, 40)
    groups = [f"sb-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for g in groups:
        kafka_cluster.set_group_config(g, {"share.auto.offset.reset": "earliest"})
    (doc,) = java_peer.run("share-bench", kafka_cluster.bootstrap_servers, topic, "40",
                           "--groups", ",".join(groups), timeout=120)
    assert doc["records"] == 40 and doc["seconds"] > 0 and doc["cpu_seconds"] > 0


def test_raw_c_runs_on_the_bound_library_and_on_glibc(tmp_path: Path) -> None:
    """run.py's two C floors read every record: `raw-c` on the library kipconsumer loads (bound to the
    bundled jemalloc) and `raw-c-glibc` on confluent-kafka's binary as it ships, which must not be
    bound (it was, unnoticed, when alloc_ab.py took the checkout's library as its plain side)."""
    sys.path.insert(0, str(BENCH.parent / "scripts"))
    sys.path.insert(0, str(BENCH))
    import native_bundle
    import run

    from kipconsumer._loader import librdkafka_path

    plain = Path(run.plain_librdkafka(str(tmp_path / "plain")))
    assert not native_bundle.is_bound(plain)
    assert native_bundle.is_bound(Path(librdkafka_path()))  # what ./dev.sh and the wheels load
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--broker", "mock", "--records", "3000", "--partitions", "3",
         "--repeat", "1", "--warmup", "0", "--clients", "raw-c,raw-c-glibc", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads(out.read_text())["summary"]
    for name in ("raw-c", "raw-c-glibc"):
        assert [r["records"] for r in summary[name]["runs"]] == [3000], name
