"""One member of the chaos suite's consumer group (run as a separate process).

    python tests/chaos/chaos_member.py --bootstrap S --topic T --group G --run-id m3 --log m3.jsonl
        [--strategy range|cooperative-sticky|kip848] [--client kip|confluent] [--commit-interval 1.0]

``--strategy kip848``: ``group.protocol=consumer`` (KIP-848; the broker assigns, incrementally; no
session/heartbeat/assignor settings).

Processes records (a record's value is its unique id) and writes one JSON line per event to --log:

* ``{"ev": "start", "run": ..., "pid": ..., "t": ...}``
* ``{"ev": "rec", "p": partition, "o": offset, "id": value, "run": ..., "own": n, "t": ...}``
  (``own`` counts this run's assignment changes: records of one ownership period share it)
* ``{"ev": "assigned" | "revoked" | "lost", "parts": [...], "own": n, "mid": member id, "t": ...}``
* ``{"ev": "commit", "why": "periodic" | "revoked" | "assigned" | "retry", "ok": bool,
  "offsets": {p: next}, "err": "...", "t0": called, "t": returned}`` (``assigned``: cooperative-sticky
  commits right after a completed rebalance; ``retry``: after a retriable failure, right after the next poll)
* ``{"ev": "stall", "ms": ..., "t": ...}``, ``{"ev": "closed", "t": ...}``

Signals: SIGTERM -> leave the loop and ``close()`` (graceful, commits in on_partitions_revoked);
SIGUSR1 -> sleep --long-stall-ms before the next poll (past max.poll.interval.ms); SIGUSR2 -> sleep
--short-stall-ms (below it); --close-delay-ms N: after SIGTERM, stop polling for a random 0..N ms before
close(), so that rebalance events are pending when it starts. The log is flushed before every commit, so a
record whose offset was committed is always in the log, even after SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from typing import Any


class Log:
    def __init__(self, path: str, run: str) -> None:
        self.f = open(path, "a", buffering=1 << 16)  # noqa: SIM115
        self.run = run

    def write(self, ev: str, **kw: Any) -> None:
        kw["ev"] = ev
        kw["run"] = self.run
        kw.setdefault("t", time.time())
        self.f.write(json.dumps(kw, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self.f.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--strategy", default="range")
    ap.add_argument("--client", default="kip", choices=["kip", "confluent"])
    ap.add_argument("--commit-interval", type=float, default=1.0)
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    ap.add_argument("--max-poll-interval-ms", type=int, default=4000)
    ap.add_argument("--long-stall-ms", type=int, default=5500)
    ap.add_argument("--short-stall-ms", type=int, default=1500)
    ap.add_argument("--work-us", type=int, default=20, help="busy work per record (microseconds)")
    ap.add_argument("--close-delay-ms", type=int, default=0,
                    help="on SIGTERM, stop polling and wait a random 0..N ms before close(), so that "
                         "rebalance events are pending when close() starts")
    args = ap.parse_args(argv)

    log = Log(args.log, args.run_id)
    log.write("start", pid=os.getpid(), client=args.client, strategy=args.strategy)
    log.flush()

    state = {"stop": False, "stall_ms": 0}

    def on_term(signum: int, frame: object) -> None:
        state["stop"] = True

    def on_usr1(signum: int, frame: object) -> None:
        state["stall_ms"] = args.long_stall_ms

    def on_usr2(signum: int, frame: object) -> None:
        state["stall_ms"] = args.short_stall_ms

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGUSR2, on_usr2)

    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": max(100, args.session_timeout_ms // 6),
        "max.poll.interval.ms": args.max_poll_interval_ms,
        "partition.assignment.strategy": args.strategy,
    }
    if args.strategy == "kip848":
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            del conf[key]
        conf["group.protocol"] = "consumer"
    if os.environ.get("KIP_CHAOS_RDKAFKA_DEBUG"):  # e.g. "cgrp,consumer": librdkafka logs on stderr
        conf["debug"] = os.environ["KIP_CHAOS_RDKAFKA_DEBUG"]
        if args.client == "kip":
            _rdkafka_log_to_stderr()
    if args.client == "kip":
        return run_kip(args, conf, log, state)
    return run_confluent(args, conf, log, state)


def _rdkafka_log_to_stderr() -> None:
    """kipconsumer hands librdkafka's lines to the logger ``kipconsumer.librdkafka``: write them to
    stderr like confluent-kafka does (``%7|<time>|<facility> [<handle>] <message>``), with the time
    librdkafka logged them (a stalled member hands them over only when it polls again)."""
    import logging

    class Stderr(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            t = getattr(record, "rdkafka_time", None) or record.created
            sys.stderr.write(f"%{getattr(record, 'syslog_level', 7)}|{t:.3f}|{record.getMessage()}\n")

    rdlog = logging.getLogger("kipconsumer.librdkafka")
    rdlog.setLevel(logging.DEBUG)
    rdlog.addHandler(Stderr())
    rdlog.propagate = False


def _work(us: int) -> None:
    if us > 0:
        end = time.perf_counter() + us / 1e6
        while time.perf_counter() < end:
            pass


def run_kip(args: argparse.Namespace, conf: dict[str, Any], log: Log, state: dict[str, Any]) -> int:
    from kipconsumer import KafkaConsumer
    from kipconsumer.errors import CommitFailedError, KafkaError

    conf = dict(conf, **{"max.poll.records": 200})
    consumer = KafkaConsumer(conf)
    own = {"n": 0}

    def commit(why: str) -> None:
        log.flush()
        offsets = {tp.partition: pos for tp, pos in consumer._native.positions().items()}
        t0 = time.time()
        try:
            done = consumer.commit_sync(timeout=5.0)
            state["retry_commit"] = False
            log.write("commit", why=why, ok=True, t0=t0, offsets={str(tp.partition): om.offset
                                                                  for tp, om in done.items()})
        except (CommitFailedError, KafkaError) as e:
            # retriable (RebalanceInProgressError): commit again as soon as the next poll() has
            # completed the rebalance
            state["retry_commit"] = bool(getattr(e, "retriable", False))
            log.write("commit", why=why, ok=False, t0=t0, offsets={str(k): v for k, v in offsets.items()},
                      err=f"{type(e).__name__}:{getattr(e, 'code', None)}")
        log.flush()

    class Listener:
        def on_partitions_assigned(self, parts: list[Any]) -> None:
            own["n"] += 1
            log.write("assigned", parts=sorted(tp.partition for tp in parts), own=own["n"],
                      mid=_mid(consumer))
            log.flush()
            if args.strategy in ("cooperative-sticky", "kip848") and consumer._native.positions():
                # The rebalance has just completed (new generation): commit what the partitions
                # this member keeps have processed, instead of waiting for the next periodic commit
                # (commits sent during the rebalance fail with ILLEGAL_GENERATION on the mock).
                commit("assigned")

        def on_partitions_revoked(self, parts: list[Any]) -> None:
            commit("revoked")
            own["n"] += 1
            log.write("revoked", parts=sorted(tp.partition for tp in parts), own=own["n"])
            log.flush()

        def on_partitions_lost(self, parts: list[Any]) -> None:
            own["n"] += 1
            log.write("lost", parts=sorted(tp.partition for tp in parts), own=own["n"])
            log.flush()

    consumer.subscribe([args.topic], listener=Listener())
    last_commit = time.monotonic()
    while not state["stop"]:
        if state["stall_ms"]:
            ms, state["stall_ms"] = state["stall_ms"], 0
            log.write("stall", ms=ms)
            log.flush()
            time.sleep(ms / 1000.0)
        try:
            records = consumer.poll(0.2)
        except KafkaError as e:
            log.write("poll_error", err=f"{type(e).__name__}:{e.code}")
            continue
        for r in records:
            _work(args.work_us)
            log.write("rec", p=r.partition, o=r.offset, id=(r.value or b"").decode(), own=own["n"])
        if len(records):
            log.flush()
        if state.get("retry_commit") or time.monotonic() - last_commit >= args.commit_interval:
            commit("retry" if state.get("retry_commit") else "periodic")
            last_commit = time.monotonic()
    if args.close_delay_ms:
        time.sleep(random.uniform(0, args.close_delay_ms) / 1000.0)
    log.write("closing", metrics=consumer_metrics_safe(consumer))
    log.flush()
    consumer.close()  # on_partitions_revoked commits
    log.write("closed", metrics=consumer_metrics_safe(consumer))
    log.flush()
    return 0


def consumer_metrics_safe(consumer: Any) -> dict[str, Any]:
    try:
        return {k: v for k, v in consumer.metrics().items() if isinstance(v, int)}
    except Exception:
        return {}


def _mid(consumer: Any) -> str | None:
    try:
        mid: str | None = consumer.member_id()
        return mid
    except Exception:
        return None


def run_confluent(args: argparse.Namespace, conf: dict[str, Any], log: Log, state: dict[str, Any]) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in conf.items()}
    consumer = Consumer(conf)
    own = {"n": 0}
    positions: dict[int, int] = {}

    def commit(why: str, parts: list[int] | None = None) -> None:
        log.flush()
        offs = {p: o for p, o in positions.items() if parts is None or p in parts}
        if not offs:
            return
        t0 = time.time()
        try:
            consumer.commit(offsets=[TopicPartition(args.topic, p, o) for p, o in offs.items()],
                            asynchronous=False)
            log.write("commit", why=why, ok=True, t0=t0, offsets={str(k): v for k, v in offs.items()})
        except KafkaException as e:
            log.write("commit", why=why, ok=False, t0=t0, offsets={str(k): v for k, v in offs.items()},
                      err=f"KafkaException:{e.args[0].name()}")
        log.flush()

    def on_assign(c: Any, parts: list[Any]) -> None:
        own["n"] += 1
        log.write("assigned", parts=sorted(tp.partition for tp in parts), own=own["n"])
        log.flush()
        if args.strategy in ("cooperative-sticky", "kip848"):
            c.incremental_assign(parts)
        else:
            c.assign(parts)

    def on_revoke(c: Any, parts: list[Any]) -> None:
        ps = [tp.partition for tp in parts]
        commit("revoked", ps)
        for p in ps:
            positions.pop(p, None)
        own["n"] += 1
        log.write("revoked", parts=sorted(ps), own=own["n"])
        log.flush()

    def on_lost(c: Any, parts: list[Any]) -> None:
        for tp in parts:
            positions.pop(tp.partition, None)
        own["n"] += 1
        log.write("lost", parts=sorted(tp.partition for tp in parts), own=own["n"])
        log.flush()

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    last_commit = time.monotonic()
    while not state["stop"]:
        if state["stall_ms"]:
            ms, state["stall_ms"] = state["stall_ms"], 0
            log.write("stall", ms=ms)
            log.flush()
            time.sleep(ms / 1000.0)
        msgs = consumer.consume(200, 0.2)
        n = 0
        for m in msgs:
            if m.error():
                continue
            _work(args.work_us)
            part, offset = m.partition(), m.offset()
            assert part is not None and offset is not None
            log.write("rec", p=part, o=offset, id=(m.value() or b"").decode(), own=own["n"])
            positions[part] = offset + 1
            n += 1
        if n:
            log.flush()
        if time.monotonic() - last_commit >= args.commit_interval:
            commit("periodic")
            last_commit = time.monotonic()
    log.write("closing")
    log.flush()
    consumer.close()
    log.write("closed")
    log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
