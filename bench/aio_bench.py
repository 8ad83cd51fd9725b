"""asyncio clients side by side: kipconsumer.aio against aiokafka and confluent-kafka's aio classes.

    python bench/aio_bench.py [--records 500000] [--partitions 12] [--value-size 100] [--repeat 3]
                              [--clients a,b,...] [--no-install]

On one broker (`--broker`: kafka, the default, real Apache Kafka; tansu; mock), one topic is filled once;
each
client then runs in its own process, `--repeat` times, interleaved:

* consume: every partition assigned from the beginning (no group), RECORDS records read, each
  value touched; kipconsumer ``await poll()``, aiokafka ``getmany(max_records=500)``,
  confluent-kafka ``AIOConsumer.consume(500)``, and for the floor the plain C consumer on
  librdkafka of bench/run.py (``raw-c``). While it runs a 1 ms ticker task measures the
  event loop's lag (how late each tick fires): p50/p99/max.
* produce: RECORDS records of VALUE_SIZE bytes to a fresh topic, awaiting deliveries in windows
  of 10,000 futures; kipconsumer ``send()``, aiokafka ``send()``, confluent-kafka
  ``AIOProducer.produce()``.

Prints records/s (median of runs), ratios to each peer, client CPU per record (all threads of
the client's process), and the loop-lag percentiles; writes bench/results/<date>-aio.json.
The liveness scenario (a loop blocked for 3 x session.timeout.ms) is a test, not a benchmark:
tests/test_aio.py::test_blocked_loop_keeps_membership, and bench/liveness.py for the peers.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BROKERS, HERE, add_kafka_version_argument, ensure_peer, fill_partitions, start_broker  # noqa: E402
from run import build_raw_consumer  # noqa: E402

TOPIC = "aio"
WINDOW = 10_000
CONSUMERS = ["kipconsumer-aio-consume", "aiokafka-consume", "confluent-aio-consume", "raw-c"]
PRODUCERS = ["kipconsumer-aio-produce", "aiokafka-produce", "confluent-aio-produce"]


class LagMeter:
    """A 1 ms ticker: how late the loop runs it (the loop's responsiveness while the client works)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(0.001)
            self.lags.append(loop.time() - t0 - 0.001)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> dict[str, float]:
        assert self._task is not None
        self._task.cancel()
        lags = sorted(self.lags) or [0.0]
        return {"lag_p50_ms": lags[len(lags) // 2] * 1e3,
                "lag_p99_ms": lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1e3,
                "lag_max_ms": lags[-1] * 1e3}


def _result(got: int, t0: float, cpu0: float, extra: dict[str, float]) -> dict[str, float]:
    secs = time.perf_counter() - t0
    return {"records": got, "seconds": secs, "records_per_s": got / secs,
            "cpu_s": time.process_time() - cpu0, **extra}


# -- consumers (each in its own process) -----------------------------------------------------------
async def kipconsumer_consume(bootstrap: str, topic: str, partitions: int, want: int) -> dict[str, float]:
    from kipconsumer import TopicPartition
    from kipconsumer.aio import AsyncKafkaConsumer

    c = AsyncKafkaConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "max.poll.records": 500})
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    meter, got, t0, cpu0 = LagMeter(), 0, 0.0, 0.0
    while got < want:
        records = await c.poll(1.0)
        if records and not t0:
            t0, cpu0 = time.perf_counter(), time.process_time()
            meter.start()
        for r in records:
            r.value  # noqa: B018 - touch each value
        got += len(records)
    out = _result(got, t0, cpu0, meter.stop())
    await c.close()
    return out


async def aiokafka_consume(bootstrap: str, topic: str, partitions: int, want: int) -> dict[str, float]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    meter, got, t0, cpu0 = LagMeter(), 0, 0.0, 0.0
    while got < want:
        batches = await c.getmany(timeout_ms=1000, max_records=500)
        n = 0
        for msgs in batches.values():
            for m in msgs:
                m.value  # noqa: B018
            n += len(msgs)
        if n and not t0:
            t0, cpu0 = time.perf_counter(), time.process_time()
            meter.start()
        got += n
    out = _result(got, t0, cpu0, meter.stop())
    await c.stop()
    return out


async def confluent_consume(bootstrap: str, topic: str, partitions: int, want: int) -> dict[str, float]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.aio import AIOConsumer

    c = AIOConsumer({"bootstrap.servers": bootstrap, "group.id": "aio-bench-unused",
                     "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    await c.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
    meter, got, t0, cpu0 = LagMeter(), 0, 0.0, 0.0
    while got < want:
        msgs = await c.consume(500, 1.0)
        n = 0
        for m in msgs:
            if m.error() is None:
                m.value()
                n += 1
        if n and not t0:
            t0, cpu0 = time.perf_counter(), time.process_time()
            meter.start()
        got += n
    out = _result(got, t0, cpu0, meter.stop())
    await c.close()
    return out


# -- producers ------------------------------------------------------------------------------------
async def kipconsumer_produce(bootstrap: str, topic: str, n: int, value: bytes) -> dict[str, float]:
    from kipconsumer.aio import AsyncKafkaProducer

    p = AsyncKafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    await p.send(topic, value=value)  # metadata, outside the timing
    t0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, n, WINDOW):
        await asyncio.gather(*[p.send(topic, value=value) for _ in range(min(WINDOW, n - start))])
    out = _result(n, t0, cpu0, {})
    await p.close()
    return out


async def aiokafka_produce(bootstrap: str, topic: str, n: int, value: bytes) -> dict[str, float]:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    await (await p.send(topic, value=value))
    t0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, n, WINDOW):
        futures = [await p.send(topic, value=value) for _ in range(min(WINDOW, n - start))]
        await asyncio.gather(*futures)
    out = _result(n, t0, cpu0, {})
    await p.stop()
    return out


async def confluent_produce(bootstrap: str, topic: str, n: int, value: bytes) -> dict[str, float]:
    from confluent_kafka.aio import AIOProducer

    p = AIOProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    async def produce() -> Any:
        r = p.produce(topic, value=value)
        return await r if asyncio.iscoroutine(r) else r

    await (await produce())
    t0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, n, WINDOW):
        futures = [await produce() for _ in range(min(WINDOW, n - start))]
        await asyncio.gather(*futures)
    out = _result(n, t0, cpu0, {})
    r = p.close()
    if asyncio.iscoroutine(r):
        await r
    return out


WORKERS: dict[str, Any] = {
    "kipconsumer-aio-consume": kipconsumer_consume, "aiokafka-consume": aiokafka_consume,
    "confluent-aio-consume": confluent_consume, "kipconsumer-aio-produce": kipconsumer_produce,
    "aiokafka-produce": aiokafka_produce, "confluent-aio-produce": confluent_produce,
}


def worker(name: str, bootstrap: str, topic: str, partitions: int, records: int, value_size: int) -> None:
    fn = WORKERS[name]
    if name.endswith("-consume"):
        result = asyncio.run(fn(bootstrap, topic, partitions, records))
    else:
        result = asyncio.run(fn(bootstrap, topic, records, b"v" * value_size))
    print(json.dumps(result), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--broker", choices=BROKERS, default="kafka")
    add_kafka_version_argument(ap)
    ap.add_argument("--clients", default=",".join(CONSUMERS + PRODUCERS))
    ap.add_argument("--no-install", action="store_true",
                    help="skip aiokafka if missing instead of installing it")
    ap.add_argument("--json", help="output file (default bench/results/<date>-aio.json)")
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS,
                    metavar=("NAME", "BOOTSTRAP", "TOPIC", "PARTITIONS", "RECORDS", "SIZE"))
    args = ap.parse_args()
    if args.worker:
        name, bootstrap, topic, parts, records, size = args.worker
        worker(name, bootstrap, topic, int(parts), int(records), int(size))
        return 0
    clients = args.clients.split(",")
    why = ensure_peer("aiokafka", install=not args.no_install)
    if why:
        print(f"aiokafka clients skipped: {why}")
        clients = [c for c in clients if not c.startswith("aiokafka")]
    results: dict[str, list[dict[str, float]]] = {c: [] for c in clients}
    tmp = tempfile.TemporaryDirectory()
    raw_c = build_raw_consumer(tmp.name) if "raw-c" in clients else ""
    broker = start_broker(args.broker)
    try:
        broker.create_topic(TOPIC, args.partitions)
        counts = [args.records // args.partitions + (1 if p < args.records % args.partitions else 0)
                  for p in range(args.partitions)]
        print(f"{args.broker} at {broker.bootstrap}: filling {args.records} x {args.value_size} B over "
              f"{args.partitions} partitions", flush=True)
        fill_partitions(broker.bootstrap, TOPIC, counts, args.value_size)
        for rep in range(args.repeat):
            for name in clients:
                topic = TOPIC
                if name.endswith("-produce"):
                    topic = f"aio-out-{name}-{rep}"
                    broker.create_topic(topic, args.partitions)
                if name == "raw-c":  # the floor: librdkafka's C consumer, no Python
                    cmd = [raw_c, broker.bootstrap, topic, str(args.partitions), str(args.records)]
                else:
                    cmd = [sys.executable, __file__, "--worker", name, broker.bootstrap, topic,
                           str(args.partitions), str(args.records), str(args.value_size)]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
                if proc.returncode or not lines:
                    print(f"  {name} run {rep + 1}: failed {proc.stderr.strip()[-400:]}", flush=True)
                    continue
                r = json.loads(lines[-1])
                results[name].append(r)
                print(f"  {name} run {rep + 1}: {r['records_per_s']:,.0f} rec/s", flush=True)
    finally:
        broker.stop()
        tmp.cleanup()

    def med(name: str, key: str) -> float:
        vals = [r[key] for r in results.get(name, []) if key in r]
        return statistics.median(vals) if vals else float("nan")

    summary: dict[str, dict[str, float]] = {}
    for group in (CONSUMERS, PRODUCERS):
        names = [n for n in group if n in clients]
        if not names:
            continue
        kip = names[0]
        print(f"\n{'client':26} {'rec/s':>11} {'x aiokafka':>11} {'x confluent':>12} {'CPU ns/rec':>11} "
              f"{'lag p50 ms':>11} {'lag p99 ms':>11} {'lag max ms':>11}")
        for name in names:
            row = {"records_per_s": med(name, "records_per_s"),
                   "cpu_ns_per_record": statistics.median(
                       [r["cpu_s"] / r["records"] * 1e9 for r in results[name]] or [float("nan")]),
                   "lag_p50_ms": med(name, "lag_p50_ms"), "lag_p99_ms": med(name, "lag_p99_ms"),
                   "lag_max_ms": med(name, "lag_max_ms")}
            peer = {p.split("-")[0]: med(p, "records_per_s") for p in names if p != kip and p != "raw-c"}
            row["x_aiokafka"] = row["records_per_s"] / peer.get("aiokafka", float("nan"))
            row["x_confluent"] = row["records_per_s"] / peer.get("confluent", float("nan"))
            summary[name] = row
            print(f"{name:26} {row['records_per_s']:11,.0f} "
                  f"{(row['x_aiokafka'] if name == kip else float('nan')):11.2f} "
                  f"{(row['x_confluent'] if name == kip else float('nan')):12.2f} "
                  f"{row['cpu_ns_per_record']:11.0f} {row['lag_p50_ms']:11.2f} {row['lag_p99_ms']:11.2f} "
                  f"{row['lag_max_ms']:11.2f}")
    out = Path(args.json) if args.json else HERE / "results" / f"{dt.date.today().isoformat()}-aio.json"
    out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "worker"},
                               "summary": summary, "runs": results}, indent=2))
    print(f"\nresults written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
