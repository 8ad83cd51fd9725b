"""Fairness over a skewed backlog: does one deep partition starve the shallow ones?

    python bench/fairness.py [--broker kafka|tansu|mock] [--deep 200000] [--shallow 2000]
        [--shallow-partitions 7]
                             [--max-poll-records 500] [--repeat 3] [--clients a,b,...] [--json OUT]

One topic, partition 0 holds --deep records, partitions 1..N hold --shallow records each (100 B
values). Every client runs in its own process, assigns all partitions from the beginning (no group),
sleeps --settle seconds (so clients that prefetch in the background can fill their buffers), then
polls with max.poll.records / max_poll_records = --max-poll-records until every record is read.
Counted over the polls that returned records:

* polls_until_all_served: index (1-based) of the poll after which every partition has returned at
  least one record (ideal: 1).
* max_gap_polls: the longest run of consecutive polls in which some partition that still had
  unread records returned none (ideal: 0).
* polls_until_shallow_drained: the poll after which every shallow partition is fully read.
* full_polls_share: share of polls that returned max-poll-records records.

Clients: kipconsumer-proportional, kipconsumer-greedy (poll.fairness), confluent-consume
(confluent-kafka consume(num_messages=N)), aiokafka (getmany(max_records=N)), kafka-python
(poll(max_records=N)). Peers not installed are installed with pip (unless --no-install) or skipped with
a printed reason. The default broker is Tansu: kafka-python cannot bootstrap from the mock cluster,
and the mock keeps only 100k records per partition. Same broker and data for every client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

TOPIC = "fairness"
ALL_CLIENTS = [
    "kipconsumer-proportional",
    "kipconsumer-greedy",
    "confluent-consume",
    "aiokafka",
    "kafka-python",
]
PEER_MODULE = {"aiokafka": "aiokafka", "kafka-python": "kafka"}


# ---------------------------------------------------------------------------------------------
# workers: each returns a list of {partition: count} for every poll that returned records
def _kipconsumer(
    mode: str, bootstrap: str, parts: int, total: int, n: int, settle: float
) -> list[dict[int, int]]:
    from kipconsumer import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.poll.records": n,
            "poll.fairness": mode,
        }
    )
    c.assign([TopicPartition(TOPIC, p) for p in range(parts)])
    time.sleep(settle)
    polls: list[dict[int, int]] = []
    got, deadline = 0, time.monotonic() + 300
    while got < total and time.monotonic() < deadline:
        recs = c.poll(0.2)
        if not recs:
            continue
        counts = {tp.partition: len(recs.records(tp)) for tp in recs.partitions()}
        got += sum(counts.values())
        polls.append(counts)
    c.close()
    return polls


def _confluent(bootstrap: str, parts: int, total: int, n: int, settle: float) -> list[dict[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-fairness-unused",
            "enable.partition.eof": False,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(TOPIC, p, -2) for p in range(parts)])
    time.sleep(settle)
    polls: list[dict[int, int]] = []
    got, deadline = 0, time.monotonic() + 300
    while got < total and time.monotonic() < deadline:
        msgs = c.consume(num_messages=n, timeout=0.2)
        counts: dict[int, int] = {}
        for m in msgs:
            if m.error() is None:
                counts[m.partition()] = counts.get(m.partition(), 0) + 1
        if counts:
            got += sum(counts.values())
            polls.append(counts)
    c.close()
    return polls


def _aiokafka(bootstrap: str, parts: int, total: int, n: int, settle: float) -> list[dict[int, int]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> list[dict[int, int]]:
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=n,
        )
        await c.start()
        try:
            c.assign([TopicPartition(TOPIC, p) for p in range(parts)])
            await asyncio.sleep(settle)
            polls: list[dict[int, int]] = []
            got, deadline = 0, time.monotonic() + 300
            while got < total and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=200, max_records=n)
                counts = {tp.partition: len(msgs) for tp, msgs in batch.items() if msgs}
                if counts:
                    got += sum(counts.values())
                    polls.append(counts)
            return polls
        finally:
            await c.stop()

    return asyncio.run(go())


def _kafka_python(bootstrap: str, parts: int, total: int, n: int, settle: float) -> list[dict[int, int]]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=n,
        group_id=None,
    )
    c.assign([TopicPartition(TOPIC, p) for p in range(parts)])
    time.sleep(settle)
    polls: list[dict[int, int]] = []
    got, deadline = 0, time.monotonic() + 300
    while got < total and time.monotonic() < deadline:
        batch = c.poll(timeout_ms=200, max_records=n)
        counts = {tp.partition: len(msgs) for tp, msgs in batch.items() if msgs}
        if counts:
            got += sum(counts.values())
            polls.append(counts)
    c.close()
    return polls


def worker(client: str, bootstrap: str, counts: list[int], n: int, settle: float) -> dict[str, Any]:
    parts, total = len(counts), sum(counts)
    t0 = time.perf_counter()
    if client.startswith("kipconsumer-"):
        polls = _kipconsumer(client.split("-", 1)[1], bootstrap, parts, total, n, settle)
    elif client == "confluent-consume":
        polls = _confluent(bootstrap, parts, total, n, settle)
    elif client == "aiokafka":
        polls = _aiokafka(bootstrap, parts, total, n, settle)
    elif client == "kafka-python":
        polls = _kafka_python(bootstrap, parts, total, n, settle)
    else:
        raise SystemExit(f"unknown client {client}")
    out = analyse(polls, counts, n)
    out["seconds"] = time.perf_counter() - t0
    out["timeline"] = [[p.get(i, 0) for i in range(parts)] for p in polls]
    return out


def analyse(polls: list[dict[int, int]], counts: list[int], n: int) -> dict[str, Any]:
    parts = len(counts)
    left = list(counts)
    served = [False] * parts
    gap = [0] * parts
    max_gap = [0] * parts
    all_served = shallow_drained = None
    for i, poll in enumerate(polls, 1):
        for p in range(parts):
            c = poll.get(p, 0)
            if c:
                served[p] = True
                gap[p] = 0
            elif left[p] > 0:
                gap[p] += 1
                max_gap[p] = max(max_gap[p], gap[p])
            left[p] -= c
        if all_served is None and all(served):
            all_served = i
        if shallow_drained is None and all(x <= 0 for x in left[1:]):
            shallow_drained = i
    return {
        "polls": len(polls),
        "records": sum(sum(p.values()) for p in polls),
        "expected_records": sum(counts),
        "polls_until_all_served": all_served,
        "max_gap_polls": max(max_gap) if max_gap else 0,
        "max_gap_per_partition": max_gap,
        "polls_until_shallow_drained": shallow_drained,
        "full_polls_share": (sum(1 for p in polls if sum(p.values()) >= n) / len(polls)) if polls else 0.0,
    }


# ---------------------------------------------------------------------------------------------
def run(args: argparse.Namespace, broker: Any = None, quiet: bool = False) -> dict[str, Any]:
    """Runs the comparison; returns {"config", "skipped", "runs", "summary"}. Reuses `broker` if given."""
    counts = [args.deep] + [args.shallow] * args.shallow_partitions
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
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    try:
        broker.create_topic(TOPIC, len(counts))
        if not quiet:
            print(
                f"broker {broker.name} at {broker.bootstrap}: partition 0 x {args.deep}, "
                f"{args.shallow_partitions} x {args.shallow}",
                flush=True,
            )
        _common.fill_partitions(broker.bootstrap, TOPIC, counts, 100)
        prog = _common.Progress(args.repeat * len(clients))
        for rep in range(args.repeat):
            for name in clients:  # interleaved
                prog.step(f"fairness {name} run {rep + 1}")
                cmd = [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--worker",
                    name,
                    "--bootstrap",
                    broker.bootstrap,
                    "--counts",
                    ",".join(map(str, counts)),
                    "--max-poll-records",
                    str(args.max_poll_records),
                    "--settle",
                    str(args.settle),
                ]
                res, err = _common.run_json(cmd, timeout=360)
                if res is None:
                    print(f"  {name}: failed: {err}", flush=True)
                    skipped.setdefault(name, f"failed: {err[-200:]}")
                    continue
                if res["records"] != res["expected_records"]:
                    print(f"  {name}: read {res['records']} of {res['expected_records']} records", flush=True)
                runs[name].append(res)
    finally:
        if own:
            broker.stop()

    summary: dict[str, Any] = {}
    for name, rs in runs.items():
        if not rs:
            continue

        def med(key: str, rs: list[dict[str, Any]] = rs) -> float:
            vals = [r[key] for r in rs if r[key] is not None]
            return statistics.median(vals) if vals else float("nan")

        summary[name] = {
            "runs": len(rs),
            "polls_until_all_served": _common.stats(
                [float(r["polls_until_all_served"] or "nan") for r in rs]
            ),
            "max_gap_polls": _common.stats([float(r["max_gap_polls"]) for r in rs]),
            "polls_until_shallow_drained": _common.stats(
                [float(r["polls_until_shallow_drained"] or "nan") for r in rs]
            ),
            "polls": med("polls"),
            "full_polls_share": med("full_polls_share"),
            "seconds": med("seconds"),
        }
    for name in clients:
        if name in runs and runs[name]:
            # keep one timeline (median run by max gap) for the chart; drop the rest (JSON size)
            rs = sorted(runs[name], key=lambda r: r["max_gap_polls"])
            summary[name]["timeline"] = rs[len(rs) // 2]["timeline"]
            for r in runs[name]:
                r.pop("timeline", None)
    result = {
        "config": {
            "broker": broker.name,
            "counts": counts,
            "max_poll_records": args.max_poll_records,
            "settle_s": args.settle,
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
        f"\nfairness ({cfg['broker']}, partitions {cfg['counts'][0]} + {len(cfg['counts']) - 1} x "
        f"{cfg['counts'][1] if len(cfg['counts']) > 1 else 0}, max poll records {cfg['max_poll_records']}; "
        f"median [min-max] of {cfg['repeat']} runs)"
    )
    print(
        f"{'client':26} {'polls to serve all':>20} {'max gap (polls)':>18} {'shallow drained at':>20} "
        f"{'polls':>7} {'full polls':>10}"
    )

    def fmt(s: dict[str, float]) -> str:
        return _common.fmt_stats(s, "never")

    for name, s in result["summary"].items():
        print(
            f"{name:26} {fmt(s['polls_until_all_served']):>20} {fmt(s['max_gap_polls']):>18} "
            f"{fmt(s['polls_until_shallow_drained']):>20} {s['polls']:7.0f} {s['full_polls_share']:10.0%}"
        )
    for name, why in result["skipped"].items():
        print(f"{name:26} skipped: {why}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["kafka", "tansu", "mock"], default="kafka")
    _common.add_kafka_version_argument(ap)
    ap.add_argument("--deep", type=int, default=200_000, help="records in partition 0")
    ap.add_argument("--shallow", type=int, default=2_000, help="records in each shallow partition")
    ap.add_argument("--shallow-partitions", type=int, default=7)
    ap.add_argument("--max-poll-records", type=int, default=500)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds between assign and the first poll")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clients", default=",".join(ALL_CLIENTS))
    ap.add_argument(
        "--no-install", action="store_true", help="skip missing peers instead of pip-installing them"
    )
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--counts", help=argparse.SUPPRESS)
    return ap


def main() -> int:
    args = parser().parse_args()
    if args.worker:
        counts = [int(x) for x in args.counts.split(",")]
        print(json.dumps(worker(args.worker, args.bootstrap, counts, args.max_poll_records, args.settle)))
        return 0
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if result["summary"] else 1


if __name__ == "__main__":
    sys.exit(main())
