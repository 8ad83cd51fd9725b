"""Spark read throughput, three sources in one run: ``kipkafka`` (Arrow batches built in C), the same
source yielding Python tuples, and a source yielding pre-built Arrow batches (the API's ceiling).

* ``kipkafka``: ``pyarrow.RecordBatch`` from ``ConsumerRecords.to_arrow()`` (built in C), read with
  cached assign-only consumers;
* ``kipkafka_tuples``: the same records through the same consumers, one Python tuple per record,
  which Spark's Python worker converts to Arrow itself;
* ``kafka`` (with ``--sources ...,kafka``): Spark's own Kafka connector (``format("kafka")``,
  ``spark-sql-kafka-0-10`` of pyspark's version, jars fetched once by
  ``kipconsumer.testing.spark_connector``), the same query and options;
* ``arrow_ceiling``: no broker at all in ``read()``: slices of one Arrow batch built once per
  worker process with the source's schema, the same row count per input partition and the same
  value size (key null, as produced here). What Spark costs per Arrow row through the Python Data
  Source API: scheduling, Python worker, Arrow IPC to the JVM, the ``noop`` sink.

Each run is a Structured Streaming query (``Trigger.AvailableNow``, one micro-batch) into the
``noop`` sink. The three alternate; the best of ``--repeat`` is kept. Reported: rows/s of the read
job (the micro-batch's ``addBatch``) and of the whole query, the ratios to the ceiling, the driver's
phases (Spark's ``durationMs``), the time outside the micro-batch (query start and stop), the CPU
seconds of Spark's JVMs, of its Python workers and of the broker during each query and, for
``kipkafka``, the executor Python workers' seconds in consumer creation, seek, poll (fetch) and Arrow
building (``consumer_cache_stats``); the rest of the read job is Spark: task scheduling, worker start,
Arrow IPC to the JVM, the sink. With ``kipkafka`` and ``kafka`` both in ``--sources`` it prints the
ratio kipkafka / kafka for the read job and the whole query.

    python bench/spark_bench.py [--broker kafka|tansu|mock] [--records N] [--partitions P]
                                [--value-size B] [--repeat R] [--cluster] [--json PATH]
                                [--sources kipkafka,kipkafka_tuples,arrow_ceiling,kafka]

``--cluster`` runs the same on a Spark standalone cluster (master + 2 workers of 1 core, executors
in a venv with kipconsumer installed from its wheel; ``--executor-python`` reuses one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import add_kafka_version_argument, fill_partitions, start_broker  # noqa: E402

from kipconsumer.spark import (  # noqa: E402
    ARROW_SCHEMA,
    KipKafkaDataSource,
    KipKafkaStreamReader,
    ReadOptions,
    local_session,
    read_tuples,
)

SOURCES = ("kipkafka", "kipkafka_tuples", "arrow_ceiling")
#: Spark's own Kafka connector (JVM), pyspark's version (kipconsumer.testing.spark_connector); opt in
#: with ``--sources``.
JVM_SOURCE = "kafka"
ALL_SOURCES = SOURCES + (JVM_SOURCE,)
#: Rows per pre-built batch of the ceiling source (kipkafka hands Spark batches of >= 10,000 rows).
CEILING_BATCH_ROWS = 10_000


class TupleStreamReader(KipKafkaStreamReader):
    def read(self, partition: Any) -> Iterator[Any]:
        return read_tuples(self.opts, partition)


class TupleDataSource(KipKafkaDataSource):
    """``kipkafka`` with read() yielding Python tuples (the reference point)."""

    @classmethod
    def name(cls) -> str:
        return "kipkafka_tuples"

    def streamReader(self, schema: Any) -> TupleStreamReader:
        return TupleStreamReader(ReadOptions.parse(self.options, streaming=True))


_template: dict[tuple[str, int], Any] = {}


def _ceiling_batch(topic: str, value_size: int) -> Any:
    """One Arrow batch of the source's schema, built once per worker process."""
    import pyarrow as pa

    key = (topic, value_size)
    if key not in _template:
        n = CEILING_BATCH_ROWS
        now_us = int(time.time() * 1_000_000)
        _template[key] = pa.RecordBatch.from_arrays([
            pa.nulls(n, pa.binary()),
            pa.array([b"x" * value_size] * n, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([now_us] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ], schema=ARROW_SCHEMA)
    return _template[key]


class CeilingStreamReader(KipKafkaStreamReader):
    """The planning of ``kipkafka`` (same input partitions); read() yields pre-built batches."""

    value_size = 32

    def read(self, partition: Any) -> Iterator[Any]:
        batch = _ceiling_batch(partition.topic, self.value_size)
        left = partition.end - partition.start
        while left > 0:
            n = min(left, batch.num_rows)
            yield batch if n == batch.num_rows else batch.slice(0, n)
            left -= n


class CeilingDataSource(KipKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return "arrow_ceiling"

    def streamReader(self, schema: Any) -> CeilingStreamReader:
        low = {k.lower(): v for k, v in self.options.items()}
        reader = CeilingStreamReader(ReadOptions.parse(
            {k: v for k, v in self.options.items() if k.lower() != "bench.valuesize"}, streaming=True))
        reader.value_size = int(low.get("bench.valuesize", "32"))
        return reader


def run_query(spark: Any, fmt: str, servers: str, topic: str, extra: dict[str, str]) -> dict[str, Any]:
    """One AvailableNow query into ``noop``: rows, wall seconds, Spark's phase durations (ms)."""
    ck = tempfile.mkdtemp(prefix="kipkafka-bench-")
    try:
        r = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", servers)
             .option("subscribe", topic).option("startingOffsets", "earliest"))
        for k, v in extra.items():
            r = r.option(k, v)
        t0 = time.perf_counter()
        q = (r.load().writeStream.format("noop").option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        q.awaitTermination()
        elapsed = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))
        phases: dict[str, int] = {}
        for p in q.recentProgress:
            for k, v in p["durationMs"].items():
                phases[k] = phases.get(k, 0) + int(v)
        rows = sum(p["numInputRows"] for p in q.recentProgress)
        return {"rows": rows, "wall_s": elapsed, "job_s": phases.get("addBatch", 0) / 1000.0,
                "phases": phases}
    finally:
        shutil.rmtree(ck, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc), 0 if unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def tree_cpu(roots: list[int]) -> dict[str, float]:
    """CPU seconds (user + system, with reaped children's) of the processes under ``roots``, split
    into the JVMs (``java``) and everything else (PySpark's Python daemons and workers)."""
    from kipconsumer.spark_cluster import descendants

    out = {"jvm": 0.0, "python": 0.0}
    seen: set[int] = set()
    for root in roots:
        for pid in [root, *descendants(root)]:
            if pid in seen:
                continue
            seen.add(pid)
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                secs = sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                continue
            out["jvm" if comm == "java" else "python"] += secs
    return out


def worker_totals(stats_dir: Path) -> dict[str, float]:
    total: dict[str, float] = {}
    for f in stats_dir.glob("*.json"):
        try:
            for k, v in json.loads(f.read_text()).items():
                total[k] = total.get(k, 0) + v
        except (OSError, ValueError):
            pass
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--broker", choices=("kafka", "tansu", "mock"), default="kafka")
    add_kafka_version_argument(ap)
    ap.add_argument("--records", type=int, default=1_200_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--value-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cluster", action="store_true", help="a standalone cluster instead of local[2]")
    ap.add_argument("--executor-python", help="with --cluster: an interpreter with kipconsumer installed")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="extra source option for every source, e.g. kafka.max.poll.records=50000")
    ap.add_argument("--sources", default=",".join(SOURCES),
                    help=f"comma list of sources to run, of {', '.join(ALL_SOURCES)} (default: "
                         f"{', '.join(SOURCES)}; '{JVM_SOURCE}' is Spark's own connector)")
    args = ap.parse_args()
    extra = dict(o.split("=", 1) for o in args.option)
    sources = tuple(s.strip() for s in args.sources.split(",") if s.strip())
    unknown = [s for s in sources if s not in ALL_SOURCES]
    if unknown or not sources:
        ap.error(f"--sources: unknown {unknown}; choose from {', '.join(ALL_SOURCES)}")
    if JVM_SOURCE in sources and args.broker == "mock":
        # seen: the query fails after minutes with "Timed out waiting for a node assignment. Call: listNodes"
        ap.error(f"--sources {JVM_SOURCE}: Spark's connector cannot use the embedded broker (its "
                 "AdminClient's listNodes times out); use --broker kafka (tansu: untried)")
    jars: dict[str, str] = {}
    if JVM_SOURCE in sources:
        from kipconsumer.testing.spark_connector import connector_jars_conf

        jars = connector_jars_conf()  # before the broker starts: a missing connector fails fast

    from kipconsumer import KafkaConsumer, TopicPartition

    stats_dir = Path(tempfile.mkdtemp(prefix="kipkafka-bench-stats-"))
    os.environ["KIPKAFKA_STATS_DIR"] = str(stats_dir)  # executor workers inherit it (local mode)
    topic = "bench"
    cluster = None
    with start_broker(args.broker) as broker:
        servers = broker.bootstrap
        broker_pid = getattr(broker, "pid", None) or (broker.proc.pid if hasattr(broker, "proc") else None)
        broker.create_topic(topic, args.partitions)
        per = [args.records // args.partitions + (1 if i < args.records % args.partitions else 0)
               for i in range(args.partitions)]
        fill_partitions(servers, topic, per, args.value_size)
        c = KafkaConsumer({"bootstrap.servers": servers})
        tps = [TopicPartition(topic, i) for i in range(args.partitions)]
        lows, highs = c.beginning_offsets(tps), c.end_offsets(tps)
        c.close()
        available = sum(highs[tp] - lows[tp] for tp in tps)
        print(f"{args.broker}: topic {topic}: {available} records readable x {args.value_size} B over "
              f"{args.partitions} partitions (produced {args.records})")

        if args.cluster:
            from kipconsumer.spark_cluster import StandaloneCluster, cluster_session
            from kipconsumer.spark_env import build_executor_env

            venv = Path(tempfile.mkdtemp(prefix="kip-exec-")) / "venv"
            python = args.executor_python or str(build_executor_env(venv))
            cluster = StandaloneCluster(workers=2, python=python, env={"KIPKAFKA_STATS_DIR": str(stats_dir)})
            cluster.start()
            spark = cluster_session(cluster, "kipkafka-bench",
                                    extra={"spark.executorEnv.KIPKAFKA_STATS_DIR": str(stats_dir), **jars})
        else:
            spark = local_session("kipkafka-bench", cores=2, shuffle_partitions=2, extra=jars)
        gateway = getattr(spark.sparkContext._gateway, "proc", None)  # local: the driver/executor JVM
        roots = [gateway.pid] if gateway is not None else []

        def spark_roots() -> list[int]:
            return roots + (cluster.pids() if cluster is not None else [])

        try:
            spark.dataSource.register(TupleDataSource)
            spark.dataSource.register(CeilingDataSource)
            opts = {fmt: dict(extra) for fmt in sources}
            if "arrow_ceiling" in opts:
                opts["arrow_ceiling"]["bench.valueSize"] = str(args.value_size)
            runs: dict[str, list[dict[str, Any]]] = {fmt: [] for fmt in sources}
            for fmt in sources:  # warm-up: JVM, Python workers, consumer caches, the ceiling's batch
                run_query(spark, fmt, servers, topic, opts[fmt])
            for i in range(args.repeat):
                order = sources[i % len(sources):] + sources[:i % len(sources)]
                for fmt in order:
                    before = worker_totals(stats_dir)
                    broker_cpu = cpu_seconds(broker_pid) if broker_pid else 0.0
                    cpu0 = tree_cpu(spark_roots())
                    r = run_query(spark, fmt, servers, topic, opts[fmt])
                    r["broker_cpu_s"] = (cpu_seconds(broker_pid) - broker_cpu) if broker_pid else None
                    cpu1 = tree_cpu(spark_roots())
                    r["spark_cpu_s"] = {k: max(0.0, cpu1[k] - cpu0[k]) for k in cpu1}
                    after = worker_totals(stats_dir)
                    r["executor"] = {k: after.get(k, 0) - before.get(k, 0)
                                     for k in ("create_s", "seek_s", "poll_s", "arrow_s", "seeks",
                                               "continued", "created")}
                    if r["rows"] != available:
                        raise SystemExit(f"{fmt}: read {r['rows']} rows, expected {available}")
                    runs[fmt].append(r)
                    print(f"  {fmt:16s} {r['rows']} rows: read job {r['job_s']:6.2f} s = "
                          f"{r['rows'] / r['job_s']:10,.0f} rows/s; whole query {r['wall_s']:6.2f} s = "
                          f"{r['rows'] / r['wall_s']:10,.0f} rows/s", flush=True)
        finally:
            spark.stop()
            if cluster is not None:
                cluster.stop()

    best = {fmt: max(available / r["job_s"] for r in rs) for fmt, rs in runs.items()}
    best_wall = {fmt: max(available / r["wall_s"] for r in rs) for fmt, rs in runs.items()}
    mode = "standalone cluster (2 workers x 1 core)" if args.cluster else "local[2]"
    print(f"\n{mode}, {args.broker}, best of {args.repeat} (the machine may be shared: compare ratios)")
    ref = "arrow_ceiling" if "arrow_ceiling" in best else sources[0]
    print(f"{'source':18s} {'read job rows/s':>16s} {'x ' + ref:>16s} "
          f"{'whole query rows/s':>19s} {'x ' + ref:>16s}")
    for fmt in sources:
        print(f"{fmt:18s} {best[fmt]:16,.0f} {best[fmt] / best[ref]:16.2f} "
              f"{best_wall[fmt]:19,.0f} {best_wall[fmt] / best_wall[ref]:16.2f}")
    if "kipkafka" in best and JVM_SOURCE in best:
        print(f"kipkafka / {JVM_SOURCE} (Spark's connector): read job "
              f"{best['kipkafka'] / best[JVM_SOURCE]:.2f}x, whole query "
              f"{best_wall['kipkafka'] / best_wall[JVM_SOURCE]:.2f}x")
    if "kipkafka" in runs:
        _where_it_went(runs, args.broker)
    if args.json:
        with open(args.json, "w") as fh:
            result = {"broker": args.broker, "mode": mode, "records": available,
                      "value_size": args.value_size, "partitions": args.partitions,
                      "rows_per_s_read_job": best, "rows_per_s_whole_query": best_wall, "runs": runs,
                      f"ratio_to_{ref.removeprefix('arrow_')}": {k: best[k] / best[ref] for k in sources}}
            json.dump(result, fh, indent=2)
    shutil.rmtree(stats_dir, ignore_errors=True)
    return 0


def _where_it_went(runs: dict[str, list[dict[str, Any]]], broker: str) -> None:
    print("\nwhere each source's best run went (seconds; executor figures are summed over the worker")
    print("processes, which run in parallel; CPU is user + system over the query):")
    for fmt in [f for f in ("kipkafka", JVM_SOURCE, "arrow_ceiling") if f in runs]:
        r = min(runs[fmt], key=lambda r: r["job_s"])
        outside = r["wall_s"] - r["phases"].get("triggerExecution", 0) / 1000.0
        why = "" if fmt == JVM_SOURCE else "; a Python source's planner process starts with each query"
        print(f"  {fmt}: read job {r['job_s']:.2f} s, whole query {r['wall_s']:.2f} s, of which "
              f"{outside:.2f} s outside the micro-batch (query start and stop{why})")
        print(f"    driver: {', '.join(f'{k} {v / 1000:.2f}' for k, v in sorted(r['phases'].items()))}")
        if fmt == "kipkafka":
            ex = r["executor"]
            print(f"    executors' Python: consumer creation {ex['create_s']:.2f}, seek {ex['seek_s']:.2f}, "
                  f"poll/fetch {ex['poll_s']:.2f}, Arrow build {ex['arrow_s']:.2f} "
                  f"({int(ex['seeks'])} seeks, "
                  f"{int(ex['continued'])} continued, {int(ex['created'])} consumers created)")
        cpu = r.get("spark_cpu_s") or {}
        broker_cpu = r.get("broker_cpu_s")
        print(f"    CPU: Spark's JVMs {cpu.get('jvm', 0):.2f}, Python workers {cpu.get('python', 0):.2f}"
              + (f", the broker ({broker}, same cores) {broker_cpu:.2f}" if broker_cpu is not None else ""))
    if "arrow_ceiling" in runs:
        print("  (the ceiling's read job is Spark's own share for a Python source: scheduling, worker, "
              "Arrow IPC to the JVM, sink)")


if __name__ == "__main__":
    sys.exit(main())
