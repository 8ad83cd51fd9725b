"""Exactly-once consume-transform-produce: kipconsumer's Pipeline against confluent-kafka's loop.

    python bench/eos_bench.py [--records 100000] [--partitions 6] [--value-size 100] [--repeat 3]
                              [--commit-interval-ms 100]

On one broker (`--broker`: kafka, the default, real Apache Kafka; tansu), a source topic is filled
once; each client then copies it to a fresh sink topic, record for record, in its own process,
`--repeat` times, interleaved:

* ``kipconsumer``: ``Pipeline`` with ``processing.guarantee=exactly_once_v2`` and
  ``commit.interval.ms`` (one transaction per interval: outputs + source offsets).
* ``confluent``: confluent-kafka's transactional loop as in its examples (``consume(500)``,
  ``produce()`` to the source partition's sink partition, every ``commit.interval.ms``
  ``send_offsets_to_transaction(position)`` + ``commit_transaction()``), read_committed consumer.

Timing starts at the first record a client receives and ends when the offsets of every source
record are committed (so both include their last transaction). Prints records/s (median of runs),
the ratio, client CPU per record (user+sys of the whole client process, all threads), and the
number of transactions; writes bench/results/<date>-eos.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, add_kafka_version_argument, fill_partitions, start_broker  # noqa: E402

CLIENTS = ["kipconsumer", "confluent"]


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _result(n: int, t0: float, cpu0: float, txns: int) -> dict[str, Any]:
    return {"records": n, "seconds": time.perf_counter() - t0, "cpu_s": _cpu() - cpu0, "transactions": txns}


def kipconsumer_worker(a: argparse.Namespace) -> dict[str, Any]:
    from kipconsumer.streams import Pipeline

    start: list[float] = []

    def process(record: Any) -> list[tuple[Any, Any]]:
        if not start:
            start.extend((time.perf_counter(), _cpu()))
        return [(record.key, record.value)]

    conf = {"bootstrap.servers": a.bootstrap, "group.id": f"eos-bench-{uuid.uuid4().hex[:8]}",
            "processing.guarantee": "exactly_once_v2", "commit.interval.ms": a.commit_interval_ms,
            "transactional.id": f"eos-bench-kip-{uuid.uuid4().hex[:8]}"}
    pipeline = Pipeline(conf, a.source, process, a.sink)
    next_check = [0.0]

    def done() -> bool:
        now = time.monotonic()
        if now < next_check[0]:
            return False
        next_check[0] = now + 0.02
        parts = pipeline.metrics()["partitions"]
        return len(parts) == a.partitions and sum(p["committed"] for p in parts.values()) >= a.records

    try:
        pipeline.run(until=done, timeout=600)
        out = _result(a.records, start[0], start[1], pipeline.metrics()["transactions_committed"])
    finally:
        pipeline.close()
    return out


def confluent_worker(a: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer

    consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": f"eos-bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5,
                         "transactional.id": f"eos-bench-ck-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    consumer.subscribe([a.source])
    sink_parts = a.partitions
    done: dict[int, int] = {}  # source partition -> committed next offset
    t0 = cpu0 = 0.0
    in_txn = False
    txns = 0
    next_commit = 0.0
    try:
        while sum(done.values()) < a.records:
            msgs = consumer.consume(500, 0.1)
            for m in msgs:
                if m.error() is not None:
                    continue
                if not t0:
                    t0, cpu0 = time.perf_counter(), _cpu()
                if not in_txn:
                    producer.begin_transaction()
                    in_txn = True
                while True:
                    try:
                        producer.produce(a.sink, value=m.value(), key=m.key(),
                                         partition=m.partition() % sink_parts)
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.poll(0)
            now = time.monotonic()
            if in_txn and now >= next_commit:
                positions = consumer.position(consumer.assignment())
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
                in_txn = False
                txns += 1
                next_commit = now + a.commit_interval_ms / 1000.0
                for tp in positions:
                    if tp.offset >= 0:
                        done[tp.partition] = tp.offset
        return _result(a.records, t0, cpu0, txns)
    finally:
        consumer.close()
        producer.flush(10)


def run_worker(client: str, a: argparse.Namespace, sink: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", client, "--bootstrap", a.bootstrap,
           "--source", a.source, "--sink", sink, "--records", str(a.records),
           "--partitions", str(a.partitions),
           "--commit-interval-ms", str(a.commit_interval_ms)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{client} worker failed: {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--broker", choices=["kafka", "tansu"], default="kafka")
    add_kafka_version_argument(ap)
    ap.add_argument("--commit-interval-ms", type=int, default=100)
    ap.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--source", help=argparse.SUPPRESS)
    ap.add_argument("--sink", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        fn = kipconsumer_worker if a.worker == "kipconsumer" else confluent_worker
        print(json.dumps(fn(a)), flush=True)
        return
    with start_broker(a.broker) as broker:
        a.bootstrap = broker.bootstrap
        a.source = f"eos-src-{uuid.uuid4().hex[:8]}"
        broker.create_topic(a.source, a.partitions)
        base, extra = divmod(a.records, a.partitions)
        per = [base + (1 if p < extra else 0) for p in range(a.partitions)]
        fill_partitions(a.bootstrap, a.source, per, a.value_size)
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CLIENTS}
        for r in range(a.repeat):
            for client in CLIENTS:
                sink = f"eos-sink-{client[:3]}-{r}-{uuid.uuid4().hex[:6]}"
                broker.create_topic(sink, a.partitions)
                res = run_worker(client, a, sink)
                runs[client].append(res)
                print(f"run {r + 1} {client:12s} {res['records'] / res['seconds']:>10,.0f} rec/s  "
                      f"{res['cpu_s'] / res['records'] * 1e6:6.2f} us CPU/rec  {res['transactions']} txns",
                      flush=True)
    summary: dict[str, Any] = {}
    for client, rs in runs.items():
        summary[client] = {
            "records_per_s": statistics.median(x["records"] / x["seconds"] for x in rs),
            "cpu_us_per_record": statistics.median(x["cpu_s"] / x["records"] * 1e6 for x in rs),
            "transactions": statistics.median(x["transactions"] for x in rs),
        }
    ratio = summary["kipconsumer"]["records_per_s"] / summary["confluent"]["records_per_s"]
    cpu_ratio = summary["confluent"]["cpu_us_per_record"] / summary["kipconsumer"]["cpu_us_per_record"]
    print(f"\n{a.broker}, {a.records} records x {a.value_size} B, {a.partitions} partitions, "
          f"commit.interval.ms={a.commit_interval_ms}, median of {a.repeat}:")
    for client, s in summary.items():
        print(f"  {client:12s} {s['records_per_s']:>10,.0f} rec/s  {s['cpu_us_per_record']:6.2f} us CPU/rec  "
              f"{s['transactions']:.0f} txns")
    print(f"  kipconsumer / confluent: {ratio:.2f}x records/s; CPU per record confluent / kipconsumer: "
          f"{cpu_ratio:.2f}x (above 1: kipconsumer uses less)")
    out = HERE / "results" / f"{dt.date.today().isoformat()}-eos.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"args": {k: v for k, v in vars(a).items() if k not in ("worker",)},
                               "summary": summary, "ratio_records_per_s": ratio,
                               "ratio_cpu_per_record": cpu_ratio, "runs": runs}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
