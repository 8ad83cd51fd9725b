"""The Spark main job: embedded broker -> producer -> Spark Structured Streaming via ``kipkafka``
-> per-partition aggregates and raw records in Parquet -> exactly-once check.

1. Starts a 3-broker EmbeddedBroker (in this process; Spark's Python workers connect over TCP)
   and fills a topic with keyed records of varying value length (KIP-19 producer, every future
   checked).
2. Runs a Structured Streaming query on Spark ``local[2]``: ``readStream.format("kipkafka")``
   with ``maxOffsetsPerTrigger``; each micro-batch writes its raw records and its aggregates
   (count, sum of value length, min/max offset per partition) as Parquet under a directory named
   by the batch id (idempotent: a replayed batch overwrites its own output). The offsets live in
   the query's checkpoint.
   With ``--cluster`` the Spark half runs on a Spark standalone cluster started for the job (a
   master and two 1-core workers, :mod:`kipconsumer.spark_cluster`) instead; its executors run
   Python from ``--executor-python`` or, without it, from a venv built for the run with
   kipconsumer installed from its wheel (:mod:`kipconsumer.spark_env`, needs a checkout).
3. By default the query is stopped after its first micro-batches and restarted from the
   checkpoint with ``Trigger.AvailableNow`` (``--no-restart`` to run it once).
4. Reads the Parquet back and checks: every produced (partition, offset) exactly once, the
   aggregates equal to what was produced (count and value bytes per partition).

Prints rows in, rows out, rows/s and the check; exit status 0 only if the check passes.

    python -m kipconsumer.spark_demo [--records N] [--partitions P] [--max-offsets-per-trigger M]
                                     [--cluster [--executor-python PATH]]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOPIC = "events"


def value_of(i: int) -> bytes:
    return b"%d:" % i + b"x" * (16 + i % 49)


def produce(servers: str, records: int, partitions: int) -> tuple[dict[int, int], dict[int, int], float]:
    """Writes the records round-robin; returns (records, value bytes) per partition and seconds."""
    from kipconsumer.producer import KafkaProducer

    counts = {p: 0 for p in range(partitions)}
    sizes = {p: 0 for p in range(partitions)}
    t0 = time.perf_counter()
    with KafkaProducer({"bootstrap.servers": servers, "linger.ms": 5}) as prod:
        futures = []
        for i in range(records):
            v = value_of(i)
            futures.append(prod.send(TOPIC, value=v, key=b"k%d" % i, partition=i % partitions))
        prod.flush()
        for i, f in enumerate(futures):
            f.result()  # raises if a record was not acknowledged
            p = i % partitions
            counts[p] += 1
            sizes[p] += len(value_of(i))
    return counts, sizes, time.perf_counter() - t0


def cluster_spark(stack: contextlib.ExitStack, executor_python: str | None, workdir: Path,
                  extra: dict[str, str] | None = None) -> Any:
    """A session on a standalone cluster (master + 2 workers) that ``stack`` stops on exit."""
    from kipconsumer.spark_cluster import StandaloneCluster, cluster_session

    if executor_python is None:
        from kipconsumer.spark_env import build_executor_env

        t0 = time.perf_counter()
        executor_python = str(build_executor_env(workdir / "executor-venv"))
        print(f"executor venv with kipconsumer from its wheel: {executor_python} "
              f"({time.perf_counter() - t0:.1f} s)")
    cluster = stack.enter_context(StandaloneCluster(workers=2, python=executor_python))
    print(f"standalone cluster {cluster.master_url}: master + 2 workers registered in "
          f"{cluster.start_seconds:.1f} s")
    t0 = time.perf_counter()
    spark = cluster_session(cluster, "kipkafka-demo", extra=extra)
    stack.callback(spark.stop)
    print(f"spark {spark.version} on the cluster with 2 executors up in {time.perf_counter() - t0:.1f} s")
    return spark


#: StreamingQueryProgress.durationMs phases outside the foreachBatch (Spark's own per-micro-batch work).
_SPARK_PHASES = ("latestOffset", "queryPlanning", "getBatch", "walCommit", "commitOffsets")


def steady_state(runs: Sequence[Sequence[dict[str, Any]]], max_offsets: int,
                 triggers: str) -> tuple[float, list[str]]:
    """The rate a Spark user reads off a streaming query's progress: rows / ``triggerExecution`` of
    each micro-batch with rows, leaving out each run's first one (query start: planning, the Python
    workers' and the consumers' start, code generation). Returns (rows/s over those micro-batches,
    lines that say what was measured and where a micro-batch's time went)."""
    warm = [p for run in runs for p in [q for q in run if q["numInputRows"]][1:]]
    if not warm:
        return 0.0, ["steady state: no micro-batch after a run's first one (use more records)"]
    rows = sum(p["numInputRows"] for p in warm)
    secs = sum(p["durationMs"].get("triggerExecution", 0) for p in warm) / 1000.0
    steady = rows / secs if secs else 0.0
    per_batch = sorted(p["numInputRows"] / (p["durationMs"]["triggerExecution"] / 1000.0)
                       for p in warm if p["durationMs"].get("triggerExecution"))
    add = sum(p["durationMs"].get("addBatch", 0) for p in warm) / 1000.0 / len(warm)
    spark_own = sum(p["durationMs"].get(k, 0) for p in warm for k in _SPARK_PHASES) / 1000.0 / len(warm)
    sizes = [p["numInputRows"] for p in warm]
    lines = [
        f"steady state: {len(warm)} micro-batch(es) after each run's first ({triggers}; "
        f"maxOffsetsPerTrigger {max_offsets:,}: {', '.join(f'{n:,}' for n in sizes)} rows): "
        f"{rows:,} rows in {secs:.2f} s of triggerExecution = {steady:,.0f} rows/s "
        f"(per micro-batch {per_batch[0]:,.0f}..{per_batch[-1]:,.0f})",
        f"  a micro-batch took {secs / len(warm):.2f} s: {add:.2f} s in addBatch (the foreachBatch: "
        f"read the Kafka ranges, write the raw rows, aggregate with a shuffle and write: 3 Spark jobs), "
        f"{spark_own:.2f} s planning + offset log + commit",
    ]
    pts = [(p["numInputRows"], p["durationMs"]["triggerExecution"] / 1000.0)
           for p in warm if p["durationMs"].get("triggerExecution")]
    fit = _line_fit(pts)
    if fit is not None and fit[0] > 0 and fit[1] > 0:
        fixed, per_row = fit
        lines.append(
            f"  time = {fixed:.2f} s per micro-batch + {per_row * 1e6:.1f} us per row (fit over these "
            f"micro-batches): bound by Spark's fixed cost per micro-batch (3 jobs: scheduling, Python "
            f"workers, Parquet commits), so a micro-batch of {max_offsets:,} rows runs at most "
            f"{max_offsets / (fixed + per_row * max_offsets):,.0f} rows/s and larger ones approach "
            f"{1 / per_row:,.0f} (docs/spark.md, 'The main job's rows/s')")
    else:
        lines.append("  bound by Spark's fixed cost per micro-batch (3 jobs: scheduling, Python workers, "
                     "Parquet commits) more than by rows: larger maxOffsetsPerTrigger -> more rows/s "
                     "(docs/spark.md, 'The main job's rows/s')")
    return steady, lines


def _line_fit(pts: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares seconds = a + b * rows, or None with fewer than two distinct sizes."""
    if len({n for n, _ in pts}) < 2:
        return None
    mx = sum(n for n, _ in pts) / len(pts)
    my = sum(t for _, t in pts) / len(pts)
    b = sum((n - mx) * (t - my) for n, t in pts) / sum((n - mx) ** 2 for n, _ in pts)
    return my - b * mx, b


def main(argv: Sequence[str] | None = None) -> int:
    doc = (__doc__ or "").splitlines()[0]
    ap = argparse.ArgumentParser(prog="python -m kipconsumer.spark_demo", description=doc)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=60_000)
    ap.add_argument("--no-restart", action="store_true", help="run the query once, without a stop/restart")
    ap.add_argument("--keep", metavar="DIR", help="write the Parquet output and checkpoint here (kept)")
    ap.add_argument("--cluster", action="store_true",
                    help="run Spark on a standalone cluster (master + 2 workers) started for the job "
                         "instead of local[2]")
    ap.add_argument("--executor-python", metavar="PATH",
                    help="with --cluster: the executors' Python (kipconsumer, pyarrow, pandas<3 installed); "
                         "default: a venv built for the run from this checkout's wheel")
    ap.add_argument("--kafka", action="store_true",
                    help="run on a real Apache Kafka cluster of 3 nodes (kipconsumer.testing.KafkaCluster) "
                         "instead of the embedded broker")
    ap.add_argument("--source", choices=("kipkafka", "kafka"), default="kipkafka",
                    help="the data source: kipkafka (ours), or kafka (Spark's own JVM connector "
                         "spark-sql-kafka-0-10, fetched by kipconsumer.testing.spark_connector; needs "
                         "--kafka): the same job, for comparison")
    args = ap.parse_args(argv)
    if args.executor_python and not args.cluster:
        ap.error("--executor-python needs --cluster")
    jars: dict[str, str] = {}
    if args.source == "kafka":
        if not args.kafka:
            # Spark's connector cannot use the embedded broker (its AdminClient's listNodes times out)
            ap.error("--source kafka needs --kafka (Spark's connector cannot use the embedded broker)")
        from kipconsumer.testing.spark_connector import connector_jars_conf

        jars = connector_jars_conf()  # before the brokers start: a missing connector fails fast

    from pyspark.sql import functions as F

    from kipconsumer.broker import EmbeddedBroker
    from kipconsumer.spark import local_session
    from kipconsumer.testing import KafkaCluster

    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kipkafka-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    raw_dir, agg_dir, ck_dir = workdir / "raw", workdir / "agg", workdir / "checkpoint"
    ok = False
    try:
        cluster: EmbeddedBroker | KafkaCluster = KafkaCluster(brokers=3) if args.kafka else EmbeddedBroker(3)
        with contextlib.ExitStack() as stack, cluster as broker:
            servers = broker.bootstrap_servers
            broker.create_topic(TOPIC, partitions=args.partitions)
            kind = f"Apache Kafka {broker.version}" if isinstance(broker, KafkaCluster) else "embedded broker"
            print(f"{kind}: {servers}; topic {TOPIC!r} x {args.partitions} partitions; "
                  f"source format({args.source!r})")
            counts, sizes, secs = produce(servers, args.records, args.partitions)
            rows_in = sum(counts.values())
            print(f"produced {rows_in} records ({sum(sizes.values())} value bytes) in {secs:.2f} s "
                  f"({rows_in / secs:,.0f} records/s), every future acknowledged")

            t_spark = time.perf_counter()
            if args.cluster:
                spark = cluster_spark(stack, args.executor_python, workdir, jars)
            else:
                spark = local_session("kipkafka-demo", cores=2, shuffle_partitions=2, extra=jars)
                print(f"spark {spark.version} local[2] up in {time.perf_counter() - t_spark:.1f} s")

            def sink(batch: Any, batch_id: int) -> None:
                batch.persist()
                batch.write.mode("overwrite").parquet(str(raw_dir / f"batch={batch_id}"))
                (batch.groupBy("partition")
                 .agg(F.count("*").alias("records"), F.sum("value_len").alias("value_bytes"),
                      F.min("offset").alias("min_offset"), F.max("offset").alias("max_offset"))
                 .write.mode("overwrite").parquet(str(agg_dir / f"batch={batch_id}")))
                batch.unpersist()

            def start(**trigger: Any) -> Any:
                df = (spark.readStream.format(args.source)
                      .option("kafka.bootstrap.servers", servers)
                      .option("subscribe", TOPIC)
                      .option("startingOffsets", "earliest")
                      .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
                      .load()
                      .select("partition", "offset", "key", F.length("value").alias("value_len"),
                              "timestamp"))
                return (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(ck_dir))
                        .trigger(**trigger).start())

            stream_rows = 0
            runs: list[list[dict[str, Any]]] = []
            t0 = time.perf_counter()
            if not args.no_restart:
                q = start(processingTime="0 seconds")
                while q.isActive and (q.lastProgress is None or q.lastProgress["batchId"] < 1):
                    time.sleep(0.05)
                q.stop()
                stream_rows += sum(p["numInputRows"] for p in q.recentProgress)
                runs.append(list(q.recentProgress))
                print(f"first run stopped after {len(q.recentProgress)} micro-batch(es), "
                      f"{stream_rows} rows; restarting from the checkpoint with Trigger.AvailableNow")
            q = start(availableNow=True)
            q.awaitTermination()
            if q.exception() is not None:
                raise RuntimeError(f"streaming query failed: {q.exception()}")
            elapsed = time.perf_counter() - t0
            progress = q.recentProgress
            stream_rows += sum(p["numInputRows"] for p in progress)
            runs.append(list(progress))
            triggers = ("Trigger.AvailableNow" if args.no_restart else
                        "processingTime 0 s, stopped, then Trigger.AvailableNow from the checkpoint")
            steady, steady_lines = steady_state(runs, args.max_offsets_per_trigger, triggers)
            batch_sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
            if os.environ.get("KIPKAFKA_DEMO_VERBOSE"):
                for p in progress:
                    print(f"  batch {p['batchId']}: {p['numInputRows']} rows, durations {p['durationMs']}")
            print(f"streamed {stream_rows} rows in {elapsed:.2f} s ({stream_rows / elapsed:,.0f} rows/s "
                  f"end to end incl. query start and warm-up); last run's micro-batches: {batch_sizes}")
            print("\n".join(steady_lines))

            raw = spark.read.parquet(str(raw_dir))
            rows_out = raw.count()
            unique = raw.select("partition", "offset").distinct().count()
            per_part = {r["partition"]: (r["n"], r["lo"], r["hi"]) for r in
                        raw.groupBy("partition").agg(F.count("*").alias("n"), F.min("offset").alias("lo"),
                                                     F.max("offset").alias("hi")).collect()}
            agg = {r["partition"]: (r["records"], r["value_bytes"]) for r in
                   spark.read.parquet(str(agg_dir)).groupBy("partition")
                   .agg(F.sum("records").alias("records"), F.sum("value_bytes").alias("value_bytes"))
                   .collect()}
            spark.stop()

        print("partition  produced  raw rows  offsets        agg records  agg value bytes  expected bytes")
        exact = True
        for p in range(args.partitions):
            n, lo, hi = per_part.get(p, (0, None, None))
            a_n, a_b = agg.get(p, (0, 0))
            good = (n == counts[p] and lo == 0 and hi == counts[p] - 1
                    and a_n == counts[p] and a_b == sizes[p])
            exact &= good
            print(f"{p:9d} {counts[p]:9d} {n:9d}  {lo}..{hi}  {a_n:11d}  {a_b:15d}  {sizes[p]:14d}"
                  f"{'' if good else '  MISMATCH'}")
        ok = exact and rows_out == rows_in and unique == rows_in
        print(f"summary: rows in={rows_in} rows out={rows_out} unique (partition, offset)={unique} "
              f"duplicates={rows_out - unique} missing={rows_in - unique} "
              f"rows/s={stream_rows / elapsed:,.0f} (steady {steady:,.0f}) "
              f"-> {'OK: every record exactly once' if ok else 'FAILED'}")
        print(f"output: {raw_dir} (raw), {agg_dir} (aggregates), {ck_dir} (offsets)"
              if args.keep else "output: temporary directory (removed); --keep DIR to keep it")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
