"""kipconsumer beside the Apache Kafka Java client and confluent-kafka, on real Apache Kafka.

    python bench/java_bench.py [--records 200000] [--partitions 6] [--value-size 100] [--repeat 1]

Starts one Kafka node (kipconsumer.testing.KafkaCluster), then per client, each in its own process:

* consume: read ``--records`` records of a filled topic from the beginning (every partition
  assigned), touching every value; the Java client through our peer (tests/java/KafkaPeer.java
  ``consume-bench``, ``max.poll.records=500``; it reads the topic twice in one JVM and reports the
  second pass, after the JIT warmed up), confluent-kafka ``consume(500)``, kipconsumer iterating
  ``poll()`` batches' values, kipconsumer ``to_arrow()`` (one pass each);
* produce: send ``--records`` keyed records of ``--value-size`` bytes with default settings
  (acks=all, idempotent) and flush: the Java client (second of two passes), confluent-kafka
  ``produce()``, kipconsumer ``send()``.

Prints records/s and process CPU per record (all threads: the client's own cost, JVM JIT and GC
included for Java, start-up excluded for all), and each client's ratios to the Java client's.
Results depend on the machine's load: on a shared 2-core machine run it alone, and read ratios
from one run, never absolute numbers across runs. Results go to bench/results/<date>-java.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _common import ROOT, fill_partitions, run_json  # noqa: E402

_PY_CONSUMERS = {
    "confluent-kafka": """
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": BOOT, "group.id": "bench-ck", "enable.auto.commit": False,
              "fetch.queue.backoff.ms": 10})
c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTS)])
start(); n = 0; size = 0
while n < N:
    for m in c.consume(500, 0.5):
        if m.error() is None:
            size += len(m.value()); n += 1
done(n); c.close()
""",
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()

    from kipconsumer.testing import KafkaCluster

    n, parts, size = args.records, args.partitions, args.value_size
    results: dict[str, dict[str, list[dict[str, float]]]] = {"consume": {}, "produce": {}}
    with KafkaCluster(brokers=1) as k:
        boot, version = k.bootstrap_servers, k.version
        k.create_topic("bench-c", parts, 1)
        per = [n // parts + (1 if p < n % parts else 0) for p in range(parts)]
        fill_partitions(boot, "bench-c", per, size)
        for rep in range(args.repeat):
            clients = {"java": lambda: _java(["consume-bench", boot, "bench-c", str(n)]),
                       **{name: (lambda b=body: _python(b, [boot, "bench-c", str(n), str(parts), str(size)]))
                          for name, body in _PY_CONSUMERS.items()}}
            for name, run in clients.items():
                out, err = run()
                print(f"consume {name} #{rep + 1}: {out or err}", flush=True)
                if out:
                    results["consume"].setdefault(name, []).append(out)
            for name in ["java", *_PY_PRODUCERS]:
                topic = f"bench-p-{name}-{rep}"
                k.create_topic(topic, parts, 1)
                if name == "java":
                    out, err = _java(["produce-bench", boot, topic, str(n), "--value-size", str(size)])
                else:
                    out, err = _python(_PY_PRODUCERS[name], [boot, topic, str(n), str(parts), str(size)])
                print(f"produce {name} #{rep + 1}: {out or err}", flush=True)
                if out:
                    results["produce"].setdefault(name, []).append(out)

    print(f"\nreal Apache Kafka {version}, 1 node; {n:,} records x {size} B, {parts} partitions; "
          f"median of {args.repeat}")
    for kind, by_client in results.items():
        print(f"{kind}:")
        java = by_client.get("java")
        ref = None
        if java:
            ref = {"rate": statistics.median(r["records"] / r["seconds"] for r in java),
                   "cpu_ns": statistics.median(r["cpu_seconds"] / r["records"] * 1e9 for r in java)}
        for name, runs in by_client.items():
            print(_row(name, runs, None if name == "java" else ref))
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    path = out_dir / f"{dt.date.today().isoformat()}-java.json"
    path.write_text(json.dumps({"records": n, "partitions": parts, "value_size": size, "results": results},
                               indent=1))
    print(f"results: {path.relative_to(ROOT)}")
    return 0 if all(results[k] for k in results) else 1


if __name__ == "__main__":
    sys.exit(main())
