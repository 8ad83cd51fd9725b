"""Memory: peak RSS while consuming, and growth while the application stops polling.

    python bench/memory.py [--broker kafka|tansu|mock] [--records 1000000] [--partitions 12]
        [--value-size 100]
                           [--stall 60] [--repeat 3] [--clients kipconsumer,confluent-kafka] [--json OUT]

Fills one topic, then runs each client in its own process (assign all partitions from the beginning,
no group, default settings apart from max.poll.records=500 / consume(500)), interleaved, --repeat times:

* consume: reads every record, touching each value; reports the process's peak RSS (VmHWM) and
  the RSS before the first poll (imports and consumer created), so ``peak - base`` is what consuming
  costs.
* stall: polls once (gets records), then does not poll for --stall seconds (60 by default; use e.g.
  --stall 10 for a quick run) while a sampler thread reads the process's RSS every 0.5 s (and
  kipconsumer's metrics(): buffered_records / buffered_bytes). Reports RSS at the start of the stall, at
  its end and the maximum: the growth is what the client prefetched meanwhile. Then times the polls
  after the stall: the first poll, and records/s over the next 200,000 records (what a client that
  released its prefetch during the stall, poll.stall.fetch.pause.ms, pays for it).

kipconsumer bounds its fetch buffer (queued.max.messages.kbytes per partition, see docs); confluent-kafka
uses librdkafka's defaults (queued.max.messages.kbytes=65536 per partition).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from workers import kipconsumer_settings  # noqa: E402

TOPIC = "memory"
ALL_CLIENTS = ["kipconsumer", "confluent-kafka"]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    """Peak RSS of this process image (VmHWM). Not ru_maxrss: Linux carries that across exec from the
    parent (subprocess forks the benchmark driver, whose RSS would then show as the worker's peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Client:
    """poll() -> number of records (each value touched); metrics() -> dict."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, extra: dict[str, Any]) -> None:
        # "kipconsumer@key=value;key=value": kipconsumer with more settings (a variant in the same run)
        name, _, variant = name.partition("@")
        extra = {**extra, **parse_settings(variant.split(";") if variant else None)}
        self.name = name
        if name == "kipconsumer":
            from kipconsumer import KafkaConsumer, TopicPartition

            self.c: Any = KafkaConsumer(
                {
                    "bootstrap.servers": bootstrap,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "max.poll.records": 500,
                    **kipconsumer_settings(),
                    **extra,
                }
            )
            self.c.assign([TopicPartition(topic, p) for p in range(partitions)])
        else:
            from confluent_kafka import Consumer
            from confluent_kafka import TopicPartition as CTP

            self.c = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": "bench-memory-unused",
                    "enable.partition.eof": False,
                    "enable.auto.commit": False,
                    **extra,
                }
            )
            self.c.assign([CTP(topic, p, -2) for p in range(partitions)])

    def poll(self) -> int:
        n = 0
        if self.name == "kipconsumer":
            for r in self.c.poll(0.1):
                _ = r.value
                n += 1
        else:
            for m in self.c.consume(num_messages=500, timeout=0.1):
                if m.error() is None:
                    _ = m.value()
                    n += 1
        return n

    def metrics(self) -> dict[str, Any]:
        if self.name == "kipconsumer":
            m = self.c.metrics()
            return {"buffered_records": m["buffered_records"], "buffered_bytes": m["buffered_bytes"],
                    "prefetched_records": m["prefetched_records"]}
        return {}

    def close(self) -> None:
        self.c.close()


def parse_settings(items: list[str] | None) -> dict[str, Any]:
    """["key=value", ...] -> {key: int(value) if numeric else value}."""
    out: dict[str, Any] = {}
    for item in items or []:
        k, _, v = item.partition("=")
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


def worker(
    name: str,
    mode: str,
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    stall: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    c = Client(name, bootstrap, topic, partitions, extra or {})
    base = rss_mb()
    out: dict[str, Any] = {"base_rss_mb": base}
    got = 0
    deadline = time.monotonic() + 300
    if mode == "consume":
        t0 = time.perf_counter()
        while got < records and time.monotonic() < deadline:
            got += c.poll()
        out.update(records=got, seconds=time.perf_counter() - t0, peak_rss_mb=peak_mb(), end_rss_mb=rss_mb())
    else:
        while got == 0 and time.monotonic() < deadline:
            got = c.poll()
        samples: list[dict[str, float]] = []
        stop = threading.Event()
        t0 = time.monotonic()

        def sample() -> None:
            while not stop.is_set():
                samples.append({"t": round(time.monotonic() - t0, 2), "rss_mb": rss_mb(), **c.metrics()})
                stop.wait(0.5)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        time.sleep(stall)  # the application stops polling
        stop.set()
        th.join()
        rss = [s["rss_mb"] for s in samples]
        out.update(
            records=got,
            stall_s=stall,
            rss_start_mb=rss[0],
            rss_end_mb=rss[-1],
            rss_max_mb=max(rss),
            growth_mb=rss[-1] - rss[0],
            peak_rss_mb=peak_mb(),
            samples=samples,
        )
        if samples and "buffered_records" in samples[-1]:
            out["buffered_records_end"] = samples[-1]["buffered_records"]
            out["buffered_bytes_end"] = samples[-1]["buffered_bytes"]
        out.update(after_stall(c, min(AFTER_STALL_RECORDS, records - got)))
    c.close()
    return out


#: records read after the stall to time what the stall costs the polls that follow
AFTER_STALL_RECORDS = 200_000


def after_stall(c: Client, want: int) -> dict[str, Any]:
    """Times the polls after the stall: the first one (ms, records) and the rate over the next `want`
    records, from the first poll on (a client that dropped its prefetch refetches it here)."""
    t0 = time.perf_counter()
    first = c.poll()
    first_s = time.perf_counter() - t0
    got, deadline = first, time.monotonic() + 120
    while got < want and time.monotonic() < deadline:
        got += c.poll()
    seconds = time.perf_counter() - t0
    return {
        "after_stall_first_poll_ms": first_s * 1000,
        "after_stall_first_poll_records": first,
        "after_stall_records": got,
        "after_stall_records_per_s": got / seconds if seconds else 0.0,
    }


def run(
    args: argparse.Namespace, broker: Any = None, topic_ready: bool = False, quiet: bool = False
) -> dict[str, Any]:
    """Runs both phases; `broker` is reused if given (and the topic filled unless topic_ready)."""
    clients = args.clients.split(",")
    own = broker is None
    if own:
        broker = _common.start_broker(args.broker)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {c: {"consume": [], "stall": []} for c in clients}
    skipped: dict[str, str] = {}
    try:
        if not topic_ready:
            broker.create_topic(args.topic, args.partitions)
            if not quiet:
                print(
                    f"broker {broker.name} at {broker.bootstrap}: filling {args.records} x "
                    f"{args.value_size} B "
                    f"over {args.partitions} partitions",
                    flush=True,
                )
            per = [
                args.records // args.partitions + (1 if p < args.records % args.partitions else 0)
                for p in range(args.partitions)
            ]
            _common.fill_partitions(broker.bootstrap, args.topic, per, args.value_size)
        prog = _common.Progress(args.repeat * len(clients) * 2)
        for rep in range(args.repeat):
            for mode in ("consume", "stall"):
                for name in clients:
                    prog.step(f"memory {mode} {name} run {rep + 1}")
                    cmd = [
                        sys.executable,
                        os.path.abspath(__file__),
                        "--worker",
                        name,
                        "--mode",
                        mode,
                        "--bootstrap",
                        broker.bootstrap,
                        "--partitions",
                        str(args.partitions),
                        "--records",
                        str(args.records),
                        "--stall",
                        str(args.stall),
                        "--topic",
                        args.topic,
                        *[f"--set={kv}" for kv in args.set or []],
                    ]
                    res, err = _common.run_json(cmd, timeout=args.stall + 200)
                    if res is None:
                        print(f"  {name} {mode}: failed: {err}", flush=True)
                        skipped.setdefault(name, f"failed: {err[-200:]}")
                        continue
                    if mode == "consume" and res["records"] < args.records:
                        print(f"  {name}: read {res['records']} of {args.records}", flush=True)
                    runs[name][mode].append(res)
    finally:
        if own:
            broker.stop()
    summary: dict[str, Any] = {}
    for name, r in runs.items():
        s: dict[str, Any] = {}
        if r["consume"]:
            s["peak_rss_mb"] = _common.stats([x["peak_rss_mb"] for x in r["consume"]])
            s["consume_delta_mb"] = _common.stats([x["peak_rss_mb"] - x["base_rss_mb"] for x in r["consume"]])
        if r["stall"]:
            s["stall_growth_mb"] = _common.stats([x["growth_mb"] for x in r["stall"]])
            s["stall_rss_max_mb"] = _common.stats([x["rss_max_mb"] for x in r["stall"]])
            for key in ("after_stall_records_per_s", "after_stall_first_poll_ms"):
                s[key] = _common.stats([x[key] for x in r["stall"]])
            if "buffered_bytes_end" in r["stall"][0]:
                s["stall_buffered_mb"] = _common.stats([x["buffered_bytes_end"] / 2**20 for x in r["stall"]])
            # one RSS curve for the chart
            s["stall_curve"] = [[p["t"], p["rss_mb"]] for p in r["stall"][0]["samples"]]
            for x in r["stall"]:
                x.pop("samples", None)
        if s:
            summary[name] = s
    result = {
        "config": {
            "broker": broker.name,
            "records": args.records,
            "partitions": args.partitions,
            "value_size": args.value_size,
            "stall_s": args.stall,
            "repeat": args.repeat,
            "settings": parse_settings(args.set),
        },
        "skipped": skipped,
        "runs": runs,
        "summary": summary,
    }
    print_table(result)
    return result


def print_table(result: dict[str, Any]) -> None:
    cfg = result["config"]
    print(
        f"\nmemory ({cfg['broker']}, {cfg['records']} x {cfg['value_size']} B, "
        f"{cfg['partitions']} partitions, "
        f"stall {cfg['stall_s']:.0f} s; MiB, median [min-max] of {cfg['repeat']} runs)"
    )
    print(
        f"{'client':18} {'peak RSS':>20} {'consume - base':>20} {'stall growth':>20} {'stall RSS max':>20} "
        f"{'buffered at end':>16} {'after: first poll ms':>22} {'after: records/s':>26}"
    )

    f = _common.fmt_stats
    for name, s in result["summary"].items():
        print(
            f"{name:18} {f(s.get('peak_rss_mb')):>20} {f(s.get('consume_delta_mb')):>20} "
            f"{f(s.get('stall_growth_mb')):>20} {f(s.get('stall_rss_max_mb')):>20} "
            f"{f(s.get('stall_buffered_mb')):>16} {f(s.get('after_stall_first_poll_ms')):>22} "
            f"{f(s.get('after_stall_records_per_s')):>26}"
        )
    for name, why in result["skipped"].items():
        print(f"{name:18} skipped: {why}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["kafka", "tansu", "mock"], default="kafka")
    _common.add_kafka_version_argument(ap)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--stall", type=float, default=60.0, help="seconds without poll() in the stall phase")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--clients",
        default=",".join(ALL_CLIENTS),
        help="comma list; kipconsumer@KEY=VALUE[;KEY=VALUE] is kipconsumer with more settings, e.g. "
        "kipconsumer,kipconsumer@poll.stall.fetch.pause.ms=500",
    )
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument("--topic", default=TOPIC, help="topic name (created and filled here)")
    ap.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="extra consumer setting for every client (repeatable), e.g. --set queued.min.messages=10000",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    return ap


def main() -> int:
    args = parser().parse_args()
    if args.worker:
        print(
            json.dumps(
                worker(
                    args.worker,
                    args.mode,
                    args.bootstrap,
                    args.topic,
                    args.partitions,
                    args.records,
                    args.stall,
                    parse_settings(args.set),
                )
            )
        )
        return 0
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if result["summary"] else 1


if __name__ == "__main__":
    sys.exit(main())
