"""A/B: librdkafka on glibc's malloc against the same librdkafka bound to the bundled jemalloc (issue #37).

    python bench/alloc_ab.py [--broker kafka] [--records 1200000] [--partitions 12] [--rounds 5]
                             [--bound /path/to/bound/librdkafka.so.1] [--preload LIBJEMALLOC]

Fills one topic, then per round runs, each in its own process and in alternating order (ABBA, so drift
hits both sides alike): the raw C consumer (bench/c/raw_consumer.c, linked once against the plain
library, confluent-kafka's wheel's binary as it ships (run.py's plain_librdkafka), and once against a
bound copy of it) and kipconsumer iterating values (bench/workers.py ``kipconsumer-iter``; each side
gets its library through ``KIPCONSUMER_LIBRDKAFKA``). Until session 22 (2026-11-29) the plain side was
the checkout's own library, which ./dev.sh binds: both sides were bound
(2026-11-29-alloc-ab-kafka-s21.json's ratio 1.00).
Prints records/s and CPU ns per record (min/median/max) per side and the per-round ratio bound/plain
(min/median/max); then the peak and final RSS of a kipconsumer consume of the same records on each side
(bench/memory.py's worker). The bound copy is made by scripts/native_bundle.py unless ``--bound`` names
one. Results go to bench/results/<date>-alloc-ab-<broker>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scripts"))
from _common import ROOT, start_broker  # noqa: E402
from run import TOPIC, build_raw_consumer, fill, plain_librdkafka  # noqa: E402

ENV = "KIPCONSUMER_LIBRDKAFKA"


def run_json(cmd: list[str], env: dict[str, str]) -> dict[str, float] | None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        print(f"  failed (rc={proc.returncode}): {proc.stderr.strip()[-300:]}", flush=True)
        return None
    result: dict[str, float] = json.loads(lines[-1])
    return result


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)} if values else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["kafka", "tansu", "mock"], default="kafka")
    ap.add_argument("--records", type=int, default=1_200_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bound", help="a bound librdkafka (default: scripts/native_bundle.py makes one)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--preload", metavar="LIBJEMALLOC",
                    help="add a third side: the plain library with this allocator in LD_PRELOAD for the "
                    "whole process (e.g. Debian's libjemalloc.so.2), as a reference")
    args = ap.parse_args()

    base_env = {k: v for k, v in os.environ.items() if k != ENV}
    base_env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        # plain: confluent-kafka's binary as it ships (the checkout's own copy is bound already)
        (Path(tmp) / "plain").mkdir()
        plain = plain_librdkafka(str(Path(tmp) / "plain"))
        if args.bound:
            bound = Path(args.bound)
        else:
            import native_bundle

            bound = native_bundle.bound_copy(Path(tmp) / "bound", source=Path(plain))
        print(f"plain: {plain}\nbound: {bound}", flush=True)
        plain_env = {**base_env, ENV: plain}
        bound_env = {**base_env, ENV: str(bound)}
        (Path(tmp) / "jemalloc").mkdir()
        raw = {"plain": build_raw_consumer(str(Path(tmp) / "plain"), lib=plain),
               "jemalloc": build_raw_consumer(str(Path(tmp) / "jemalloc"), lib=str(bound))}
        envs = {"plain": plain_env, "jemalloc": bound_env}
        if args.preload:
            envs["preload"] = {**plain_env, "LD_PRELOAD": args.preload}
            raw["preload"] = raw["plain"]

        broker = start_broker(args.broker)
        runs: dict[str, list[dict[str, float]]] = {}
        memory: dict[str, list[dict[str, float]]] = {side: [] for side in envs}
        try:
            broker.create_topic(TOPIC, args.partitions)
            print(f"broker {args.broker}: filling {args.records} x {args.value_size} B", flush=True)
            fill(broker.bootstrap, args.records, args.partitions, args.value_size)
            tail = [broker.bootstrap, TOPIC, str(args.partitions), str(args.records)]
            for rnd in range(-1, args.rounds):  # round -1: warm-up, not counted
                order = list(envs) if rnd % 2 == 0 else list(reversed(envs))
                for client in ("raw-c", "kipconsumer-iter"):
                    for side in order:
                        cmd = (
                            [raw[side], *tail]
                            if client == "raw-c"
                            else [sys.executable, str(HERE / "workers.py"), client, *tail]
                        )
                        print(f"round {rnd + 1}/{args.rounds} {client} {side}", flush=True)
                        r = run_json(cmd, envs[side])
                        if r is not None and rnd >= 0 and r["records"] == args.records:
                            runs.setdefault(f"{client}/{side}", []).append(r)
            for side in envs:
                cmd = [sys.executable, str(HERE / "memory.py"), "--worker", "kipconsumer",
                       "--mode", "consume", "--bootstrap", broker.bootstrap,
                       "--partitions", str(args.partitions), "--records", str(args.records),
                       "--stall", "0", "--topic", TOPIC]
                r = run_json(cmd, envs[side])
                if r is not None:
                    memory[side].append(r)
        finally:
            broker.stop()

    summary: dict[str, object] = {}
    print(f"\n{'client/allocator':28} {'rec/s min':>11} {'median':>11} {'max':>11} {'CPU ns/rec median':>18}")
    for name, rs in sorted(runs.items()):
        rate = spread([r["records_per_s"] for r in rs])
        cpu = spread([r["cpu_s"] / r["records"] * 1e9 for r in rs])
        summary[name] = {"records_per_s": rate, "cpu_ns_per_record": cpu, "runs": len(rs)}
        print(f"{name:28} {rate['min']:>11,.0f} {rate['median']:>11,.0f} {rate['max']:>11,.0f} "
              f"{cpu['median']:>18,.0f}")
    print(f"\n{'client':20} {'side / plain, per round: min':>40} {'median':>8} {'max':>8}")
    for client in ("raw-c", "kipconsumer-iter"):
        for side in [s for s in envs if s != "plain"]:
            a, b = runs.get(f"{client}/plain", []), runs.get(f"{client}/{side}", [])
            ratios = [y["records_per_s"] / x["records_per_s"] for x, y in zip(a, b, strict=False)]
            if ratios:
                r = spread(ratios)
                summary[f"{client} {side}/plain"] = r
                label = f"{side} / plain"
                print(f"{client:20} {label:>40} {r['min']:>8.2f} {r['median']:>8.2f} {r['max']:>8.2f}")
    for side, rs in memory.items():
        if rs:
            summary[f"memory/{side}"] = {k: rs[0][k] for k in ("base_rss_mb", "peak_rss_mb", "end_rss_mb")}
            print(f"kipconsumer consume RSS, {side}: base {rs[0]['base_rss_mb']:.0f} MiB, "
                  f"peak {rs[0]['peak_rss_mb']:.0f} MiB, end {rs[0]['end_rss_mb']:.0f} MiB")
    out = Path(args.json) if args.json else (
        ROOT / "bench" / "results" / f"{dt.date.today().isoformat()}-alloc-ab-{args.broker}.json")
    result = {"args": vars(args), "summary": summary, "runs": runs, "memory": memory}
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
