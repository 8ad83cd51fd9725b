"""The ``kipkafka`` PySpark data source, run for real: Spark local[2] against the EmbeddedBroker.

Spark's executor Python workers are separate processes on this machine; they reach the broker of
this test process over TCP on 127.0.0.1. Data is kept small (the machine has 2 shared cores).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install pyspark pandas)")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402
from support import produce as produce_records  # noqa: E402

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kipconsumer.broker import EmbeddedBroker  # noqa: E402
from kipconsumer.spark import (  # noqa: E402
    ARROW_SCHEMA,
    KafkaRange,
    KipKafkaStreamReader,
    ReadOptions,
    clear_consumer_cache,
    consumer_cache_stats,
    local_session,
    read_arrow,
)

pytestmark = pytest.mark.spark


# ---------------------------------------------------------------------------------------------
# helpers / fixtures
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stats_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kipkafka-stats")


@pytest.fixture(scope="module")
def spark(stats_dir: Path) -> Iterator[SparkSession]:
    # executor Python workers inherit the environment: they report their consumer-cache counters here
    os.environ["KIPKAFKA_STATS_DIR"] = str(stats_dir)
    s = local_session("kipkafka-tests", cores=2, shuffle_partitions=2)
    yield s
    s.stop()
    os.environ.pop("KIPKAFKA_STATS_DIR", None)


def worker_stats(stats_dir: Path) -> dict[str, int]:
    total: dict[str, int] = {}
    for f in stats_dir.glob("*.json"):
        for k, v in json.loads(f.read_text()).items():
            total[k] = total.get(k, 0) + v
    return total


def produce(servers: str, topic: str, counts: dict[int, int], prefix: str = "v") -> None:
    """counts: partition -> number of records; values '<prefix>-<partition>-<i>', keys 'k<i>'."""
    produce_records(servers, topic, counts, value=lambda p, i: f"{prefix}-{p}-{i}".encode(),
                    key=lambda p, i: f"k{i}".encode(), linger_ms=2)


def source(spark: SparkSession, servers: str, topic: str, stream: bool = False, **opts: Any) -> Any:
    r = spark.readStream if stream else spark.read
    r = r.format("kipkafka").option("kafka.bootstrap.servers", servers).option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def opts_for(servers: str, topic: str, streaming: bool, **extra: str) -> ReadOptions:
    return ReadOptions.parse({"kafka.bootstrap.servers": servers, "subscribe": topic, **extra}, streaming)


# ---------------------------------------------------------------------------------------------
# executor-side read() without Spark: exact range ends, consumer reuse across micro-batches
# ---------------------------------------------------------------------------------------------
def test_read_stops_exactly_at_range_end_and_reuses_the_consumer(
        broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    produce(broker.bootstrap_servers, topic, {0: 500, 1: 10})
    opts = opts_for(broker.bootstrap_servers, topic, True, **{"kafka.max.poll.records": "64"})
    before = consumer_cache_stats()
    got: list[int] = []
    for lo, hi in ((0, 150), (150, 151), (151, 400), (400, 500)):
        batches = list(read_arrow(opts, KafkaRange(topic, 0, lo, hi)))
        assert all(b.schema.equals(ARROW_SCHEMA) for b in batches)
        offs = [o for b in batches for o in b.column("offset").to_pylist()]
        assert offs == list(range(lo, hi))
        got += offs
    after = consumer_cache_stats()
    assert after["created"] - before["created"] == 1
    assert after["continued"] - before["continued"] == 3  # no seek between contiguous ranges
    # a non-contiguous range (a replay after restart) seeks
    offs = [o for b in read_arrow(opts, KafkaRange(topic, 0, 10, 20)) for o in b.column("offset").to_pylist()]
    assert offs == list(range(10, 20))
    assert consumer_cache_stats()["seeks"] - after["seeks"] == 1
    b = next(read_arrow(opts, KafkaRange(topic, 1, 3, 5)))
    assert b.column("value").to_pylist() == [f"v-1-{i}".encode() for i in (3, 4)]
    assert b.column("partition").to_pylist() == [1, 1] and b.column("timestampType").to_pylist() == [0, 0]
    assert list(read_arrow(opts, KafkaRange(topic, 1, 7, 7))) == []  # empty range: nothing, no consumer
    clear_consumer_cache()
    assert consumer_cache_stats()["cached"] == 0


def test_read_detects_deleted_records(broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    """The embedded broker keeps ~5 MiB per partition: the oldest records of a larger backlog are gone."""
    from kipconsumer.spark import DataLossError

    topic = topic_factory(partitions=1)
    with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5}) as p:
        futs = [p.send(topic, value=b"x" * 2048, partition=0) for _ in range(4000)]
        p.flush()
        assert all(f.exception() is None for f in futs)
    c = KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers})
    low = c.beginning_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    c.close()
    if low == 0:
        pytest.skip("the embedded broker kept every record")
    opts = opts_for(broker.bootstrap_servers, topic, True)
    with pytest.raises(DataLossError, match="deleted"):
        list(read_arrow(opts, KafkaRange(topic, 0, 0, low + 10)))
    lenient = opts_for(broker.bootstrap_servers, topic, True, failOnDataLoss="false")
    batches = read_arrow(lenient, KafkaRange(topic, 0, 0, low + 10))
    offs = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offs == list(range(low, low + 10))
    clear_consumer_cache()


# ---------------------------------------------------------------------------------------------
# driver-side offsets: water-filled micro-batches, AvailableNow target
# ---------------------------------------------------------------------------------------------
def test_latest_offset_water_fills_and_available_now_caps_at_target(
        broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=4)
    servers = broker.bootstrap_servers
    produce(servers, topic, {0: 1000, 1: 20, 2: 20, 3: 20})
    reader = KipKafkaStreamReader(opts_for(servers, topic, True, startingOffsets="earliest",
                                           maxOffsetsPerTrigger="200"))
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 0, "1": 0, "2": 0, "3": 0}}
        assert reader.getDefaultReadLimit() == ReadMaxRows(200)
        end = reader.latestOffset(start, ReadMaxRows(200))
        assert end == {topic: {"0": 140, "1": 20, "2": 20, "3": 20}}  # shallow ones drained at once
        parts = reader.partitions(start, end)
        assert [(p.partition, p.start, p.end) for p in parts] == [
            (0, 0, 140), (1, 0, 20), (2, 0, 20), (3, 0, 20)]
        assert reader.partitions(end, end) == []
        # AvailableNow: records produced after prepare are not read
        reader.prepareForTriggerAvailableNow()
        produce(servers, topic, {1: 30})
        cur, batches = end, 0
        while True:
            nxt = reader.latestOffset(cur, ReadMaxRows(200))
            if nxt == cur:
                break
            assert sum(nxt[topic][p] - cur[topic][p] for p in nxt[topic]) <= 200
            cur, batches = nxt, batches + 1
        assert cur == {topic: {"0": 1000, "1": 20, "2": 20, "3": 20}} and batches == 5
        # without a target and without a limit: everything
        reader._target = None
        assert reader.latestOffset(cur, ReadAllAvailable())[topic]["1"] == 50
    finally:
        reader.stop()


# ---------------------------------------------------------------------------------------------
# Spark batch reads
# ---------------------------------------------------------------------------------------------
def test_batch_read_whole_topic(spark: SparkSession, broker: EmbeddedBroker,
                                topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3)
    produce(broker.bootstrap_servers, topic, {0: 300, 1: 200, 2: 100})
    df = source(spark, broker.bootstrap_servers, topic)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    rows = df.select("partition", "offset", "value", "topic", "timestamp").collect()
    assert len(rows) == 600
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p, n in ((0, 300), (1, 200), (2, 100))
                                                       for o in range(n)}
    assert all(r.value == f"v-{r.partition}-{r.offset}".encode() and r.topic == topic for r in rows)
    assert all(r.timestamp is not None for r in rows)
    assert len(df.limit(5).collect()) == 5  # a task that stops early leaves a reusable consumer
    assert df.where("partition = 1").count() == 200


def test_batch_read_per_partition_offsets(spark: SparkSession, broker: EmbeddedBroker,
                                          topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3)
    produce(broker.bootstrap_servers, topic, {0: 50, 1: 50, 2: 50})
    df = source(spark, broker.bootstrap_servers, topic,
                startingOffsets=json.dumps({topic: {"0": 10, "1": -2, "2": 45}}),
                endingOffsets=json.dumps({topic: {"0": 20, "1": 5, "2": -1}}))
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    want = [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)] + [(2, o) for o in range(45, 50)]
    assert got == want


# ---------------------------------------------------------------------------------------------
# Spark Structured Streaming reads
# ---------------------------------------------------------------------------------------------
def _parquet_pairs(spark: SparkSession, path: Path) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(path)).select("partition", "offset").collect()
    return [(r.partition, r.offset) for r in rows]


def test_stream_available_now_honours_max_offsets_per_trigger(
        spark: SparkSession, broker: EmbeddedBroker, topic_factory: Callable[..., str],
        tmp_path: Path) -> None:
    topic = topic_factory(partitions=3)
    produce(broker.bootstrap_servers, topic, {0: 600, 1: 30, 2: 30})
    q = (source(spark, broker.bootstrap_servers, topic, stream=True, startingOffsets="earliest",
                maxOffsetsPerTrigger=250)
         .writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert not q.isActive
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [250, 250, 160]
    pairs = _parquet_pairs(spark, tmp_path / "out")
    assert len(pairs) == 660 and len(set(pairs)) == 660


def test_stream_reuses_consumers_across_micro_batches(
        spark: SparkSession, broker: EmbeddedBroker, topic_factory: Callable[..., str], tmp_path: Path,
        stats_dir: Path) -> None:
    topic = topic_factory(partitions=1)
    produce(broker.bootstrap_servers, topic, {0: 600})
    before = worker_stats(stats_dir)
    q = (source(spark, broker.bootstrap_servers, topic, stream=True, startingOffsets="earliest",
                maxOffsetsPerTrigger=100)
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [100] * 6
    after = worker_stats(stats_dir)
    created = after.get("created", 0) - before.get("created", 0)
    reused = after.get("reused", 0) - before.get("reused", 0)
    continued = after.get("continued", 0) - before.get("continued", 0)
    print(f"6 micro-batches: consumers created {created}, reused {reused}, continued (no seek) {continued}")
    assert created <= 2 and reused >= 4  # at most one new consumer per executor worker process


def test_stream_stopped_and_restarted_is_exactly_once(
        spark: SparkSession, broker: EmbeddedBroker, topic_factory: Callable[..., str],
        tmp_path: Path) -> None:
    topic = topic_factory(partitions=3)
    servers = broker.bootstrap_servers
    produce(servers, topic, {0: 400, 1: 400, 2: 400})
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def start(**trigger: Any) -> Any:
        df = source(spark, servers, topic, stream=True, startingOffsets="earliest", maxOffsetsPerTrigger=100)
        return (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
                .trigger(**trigger).start())

    q = start(processingTime="0 seconds")
    deadline = time.monotonic() + 120
    while (q.lastProgress is None or q.lastProgress["batchId"] < 2) and time.monotonic() < deadline:
        time.sleep(0.2)
    q.stop()  # mid-way: possibly inside a micro-batch
    first = len(_parquet_pairs(spark, tmp_path / "out"))
    assert 0 < first < 1200
    produce(servers, topic, {0: 100, 2: 50}, prefix="late")
    q = start(availableNow=True)
    q.awaitTermination(240)
    pairs = _parquet_pairs(spark, tmp_path / "out")
    assert len(pairs) == 1350 and len(set(pairs)) == 1350
    assert set(pairs) == {(p, o) for p, n in ((0, 500), (1, 400), (2, 450)) for o in range(n)}


_KILLED_QUERY = """
import sys, time
from kipconsumer.spark import local_session
servers, topic, out, ck = sys.argv[1:5]
spark = local_session("kipkafka-killed", cores=1, shuffle_partitions=1)
q = (spark.readStream.format("kipkafka").option("kafka.bootstrap.servers", servers).option("subscribe", topic)
     .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 100).load()
     .writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
     .trigger(processingTime="0 seconds").start())
print("STARTED", flush=True)
q.awaitTermination()
"""


def test_stream_killed_then_restarted_is_exactly_once(
        spark: SparkSession, broker: EmbeddedBroker, topic_factory: Callable[..., str],
        tmp_path: Path) -> None:
    """The driver process (and its JVM and workers) is SIGKILLed while the query runs; the query is
    restarted from the checkpoint by another Spark application: every record exactly once."""
    import signal
    import subprocess
    import sys

    topic = topic_factory(partitions=2)
    servers = broker.bootstrap_servers
    produce(servers, topic, {0: 1000, 1: 1000})
    out, ck = tmp_path / "out", tmp_path / "ck"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_QUERY, servers, topic, str(out), str(ck)],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and proc.poll() is None:
            commits = [f for f in (ck / "commits").glob("[0-9]*")] if (ck / "commits").exists() else []
            if len(commits) >= 3:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the query process ended before it was killed"
        assert len(list((ck / "commits").glob("[0-9]*"))) >= 3
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    before = len(_parquet_pairs(spark, out))
    assert 0 < before < 2000
    q = (source(spark, servers, topic, stream=True, startingOffsets="earliest", maxOffsetsPerTrigger=500)
         .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ck))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    pairs = _parquet_pairs(spark, out)
    assert len(pairs) == 2000 and set(pairs) == {(p, o) for p in (0, 1) for o in range(1000)}


def test_stream_failed_batch_then_restart_is_exactly_once(
        spark: SparkSession, broker: EmbeddedBroker, topic_factory: Callable[..., str],
        tmp_path: Path) -> None:
    """A micro-batch that dies half-way (a task raises after part of the output is written) leaves no
    visible rows; the restart replays it from the checkpoint: every record exactly once."""
    topic = topic_factory(partitions=2)
    servers = broker.bootstrap_servers
    produce(servers, topic, {0: 300, 1: 300})
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    flag = tmp_path / "fail"
    flag.write_text("1")
    flag_path = str(flag)

    def fail_once(partition, offset):  # type: ignore[no-untyped-def]  # no hints: a plain Python UDF
        if partition == 1 and offset == 250 and os.path.exists(flag_path):
            raise RuntimeError("injected task failure")
        return True

    ok = F.udf(fail_once, "boolean")

    def start() -> Any:
        df = source(spark, servers, topic, stream=True, startingOffsets="earliest", maxOffsetsPerTrigger=200)
        return (df.where(ok("partition", "offset")).writeStream.format("parquet").option("path", out)
                .option("checkpointLocation", ck).trigger(availableNow=True).start())

    q = start()
    with pytest.raises(Exception, match="injected task failure"):
        q.awaitTermination(180)
    partial = _parquet_pairs(spark, tmp_path / "out")
    assert len(partial) == len(set(partial)) and (1, 250) not in partial
    flag.unlink()
    q = start()
    q.awaitTermination(180)
    pairs = _parquet_pairs(spark, tmp_path / "out")
    assert len(pairs) == 600 and set(pairs) == {(p, o) for p in (0, 1) for o in range(300)}


# ---------------------------------------------------------------------------------------------
# Spark writes (KIP-19 producer)
# ---------------------------------------------------------------------------------------------
def _consume_all(servers: str, topic: str, partitions: int) -> list[Any]:
    c = KafkaConsumer({"bootstrap.servers": servers, "max.poll.records": 1000,
                       "auto.offset.reset": "earliest"})
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    total = sum(c.end_offsets(tps).values())
    c.assign(tps)  # no group: starts at auto.offset.reset=earliest
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < total and time.monotonic() < deadline:
        got += [(r.partition, r.key, r.value, r.headers) for r in c.poll(1.0)]
    c.close()
    return got


def test_batch_write_then_read_back(spark: SparkSession, broker: EmbeddedBroker,
                                    topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3)
    df = spark.range(300).select(
        F.format_string("k%d", "id").alias("key"),
        F.format_string("value-%d", "id").cast("binary").alias("value"),
        (F.col("id") % 3).cast("int").alias("partition"),
        F.array(F.struct(F.lit("h").alias("key"), F.col("id").cast("string").cast("binary").alias("value")))
        .alias("headers"),
    )
    df.write.format("kipkafka").option("kafka.bootstrap.servers", broker.bootstrap_servers) \
        .option("topic", topic).mode("append").save()
    got = _consume_all(broker.bootstrap_servers, topic, 3)
    assert len(got) == 300
    for part, key, value, headers in got:
        i = int(value.split(b"-")[1])
        assert key == b"k%d" % i and part == i % 3 and headers == [("h", str(i).encode())]


def test_write_stream_kafka_to_kafka(spark: SparkSession, broker: EmbeddedBroker,
                                     topic_factory: Callable[..., str], tmp_path: Path) -> None:
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    servers = broker.bootstrap_servers
    produce(servers, src, {0: 150, 1: 150})
    q = (source(spark, servers, src, stream=True, startingOffsets="earliest")
         .select("key", F.upper(F.col("value").cast("string")).alias("value"), "partition")
         .writeStream.format("kipkafka").option("kafka.bootstrap.servers", servers).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(180)
    got = _consume_all(servers, dst, 2)
    want = sorted(f"V-{p}-{i}".encode() for p in (0, 1) for i in range(150))
    assert sorted(v for _, _, v, _ in got) == want


def test_failed_send_fails_the_write(spark: SparkSession, broker: EmbeddedBroker,
                                     topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    df = spark.range(20).select(F.col("id").cast("string").alias("value"),
                                F.when(F.col("id") == 13, 99).otherwise(0).cast("int").alias("partition"))
    with pytest.raises(Exception, match="UNKNOWN_PARTITION|Unknown partition|partition"):
        df.write.format("kipkafka").option("kafka.bootstrap.servers", broker.bootstrap_servers) \
            .option("topic", topic).mode("append").save()


def test_undeliverable_records_fail_the_write(spark: SparkSession) -> None:
    """Broker down: the records cannot be acknowledged within delivery.timeout.ms -> task fails."""
    with EmbeddedBroker(num_brokers=1) as b:
        b.create_topic("down", partitions=1)
        b.set_down(1)
        df = spark.range(5).select(F.col("id").cast("string").alias("value"))
        t0 = time.monotonic()
        with pytest.raises(Exception, match="KafkaTimeoutError|timed out|Expiring|KafkaWriteError"):
            (df.coalesce(1).write.format("kipkafka").option("kafka.bootstrap.servers", b.bootstrap_servers)
             .option("topic", "down").option("kafka.max.block.ms", 3000)
             .option("kafka.request.timeout.ms", 1000).option("kafka.delivery.timeout.ms", 2000)
             .option("kafka.linger.ms", 0).mode("append").save())
        assert time.monotonic() - t0 < 60
