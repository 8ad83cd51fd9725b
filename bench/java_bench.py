"""kipconsumer beside the Apache Kafka Java client and confluent-kafka, on real Apache Kafka.

    python bench/java_bench.py [--records 200000] [--partitions 6] [--value-size 100] [--repeat 1]
        [--only consume,produce,latency,fairness,kip62,memory]

Starts one Kafka node (kipconsumer.testing.KafkaCluster), then per client, each in its own process:

* consume: read ``--records`` records of a filled topic from the beginning (every partition
  assigned), touching every value; the Java client through our peer (tests/java/KafkaPeer.java
  ``consume-bench``, ``max.poll.records=500``; it reads the topic twice in one JVM and reports the
  second pass, after the JIT warmed up), confluent-kafka ``consume(500)`` (``fetch.queue.backoff.ms``
  10, and ``-tuned``: every fetch setting kipconsumer gives librdkafka, bench/workers.py), kipconsumer
  iterating ``poll()`` batches' values, kipconsumer ``to_arrow()`` (one pass each), and the raw C
  consumer (bench/c/raw_consumer.c) on the library kipconsumer loads (``raw-c``) and on glibc
  (``raw-c-glibc``, bench/run.py's plain_librdkafka), timed from ``assign()`` as the others;
* produce: send ``--records`` keyed records of ``--value-size`` bytes with default settings
  (acks=all, idempotent) and flush: the Java client (second of two passes), confluent-kafka
  ``produce()``, kipconsumer ``send()``.

* latency: the time of one poll() returning up to 500 already-buffered records (the bench/workers.py
  ``*-latency`` clients: 10 rounds of a 1 s pause then timed polls; Java's peer ``poll-latency``
  times ``consumer.poll(Duration.ofSeconds(1))`` with System.nanoTime the same way, after an untimed
  warm-up read by another consumer in the same JVM): p50, p99, max;
* fairness (KIP-41): a skewed backlog (partition 0 holds ``--deep`` records, ``--shallow-partitions``
  hold ``--shallow``), ``max.poll.records`` = ``--max-poll-records``; bench/fairness.py's workers and
  analysis (Java: peer ``fairness``): polls until every partition was served, longest gap, polls until
  the shallow partitions are drained;
* kip62: one group member per client, ``max.poll.interval.ms`` = ``--poll-interval-ms``; it polls,
  commits, then stops polling for 1 s less than that ("under": it must stay in the group, no rebalance,
  no duplicate) or 2 s more ("over": it leaves the group and rejoins on its next poll), then reads the
  rest of the topic committing after each poll: rebalance events after the gap, duplicates, seconds
  from the gap's end to records again, failed commits (Java: peer ``poll-gap``);
* memory: a consumer polls once, then does not poll for ``--stall`` seconds with the consume topic's
  backlog unread: RSS at the stall's start, end and maximum, and the process's peak (VmHWM)
  (bench/memory.py's stall worker; Java: peer ``stall``, its RSS read from /proc/<pid>/status by this
  script; the peer JVM runs with -Xmx128m, serial GC, C1 only as every peer JVM here).

``--only`` runs some of the sections (comma-separated); default all.
Prints records/s and process CPU per record (all threads: the client's own cost, JVM JIT and GC
included for Java, start-up excluded for all), and each client's ratios to the Java client's.
Results depend on the machine's load: on a shared 2-core machine run it alone, and read ratios
from one run, never absolute numbers across runs. Results go to bench/results/<date>-java.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _common import ROOT, add_kafka_version_argument, fill_partitions, run_json  # noqa: E402

# confluent-kafka's consume loop, after `c = Consumer(...)` (CK_SETTINGS: the settings beyond the common ones)
_CK_CONSUMER = """
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": BOOT, "group.id": "bench-ck", "enable.auto.commit": False, **CK_SETTINGS})
c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTS)])
start(); n = 0; size = 0
while n < N:
    for m in c.consume(500, 0.5):
        if m.error() is None:
            size += len(m.value()); n += 1
done(n); c.close()
"""

_PY_CONSUMERS = {
    "confluent-kafka": 'CK_SETTINGS = {"fetch.queue.backoff.ms": 10}' + _CK_CONSUMER,
    # every fetch setting kipconsumer gives librdkafka (bench/workers.py)
    "confluent-kafka-tuned": f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from workers import like_for_like_settings
CK_SETTINGS = like_for_like_settings(BOOT)
""" + _CK_CONSUMER,
    "kipconsumer": """
from kipconsumer import KafkaConsumer, TopicPartition
c = KafkaConsumer({"bootstrap.servers": BOOT, "enable.auto.commit": False})
tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
c.assign(tps)
for tp in tps:
    c.seek(tp, 0)
start(); n = 0; size = 0
while n < N:
    for r in c.poll(0.5):
        size += len(r.value); n += 1
done(n); c.close()
""",
    "kipconsumer-arrow": """
import pyarrow  # imported before the clock starts, as by any Arrow application
from kipconsumer import KafkaConsumer, TopicPartition
c = KafkaConsumer({"bootstrap.servers": BOOT, "enable.auto.commit": False})
tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
c.assign(tps)
for tp in tps:
    c.seek(tp, 0)
start(); n = 0
while n < N:
    n += c.poll(0.5).to_arrow().num_rows
done(n); c.close()
""",
}

_PY_PRODUCERS = {
    "confluent-kafka": """
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOT, "enable.idempotence": True, "linger.ms": 5})
p.list_topics(TOPIC, timeout=30)
v = b"x" * SIZE
start()
for i in range(N):
    while True:
        try:
            p.produce(TOPIC, key=str(i).encode(), value=v)
            break
        except BufferError:
            p.poll(0.01)
    if i % 10000 == 0:
        p.poll(0)
assert p.flush(120) == 0
done(N)
""",
    "kipconsumer": """
from kipconsumer import KafkaProducer
p = KafkaProducer({"bootstrap.servers": BOOT})
p.partitions_for(TOPIC)
v = b"x" * SIZE
start()
send = p.send
for i in range(N):
    send(TOPIC, value=v, key=str(i).encode())
p.flush(120)
done(N); p.close()
""",
}

_PRELUDE = """
import json, resource, sys, time
BOOT, TOPIC, N, PARTS, SIZE = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def start():
    global _t0, _c0
    _t0, _c0 = time.monotonic(), _cpu()
def done(n):
    out = {"records": n, "seconds": time.monotonic() - _t0, "cpu_seconds": _cpu() - _c0}
    print(json.dumps(out), flush=True)
"""


def _python(body: str, args: list[str]) -> tuple[dict[str, float] | None, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return run_json([sys.executable, "-c", _PRELUDE + body, *args], timeout=300, env=env)


def _raw_c(exe: str, boot: str, topic: str, parts: int, n: int) -> tuple[dict[str, float] | None, str]:
    """bench/c/raw_consumer.c's run in this script's terms: timed from assign(), as the Python bodies
    (start() after assign) and the Java peer."""
    out, err = run_json([exe, boot, topic, str(parts), str(n)], timeout=300)
    if out is None:
        return None, err
    return {"records": out["records"], "seconds": out["seconds_from_assign"],
            "cpu_seconds": out["cpu_s_from_assign"]}, ""


def _java(command: list[str]) -> tuple[dict[str, float] | None, str]:
    import java_peer

    return run_json(java_peer.command(*command), timeout=300)


def _row(name: str, runs: list[dict[str, float]], ref: dict[str, float] | None) -> str:
    rate = statistics.median(r["records"] / r["seconds"] for r in runs)
    cpu_ns = statistics.median(r["cpu_seconds"] / r["records"] * 1e9 for r in runs)
    line = f"  {name:<20} {rate:>12,.0f} rec/s {cpu_ns:>9,.0f} ns CPU/record"
    if ref is not None:
        line += f"   x{rate / ref['rate']:.2f} throughput, x{cpu_ns / ref['cpu_ns']:.2f} CPU of Java's"
    return line


SECTIONS = ("consume", "produce", "latency", "fairness", "kip62", "memory")
Got = tuple[dict[str, Any] | None, str]  # a run's JSON result, or None and why


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _median(runs: list[dict[str, Any]], key: str) -> float:
    vals = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else float("nan")


def _ratio(value: float, ref: float) -> str:
    return f"x{value / ref:.2f}" if ref == ref and value == value and abs(ref) > 1e-9 else "-"


# -- latency: polls of 500 buffered records ------------------------------------------------------
def _latency(boot: str, topic: str, parts: int, n: int) -> dict[str, Got]:
    out = {"java": _java(["poll-latency", boot, topic, str(n)])}
    for name, worker in (("kipconsumer", "kipconsumer-latency"), ("confluent-kafka", "confluent-latency")):
        out[name] = run_json([sys.executable, str(HERE / "workers.py"), worker, boot, topic, str(parts),
                              str(n)], timeout=300, env=_env())
    return out


# -- fairness (KIP-41) over a skewed backlog -------------------------------------------------------
def _fairness(boot: str, counts: list[int], max_poll: int, settle: float) -> dict[str, Got]:
    import fairness

    out: dict[str, Got] = {}
    raw, err = _java(["fairness", boot, fairness.TOPIC, ",".join(map(str, counts)),
                      "--max-poll-records", str(max_poll), "--settle", str(settle)])
    res = None
    if raw is not None:
        timeline: list[list[int]] = raw["timeline"]  # type: ignore[assignment]
        res = fairness.analyse([{p: c for p, c in enumerate(row) if c} for row in timeline], counts, max_poll)
    out["java"] = (res, err)
    for name, worker in (("kipconsumer", "kipconsumer-proportional"),
                         ("confluent-kafka", "confluent-consume")):
        r, e = run_json([sys.executable, str(HERE / "fairness.py"), "--worker", worker, "--bootstrap", boot,
                         "--counts", ",".join(map(str, counts)), "--max-poll-records", str(max_poll),
                         "--settle", str(settle)], timeout=300, env=_env())
        if r is not None:
            r.pop("timeline", None)
        out[name] = (r, e)
    return out


# -- KIP-62: a processing gap under / over max.poll.interval.ms ------------------------------------
def gap_worker(client: str, boot: str, topic: str, group: str, total: int, gap_ms: int,
               interval_ms: int) -> dict[str, Any]:
    """The Python side of the peer's ``poll-gap``: same steps, same JSON."""
    events: list[dict[str, Any]] = []
    gap_start = [time.monotonic()]

    def ev(name: str, parts: list[int]) -> None:
        t = round(time.monotonic() - gap_start[0], 3)
        events.append({"event": name, "t": t, "partitions": sorted(parts)})

    common = {"bootstrap.servers": boot, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "max.poll.interval.ms": interval_ms,
              "session.timeout.ms": min(6000, interval_ms), "heartbeat.interval.ms": 1000}
    if client == "kipconsumer":
        from kipconsumer import KafkaConsumer
        from kipconsumer.errors import KafkaError

        class L:
            def on_partitions_assigned(self, ps: list[Any]) -> None:
                ev("assigned", [x.partition for x in ps])

            def on_partitions_revoked(self, ps: list[Any]) -> None:
                ev("revoked", [x.partition for x in ps])

            def on_partitions_lost(self, ps: list[Any]) -> None:
                ev("lost", [x.partition for x in ps])

        kc = KafkaConsumer({**common, "max.poll.records": 100})
        kc.subscribe([topic], listener=L())

        def poll() -> list[tuple[int, int]]:
            return [(r.partition, r.offset) for r in kc.poll(0.2)]

        commit: Any = kc.commit_sync
        close: Any = kc.close
        errors: tuple[type[BaseException], ...] = (KafkaError,)
    else:
        from confluent_kafka import Consumer, KafkaException

        cc = Consumer({**common, "fetch.queue.backoff.ms": 10})
        cc.subscribe([topic], on_assign=lambda _c, ps: ev("assigned", [x.partition for x in ps]),
                     on_revoke=lambda _c, ps: ev("revoked", [x.partition for x in ps]),
                     on_lost=lambda _c, ps: ev("lost", [x.partition for x in ps]))

        def poll() -> list[tuple[int, int]]:
            got: list[tuple[int, int]] = []
            for m in cc.consume(100, 0.2):
                if m.error() is None:
                    got.append((int(m.partition() or 0), int(m.offset() or 0)))
                else:
                    events.append({"event": "error", "t": round(time.monotonic() - gap_start[0], 3),
                                   "error": str(m.error())})
            return got

        commit = lambda: cc.commit(asynchronous=False)  # noqa: E731
        close = cc.close
        errors = (KafkaException,)
    seen: set[tuple[int, int]] = set()
    got = dups = failures = 0
    after: float | None = None
    gap_done = False
    deadline = time.monotonic() + 60
    while got < total and time.monotonic() < deadline:
        batch = poll()
        if not batch:
            continue
        for key in batch:
            dups += key in seen
            seen.add(key)
        got += len(batch)
        if gap_done and after is None:
            after = time.monotonic() - gap_start[0] - gap_ms / 1000
        try:
            commit()
        except errors:
            failures += 1
        if not gap_done:  # the processing gap, after the first records and their commit
            gap_start[0] = time.monotonic()
            events.clear()
            time.sleep(gap_ms / 1000)
            gap_done = True
            deadline = time.monotonic() + 60
    seen_events = list(events)  # before close(): its revoke is a wanted leave, not the gap's
    close()
    return {"gap_s": gap_ms / 1000, "records": got, "duplicates": dups, "records_after_gap_s": after,
            "commit_failures": failures, "events": seen_events}


def _gap_summary(r: dict[str, Any]) -> dict[str, Any]:
    after = [e for e in r["events"] if e["t"] >= 0]
    r["left_group"] = any(e["event"] in ("revoked", "lost") for e in after)
    r["rebalances"] = sum(1 for e in after if e["event"] == "assigned")
    return r


def _kip62(boot: str, topic: str, total: int, interval_ms: int, tag: str) -> dict[str, dict[str, Got]]:
    out: dict[str, dict[str, Got]] = {}
    for scenario, gap_ms in (("under", interval_ms - 1000), ("over", interval_ms + 2000)):
        for name in ("java", "kipconsumer", "confluent-kafka"):
            group = f"kip62-{name}-{scenario}-{tag}"
            if name == "java":
                r, e = _java(["poll-gap", boot, topic, group, str(total), "--gap-ms", str(gap_ms),
                              "--max-poll-interval-ms", str(interval_ms),
                              "--session-timeout-ms", str(min(6000, interval_ms))])
            else:
                r, e = run_json([sys.executable, str(Path(__file__).resolve()), "--gap-worker", name, boot,
                                 topic, group, str(total), str(gap_ms), str(interval_ms)], timeout=300,
                                env=_env())
            out.setdefault(name, {})[scenario] = (_gap_summary(r) if r else None, e)
    return out


# -- memory of a stalled consumer -------------------------------------------------------------------
def _proc_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _java_stall(boot: str, topic: str, stall: float) -> Got:
    import java_peer

    proc = subprocess.Popen(java_peer.command("stall", boot, topic, "--stall", str(stall)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "stall_start" not in line:
            proc.kill()
            return None, f"no stall_start: {line!r} {proc.communicate(timeout=30)[1][-400:]}"
        samples: list[float] = []
        peak = float("nan")
        end = time.monotonic() + stall
        while time.monotonic() < end - 0.25 and proc.poll() is None:
            samples.append(_proc_mb(proc.pid, "VmRSS"))
            peak = _proc_mb(proc.pid, "VmHWM")
            time.sleep(0.5)
        rest, err = proc.communicate(timeout=60)
        if "stall_end" not in rest or not samples:
            return None, f"rc={proc.returncode} {err[-400:]}"
        return {"records": json.loads(line)["records"], "stall_s": stall, "rss_start_mb": samples[0],
                "rss_end_mb": samples[-1], "rss_max_mb": max(samples), "growth_mb": samples[-1] - samples[0],
                "peak_rss_mb": peak}, ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _memory(boot: str, topic: str, parts: int, n: int, stall: float) -> dict[str, Got]:
    out = {"java": _java_stall(boot, topic, stall)}
    for name, worker in (("kipconsumer", "kipconsumer"), ("confluent-kafka", "confluent-kafka")):
        r, e = run_json([sys.executable, str(HERE / "memory.py"), "--worker", worker, "--mode", "stall",
                         "--bootstrap", boot, "--topic", topic, "--partitions", str(parts),
                         "--records", str(n), "--stall", str(stall)], timeout=stall + 120, env=_env())
        if r is not None:
            r.pop("samples", None)
        out[name] = (r, e)
    return out


# -- tables -----------------------------------------------------------------------------------------
def _table(title: str, by_client: dict[str, list[dict[str, Any]]], cols: list[tuple[str, str, str]],
           ratios: tuple[str, ...]) -> None:
    """cols: (key, header, format), medians over the runs; then each client's ratio to Java's median
    for the columns named in `ratios` (keys)."""
    print(title)
    java = by_client.get("java", [])
    head = "  " + f"{'client':<18}" + "".join(f"{h:>16}" for _, h, _ in cols)
    names = [h for k, h, _ in cols if k in ratios]
    print(head + "   x Java's: " + ", ".join(names))
    for name, runs in by_client.items():
        vals = [_median(runs, k) for k, _, _ in cols]
        line = "  " + f"{name:<18}" + "".join(f"{format(v, f) if v == v else '-':>16}" for v, (_, _, f) in
                                              zip(vals, cols, strict=True))
        if name != "java" and java:
            line += "   " + " ".join(_ratio(v, _median(java, k))
                                     for v, (k, _, _) in zip(vals, cols, strict=True) if k in ratios)
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1)
    add_kafka_version_argument(ap)
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help="sections, comma-separated: " + ",".join(SECTIONS))
    ap.add_argument("--deep", type=int, default=50_000, help="fairness: records in partition 0")
    ap.add_argument("--shallow", type=int, default=1_000, help="fairness: records in each shallow partition")
    ap.add_argument("--shallow-partitions", type=int, default=5)
    ap.add_argument("--max-poll-records", type=int, default=500, help="fairness: max.poll.records")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="fairness: seconds between assign and first poll")
    ap.add_argument("--poll-interval-ms", type=int, default=6000, help="kip62: max.poll.interval.ms")
    ap.add_argument("--gap-records", type=int, default=2_000,
                    help="kip62: records in its topic (4 partitions)")
    ap.add_argument("--stall", type=float, default=10.0, help="memory: seconds without poll()")
    ap.add_argument("--gap-worker", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gap_worker:
        client, boot, topic, group, total, gap_ms, interval_ms = args.gap_worker
        print(json.dumps(gap_worker(client, boot, topic, group, int(total), int(gap_ms), int(interval_ms))))
        return 0
    only = [x for x in args.only.split(",") if x]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown section(s) {sorted(unknown)}; choose from {','.join(SECTIONS)}")

    from kipconsumer.testing import KafkaCluster

    n, parts, size = args.records, args.partitions, args.value_size
    results: dict[str, Any] = {k: {} for k in SECTIONS if k in only}

    def keep(section: str, name: str, rep: int, got: Got, sub: str | None = None) -> None:
        out, err = got
        print(f"{section} {name}{' ' + sub if sub else ''} #{rep + 1}: {out or err}", flush=True)
        if out:
            slot = results[section].setdefault(name, {} if sub else [])
            (slot.setdefault(sub, []) if sub else slot).append(out)

    # the C floors: on the library kipconsumer loads (bound to the bundled jemalloc) and on glibc
    tmp = tempfile.TemporaryDirectory()
    raw_c: dict[str, str] = {}
    if "consume" in only:
        from run import build_raw_consumer, build_raw_consumer_on_glibc

        raw_c["raw-c"] = build_raw_consumer(tmp.name)
        raw_c["raw-c-glibc"] = build_raw_consumer_on_glibc(os.path.join(tmp.name, "glibc"))

    with tmp, KafkaCluster(brokers=1) as k:
        boot, version = k.bootstrap_servers, k.version
        if {"consume", "latency", "memory"} & set(only):
            k.create_topic("bench-c", parts, 1)
            per = [n // parts + (1 if p < n % parts else 0) for p in range(parts)]
            fill_partitions(boot, "bench-c", per, size)
        counts = [args.deep] + [args.shallow] * args.shallow_partitions
        if "fairness" in only:
            import fairness

            k.create_topic(fairness.TOPIC, len(counts), 1)
            fill_partitions(boot, fairness.TOPIC, counts, 100)
        if "kip62" in only:
            k.create_topic("bench-gap", 4, 1)
            fill_partitions(boot, "bench-gap", [args.gap_records // 4] * 4, size)
        for rep in range(args.repeat):
            if "consume" in only:
                clients: dict[str, Callable[[], Got]] = {
                    "java": lambda: _java(["consume-bench", boot, "bench-c", str(n)]),
                    **{name: functools.partial(_python, body, [boot, "bench-c", str(n), str(parts),
                                                               str(size)])
                       for name, body in _PY_CONSUMERS.items()},
                    **{name: functools.partial(_raw_c, exe, boot, "bench-c", parts, n)
                       for name, exe in raw_c.items()}}
                for name, run in clients.items():
                    keep("consume", name, rep, run())
            if "produce" in only:
                for name in ["java", *_PY_PRODUCERS]:
                    topic = f"bench-p-{name}-{rep}"
                    k.create_topic(topic, parts, 1)
                    if name == "java":
                        got = _java(["produce-bench", boot, topic, str(n), "--value-size", str(size)])
                    else:
                        got = _python(_PY_PRODUCERS[name], [boot, topic, str(n), str(parts), str(size)])
                    keep("produce", name, rep, got)
            if "latency" in only:
                for name, got in _latency(boot, "bench-c", parts, n).items():
                    keep("latency", name, rep, got)
            if "fairness" in only:
                for name, got in _fairness(boot, counts, args.max_poll_records, args.settle).items():
                    keep("fairness", name, rep, got)
            if "kip62" in only:
                for name, by_scenario in _kip62(boot, "bench-gap", (args.gap_records // 4) * 4,
                                                args.poll_interval_ms, str(rep)).items():
                    for scenario, got in by_scenario.items():
                        keep("kip62", name, rep, got, scenario)
            if "memory" in only:
                for name, got in _memory(boot, "bench-c", parts, n, args.stall).items():
                    keep("memory", name, rep, got)

    print(f"\nreal Apache Kafka {version}, 1 node; {n:,} records x {size} B, {parts} partitions; "
          f"median of {args.repeat}")
    for kind in ("consume", "produce"):
        if kind not in results:
            continue
        by_client = results[kind]
        print(f"{kind}:")
        java = by_client.get("java")
        ref = None
        if java:
            ref = {"rate": statistics.median(r["records"] / r["seconds"] for r in java),
                   "cpu_ns": statistics.median(r["cpu_seconds"] / r["records"] * 1e9 for r in java)}
        for name, runs in by_client.items():
            print(_row(name, runs, None if name == "java" else ref))
    if "latency" in results:
        _table("poll latency, up to 500 buffered records per poll (us; 'first' = first poll after a pause):",
               results["latency"], [("buffered_p50_us", "p50", ".0f"), ("buffered_p99_us", "p99", ".0f"),
                                    ("buffered_max_us", "max", ".0f"), ("first_max_us", "first max", ".0f")],
               ("buffered_p50_us", "buffered_p99_us", "buffered_max_us", "first_max_us"))
    if "fairness" in results:
        _table(f"fairness (KIP-41): partition 0 x {args.deep:,}, "
               f"{args.shallow_partitions} x {args.shallow:,}, "
               f"max.poll.records={args.max_poll_records} (polls; lower is fairer):",
               results["fairness"], [("polls_until_all_served", "all served", ".0f"),
                                     ("max_gap_polls", "max gap", ".0f"),
                                     ("polls_until_shallow_drained", "shallow done", ".0f"),
                                     ("polls", "polls", ".0f")],
               ("polls_until_all_served", "polls_until_shallow_drained"))
    if "kip62" in results:
        ms = args.poll_interval_ms
        for scenario, gap in (("under", ms - 1000), ("over", ms + 2000)):
            by = {name: runs.get(scenario, []) for name, runs in results["kip62"].items()}
            for runs in by.values():
                for r in runs:
                    r["left_group_n"] = int(r["left_group"])
            _table(f"KIP-62, max.poll.interval.ms={ms}, no poll() for {gap / 1000:g} s ({scenario}; "
                   f"left = revoked/lost seen, 1 = yes):", by,
                   [("left_group_n", "left", ".0f"), ("rebalances", "rebalances", ".0f"),
                    ("duplicates", "duplicates", ".0f"), ("records_after_gap_s", "back after s", ".2f"),
                    ("commit_failures", "commit fails", ".0f")], ("records_after_gap_s",))
    if "memory" in results:
        _table(f"memory, no poll() for {args.stall:g} s with {n:,} records unread (MB):", results["memory"],
               [("rss_start_mb", "RSS start", ".0f"), ("rss_max_mb", "RSS max", ".0f"),
                ("growth_mb", "growth", ".1f"), ("peak_rss_mb", "peak (HWM)", ".0f")],
               ("rss_max_mb", "peak_rss_mb"))
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    path = out_dir / f"{dt.date.today().isoformat()}-java.json"
    path.write_text(json.dumps({"records": n, "partitions": parts, "value_size": size, "sections": only,
                                "kafka": version, "args": vars(args), "results": results}, indent=1))
    print(f"results: {path.relative_to(ROOT)}")
    return 0 if all(results[k] for k in results) else 1


if __name__ == "__main__":
    sys.exit(main())
