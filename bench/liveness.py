"""Liveness under load: does a member that hogs the GIL get thrown out of its group?

    python bench/liveness.py [--broker kafka|tansu|mock] [--session-ms 6000] [--busy-factor 3]
        [--hold gil|loop]
                             [--repeat 1] [--clients a,b,...] [--json OUT]

For each client library, a 2-member group on one topic (4 partitions), each member in its own process,
both of the same library:

* the *steady* member polls all the time (it sees every rebalance of the group);
* the *busy* member joins, waits until the group is stable (no assignment change for 3 s), then its
  Python thread runs a busy loop for --busy-factor x session.timeout.ms (default 3 x 6000 ms = 18 s)
  without calling poll(), then polls again for 2 x session.timeout.ms + 2 s.

``--hold gil`` (default) raises the interpreter's switch interval above the busy time, so no other
Python thread of that process runs during the loop (as in a long call into a C extension that keeps the
GIL); ``--hold loop`` is a plain Python loop (the GIL is handed over every 5 ms).
max.poll.interval.ms is 60 s for every client, above the busy time: a rebalance here is *unwanted*
(the member was alive and within its poll interval, only its heartbeats stopped).

Counted from the start of the busy loop to the end: rebalances the steady member went through (each
assignment it received) and the partitions the busy member lost/had revoked. kipconsumer heartbeats from
librdkafka's native threads, so it must show none.
Clients: kipconsumer, kipconsumer-aio (kipconsumer.aio, the loop blocked as aiokafka's), confluent-kafka,
aiokafka, kafka-python (peers installed with pip unless
--no-install, or skipped with a printed reason). The default broker is Tansu (kafka-python cannot
bootstrap from the mock cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ALL_CLIENTS = ["kipconsumer", "kipconsumer-aio", "confluent-kafka", "aiokafka", "kafka-python"]
PEER_MODULE = {"aiokafka": "aiokafka", "kafka-python": "kafka"}
PARTITIONS = 4
STABLE_S = 3.0


class Events:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.assigned: set[int] = set()
        self.last = time.time()

    def add(self, kind: str, parts: list[int]) -> None:
        now = time.time()
        self.items.append({"t": now, "event": kind, "partitions": sorted(parts)})
        self.last = now
        if kind == "assigned":
            self.assigned |= set(parts)
        else:
            self.assigned -= set(parts)
        print(f"EVENT {kind} {sorted(parts)}", flush=True)


def hold(seconds: float, mode: str) -> int:
    """Busy loop on this thread for `seconds`; with mode 'gil' no other Python thread runs meanwhile."""
    old = sys.getswitchinterval()
    if mode == "gil":
        sys.setswitchinterval(seconds + 10)
    end = time.monotonic() + seconds
    x = 0
    try:
        while time.monotonic() < end:
            x += 1
    finally:
        sys.setswitchinterval(old)
    return x


def sync_member(role: str, poll: Callable[[], None], ev: Events, a: argparse.Namespace) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while not ev.assigned and time.monotonic() < deadline:
        poll()
    if not ev.assigned:
        raise SystemExit("no assignment within 90 s")
    out: dict[str, Any] = {}
    if role == "steady":
        print("READY", flush=True)
        while not os.path.exists(a.stop_file):
            poll()
    else:
        while time.time() - ev.last < STABLE_S:
            poll()
        out["busy_start"] = time.time()
        print("BUSY_START", flush=True)
        hold(a.busy_s, a.hold)
        out["busy_end"] = time.time()
        print("BUSY_END", flush=True)
        end = time.monotonic() + a.post_s
        while time.monotonic() < end:
            poll()
        out["window_end"] = time.time()  # before close(): leaving the group is a wanted rebalance
    return out


def run_kipconsumer(role: str, a: argparse.Namespace) -> dict[str, Any]:
    from kipconsumer import KafkaConsumer

    ev = Events()

    class L:
        def on_partitions_assigned(self, parts: list[Any]) -> None:
            ev.add("assigned", [p.partition for p in parts])

        def on_partitions_revoked(self, parts: list[Any]) -> None:
            ev.add("revoked", [p.partition for p in parts])

        def on_partitions_lost(self, parts: list[Any]) -> None:
            ev.add("lost", [p.partition for p in parts])

    c = KafkaConsumer(
        {
            "bootstrap.servers": a.bootstrap,
            "group.id": a.group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": a.session_ms,
            "heartbeat.interval.ms": a.session_ms // 3,
            "max.poll.interval.ms": 60000,
            "max.poll.records": 500,
        }
    )
    c.subscribe([a.topic], listener=L())
    out = sync_member(role, lambda: c.poll(0.2), ev, a)
    out["metrics"] = {
        k: v
        for k, v in c.metrics().items()
        if k in ("rebalances", "poll_interval_expiries", "heartbeats", "heartbeat_errors")
    }
    c.close()
    out["events"] = ev.items
    return out


def run_confluent(role: str, a: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Consumer

    ev = Events()
    c = Consumer(
        {
            "bootstrap.servers": a.bootstrap,
            "group.id": a.group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": a.session_ms,
            "heartbeat.interval.ms": a.session_ms // 3,
            "max.poll.interval.ms": 60000,
            "enable.partition.eof": False,
        }
    )
    c.subscribe(
        [a.topic],
        on_assign=lambda c_, ps: ev.add("assigned", [p.partition for p in ps]),
        on_revoke=lambda c_, ps: ev.add("revoked", [p.partition for p in ps]),
        on_lost=lambda c_, ps: ev.add("lost", [p.partition for p in ps]),
    )
    out = sync_member(role, lambda: c.consume(500, 0.2) and None, ev, a)
    c.close()
    out["events"] = ev.items
    return out


def run_kafka_python(role: str, a: argparse.Namespace) -> dict[str, Any]:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    ev = Events()

    class L(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_assigned(self, parts: Any) -> None:
            ev.add("assigned", [p.partition for p in parts])

        def on_partitions_revoked(self, parts: Any) -> None:
            ev.add("revoked", [p.partition for p in parts])

    c = KafkaConsumer(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        auto_offset_reset="earliest",
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.session_ms // 3,
        max_poll_interval_ms=60000,
        max_poll_records=500,
    )
    c.subscribe([a.topic], listener=L())
    out = sync_member(role, lambda: c.poll(timeout_ms=200) and None, ev, a)
    c.close()
    out["events"] = ev.items
    return out


def run_aiokafka(role: str, a: argparse.Namespace) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    ev = Events()

    class L(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_assigned(self, parts: Any) -> None:
            ev.add("assigned", [p.partition for p in parts])

        async def on_partitions_revoked(self, parts: Any) -> None:
            ev.add("revoked", [p.partition for p in parts])

    async def go() -> dict[str, Any]:
        c = AIOKafkaConsumer(
            bootstrap_servers=a.bootstrap,
            group_id=a.group,
            auto_offset_reset="earliest",
            session_timeout_ms=a.session_ms,
            heartbeat_interval_ms=a.session_ms // 3,
            max_poll_interval_ms=60000,
            max_poll_records=500,
        )
        await c.start()
        c.subscribe([a.topic], listener=L())
        out: dict[str, Any] = {}
        try:
            deadline = time.monotonic() + 90
            while not ev.assigned and time.monotonic() < deadline:
                await c.getmany(timeout_ms=200)
            if not ev.assigned:
                raise SystemExit("no assignment within 90 s")
            if role == "steady":
                print("READY", flush=True)
                while not os.path.exists(a.stop_file):
                    await c.getmany(timeout_ms=200)
            else:
                while time.time() - ev.last < STABLE_S:
                    await c.getmany(timeout_ms=200)
                out["busy_start"] = time.time()
                print("BUSY_START", flush=True)
                hold(a.busy_s, a.hold)  # blocks the event loop, as CPU-bound work in a handler does
                out["busy_end"] = time.time()
                print("BUSY_END", flush=True)
                end = time.monotonic() + a.post_s
                while time.monotonic() < end:
                    await c.getmany(timeout_ms=200)
                out["window_end"] = time.time()
        finally:
            await c.stop()
        out["events"] = ev.items
        return out

    return asyncio.run(go())


def run_kipconsumer_aio(role: str, a: argparse.Namespace) -> dict[str, Any]:
    """kipconsumer.aio's AsyncKafkaConsumer, with the same schedule as aiokafka's member."""
    from kipconsumer.aio import AsyncKafkaConsumer

    ev = Events()

    class L:
        async def on_partitions_assigned(self, parts: Any) -> None:
            ev.add("assigned", [p.partition for p in parts])

        async def on_partitions_revoked(self, parts: Any) -> None:
            ev.add("revoked", [p.partition for p in parts])

    async def go() -> dict[str, Any]:
        c = AsyncKafkaConsumer({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                                "auto.offset.reset": "earliest", "session.timeout.ms": a.session_ms,
                                "heartbeat.interval.ms": a.session_ms // 3, "max.poll.interval.ms": 60000,
                                "max.poll.records": 500})
        c.subscribe([a.topic], L())
        out: dict[str, Any] = {}
        try:
            deadline = time.monotonic() + 90
            while not ev.assigned and time.monotonic() < deadline:
                await c.poll(0.2)
            if not ev.assigned:
                raise SystemExit("no assignment within 90 s")
            if role == "steady":
                print("READY", flush=True)
                while not os.path.exists(a.stop_file):
                    await c.poll(0.2)
            else:
                while time.time() - ev.last < STABLE_S:
                    await c.poll(0.2)
                out["busy_start"] = time.time()
                print("BUSY_START", flush=True)
                hold(a.busy_s, a.hold)  # blocks the event loop, as CPU-bound work in a handler does
                out["busy_end"] = time.time()
                print("BUSY_END", flush=True)
                end = time.monotonic() + a.post_s
                while time.monotonic() < end:
                    await c.poll(0.2)
                out["window_end"] = time.time()
        finally:
            await c.close()
        out["events"] = ev.items
        return out

    return asyncio.run(go())


WORKERS: dict[str, Callable[[str, argparse.Namespace], dict[str, Any]]] = {
    "kipconsumer": run_kipconsumer,
    "confluent-kafka": run_confluent,
    "aiokafka": run_aiokafka,
    "kipconsumer-aio": run_kipconsumer_aio,
    "kafka-python": run_kafka_python,
}


# ---------------------------------------------------------------------------------------------
class Member:
    def __init__(self, cmd: list[str]) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.all: list[str] = []
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr or []), daemon=True).start()

    def _read(self) -> None:
        for ln in self.proc.stdout or []:
            self.all.append(ln)
            self.lines.put(ln.strip())

    def wait_for(self, word: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if self.lines.get(timeout=0.5) == word:
                    return True
            except queue.Empty:
                if self.proc.poll() is not None:
                    return False
        return False

    def result(self, timeout: float) -> dict[str, Any] | None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        time.sleep(0.2)
        js = [ln for ln in self.all if ln.startswith("{")]
        return json.loads(js[-1]) if js and self.proc.returncode == 0 else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def one_run(client: str, broker: Any, topic: str, a: argparse.Namespace, tag: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        stop = os.path.join(tmp, "stop")
        base = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            client,
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            topic,
            "--group",
            f"liveness-{tag}",
            "--session-ms",
            str(a.session_ms),
            "--busy-s",
            str(a.busy_s),
            "--post-s",
            str(a.post_s),
            "--hold",
            a.hold,
            "--stop-file",
            stop,
        ]
        steady = Member([*base, "--role", "steady"])
        busy = None
        try:
            if not steady.wait_for("READY", 90):
                return {"error": "steady member got no assignment: " + "".join(steady.err)[-300:]}
            busy = Member([*base, "--role", "busy"])
            b = busy.result(a.busy_s + a.post_s + 150)
            Path(stop).touch()
            s = steady.result(60)
            if b is None or s is None:
                which = "busy" if b is None else "steady"
                errs = (busy if b is None else steady).err
                return {"error": f"{which} member failed: " + "".join(errs)[-400:]}
        finally:
            steady.kill()
            if busy is not None:
                busy.kill()
    t0, t1, t2 = b["busy_start"], b["busy_end"], b["window_end"]
    steady_after = [e for e in s["events"] if t0 <= e["t"] <= t2]
    busy_after = [e for e in b["events"] if t0 <= e["t"] <= t2]
    return {
        "rebalances": sum(1 for e in steady_after if e["event"] == "assigned"),
        "busy_member_lost_or_revoked": sum(1 for e in busy_after if e["event"] in ("lost", "revoked")),
        "busy_seconds": t1 - t0,
        "first_rebalance_after_s": (min(e["t"] for e in steady_after) - t0) if steady_after else None,
        "steady_events": [{**e, "t": round(e["t"] - t0, 2)} for e in s["events"]],
        "busy_events": [{**e, "t": round(e["t"] - t0, 2)} for e in b["events"]],
        "busy_metrics": b.get("metrics"),
    }


def run(args: argparse.Namespace, broker: Any = None, quiet: bool = False) -> dict[str, Any]:
    args.busy_s = args.busy_factor * args.session_ms / 1000
    args.post_s = 2 * args.session_ms / 1000 + 2
    clients = args.clients.split(",")
    skipped: dict[str, str] = {}
    for c in list(clients):
        mod = PEER_MODULE.get(c)
        if mod:
            why = _common.ensure_peer(mod, install=not args.no_install)
            if why:
                skipped[c] = why
                clients.remove(c)
                print(f"  skipping {c}: {why}", flush=True)
    own = broker is None
    if own:
        broker = _common.start_broker(args.broker)
    topic = f"liveness-{os.getpid()}"
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    try:
        broker.create_topic(topic, PARTITIONS)
        _common.fill_partitions(broker.bootstrap, topic, [250] * PARTITIONS, 100)
        if not quiet:
            print(
                f"broker {broker.name} at {broker.bootstrap}: session.timeout.ms={args.session_ms}, busy "
                f"{args.busy_s:.0f} s ({args.hold}), ~{args.busy_s + args.post_s + 15:.0f} s per run",
                flush=True,
            )
        prog = _common.Progress(args.repeat * len(clients))
        for rep in range(args.repeat):
            for name in clients:
                prog.step(f"liveness {name} run {rep + 1}")
                r = one_run(name, broker, topic, args, f"{name}-{rep}-{os.getpid()}")
                if "error" in r:
                    print(f"  {name}: {r['error']}", flush=True)
                    skipped.setdefault(name, r["error"][-200:])
                    continue
                print(
                    f"  {name}: {r['rebalances']} rebalance(s) seen by the steady member, busy member "
                    f"lost/revoked {r['busy_member_lost_or_revoked']} time(s)",
                    flush=True,
                )
                runs[name].append(r)
    finally:
        if own:
            broker.stop()
    summary = {
        name: {
            "runs": len(rs),
            "rebalances": _common.stats([float(r["rebalances"]) for r in rs]),
            "busy_member_lost_or_revoked": _common.stats(
                [float(r["busy_member_lost_or_revoked"]) for r in rs]
            ),
        }
        for name, rs in runs.items()
        if rs
    }
    result = {
        "config": {
            "broker": broker.name,
            "session_timeout_ms": args.session_ms,
            "busy_s": args.busy_s,
            "hold": args.hold,
            "max_poll_interval_ms": 60000,
            "repeat": args.repeat,
        },
        "skipped": skipped,
        "runs": runs,
        "summary": summary,
    }
    print_table(result)
    return result


def print_table(result: dict[str, Any]) -> None:
    cfg = result["config"]
    print(
        f"\nliveness ({cfg['broker']}, session.timeout.ms={cfg['session_timeout_ms']}, busy loop "
        f"{cfg['busy_s']:.0f} s holding the {'GIL' if cfg['hold'] == 'gil' else 'thread'}; "
        f"median [min-max] over {cfg['repeat']} run(s))"
    )
    print(f"{'client':18} {'unwanted rebalances':>22} {'busy member lost/revoked':>26}")
    f = _common.fmt_stats
    for name, s in result["summary"].items():
        print(f"{name:18} {f(s['rebalances']):>22} {f(s['busy_member_lost_or_revoked']):>26}")
    for name, why in result["skipped"].items():
        print(f"{name:18} skipped: {why}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["kafka", "tansu", "mock"], default="kafka")
    _common.add_kafka_version_argument(ap)
    ap.add_argument("--session-ms", type=int, default=6000)
    ap.add_argument("--busy-factor", type=float, default=3.0, help="busy time in units of session.timeout.ms")
    ap.add_argument("--hold", choices=["gil", "loop"], default="gil")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--clients", default=",".join(ALL_CLIENTS))
    ap.add_argument(
        "--no-install", action="store_true", help="skip missing peers instead of pip-installing them"
    )
    ap.add_argument("--json", help="also write the result here")
    for hidden in ("--worker", "--role", "--bootstrap", "--topic", "--group", "--stop-file"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--busy-s", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--post-s", type=float, help=argparse.SUPPRESS)
    return ap


def main() -> int:
    args = parser().parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args.role, args)), flush=True)
        return 0
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if result["summary"] else 1


if __name__ == "__main__":
    sys.exit(main())
