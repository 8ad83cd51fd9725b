"""Producer throughput: kipconsumer KafkaProducer.send() + futures vs confluent-kafka produce().

One run starts an EmbeddedBroker (librdkafka's mock cluster, real TCP) in this process and runs each
client in its own subprocess against it, one after the other, with the same librdkafka settings
(acks=all, enable.idempotence=true, linger.ms=5, 32 MiB / 100k-message buffer):

* kipconsumer: ``fut = p.send(topic, value)`` for every record (futures kept), then ``p.flush()``;
  every future is checked to have succeeded (outside the timed section).
* confluent-kafka: ``p.produce(topic, value, on_delivery=cb)`` + ``p.poll(0)`` in the loop
  (``BufferError`` -> ``poll(0.01)`` and retry), then ``p.flush()``; the callback counts successes.

Usage::

    python bench/bench_producer.py [--records 500000] [--size 100] [--partitions 6] [--repeat 3]

Prints records/s of every run, the median of each client and the ratio of the medians
(kipconsumer / confluent-kafka).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

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
    p.close()
    return {"seconds": t1 - t0, "enqueue_seconds": t_enqueued - t0, "delivered": n - failed,
            "failed": failed}


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
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.01)
        poll(0)
    t_enqueued = time.perf_counter()
    p.flush(120)
    t1 = time.perf_counter()
    return {"seconds": t1 - t0, "enqueue_seconds": t_enqueued - t0, "delivered": counts["ok"],
            "failed": n - counts["ok"]}


def child(args: argparse.Namespace) -> None:
    fn = run_kipconsumer if args.client == "kipconsumer" else run_confluent
    res = fn(args.bootstrap, args.topic, args.records, args.size)
    res["records_per_s"] = args.records / res["seconds"]
    print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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

    from kipconsumer.broker import EmbeddedBroker

    results: dict[str, list[float]] = {"kipconsumer": [], "confluent": []}
    with EmbeddedBroker(num_brokers=3) as broker:
        print(f"embedded broker {broker.bootstrap_servers}; {args.records} records x {args.size} B, "
              f"{args.partitions} partitions, acks=all, idempotence on, linger.ms=5")
        for rep in range(args.repeat):
            order = ("kipconsumer", "confluent") if rep % 2 == 0 else ("confluent", "kipconsumer")
            for client in order:
                topic = f"bench-{client}-{rep}-{os.getpid()}"
                broker.create_topic(topic, partitions=args.partitions)
                out = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--client", client, "--bootstrap",
                     broker.bootstrap_servers, "--topic", topic, "--records", str(args.records),
                     "--size", str(args.size)],
                    check=True, capture_output=True, text=True)
                res = json.loads(out.stdout.strip().splitlines()[-1])
                if res["failed"]:
                    sys.exit(f"{client}: {res['failed']} record(s) not delivered: {res}")
                results[client].append(res["records_per_s"])
                print(f"  {client:12s} {res['records_per_s']:>12,.0f} records/s  "
                      f"(enqueue {args.records / res['enqueue_seconds']:,.0f}/s, "
                      f"total {res['seconds']:.2f} s, delivered {res['delivered']})")
    kip = statistics.median(results["kipconsumer"])
    ck = statistics.median(results["confluent"])
    print(f"kipconsumer send()+futures: {kip:,.0f} records/s (median of {len(results['kipconsumer'])})")
    print(f"confluent-kafka produce():  {ck:,.0f} records/s (median of {len(results['confluent'])})")
    print(f"ratio kipconsumer/confluent: {kip / ck:.2f}")


if __name__ == "__main__":
    main()
