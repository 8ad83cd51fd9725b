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
