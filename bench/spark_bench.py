"""Spark read throughput: ``kipkafka`` (Arrow batches built in C) vs a plain Python-tuple source.

Both sources read the same records through the same kipconsumer code path (same offsets,
partitions, cached assign-only consumers); they differ only in what ``read()`` yields to Spark:

* ``kipkafka``: ``pyarrow.RecordBatch`` from ``ConsumerRecords.to_arrow()`` (built in C);
* ``kipkafka_tuples``: one Python tuple per record (``ConsumerRecord`` attributes), which Spark's
  Python worker converts to Arrow itself.

Each run is a Structured Streaming query (``Trigger.AvailableNow``, one micro-batch unless
``--max-offsets-per-trigger``) into the ``noop`` sink on Spark ``local[2]``, against an embedded
broker in this process. Runs alternate between the two sources; the best of ``--repeat`` is kept.
Prints rows/s of each and the ratio.

    python bench/spark_bench.py [--records N] [--partitions P] [--value-size B] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from kipconsumer.spark import (
    KipKafkaDataSource,
    KipKafkaStreamReader,
    ReadOptions,
    local_session,
    read_tuples,
)


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


def run_query(spark: Any, fmt: str, servers: str, topic: str, max_per_trigger: int | None,
              extra: dict[str, str] | None = None) -> tuple[int, float, float]:
    """Returns (rows, query wall seconds, seconds spent in the micro-batches' Spark jobs)."""
    ck = tempfile.mkdtemp(prefix="kipkafka-bench-")
    try:
        r = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", servers)
             .option("subscribe", topic).option("startingOffsets", "earliest"))
        if max_per_trigger:
            r = r.option("maxOffsetsPerTrigger", max_per_trigger)
        for k, v in (extra or {}).items():
            r = r.option(k, v)
        t0 = time.perf_counter()
        q = (r.load().writeStream.format("noop").option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        q.awaitTermination()
        elapsed = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))
        rows = sum(p["numInputRows"] for p in q.recentProgress)
        job_s = sum(p["durationMs"].get("addBatch", 0) for p in q.recentProgress) / 1000.0
        return rows, elapsed, job_s
    finally:
        shutil.rmtree(ck, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--value-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=None)
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="extra source option for both sources, e.g. kafka.max.poll.records=50000")
    args = ap.parse_args()
    extra = dict(o.split("=", 1) for o in args.option)

    from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
    from kipconsumer.broker import EmbeddedBroker

    topic = "bench"
    with EmbeddedBroker(num_brokers=1) as broker:
        servers = broker.bootstrap_servers
        broker.create_topic(topic, partitions=args.partitions)
        value = b"v" * args.value_size
        with KafkaProducer({"bootstrap.servers": servers, "linger.ms": 20}) as p:
            futs = [p.send(topic, value=value, key=b"%d" % i, partition=i % args.partitions)
                    for i in range(args.records)]
            p.flush()
            for f in futs:
                f.result()
        c = KafkaConsumer({"bootstrap.servers": servers})
        tps = [TopicPartition(topic, i) for i in range(args.partitions)]
        lows, highs = c.beginning_offsets(tps), c.end_offsets(tps)
        c.close()
        available = sum(highs[tp] - lows[tp] for tp in tps)
        if available != args.records:
            print(f"note: the embedded broker kept {available} of {args.records} records "
                  "(it keeps ~100k records / 5 MiB per partition)")
        print(f"topic {topic}: {available} records x {args.value_size} B over {args.partitions} partitions")

        spark = local_session("kipkafka-bench", cores=2, shuffle_partitions=2)
        spark.dataSource.register(TupleDataSource)
        results: dict[str, list[float]] = {"kipkafka": [], "kipkafka_tuples": []}
        wall: dict[str, list[float]] = {"kipkafka": [], "kipkafka_tuples": []}
        # warm-up: JVM, Python workers, consumer caches
        run_query(spark, "kipkafka", servers, topic, args.max_offsets_per_trigger, extra)
        run_query(spark, "kipkafka_tuples", servers, topic, args.max_offsets_per_trigger, extra)
        for i in range(args.repeat):
            for fmt in (("kipkafka", "kipkafka_tuples") if i % 2 == 0 else ("kipkafka_tuples", "kipkafka")):
                rows, secs, job_s = run_query(spark, fmt, servers, topic, args.max_offsets_per_trigger, extra)
                if rows != available:
                    raise SystemExit(f"{fmt}: read {rows} rows, expected {available}")
                results[fmt].append(rows / job_s)
                wall[fmt].append(rows / secs)
                print(f"  {fmt:16s} {rows} rows: read job {job_s:6.2f} s = {rows / job_s:10,.0f} rows/s; "
                      f"whole query {secs:6.2f} s = {rows / secs:10,.0f} rows/s")
        spark.stop()

    best = {k: max(v) for k, v in results.items()}
    best_wall = {k: max(v) for k, v in wall.items()}
    ratio = best["kipkafka"] / best["kipkafka_tuples"]
    ratio_wall = best_wall["kipkafka"] / best_wall["kipkafka_tuples"]
    print(f"kipkafka (Arrow from C):  {best['kipkafka']:12,.0f} rows/s read job, "
          f"{best_wall['kipkafka']:12,.0f} rows/s whole query (best of {args.repeat})")
    print(f"Python-tuple source:      {best['kipkafka_tuples']:12,.0f} rows/s read job, "
          f"{best_wall['kipkafka_tuples']:12,.0f} rows/s whole query (best of {args.repeat})")
    print(f"ratio kipkafka / tuples: {ratio:.2f}x on the read job (micro-batch execution), "
          f"{ratio_wall:.2f}x on the whole query incl. planning/checkpoint overhead")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"records": available, "value_size": args.value_size, "partitions": args.partitions,
                       "rows_per_s_read_job": best, "rows_per_s_whole_query": best_wall,
                       "runs_read_job": results, "runs_whole_query": wall, "ratio": ratio,
                       "ratio_whole_query": ratio_wall}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
