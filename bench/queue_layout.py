"""librdkafka's shared fetch queue against per-partition queues, in plain C (bench/c/queue_layout.c).

    python bench/queue_layout.py [--records 3000000] [--partitions 12] [--kbytes 8192] [--repeat 3]
                                 [--broker kafka|tansu|mock] [--modes throughput,pause]

Issue 19 asks for a first poll after a pause that costs no more than confluent-kafka's, serves
every partition with data (KIP-41) and holds no more memory during a stall. kipconsumer reads
librdkafka's one shared consumer queue, in the order fetches arrived: a poll that must serve every
partition has to take everything queued ahead of the last partition's first record. This runs the
same C consumer over both layouts of librdkafka's queues at the same total prefetch bound
(`queued.max.messages.kbytes`=KBYTES shared, KBYTES / PARTITIONS per partition queue), on one Tansu
topic, interleaved, and prints throughput, CPU per record, the first poll after each 1 s pause
(and how many records it had to take), p99/max of all timed polls, and the RSS growth over a pause.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_kafka_version_argument, start_broker  # noqa: E402
from run import TOPIC, build_raw_consumer, fill, run_client  # noqa: E402

FIGURES = (
    ("records_per_s", "records/s", "{:,.0f}"),
    ("cpu_ns_per_record", "CPU ns/rec", "{:.0f}"),
    ("first_p50_us", "first p50 us", "{:.0f}"),
    ("first_max_us", "first max us", "{:.0f}"),
    ("first_moved_max", "first took", "{:,.0f}"),
    ("p99_us", "p99 us", "{:.0f}"),
    ("max_us", "max us", "{:.0f}"),
    ("rss_growth_max_mib", "pause RSS+ MiB", "{:.1f}"),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--kbytes", type=int, default=8192, help="total prefetch bound (kipconsumer's default)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--broker", choices=["kafka", "tansu", "mock"], default="kafka")
    add_kafka_version_argument(ap)
    ap.add_argument("--modes", default="throughput,pause", help="throughput, pause (10 x 1 s pauses)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    # (row, layout, total prefetch bound in KiB): the partition layout at the same total bound, and
    # at the bound each partition would need to keep up (the shared queue's, per partition)
    rows = [
        ("shared", "shared", args.kbytes),
        ("partition", "partition", args.kbytes),
        (f"partition x{args.partitions}", "partition", args.kbytes * args.partitions),
    ]
    results: dict[str, list[dict[str, float]]] = {row: [] for row, _, _ in rows}
    broker = start_broker(args.broker)
    short = 0
    try:
        broker.create_topic(TOPIC, args.partitions)
        print(f"{args.broker}: {args.records} x 100 B over {args.partitions} partitions", flush=True)
        fill(broker.bootstrap, args.records, args.partitions, 100)
        with tempfile.TemporaryDirectory() as tmp:
            exe = build_raw_consumer(tmp, "queue_layout")
            for rep in range(args.repeat):
                for row, layout, kbytes in rows:
                    merged: dict[str, float] = {}
                    for mode in modes:
                        print(f"run {rep + 1}: {row} {mode}", flush=True)
                        cmd = [
                            exe,
                            broker.bootstrap,
                            TOPIC,
                            str(args.partitions),
                            str(args.records),
                            layout,
                            str(kbytes),
                            mode,
                        ]
                        r = run_client(f"{row}-{mode}", cmd)
                        if r is None or (mode == "throughput" and r["records"] != args.records):
                            short += 1
                        if r is not None:
                            merged.update({k: v for k, v in r.items() if isinstance(v, (int, float))})
                    results[row].append(merged)
    finally:
        broker.stop()
    bound = f"prefetch bound {args.kbytes} KiB in all (x{args.partitions}: per partition)"
    print(f"\nmedian of {args.repeat} runs; {bound}")
    print(f"{'layout':<14}" + "".join(f"{label:>15}" for _, label, _ in FIGURES))
    for row, _, _ in rows:
        cells = []
        for key, _, fmt in FIGURES:
            vals = [r[key] for r in results[row] if key in r]
            cells.append(fmt.format(statistics.median(vals)) if vals else "-")
        print(f"{row:<14}" + "".join(f"{c:>15}" for c in cells))
    if short:
        print(f"{short} run(s) failed or read fewer than {args.records} records")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
