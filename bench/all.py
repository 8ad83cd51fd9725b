"""The whole comparison in one command: throughput + latency, producer, fairness, liveness, memory, scaling.

    python bench/all.py [--quick] [--full] [--repeat 3] [--only a,b] [--skip a,b] [--no-install]
                        [--records 1000000] [--stall 60] [--no-charts] [--profile]

Sections (each client in its own process, runs interleaved, every figure repeated --repeat times and
reported as median and min/max):

* throughput  bench/run.py on its own broker: records/s and per-poll latency p50/p99 of
              kipconsumer poll()+iterate, poll()+to_arrow(), confluent-kafka consume(500), raw C.
* producer    bench/bench_producer.py on the same kind of broker: send()+futures vs produce()+callback.
* fairness    bench/fairness.py: 1 partition x 200k + 7 x 2k, max poll records 500, all clients.
* liveness    bench/liveness.py: 2-member groups, one member holds the GIL for 3 x session.timeout.ms.
* scaling     bench/scaling.py: 1/12/96 partitions x 100 B/1 KiB/10 KiB (reduced matrix; --full: all 9).
* memory      bench/memory.py: peak RSS consuming --records records; RSS growth over a --stall s stall.
* profile     (with --profile) bench/profile_poll.py: py-spy top frames of kipconsumer's poll+iterate loop.

Broker (--broker): kafka (the default: real Apache Kafka, one KRaft node of
kipconsumer.testing.KafkaCluster) or tansu. fairness, liveness, scaling and memory share one broker
(kafka-python cannot bootstrap from the mock cluster). --quick: 200k records, 1 liveness run, 15 s stall
(a smoke run of the harness, ~6 min).
Writes bench/results/<date>.json and PNG charts bench/results/<date>-*.png (throughput bars, latency,
fairness timeline, scaling, memory). Missing peers (aiokafka, kafka-python) are pip-installed into the
running environment unless --no-install, else skipped with a printed reason; matplotlib likewise (no
charts if it cannot be installed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import fairness  # noqa: E402
import liveness  # noqa: E402
import memory  # noqa: E402
import scaling  # noqa: E402

SECTIONS = ["throughput", "producer", "fairness", "liveness", "scaling", "memory", "profile"]
NAN = float("nan")


def banner(i: int, n: int, name: str, t0: float) -> None:
    bar = "=" * (30 * (i - 1) // n)
    print(f"\n[{bar:<30}] section {i}/{n}: {name}   ({time.monotonic() - t0:.0f} s elapsed)", flush=True)


def stream(cmd: list[str], timeout: float) -> tuple[int, str]:
    """Runs cmd, echoing its output as it comes (so its own progress bar shows); returns (rc, output)."""
    out: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        out.append(line)
        print("    " + line, end="", flush=True)
        if time.monotonic() > deadline:
            proc.kill()
            break
    return proc.wait(), "".join(out)


def section_throughput(a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        js = Path(tmp) / "throughput.json"
        rc, _ = stream(
            [
                sys.executable,
                str(_common.HERE / "run.py"),
                "--records",
                str(a.records),
                "--repeat",
                str(a.repeat),
                "--json",
                str(js),
                "--broker",
                a.broker,
            ],
            timeout=3600,
        )
        if rc != 0 or not js.exists():
            return {"skipped": f"bench/run.py failed (rc={rc})"}
        result: dict[str, Any] = json.loads(js.read_text())
        return result


def section_producer(a: argparse.Namespace) -> dict[str, Any]:
    records = min(500_000, a.records)
    rc, out = stream(
        [
            sys.executable,
            str(_common.HERE / "bench_producer.py"),
            "--records",
            str(records),
            "--repeat",
            str(a.repeat),
            "--broker",
            a.broker,
        ],
        timeout=3600,
    )
    runs: dict[str, list[float]] = {"kipconsumer": [], "confluent": []}
    for m in re.finditer(r"^\s+(kipconsumer|confluent)\s+([\d,]+) records/s", out, re.M):
        runs[m.group(1)].append(float(m.group(2).replace(",", "")))
    if rc != 0 or not runs["kipconsumer"] or not runs["confluent"]:
        return {"skipped": f"bench/bench_producer.py failed (rc={rc})", "runs": runs}
    k, c = _common.stats(runs["kipconsumer"]), _common.stats(runs["confluent"])
    return {
        "records": records,
        "runs": runs,
        "kipconsumer": k,
        "confluent": c,
        "ratio": k["median"] / c["median"],
    }


def ns(parser: argparse.ArgumentParser, **kw: Any) -> argparse.Namespace:
    a = parser.parse_args([])
    for k, v in kw.items():
        setattr(a, k, v)
    return a


# ---------------------------------------------------------------------------------------------
Row = tuple[str, str, str, str, str, str, str]


def summary_table(res: dict[str, Any]) -> list[Row]:
    """(figure, measured, target, verdict, records/s x raw C, CPU ns/record, CPU x raw C) rows; the last
    three describe the kipconsumer client the figure is about ("-" where a figure has no such client)."""
    rows: list[Row] = []

    def verdict(ok: bool | None) -> str:
        return "-" if ok is None else ("met" if ok else "NOT met")

    def known(*vals: float) -> bool:
        return all(v == v for v in vals)

    none = ("-", "-", "-")
    tp = res.get("throughput", {}).get("summary", {})
    if tp:

        def med(c: str, k: str = "median_records_per_s") -> float:
            return float(tp.get(c, {}).get(k, NAN))

        rc_rate, rc_cpu = med("raw-c", "median_records_per_s_from_assign"), med("raw-c", "cpu_ns_per_record")

        def cols(name: str) -> tuple[str, str, str]:
            """records/s x raw C, CPU ns/record, CPU x raw C of a throughput client (from assign())."""
            rate, cpu = med(name, "median_records_per_s_from_assign"), med(name, "cpu_ns_per_record")
            return (f"{rate / rc_rate:.2f}x", f"{cpu:,.0f}", f"{cpu / rc_cpu:.2f}x")

        it, ar = med("kipconsumer-iter", "median_records_per_s_from_assign"), med(
            "kipconsumer-arrow", "median_records_per_s_from_assign")
        cf_tuned = med("confluent-consume500-tuned", "median_records_per_s_from_assign")
        cf_dflt = med("confluent-consume500", "median_records_per_s_from_assign")
        rc = med("raw-c", "median_records_per_s_from_assign")
        rc_glibc = med("raw-c-glibc", "median_records_per_s_from_assign")
        java, java_cpu = med("java", "median_records_per_s_from_assign"), med("java", "cpu_ns_per_record")
        it_cpu, ar_cpu = (
            med("kipconsumer-iter", "cpu_ns_per_record"),
            med("kipconsumer-arrow", "cpu_ns_per_record"),
        )
        # issue 37's goals (records/s from assign(), CPU from assign()), side by side in one run
        for label, name, rate in (("poll()+values", "kipconsumer-iter", it),
                                  ("poll()+to_arrow()", "kipconsumer-arrow", ar)):
            # issue 37's raw C goal is the C consumer on glibc (librdkafka as confluent-kafka's wheel ships
            # it); the one on the library kipconsumer loads (bound to the bundled jemalloc) is shown beside
            # it, without a goal
            for peer, ref, goal in (("raw C consumer on glibc", rc_glibc, 1.0),
                                    ("raw C consumer on the bound library", rc, None),
                                    ("Java client", java, 1.2)):
                rows.append(
                    (
                        f"{label} records/s vs {peer}",
                        f"{rate:,.0f} / {ref:,.0f} = {rate / ref:.2f}x",
                        "-" if goal is None else f">= {goal}x",
                        verdict(None if goal is None or not known(rate, ref) else rate / ref >= goal),
                        *cols(name),
                    )
                )
        for label, name, cpu in (("poll()+values", "kipconsumer-iter", it_cpu),
                                 ("poll()+to_arrow()", "kipconsumer-arrow", ar_cpu)):
            rows.append(
                (
                    f"{label} client CPU per record vs the Java client",
                    f"{cpu:,.0f} / {java_cpu:,.0f} ns = {cpu / java_cpu:.2f}x",
                    "<= 0.9x",
                    verdict(cpu / java_cpu <= 0.9 if known(cpu, java_cpu) else None),
                    *cols(name),
                )
            )
        rows.append(
            (
                "poll()+to_arrow() CPU per record vs poll()+values",
                f"{ar_cpu:,.0f} vs {it_cpu:,.0f} ns",
                "to_arrow() lower",
                verdict(ar_cpu < it_cpu if known(ar_cpu, it_cpu) else None),
                *cols("kipconsumer-arrow"),
            )
        )
        for peer, ref, goal in (("confluent consume(500), like for like", cf_tuned, 1.1),
                                ("confluent consume(500) at its defaults", cf_dflt, None)):
            rows.append(
                (
                    f"poll()+values vs {peer}",
                    f"{it:,.0f} / {ref:,.0f} = {it / ref:.2f}x",
                    f">= {goal}x" if goal else "(informative)",
                    verdict(it / ref >= goal if goal and known(it, ref) else None),
                    *cols("kipconsumer-iter"),
                )
            )
        for name in ("confluent-consume500-tuned", "confluent-consume500", "java", "raw-c", "raw-c-glibc"):
            rows.append(
                (f"{name} (peer / floor)", f"{med(name, 'median_records_per_s_from_assign'):,.0f} rec/s",
                 "(reference)", "-", *cols(name))
            )
        # The raw C consumer does the same work every run: a spread of its CPU per record means the
        # machine's speed changed during the run (seen: 152 ns in some runs, 202-207 in others), and
        # the verdicts above are then not worth much.
        rc_runs = [
            r["cpu_s"] * 1e9 / r["records"]
            for r in tp.get("raw-c", {}).get("runs", [])
            if r.get("records") and "cpu_s" in r
        ]
        if len(rc_runs) > 1:
            lo, hi = min(rc_runs), max(rc_runs)
            rows.append(
                (
                    "quiet machine: raw C CPU per record, min-max of the runs",
                    f"{lo:,.0f}-{hi:,.0f} ns (+{hi / lo - 1:.0%})",
                    "spread <= 20%",
                    verdict(hi / lo <= 1.2),
                    *none,
                )
            )
        for k, label, tgt in (
            ("buffered_p50_us", "p50", "(informative)"),
            ("buffered_p99_us", "p99", "below confluent"),
            ("buffered_max_us", "max", "below confluent"),
            ("first_max_us", "first after a pause, max", "(in max)"),
        ):
            kv, cv = med("kipconsumer-latency", k), med("confluent-latency", k)
            below = kv < cv if known(kv, cv) else None
            rows.append(
                (
                    f"poll() of 500 buffered records {label} (us), kipconsumer vs confluent",
                    f"{kv:,.0f} vs {cv:,.0f} = {kv / cv:.2f}x",
                    tgt,
                    verdict(below) if tgt == "below confluent" else "-",
                    *none,
                )
            )
        for k, label in (("poll_p50_us", "p50"), ("poll_p99_us", "p99")):
            kv, cv = med("kipconsumer-iter", k), med("confluent-consume500", k)
            rows.append(
                (
                    f"poll latency {label} during the throughput run (us; includes waits for the broker)",
                    f"{kv:,.0f} vs {cv:,.0f}",
                    "(informative)",
                    "-",
                    *none,
                )
            )
    pr = res.get("producer", {})
    if "ratio" in pr:
        rows.append(
            (
                "producer send()+futures vs produce()+callback",
                f"{pr['kipconsumer']['median']:,.0f} / {pr['confluent']['median']:,.0f} = {pr['ratio']:.2f}x",
                ">= 1.2x",
                verdict(pr["ratio"] >= 1.2),
                *none,
            )
        )
    fa = res.get("fairness", {}).get("summary", {})
    for name, s in fa.items():
        a, g = s["polls_until_all_served"], s["max_gap_polls"]
        rows.append(
            (
                f"fairness {name}: polls to serve all / max gap",
                f"{a.get('median', NAN):.0f} / {g.get('median', NAN):.0f}",
                "(lower is fairer)",
                "-",
                *none,
            )
        )
    lv = res.get("liveness", {}).get("summary", {})
    for name, s in lv.items():
        n = s["rebalances"]["max"]
        rows.append(
            (
                f"liveness {name}: unwanted rebalances (max of runs)",
                f"{n:.0f}",
                "0 for kipconsumer" if name == "kipconsumer" else "(peer)",
                verdict(n == 0) if name == "kipconsumer" else "-",
                *none,
            )
        )
    me = res.get("memory", {}).get("summary", {})
    for name, s in me.items():
        pk, gr = s.get("peak_rss_mb", {}), s.get("stall_growth_mb", {})
        rows.append(
            (
                f"memory {name}: peak RSS / stall growth (MiB)",
                f"{pk.get('median', NAN):.0f} / {gr.get('median', NAN):.0f}",
                "(lower is better)",
                "-",
                *none,
            )
        )
    for cell in res.get("scaling", {}).get("cells", []):
        c = cell["clients"]

        def cell_cols(name: str, c: dict[str, Any] = c) -> tuple[str, str, str]:
            rate, cpu = c.get(name, {}).get("median", NAN), c.get(name, {}).get("cpu_ns_per_record", NAN)
            raw, raw_cpu = (
                c.get("raw-c", {}).get("median", NAN),
                c.get("raw-c", {}).get("cpu_ns_per_record", NAN),
            )
            return (f"{rate / raw:.2f}x", f"{cpu:,.0f}", f"{cpu / raw_cpu:.2f}x")

        it = c.get("kipconsumer-iter", {}).get("median", NAN)
        ar = c.get("kipconsumer-arrow", {}).get("median", NAN)
        cf = c.get("confluent-consume500", {}).get("median", NAN)
        where = f"scaling {cell['partitions']}p x {cell['value_size']} B"
        rows.append(
            (
                f"{where}: iterate vs confluent",
                f"{it:,.0f} / {cf:,.0f} = {it / cf:.2f}x",
                "(no target)",
                "-",
                *cell_cols("kipconsumer-iter"),
            )
        )
        rows.append(
            (f"{where}: to_arrow()", f"{ar:,.0f} rec/s", "(no target)", "-", *cell_cols("kipconsumer-arrow"))
        )
    return rows


def charts(res: dict[str, Any], prefix: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files: list[str] = []
    tp = res.get("throughput", {}).get("summary", {})
    if tp:
        names = [n for n in tp if "median_records_per_s" in tp[n]]
        meds = [tp[n]["median_records_per_s"] / 1e6 for n in names]
        runs = [[r["records_per_s"] / 1e6 for r in tp[n]["runs"]] for n in names]
        lo = [m - min(r) for m, r in zip(meds, runs, strict=True)]
        hi = [max(r) - m for m, r in zip(meds, runs, strict=True)]
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.bar(names, meds, yerr=[lo, hi], capsize=4, color=["#888", "#c66", "#36c", "#3a6"][: len(names)])
        ax.set_ylabel("million records/s (median, min-max)")
        ax.set_title("Consumer throughput, 100 B records, 12 partitions")
        fig.tight_layout()
        fig.savefig(f"{prefix}-throughput.png", dpi=110)
        files.append(f"{prefix}-throughput.png")
        plt.close(fig)
        lat = [n for n in tp if "buffered_p50_us" in tp[n]]
        if lat:
            fig, ax = plt.subplots(figsize=(8, 4))
            xs = range(len(lat))
            for k, (key, label) in enumerate(
                (("buffered_p50_us", "p50"), ("buffered_p99_us", "p99"), ("buffered_max_us", "max"))
            ):
                vals = [tp[n].get(key, NAN) for n in lat]
                ax.bar([x + (k - 1) * 0.27 for x in xs], vals, 0.27, label=label)
            ax.set_xticks(list(xs))
            ax.set_xticklabels(lat)
            ax.set_yscale("log")
            ax.set_ylabel("per-poll latency, us (log)")
            ax.set_title("Latency of one poll()/consume(500) of 500 buffered records")
            ax.legend()
            fig.tight_layout()
            fig.savefig(f"{prefix}-latency.png", dpi=110)
            files.append(f"{prefix}-latency.png")
            plt.close(fig)
    fa = res.get("fairness", {}).get("summary", {})
    if fa:
        fig, axes = plt.subplots(len(fa), 1, figsize=(10, 1.6 * len(fa) + 0.8), squeeze=False)
        for ax, (name, s) in zip(axes[:, 0], fa.items(), strict=False):
            tl = s.get("timeline", [])[:60]
            if not tl:
                continue
            grid = [[row[p] for row in tl] for p in range(len(tl[0]))]
            ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest", vmin=0, vmax=500)
            ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
            ax.set_yticks([0, len(grid) - 1])
            ax.set_yticklabels(["p0 (deep)", f"p{len(grid) - 1}"], fontsize=7)
        axes[-1, 0].set_xlabel(
            "poll number (first 60 polls that returned records); colour = records of that partition"
        )
        fig.suptitle("Fairness timeline: records per partition per poll (1 x 200k + 7 x 2k, 500 per poll)")
        fig.tight_layout()
        fig.savefig(f"{prefix}-fairness.png", dpi=110)
        files.append(f"{prefix}-fairness.png")
        plt.close(fig)
    cells = res.get("scaling", {}).get("cells", [])
    if cells:
        clients = res["scaling"]["config"]["clients"]
        fig, ax = plt.subplots(figsize=(10, 4))
        w = 0.8 / max(1, len(clients))
        for i, c in enumerate(clients):
            ax.bar(
                [x + i * w for x in range(len(cells))],
                [cell["clients"].get(c, {}).get("median", 0) / 1e6 for cell in cells],
                w,
                label=c,
            )
        ax.set_xticks([x + 0.4 - w / 2 for x in range(len(cells))])
        ax.set_xticklabels([f"{c['partitions']}p x {c['value_size']} B" for c in cells])
        ax.set_ylabel("million records/s (median)")
        ax.set_title("Scaling over partitions and value sizes")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(f"{prefix}-scaling.png", dpi=110)
        files.append(f"{prefix}-scaling.png")
        plt.close(fig)
    me = res.get("memory", {}).get("summary", {})
    if any("stall_curve" in s for s in me.values()):
        fig, ax = plt.subplots(figsize=(8, 4))
        for name, s in me.items():
            if "stall_curve" in s:
                ax.plot([p[0] for p in s["stall_curve"]], [p[1] for p in s["stall_curve"]], label=name)
        ax.set_xlabel("seconds since the application stopped polling")
        ax.set_ylabel("RSS, MiB")
        ax.set_title("Memory while the application does not poll")
        ax.legend()
        fig.tight_layout()
        fig.savefig(f"{prefix}-memory.png", dpi=110)
        files.append(f"{prefix}-memory.png")
        plt.close(fig)
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="reduced sizes: 200k records, 1 liveness run, 15 s stall"
    )
    ap.add_argument("--full", action="store_true", help="full scaling matrix (9 cells)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--broker",
        choices=["kafka", "tansu"],
        default="kafka",
        help="real Apache Kafka (one KRaft node, kipconsumer.testing.KafkaCluster; the headline figures) "
        "or Tansu",
    )
    _common.add_kafka_version_argument(ap)
    ap.add_argument(
        "--records", type=int, help="records for throughput, scaling (100 B) and memory (default 1M)"
    )
    ap.add_argument("--stall", type=float, help="seconds without poll() in the memory test (default 60)")
    ap.add_argument(
        "--liveness-repeat", type=int, help="runs per client in the liveness test (default --repeat)"
    )
    ap.add_argument("--only", help=f"comma list of sections: {','.join(SECTIONS)}")
    ap.add_argument("--skip", default="", help="comma list of sections to leave out")
    ap.add_argument("--profile", action="store_true", help="also profile kipconsumer's poll loop with py-spy")
    ap.add_argument(
        "--no-install", action="store_true", help="skip missing peers/matplotlib instead of installing"
    )
    ap.add_argument("--no-charts", action="store_true")
    ap.add_argument("--out", help="JSON path (default bench/results/<date>.json; charts next to it)")
    a = ap.parse_args()
    a.records = a.records or (200_000 if a.quick else 1_000_000)
    a.stall = a.stall if a.stall is not None else (15.0 if a.quick else 60.0)
    a.liveness_repeat = a.liveness_repeat or (1 if a.quick else a.repeat)
    wanted = a.only.split(",") if a.only else [s for s in SECTIONS if s != "profile" or a.profile]
    wanted = [s for s in wanted if s not in a.skip.split(",")]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown section(s) {sorted(unknown)}; known: {SECTIONS}")

    if not a.no_charts and not _common.have_module("matplotlib"):
        why = _common.ensure_peer("matplotlib", install=not a.no_install)
        if why:
            print(f"no charts: {why}", flush=True)
            a.no_charts = True

    out = Path(a.out) if a.out else _common.HERE / "results" / f"{dt.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "args": vars(a),
        "machine": {"cpus": __import__("os").cpu_count(), "load_at_start": __import__("os").getloadavg()},
    }
    t0 = time.monotonic()
    shared: Any = None
    try:
        for i, name in enumerate(wanted, 1):
            banner(i, len(wanted), name, t0)
            if name in ("fairness", "liveness", "scaling", "memory", "profile") and shared is None:
                shared = _common.start_broker(a.broker)
                print(f"shared {a.broker} broker at {shared.bootstrap}", flush=True)
            try:
                if name == "throughput":
                    res[name] = section_throughput(a)
                elif name == "producer":
                    res[name] = section_producer(a)
                elif name == "fairness":
                    res[name] = fairness.run(
                        ns(fairness.parser(), repeat=a.repeat, no_install=a.no_install), shared
                    )
                elif name == "liveness":
                    res[name] = liveness.run(
                        ns(liveness.parser(), repeat=a.liveness_repeat, no_install=a.no_install), shared
                    )
                elif name == "scaling":
                    res[name] = scaling.run(
                        ns(scaling.parser(), repeat=a.repeat, full=a.full, max_records=a.records), shared
                    )
                elif name == "memory":
                    res[name] = memory.run(
                        ns(
                            memory.parser(),
                            repeat=a.repeat,
                            records=a.records,
                            stall=a.stall,
                            topic=f"memory-{a.records}",
                        ),
                        shared,
                    )
                elif name == "profile":
                    import profile_poll as prof

                    res[name] = prof.run(
                        ns(prof.parser(), native=True, records=max(a.records, 1_000_000)), shared
                    )
            except Exception as e:  # one broken section must not lose the others
                print(f"section {name} failed: {e!r}", flush=True)
                res[name] = {"skipped": f"failed: {e!r}"}
            out.write_text(json.dumps(res, indent=1, default=str))  # partial results survive a crash
    finally:
        if shared is not None:
            shared.stop()
    res["seconds"] = time.monotonic() - t0
    print(f"\n[{'=' * 30}] done in {res['seconds']:.0f} s\n")

    rows = summary_table(res)
    res["summary_rows"] = rows
    w = max((len(r[0]) for r in rows), default=10)
    print(
        f"{'figure':{w}}  {'measured (median)':>34}  {'target':>18}  {'verdict':>7}  "
        f"{'rec/s x raw C':>13}  {'CPU ns/rec':>10}  {'CPU x raw C':>11}"
    )
    for fig, meas, tgt, v, rate_x, cpu, cpu_x in rows:
        print(f"{fig:{w}}  {meas:>34}  {tgt:>18}  {v:>7}  {rate_x:>13}  {cpu:>10}  {cpu_x:>11}")
    for name in wanted:
        sk = res.get(name, {}).get("skipped")
        if isinstance(sk, str):
            print(f"section {name} skipped: {sk}")
        elif isinstance(sk, dict):
            for client, why in sk.items():
                print(f"{name}: {client} skipped: {why}")
    if not a.no_charts:
        res["charts"] = charts(res, out.with_suffix(""))
        for f in res["charts"]:
            print(f"chart: {f}")
    out.write_text(json.dumps(res, indent=1, default=str))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
