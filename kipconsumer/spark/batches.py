"""What the ``kipkafka`` reader hands Spark (pyarrow, no pyspark): Arrow record batches of the
source's schema built in C by ``ConsumerRecords.to_arrow()``, or Python tuples (a reference point
for benchmarks)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kipconsumer.spark.executor import RangeLike, read_range, timings
from kipconsumer.spark.options import DEFAULT_MAX_POLL_RECORDS, ReadOptions

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
#: With ``includeHeaders=true``.
SCHEMA_WITH_HEADERS = SCHEMA + ", headers array<struct<key: string, value: binary>>"
_TS_US_UTC = pa.timestamp("us", tz="UTC")
#: The Arrow schema Spark expects from read() (pyspark's to_arrow_schema of SCHEMA, UTC).
ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", _TS_US_UTC),
    pa.field("timestampType", pa.int32()),
])
HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()),
                                                       pa.field("value", pa.binary())])))
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))


def schema_of(opts: ReadOptions) -> str:
    """The DDL schema of reads with these options."""
    return SCHEMA_WITH_HEADERS if opts.include_headers else SCHEMA


#: ``timestampType`` is Kafka's (Java) numbering, as Spark's connector gives it: -1 none, 0 create
#: time, 1 log-append time; librdkafka's (``ConsumerRecord.timestamp_type``) is that + 1.
SPARK_TIMESTAMP_TYPE_SHIFT = 1


def to_spark_batch(rb: Any) -> Any:
    """``ConsumerRecords.to_arrow(timestamp_type=True[, headers=True])`` -> a batch of the
    ``kipkafka`` schema (columns reordered and renamed, timestamp in UTC microseconds,
    timestampType in Kafka's numbering)."""
    cols = [rb.column("key"), rb.column("value"), rb.column("topic"), rb.column("partition"),
            rb.column("offset"), rb.column("timestamp").cast(_TS_US_UTC),
            pc.subtract(rb.column("timestamp_type"), pa.scalar(SPARK_TIMESTAMP_TYPE_SHIFT, pa.int32()))]
    if rb.num_columns == 8:
        cols.append(rb.column("headers").cast(HEADERS_TYPE))  # renames the list item only: no copy
        return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA_WITH_HEADERS)
    return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)


def _concat(batches: list[Any]) -> Any:
    if len(batches) == 1:
        return batches[0]
    concat = getattr(pa, "concat_batches", None)
    if concat is not None:
        return concat(batches)
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]  # pragma: no cover


def read_arrow(opts: ReadOptions, rng: RangeLike) -> Iterator[Any]:
    """Arrow record batches (``kipkafka`` schema) of one input partition. Polls are coalesced
    into batches of at least ``max.poll.records`` rows (fewer Arrow IPC round trips to Spark)."""
    target = int(dict(opts.kafka).get("max.poll.records", DEFAULT_MAX_POLL_RECORDS))
    held: list[Any] = []
    rows = 0
    for recs, lo, hi in read_range(opts, rng):
        t0 = time.perf_counter()
        rb = recs.to_arrow(timestamp_type=True, headers=opts.include_headers)
        if lo or hi < rb.num_rows:
            rb = rb.slice(lo, hi - lo)
        held.append(to_spark_batch(rb))
        rows += hi - lo
        if rows >= target:
            out = _concat(held)
            held, rows = [], 0
            timings["arrow_s"] += time.perf_counter() - t0
            yield out
        else:
            timings["arrow_s"] += time.perf_counter() - t0
    if held:
        t0 = time.perf_counter()
        out = _concat(held)
        timings["arrow_s"] += time.perf_counter() - t0
        yield out


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def read_tuples(opts: ReadOptions, rng: RangeLike) -> Iterator[tuple[Any, ...]]:
    """The same records as plain Python tuples (a reference point for benchmarks)."""
    for recs, lo, hi in read_range(opts, rng):
        for i in range(lo, hi):
            r = recs[i]
            ts = r.timestamp
            row: tuple[Any, ...] = (r.key, r.value, r.topic, r.partition, r.offset,
                   _EPOCH + timedelta(milliseconds=ts) if ts >= 0 else None,
                   r.timestamp_type - SPARK_TIMESTAMP_TYPE_SHIFT)
            if opts.include_headers:
                hdrs = r.headers
                row += ([{"key": k, "value": v} for k, v in hdrs] if hdrs else None,)
            yield row
