"""Scaling: consumer records/s over partition counts and value sizes.

    python bench/scaling.py [--broker kafka|tansu|mock] [--full] [--repeat 3] [--bytes 200000000]
                            [--clients raw-c,confluent-consume500,kipconsumer-iter,kipconsumer-arrow]

Reduced matrix (default): 1, 12, 96 partitions at 100 B, and 1 KiB, 10 KiB at 12 partitions (5 cells).
--full: every combination of {1, 12, 96} partitions x {100 B, 1 KiB, 10 KiB} (9 cells).
Each cell is one topic of min(--max-records, --bytes / value size) records (1M x 100 B, 195k x 1 KiB,
19.5k x 10 KiB by default), read by every client (bench/workers.py, bench/c/raw_consumer.c) in its own
process, interleaved, --repeat times; the table shows the median records/s (and MB/s of values) and the
ratio to confluent-kafka consume(500) and to the raw C consumer.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import run as throughput  # noqa: E402

CLIENTS = "raw-c,confluent-consume500,kipconsumer-iter,kipconsumer-arrow"


def cells(full: bool) -> list[tuple[int, int]]:
    if full:
        return [(p, v) for v in (100, 1024, 10240) for p in (1, 12, 96)]
    return [(1, 100), (12, 100), (96, 100), (12, 1024), (12, 10240)]


def run(args: argparse.Namespace, broker: Any = None, quiet: bool = False) -> dict[str, Any]:
    clients = args.clients.split(",")
    own = broker is None
    if own:
        broker = _common.start_broker(args.broker)
    results: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            raw = throughput.build_raw_consumer(tmp) if "raw-c" in clients else ""
            todo = cells(args.full)
            prog = _common.Progress(len(todo) * args.repeat * len(clients))
            for parts, size in todo:
                records = min(args.max_records, args.bytes // size)
                topic = f"scale-{parts}p-{size}b"
                broker.create_topic(topic, parts)
                per = [records // parts + (1 if p < records % parts else 0) for p in range(parts)]
                _common.fill_partitions(broker.bootstrap, topic, per, size)
                runs: dict[str, list[float]] = {c: [] for c in clients}
                cpu: dict[str, list[float]] = {c: [] for c in clients}  # client CPU ns per record
                for rep in range(args.repeat):
                    for name in clients:
                        prog.step(f"scaling {parts}p x {size} B: {name} run {rep + 1}")
                        tail = [broker.bootstrap, topic, str(parts), str(records)]
                        cmd = (
                            [raw, *tail]
                            if name == "raw-c"
                            else [sys.executable, str(_common.HERE / "workers.py"), name, *tail]
                        )
                        res, err = _common.run_json(cmd, timeout=200)
                        if res is None:
                            print(f"  {name}: failed: {err}", flush=True)
                        elif res["records"] != records:
                            print(f"  {name}: read {res['records']} of {records}", flush=True)
                        else:
                            runs[name].append(res["records_per_s"])
                            if "cpu_s" in res:
                                cpu[name].append(res["cpu_s"] / res["records"] * 1e9)
                cell: dict[str, Any] = {
                    "partitions": parts,
                    "value_size": size,
                    "records": records,
                    "clients": {},
                }
                for name, vals in runs.items():
                    if vals:
                        cell["clients"][name] = {
                            **_common.stats(vals),
                            "runs": vals,
                            "cpu_ns_per_record": _common.stats(cpu[name]).get("median", float("nan")),
                        }
                results.append(cell)
    finally:
        if own:
            broker.stop()
    out = {
        "config": {"broker": broker.name, "full": args.full, "repeat": args.repeat, "clients": clients},
        "cells": results,
    }
    print_table(out)
    return out


def print_table(result: dict[str, Any]) -> None:
    clients = result["config"]["clients"]
    print(
        f"\nscaling ({result['config']['broker']}; median records/s of {result['config']['repeat']} runs; "
        "x cf = ratio to confluent consume(500), x C = ratio to raw C)"
    )
    head = f"{'partitions':>10} {'value':>7} {'records':>9}"
    for c in clients:
        head += f" {c:>22}"
    print(head + f" {'iter x cf':>9} {'arrow x C':>9}")
    for cell in result["cells"]:
        line = f"{cell['partitions']:>10} {cell['value_size']:>7} {cell['records']:>9}"
        med = {c: cell["clients"].get(c, {}).get("median", float("nan")) for c in clients}
        for c in clients:
            mbs = med[c] * cell["value_size"] / 1e6
            line += f" {med[c]:>12,.0f} ({mbs:5.0f}MB/s)" if med[c] == med[c] else f" {'-':>22}"
        it, cf = med.get("kipconsumer-iter", float("nan")), med.get("confluent-consume500", float("nan"))
        ar, rc = med.get("kipconsumer-arrow", float("nan")), med.get("raw-c", float("nan"))
        print(line + f" {it / cf if cf else float('nan'):9.2f} {ar / rc if rc else float('nan'):9.2f}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["kafka", "tansu", "mock"], default="kafka")
    _common.add_kafka_version_argument(ap)
    ap.add_argument("--full", action="store_true", help="all 9 cells instead of the reduced 5")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-records", type=int, default=1_000_000)
    ap.add_argument("--bytes", type=int, default=200_000_000, help="value bytes per cell (bounds records)")
    ap.add_argument("--clients", default=CLIENTS)
    ap.add_argument("--json", help="also write the result here")
    return ap


def main() -> int:
    args = parser().parse_args()
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if any(c["clients"] for c in result["cells"]) else 1


if __name__ == "__main__":
    sys.exit(main())
