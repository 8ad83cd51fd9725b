"""Duplicates under member churn: kipconsumer eager vs cooperative-sticky vs KIP-848 vs confluent-kafka.

    python bench/churn_duplicates.py [--seeds 1,2,3,4] [--records 30000] [--seconds 50] [--gap 5]
                                     [--commit-interval 1.0] [--variants kip,confluent] [--json OUT]
    python bench/churn_duplicates.py --variants kip-cooperative,kip-kip848 --baseline kip/cooperative-sticky

``kip-kip848`` is kipconsumer with ``group.protocol=consumer`` (KIP-848, served by the embedded
broker); ``--baseline`` names the variant the ratios are taken against (default confluent-kafka's).

The scenario of issue 7: 3 consumer processes in one group on 12 partitions, a producer writing
`--records` records with unique ids, and a driver that replaces a member (starts a new one, closes an
old one) every `--gap` seconds on average for `--seconds`. Every member commits every
`--commit-interval` seconds and in on_partitions_revoked. It runs the chaos suite
(tests/chaos/test_chaos.py, KIP_CHAOS_FAULTS=replace) once per seed and variant, in one invocation, on
the embedded broker (librdkafka's mock cluster, which refuses every commit while the group is
joining); each run asserts that nothing was lost, so a failed run fails the benchmark.

Printed: duplicate records per seed and variant, the totals, and each kipconsumer variant's total as a
ratio to confluent-kafka's eager total (issue 7 aims at 5x fewer for cooperative-sticky). Single
runs vary a lot with the timing of closes against joins, which is why several seeds are summed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFLUENT = "confluent/range"


def run_seed(seed: int, args: argparse.Namespace, out: Path) -> dict[str, int]:
    """Runs every variant for one seed; returns {variant: duplicate records}."""
    env = dict(os.environ, KIP_CHAOS="1", KIP_CHAOS_CONFLUENT="1", KIP_CHAOS_KIP848="1",
               KIP_CHAOS_SEED=str(seed),
               KIP_CHAOS_SECONDS=str(args.seconds), KIP_CHAOS_RECORDS=str(args.records),
               KIP_CHAOS_FAULTS="replace", KIP_CHAOS_FAULT_GAP=str(args.gap),
               KIP_CHAOS_COMMIT_INTERVAL=str(args.commit_interval), KIP_CHAOS_OUT=str(out))
    select = " or ".join(args.variants.split(","))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
           str(ROOT / "tests" / "chaos" / "test_chaos.py"), "-k", f"test_chaos and ({select})",
           "--basetemp", str(out / "tmp")]
    log = out / "pytest.log"
    with log.open("w") as fh:
        rc = subprocess.call(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if rc != 0:
        raise SystemExit(f"seed {seed}: the chaos run failed (exit {rc}); see {log}")
    dups: dict[str, int] = {}
    for f in sorted(out.glob("chaos-*-*.json")):
        if f.name == "chaos-comparison.json":
            continue
        r = json.loads(f.read_text())
        dups[r["variant"]] = int(r["duplicate_records"])
    return dups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1,2,3,4")
    ap.add_argument("--records", type=int, default=30000)
    ap.add_argument("--seconds", type=float, default=50.0)
    ap.add_argument("--gap", type=float, default=5.0)
    ap.add_argument("--commit-interval", type=float, default=1.0)
    ap.add_argument("--variants", default="kip,confluent",
                    help="pytest -k words: kip (both kipconsumer variants), kip-eager, kip-coop, confluent")
    ap.add_argument("--baseline", default=CONFLUENT, help="the variant ratios are taken against")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep each run's member logs and summaries under this directory")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    per_seed: dict[int, dict[str, int]] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kip-churn-") as tmp:
        for seed in seeds:
            out = (args.keep or Path(tmp)) / f"seed{seed}"
            out.mkdir(parents=True, exist_ok=True)
            per_seed[seed] = run_seed(seed, args, out)
            print(f"seed {seed}: " + "  ".join(f"{v} {n}" for v, n in per_seed[seed].items()), flush=True)
    variants = sorted({v for d in per_seed.values() for v in d})
    totals = {v: sum(d.get(v, 0) for d in per_seed.values()) for v in variants}
    base = totals.get(args.baseline)
    print(f"\n=== duplicates under churn: {len(seeds)} seeds, {args.records} records each, a member "
          f"replaced every ~{args.gap} s for {args.seconds} s, commits every {args.commit_interval} s ===")
    header = " ".join(f"{'seed ' + str(s):>10s}" for s in seeds)
    print(f"{'variant':28s} {header} {'total':>10s}  vs {args.baseline}")
    for v in variants:
        ratio = f"{base / totals[v]:.2f}x fewer" if base and totals[v] and v != args.baseline else ""
        print(f"{v:28s} " + " ".join(f"{per_seed[s].get(v, 0):>10d}" for s in seeds)
              + f" {totals[v]:>10d}  {ratio}")
    print(f"(losses 0 in every run; {time.monotonic() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"seeds": seeds, "records": args.records, "seconds": args.seconds,
                                         "gap": args.gap, "commit_interval": args.commit_interval,
                                         "per_seed": {str(s): d for s, d in per_seed.items()},
                                         "totals": totals}, indent=1))


if __name__ == "__main__":
    main()
