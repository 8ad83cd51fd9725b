"""Resume latency: how long after ``resume()`` a consumer has records again.

    python bench/resume_latency.py [--broker kafka|tansu|mock] [--records 1200000] [--partitions 12]
        [--rounds 5] [--pause 1.5] [--after 20000] [--clients kipconsumer,confluent-kafka] [--json OUT]

Fills one topic, then runs each client in its own process (assign all partitions from offset 0, no
group, max.poll.records=500 / consume(500)); confluent-kafka gets kipconsumer's fetch settings (like for
like, bench/workers.py). Each of --rounds rounds: read 100,000 records, pause() every partition, keep
calling poll(0.1) for --pause seconds (librdkafka drops what it had queued of them), resume() them all,
then time until --after records have come (and the largest gap between two polls that returned
records). librdkafka's own resume leaves its broker thread idle until its wait of up to 1 s ends;
kipconsumer's resume() wakes the fetchers (docs/consumer.md, "pause() / resume()").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

TOPIC = "resume"
ALL_CLIENTS = ["kipconsumer", "confluent-kafka"]
READ_BEFORE = 100_000


def _rounds(
    poll: Any, pause: Any, resume: Any, rounds: int, pause_s: float, after: int
) -> list[dict[str, float]]:
    """`poll()` returns a list of records; `pause()` / `resume()` act on every assigned partition."""
    out = []
    for _ in range(rounds):
        got = 0
        while got < READ_BEFORE:
            got += len(poll(1.0))
        pause()
        end = time.monotonic() + pause_s
        while time.monotonic() < end:
            poll(0.1)
        resume()
        t0 = last = time.perf_counter()
        got, gap = 0, 0.0
        while got < after:
            records = poll(2.0)
            now = time.perf_counter()
            if records:
                gap, last = max(gap, now - last), now
                got += len(records)
        out.append({"ms": (time.perf_counter() - t0) * 1e3, "max_gap_ms": gap * 1e3})
    return out


def worker(
    client: str, bootstrap: str, topic: str, partitions: int, rounds: int, pause_s: float, after: int
) -> list[dict[str, float]]:
    import workers

    if client == "kipconsumer":
        k = workers._kipconsumer(bootstrap, topic, partitions)
        tps = k.assignment()
        try:
            return _rounds(k.poll, lambda: k.pause(tps), lambda: k.resume(tps), rounds, pause_s, after)
        finally:
            k.close()
    c = workers._confluent(bootstrap, topic, partitions, tuned=True)
    parts = c.assignment()

    def poll(timeout: float) -> list[Any]:
        return [m for m in c.consume(500, timeout) if not m.error()]

    try:
        return _rounds(poll, lambda: c.pause(parts), lambda: c.resume(parts), rounds, pause_s, after)
    finally:
        c.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    clients = [c for c in args.clients.split(",") if c]
    result: dict[str, Any] = {
        "config": {
            k: getattr(args, k) for k in ("broker", "records", "partitions", "rounds", "pause", "after")
        },
        "runs": {},
        "summary": {},
    }
    broker = _common.start_broker(args.broker)
    try:
        broker.create_topic(TOPIC, args.partitions)
        n, parts = args.records, args.partitions
        _common.fill_partitions(
            broker.bootstrap, TOPIC, [n // parts + (p < n % parts) for p in range(parts)], 100
        )
        for client in clients:
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                client,
                "--bootstrap",
                broker.bootstrap,
                "--partitions",
                str(args.partitions),
                "--rounds",
                str(args.rounds),
                "--pause",
                str(args.pause),
                "--after",
                str(args.after),
            ]
            p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), timeout=600)
            if p.returncode:
                raise SystemExit(f"{client} failed:\n{p.stderr[-3000:]}")
            runs = json.loads(p.stdout.strip().splitlines()[-1])
            result["runs"][client] = runs
            result["summary"][client] = {k: _common.stats([r[k] for r in runs]) for k in ("ms", "max_gap_ms")}
    finally:
        broker.stop()
    return result


def print_table(result: dict[str, Any]) -> None:
    cfg = result["config"]
    print(
        f"\nresume latency ({cfg['broker']}, {cfg['partitions']} partitions, all paused {cfg['pause']} s, "
        f"then {cfg['after']} records; ms, median [min-max] of {cfg['rounds']} rounds)"
    )
    print(f"{'client':18} {'to the records':>20} {'largest gap':>20}")
    for name, s in result["summary"].items():
        print(f"{name:18} {_common.fmt_stats(s['ms']):>20} {_common.fmt_stats(s['max_gap_ms']):>20}")
    s = result["summary"]
    if "kipconsumer" in s and "confluent-kafka" in s:
        print(
            f"confluent-kafka / kipconsumer (median time to the records): "
            f"{s['confluent-kafka']['ms']['median'] / s['kipconsumer']['ms']['median']:.1f}x"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["kafka", "tansu", "mock"], default="kafka")
    _common.add_kafka_version_argument(ap)
    ap.add_argument("--records", type=int, default=1_200_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pause", type=float, default=1.5, help="seconds the partitions stay paused")
    ap.add_argument("--after", type=int, default=20_000, help="records timed after resume()")
    ap.add_argument("--clients", default=",".join(ALL_CLIENTS))
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(
            json.dumps(
                worker(
                    args.worker, args.bootstrap, TOPIC, args.partitions, args.rounds, args.pause, args.after
                )
            )
        )
        return 0
    if args.records < args.rounds * (READ_BEFORE + args.after):
        ap.error(f"--records must be at least --rounds x ({READ_BEFORE} + --after)")
    result = run(args)
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
