"""Share group consumption (KIP-932): kipconsumer's KafkaShareConsumer against confluent-kafka's
ShareConsumer and the Java client's KafkaShareConsumer, on the same broker in one run.

    python bench/share_bench.py [--records 200000] [--partitions 6] [--value-size 100] [--repeat 3]
                                [--broker kafka|mock] [--max-poll-records 500] [--java-passes 2]
                                [--warmup 1]

One topic is filled once. Each run is one client in its own process, in a fresh share group
(share.auto.offset.reset=earliest), implicit acknowledgement, reading RECORDS records and touching each
value; the clock (wall and process CPU, all threads) starts at the first non-empty poll, so joining the
group does not count, and stops after close() (which sends the last acknowledgements). The Java client
(tests/java/KafkaPeer.java ``share-bench``, kafka-clients of the broker's release) reads the topic
``--java-passes`` times in one JVM, each pass in a fresh group, and reports the last (the first warms
the JIT up; JVM start-up is not counted); it runs on ``--broker kafka`` only. Before the timed runs,
``--warmup`` untimed rounds run each Python client once (fresh groups), so the broker's share fetch
path is warm for whichever client comes first. The order of the clients rotates over the ``--repeat``
runs (run i starts with client i mod n): a timed run of 50k records lasts only a few tenths of a
second, and the run that came first after the fill was measured up to a third slower whichever client
it was. Prints records/s (median), CPU per record and the ratios of kipconsumer to
confluent-kafka and to Java; writes bench/results/<date>-share.json. Run it on a quiet machine for
figures; ``--records 2000 --repeat 1`` checks that it works.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, add_kafka_version_argument, fill_partitions, run_json, start_broker  # noqa: E402

TOPIC = "share"
CLIENTS = ["kipconsumer", "confluent", "java"]
PY_CLIENTS = ["kipconsumer", "confluent"]


def _consume_kipconsumer(bootstrap: str, group: str, records: int, max_poll: int) -> tuple[int, float, float]:
    from kipconsumer import KafkaShareConsumer

    n, start = 0, (0.0, 0.0)
    with KafkaShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "max.poll.records": max_poll}) as c:
        c.subscribe([TOPIC])
        while n < records:
            batch = c.poll(1.0)
            if batch and not n:
                start = (time.perf_counter(), time.process_time())
            for r in batch:
                _ = r.value
                n += 1
    return n, *start


def _consume_confluent(bootstrap: str, group: str, records: int, max_poll: int) -> tuple[int, float, float]:
    from confluent_kafka import ShareConsumer

    n, start = 0, (0.0, 0.0)
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": max_poll})
    try:
        c.subscribe([TOPIC])
        while n < records:
            batch = c.poll(1.0)
            if len(batch) and not n:
                start = (time.perf_counter(), time.process_time())
            for m in batch:
                if m.error() is None:
                    _ = m.value()
                    n += 1
    finally:
        c.close()
    return n, *start


def _java_command(bootstrap: str, records: str, *extra: str) -> list[str]:
    """The Java peer's share-bench command (tests/java_peer.py compiles it once, cached)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    import java_peer

    return java_peer.command("share-bench", bootstrap, TOPIC, records, *extra)


def worker(args: argparse.Namespace) -> None:
    fn = _consume_kipconsumer if args.worker == "kipconsumer" else _consume_confluent
    n, t0, cpu0 = fn(args.bootstrap, args.group, args.records, args.max_poll_records)
    # from the first batch on (joining the group is not the client's speed), close included
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(json.dumps({"client": args.worker, "records": n, "seconds": wall, "cpu_seconds": cpu}))


def _new_group(broker: Any) -> str:
    group = f"share-bench-{uuid.uuid4().hex[:8]}"
    if broker.name == "kafka":
        broker.cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    return group


def _py_command(args: argparse.Namespace, broker: Any, client: str) -> list[str]:
    """A Python client's worker command, in a fresh share group."""
    return [sys.executable, __file__, "--worker", client, "--bootstrap", broker.bootstrap,
            "--group", _new_group(broker), "--records", str(args.records),
            "--max-poll-records", str(args.max_poll_records)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-poll-records", type=int, default=500)
    ap.add_argument("--broker", choices=["kafka", "mock"], default="kafka")
    add_kafka_version_argument(ap)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--java-passes", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds of the Python clients first")
    ap.add_argument("--worker", choices=PY_CLIENTS, help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--group", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    clients = CLIENTS if args.broker == "kafka" else PY_CLIENTS
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    with start_broker(args.broker) as broker:
        if args.broker == "mock":
            broker.broker.configure_share_groups(auto_offset_reset="earliest")
        broker.create_topic(TOPIC, args.partitions)
        per = [args.records // args.partitions + (p < args.records % args.partitions)
               for p in range(args.partitions)]
        fill_partitions(broker.bootstrap, TOPIC, per, args.value_size)
        for _ in range(max(0, args.warmup)):
            for client in PY_CLIENTS:
                out, err = run_json(_py_command(args, broker, client), args.timeout)
                print(f"warm-up {client}: {'done' if out is not None else 'failed: ' + err}", flush=True)
        for i in range(args.repeat):
            for client in clients[i % len(clients):] + clients[:i % len(clients)]:
                if client == "java":
                    groups = ",".join(_new_group(broker) for _ in range(max(1, args.java_passes)))
                    cmd = _java_command(broker.bootstrap, str(args.records), "--groups", groups,
                                        "--max-poll-records", str(args.max_poll_records))
                else:
                    cmd = _py_command(args, broker, client)
                out, err = run_json(cmd, args.timeout)
                if out is None:
                    print(f"run {i + 1} {client}: failed: {err}")
                    continue
                runs[client].append(out)
                print(f"run {i + 1} {client}: {out['records'] / out['seconds']:,.0f} rec/s, "
                      f"{out['cpu_seconds'] / out['records'] * 1e6:.2f} us CPU/record", flush=True)
    summary: dict[str, dict[str, float]] = {}
    for client, rs in runs.items():
        if rs:
            summary[client] = {
                "records_per_s": statistics.median(r["records"] / r["seconds"] for r in rs),
                "cpu_us_per_record": statistics.median(r["cpu_seconds"] / r["records"] * 1e6 for r in rs),
            }
    for client, rs in runs.items():
        if client in summary:
            print(f"{client:<12} {summary[client]['records_per_s']:>12,.0f} rec/s "
                  f"{summary[client]['cpu_us_per_record']:>8.2f} us CPU/record (median of {len(rs)})")
    ratios: dict[str, dict[str, float]] = {}
    for ref, label in (("confluent", "confluent-kafka ShareConsumer"), ("java", "Java KafkaShareConsumer")):
        if "kipconsumer" in summary and ref in summary:
            k, c = summary["kipconsumer"], summary[ref]
            ratios[ref] = {"throughput": k["records_per_s"] / c["records_per_s"],
                           "cpu_per_record": k["cpu_us_per_record"] / c["cpu_us_per_record"]}
            print(f"kipconsumer / {label}: throughput x{ratios[ref]['throughput']:.2f}, "
                  f"CPU per record x{ratios[ref]['cpu_per_record']:.2f}")
    if "confluent" in summary and "java" in summary:
        c, j = summary["confluent"], summary["java"]
        ratios["confluent_to_java"] = {"throughput": c["records_per_s"] / j["records_per_s"],
                                       "cpu_per_record": c["cpu_us_per_record"] / j["cpu_us_per_record"]}
    summary["ratio"] = ratios  # type: ignore[assignment]
    out_path = args.out or HERE / "results" / f"{dt.date.today().isoformat()}-share.json"
    out_path.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "out"},
                                    "broker": args.broker, "runs": runs, "summary": summary},
                                   indent=2, default=str))
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
