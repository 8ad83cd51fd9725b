"""Issue 31: clients inherited through ``os.fork()`` are foreign in the child.

Each case runs tests/fork_child.py in a subprocess (so no pytest state is forked): the script creates
a client, uses it (its librdkafka threads run), forks; the child checks that every call raises
``IllegalStateError`` naming the parent's pid and exits with ``sys.exit(0)`` (after ``close()`` or not)
without a crash or a hang; the parent checks that its client still works. Bounded by timeouts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kipconsumer import KafkaProducer
from kipconsumer.broker import EmbeddedBroker

SCRIPT = Path(__file__).resolve().parent / "fork_child.py"
KINDS = ["producer", "consumer", "consumer-prefetch", "async-producer", "async-consumer",
         "async-consumer-prefetch"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("exit_how", ["exit", "close"])
@pytest.mark.parametrize("kind", KINDS)
def test_forked_child_gets_illegal_state_and_exits_cleanly(
        broker: EmbeddedBroker, topic_factory: Callable[..., str], kind: str, exit_how: str) -> None:
    topic = topic_factory(1)
    with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers}) as p:
        p.send(topic, b"x", partition=0).result(10)
    root = str(SCRIPT.parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(SCRIPT), kind, exit_how, broker.bootstrap_servers, topic],
                          env=env, capture_output=True, text=True, timeout=90)
    out = proc.stdout
    assert "CHILD-OK" in out, (out, proc.stderr[-3000:])
    assert "CHILD-STATUS 0" in out, (out, proc.stderr[-3000:])  # no SIGSEGV, no hang
    assert "PARENT-OK" in out and proc.returncode == 0, (out, proc.stderr[-3000:])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("exit_how", ["exit", "close"])
@pytest.mark.parametrize("kind", ["share", "async-share"])
def test_forked_share_consumer_is_foreign_in_the_child(kind: str, exit_how: str) -> None:
    """Issue #30: KafkaShareConsumer / AsyncKafkaShareConsumer under the same contract, on a broker of
    its own (share group settings are cluster-wide on the embedded broker)."""
    with EmbeddedBroker(num_brokers=1) as b:
        b.configure_share_groups(auto_offset_reset="earliest", heartbeat_interval_ms=500)
        b.create_topic("fork-share", 1)
        with KafkaProducer({"bootstrap.servers": b.bootstrap_servers}) as p:
            for i in range(3):
                p.send("fork-share", b"before-%d" % i, partition=0).result(10)
        root = str(SCRIPT.parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        cmd = [sys.executable, str(SCRIPT), kind, exit_how, b.bootstrap_servers, "fork-share"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
    out = proc.stdout
    assert "CHILD-OK" in out, (out, proc.stderr[-3000:])
    assert "CHILD-STATUS 0" in out, (out, proc.stderr[-3000:])
    assert "PARENT-OK" in out and proc.returncode == 0, (out, proc.stderr[-3000:])


GC_SCRIPT = Path(__file__).resolve().parent / "fork_gc_child.py"
GC_KINDS = ["records-of-closed-consumer", "records-in-traceback", "unclosed-consumer", "unclosed-producer",
            "futures-of-closed-producer", "share-records-of-closed-consumer", "unclosed-share-consumer",
            "failed-pipelines", "embedded-broker"]


def run_helper(*args: str) -> subprocess.CompletedProcess[str]:
    root = str(GC_SCRIPT.parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(GC_SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=420)


GcReport = tuple[dict[str, tuple[str, str]], subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def child_gc_report() -> GcReport:
    """One run of tests/fork_gc_child.py over every kind: kind -> (child's status, objects it collected)."""
    proc = run_helper("gc", *GC_KINDS)
    report = {}
    for line in proc.stdout.splitlines():
        if line.startswith("KIND "):
            _, kind, _, status, _, collected = line.split()
            report[kind] = (status, collected)
    return report, proc


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", GC_KINDS)
def test_forked_childs_garbage_collector_leaves_the_parents_librdkafka_alone(
        child_gc_report: GcReport, kind: str) -> None:
    """Issue #38: a child's gc.collect() over objects inherited in reference cycles (batches of a closed
    consumer, an error whose traceback holds one, unclosed clients, futures, share batches, the failed
    Pipelines of shared/repro/fork_gc.py, a running EmbeddedBroker) neither crashes nor hangs the child
    (it destroyed the parent's librdkafka handles: SIGSEGV in pthread_join, or a wait on a lock held by a
    parent's thread), and the parent's broker still works."""
    report, proc = child_gc_report
    assert kind in report, (proc.stdout, proc.stderr[-3000:])
    status, collected = report[kind]
    assert status == "0", (kind, status, proc.stdout, proc.stderr[-3000:])
    assert int(collected) > 0, (kind, "the child's collector found none of the cycles", proc.stdout)
    assert "PARENT-OK" in proc.stdout and proc.returncode == 0, (proc.stdout, proc.stderr[-3000:])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("how", ["with", "exit", "stop", "call"])
def test_embedded_broker_inherited_by_a_child(how: str) -> None:
    """Issue #38: a child of a process running an EmbeddedBroker exits at once (through ``with``, the
    interpreter's exit, or ``stop()``/``close()``), its calls raise IllegalStateError naming the parent
    while the properties read the parent's brokers, and the parent's broker keeps working."""
    proc = run_helper("broker", how)
    out = proc.stdout
    assert "CHILD-OK" in out, (out, proc.stderr[-3000:])
    assert "CHILD-STATUS 0" in out, (out, proc.stderr[-3000:])  # not CHILD-HUNG
    assert "PARENT-OK" in out and proc.returncode == 0, (out, proc.stderr[-3000:])
