"""Our Java peer (tests/java/KafkaPeer.java): the Apache Kafka Java client, driven from tests.

Compiled once per source version and Kafka release with ``javac`` against the cached Kafka jars
(``kipconsumer.testing._distribution``) into ``~/.cache/kipconsumer/java-peer/<hash>/`` (outside the
source tree; ``$KIPCONSUMER_JAVA_PEER_CACHE`` overrides the root), under a file lock so parallel
sessions compile it once. ``./dev.sh setup`` runs ``python tests/java_peer.py`` to compile it ahead.

Each peer JVM is small (``-Xmx128m``, serial GC, C1 only): tests start several at a time next to
the Kafka broker's JVM on a 2-core machine.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kipconsumer.testing._distribution import find_java, resolve_distribution

SOURCE = Path(__file__).resolve().parent / "java" / "KafkaPeer.java"
JVM_FLAGS = ["-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]
# kafka-clients and what it loads at run time: the codecs' libraries and slf4j's API (no binding:
# the client logs nothing).
_RUNTIME_JARS = ("kafka-clients-", "lz4-java-", "snappy-java-", "zstd-jni-", "slf4j-api-")


class JavaPeerError(RuntimeError):
    """The Java peer could not be built, or a run of it failed (its stderr is in the message)."""


def _cache_root() -> Path:
    root = os.environ.get("KIPCONSUMER_JAVA_PEER_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "kipconsumer" / "java-peer"


def _jars(libs: Path) -> list[Path]:
    jars = []
    for prefix in _RUNTIME_JARS:
        found = sorted(libs.glob(f"{prefix}*.jar"))
        if not found:
            raise JavaPeerError(f"no {prefix}*.jar in {libs}: the Kafka distribution is incomplete")
        jars.append(found[-1])
    return jars


def build() -> str:
    """Compile the peer if needed and return the classpath that runs it (``java -cp CP KafkaPeer``)."""
    java = find_java()
    javac = shutil.which("javac") or str(Path(java).with_name("javac"))
    dist = resolve_distribution()
    jars = _jars(dist.libs)
    digest = hashlib.sha256(SOURCE.read_bytes() + dist.version.encode()).hexdigest()[:16]
    out = _cache_root() / digest
    classpath = os.pathsep.join([str(out), *(str(j) for j in jars)])
    if (out / "KafkaPeer.class").exists():
        return classpath
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "KafkaPeer.class").exists():
            return classpath
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        proc = subprocess.run([javac, "-J-Xmx256m", "--release", "17", "-nowarn", "-d", str(tmp), "-cp",
                               str(jars[0]), str(SOURCE)], capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise JavaPeerError(f"javac failed on {SOURCE}:\n{proc.stdout}{proc.stderr}")
        os.replace(tmp, out)
    return classpath


def command(*args: str) -> list[str]:
    """The argv that runs the peer with ``args`` (building it first if needed)."""
    return [find_java(), *JVM_FLAGS, "-cp", build(), "KafkaPeer", *args]


def run(*args: str, stdin: str | None = None, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Run the peer to completion and return its JSON lines; a non-zero exit raises JavaPeerError."""
    proc = subprocess.run(command(*args), input=stdin, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise JavaPeerError(f"KafkaPeer {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def partitions_for(keys: Iterable[bytes | None], partitions: int) -> list[int | None]:
    """The partition the Java producer's default partitioner gives each key (None for a null key)."""
    text = "".join(("null" if k is None else k.hex()) + "\n" for k in keys)
    proc = subprocess.run(command("partition-for", str(partitions)), input=text, capture_output=True,
                          text=True, timeout=60)
    if proc.returncode != 0:
        raise JavaPeerError(f"KafkaPeer partition-for exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return [None if line == "null" else int(line) for line in proc.stdout.splitlines()]


def java_defaults() -> dict[str, dict[str, Any]]:
    """The Java client's config defaults: ``{"producer": {...}, "consumer": {...}}``."""
    (doc,) = run("defaults")
    return doc


class GroupMember:
    """A Java consumer-group member (``KafkaPeer group``) running in the background.

    ``events`` collects its JSON lines as they arrive; :meth:`stop` closes its stdin (it commits what
    it processed, leaves the group and exits), :meth:`terminate` sends SIGTERM (the same through
    its shutdown hook), :meth:`kill` SIGKILLs it (a crash: no commit, no leave).
    """

    def __init__(self, bootstrap: str, topic: str, group: str, member: str, *, protocol: str = "classic",
                 assignor: str = "cooperative-sticky", extra: Sequence[str] = ()) -> None:
        self.member = member
        args = ["group", bootstrap, topic, group, "--member", member, "--protocol", protocol, *extra]
        if protocol == "classic":
            args += ["--assignor", assignor]
        self.proc = subprocess.Popen(command(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.events: list[dict[str, Any]] = []
        self._new: queue.Queue[dict[str, Any]] = queue.Queue()
        self._stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                event = json.loads(line)
                event["_t"] = time.monotonic()  # when the test saw it
                self.events.append(event)
                self._new.put(event)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if not line.startswith("SLF4J:"):
                self._stderr.append(line)

    def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        """The first event named ``event`` (already seen or arriving within ``timeout`` s)."""
        for e in list(self.events):
            if e["event"] == event:
                return e
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and self._new.empty():
                raise JavaPeerError(f"Java member {self.member}: no {event!r} event within {timeout} s "
                                    f"(exit {self.proc.poll()}); stderr: {''.join(self._stderr)[-3000:]}")
            try:
                e = self._new.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if e["event"] == event:
                return e

    def records(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "record"]

    def stop(self, timeout: float = 30.0) -> int:
        """Close stdin: the member commits, leaves the group, prints "closed" and exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self._wait(timeout)

    def terminate(self, timeout: float = 30.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self._wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self._wait(10.0)

    def _wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise JavaPeerError(f"Java member {self.member} did not exit within {timeout} s") from None
        self._reader.join(5)
        return rc

    def __enter__(self) -> GroupMember:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


if __name__ == "__main__":  # ./dev.sh setup: compile ahead of the tests
    print("Java peer classpath:", build().split(os.pathsep)[0], file=sys.stderr)
