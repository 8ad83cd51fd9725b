"""Head to head with Spark's own Kafka connector (issue #27): the same reads through
``format("kafka")`` (org.apache.spark:spark-sql-kafka-0-10, pyspark's version, jars from
``kipconsumer.testing.spark_connector``) and ``format("kipkafka")`` on real Apache Kafka give the same
rows, column for column; the same DataFrame written by both sinks gives the same records. Where the two
differ by design, the test pins the difference (docs/spark.md, "Differences from Spark's Kafka
connector"). One SparkSession and one set of small topics for the module (CI-sized)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install pyspark pandas)")

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from support import produce  # noqa: E402

from kipconsumer import KafkaProducer  # noqa: E402
from kipconsumer.spark import local_session  # noqa: E402
from kipconsumer.testing.spark_connector import connector_jars_conf  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

COUNTS = {0: 40, 1: 25, 2: 10}
#: Recent (Kafka's retention deletes records whose timestamps are older than 7 days).
BASE_TS = (int(time.time()) - 3600) * 1000


def _key(p: int, i: int) -> bytes | None:
    return None if i % 4 == 0 else f"k{p}-{i}".encode()


def _headers(p: int, i: int) -> Any:
    if i % 3 == 0:
        return None
    # a null header value and a repeated header key, in order
    return [("a", str(i).encode())] + ([("b", None), ("a", b"again")] if i % 3 == 2 else [])


def _timestamp(p: int, i: int) -> int:
    return BASE_TS + 100 * i + 10 * p


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # Spark's connector must be pyspark's version; a missing one fails here with the Maven command.
    s = local_session("kipkafka-vs-jvm", cores=2, shuffle_partitions=2, extra=connector_jars_conf())
    yield s
    s.stop()


@pytest.fixture(scope="module")
def data(kafka_cluster: Any) -> dict[str, str]:
    """Two topics under one unique prefix: ``main`` (3 partitions, 40/25/10 records with keys, null
    keys, headers and explicit timestamps) and ``other`` (2 partitions, 3 records each)."""
    from conftest import unique_name

    prefix = unique_name("vsjvm")
    servers = kafka_cluster.bootstrap_servers
    main, other = f"{prefix}-main", f"{prefix}-other"
    kafka_cluster.create_topic(main, 3, 1)
    kafka_cluster.create_topic(other, 2, 1)
    produce(servers, main, COUNTS, key=_key, headers=_headers, timestamp=_timestamp)
    produce(servers, other, {0: 3, 1: 3})
    # the broker stamps these records (their own timestamps are replaced); outside the prefix
    log_append = unique_name("vsjvm-logappend")
    kafka_cluster.create_topic(log_append, 2, 1, {"message.timestamp.type": "LogAppendTime"})
    produce(servers, log_append, {0: 7, 1: 5}, key=_key, timestamp=_timestamp)
    return {"servers": servers, "main": main, "other": other, "prefix": prefix, "log_append": log_append}


def load(spark: SparkSession, fmt: str, servers: str, opts: dict[str, Any],
         stream: bool = False) -> DataFrame:
    r = (spark.readStream if stream else spark.read).format(fmt).option("kafka.bootstrap.servers", servers)
    for k, v in opts.items():
        r = r.option(k, v if isinstance(v, str) else json.dumps(v))
    return r.load()


def _b(x: Any) -> bytes | None:
    return None if x is None else bytes(x)


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """Every column as plain values (timestamps as exact microseconds), sorted by topic, partition,
    offset."""
    has_headers = "headers" in df.columns
    out = []
    for r in df.withColumn("ts_us", F.unix_micros("timestamp")).collect():
        t: tuple[Any, ...] = (r.topic, r.partition, r.offset, _b(r.key), _b(r.value), r.ts_us,
                              r.timestampType)
        if has_headers:
            t += (None if r.headers is None else tuple((h.key, _b(h.value)) for h in r.headers),)
        out.append(t)
    return sorted(out, key=lambda t: (t[0], t[1], t[2]))


def collect_into(into: list[tuple[Any, ...]]) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function that appends each micro-batch's rows to ``into``."""
    def f(df: DataFrame, _batch_id: int) -> None:
        into.extend(rows(df))
    return f


def both(spark: SparkSession, data: dict[str, str],
         opts: dict[str, Any]) -> tuple[list[tuple[Any, ...]], DataFrame, DataFrame]:
    """Reads with both connectors, asserts the same schema and rows; returns the rows and the two
    DataFrames (Spark's, kipkafka's)."""
    jvm = load(spark, "kafka", data["servers"], opts)
    kip = load(spark, "kipkafka", data["servers"], opts)
    assert kip.schema.simpleString() == jvm.schema.simpleString()
    want, got = rows(jvm), rows(kip)
    assert got == want, opts
    return got, jvm, kip


def same(spark: SparkSession, data: dict[str, str], opts: dict[str, Any]) -> list[tuple[Any, ...]]:
    return both(spark, data, opts)[0]


def test_subscribe_every_column_with_and_without_headers(spark: SparkSession, data: dict[str, str]) -> None:
    got = same(spark, data, {"subscribe": data["main"], "includeHeaders": "true"})
    assert len(got) == sum(COUNTS.values())
    assert {r[6] for r in got} == {0}  # CreateTime
    assert any(r[3] is None for r in got) and any(r[7] is None for r in got)
    assert len(same(spark, data, {"subscribe": f"{data['main']},{data['other']}"})) == 81


def test_assign_and_subscribe_pattern(spark: SparkSession, data: dict[str, str]) -> None:
    got = same(spark, data, {"assign": {data["main"]: [0, 2]}})
    assert len(got) == 50
    got = same(spark, data, {"subscribePattern": data["prefix"] + "-.*", "includeHeaders": "true"})
    assert len(got) == 81
    # Java regex syntax (docs/spark.md, Differences): translated where Python's re has the same meaning
    # under another spelling (POSIX classes, \Q...\E, \z; a leading (?i) means the same in both) ...
    assert len(same(spark, data, {"subscribePattern": data["prefix"] + r"-\p{Lower}+\z"})) == 81
    quoted = r"(?i)\Q" + data["prefix"].upper() + r"\E-\p{Alpha}*[\p{Digit}N]"
    assert len(same(spark, data, {"subscribePattern": quoted})) == 75
    # ... and refused by name where it is not: Python would read [a-z&&[^o]] as another set (and match
    # nothing here), and rejects a (?i) after the start; Java reads "main" but not "other" / "main".
    for java, jvm_rows, what in (("-[a-z&&[^o]]+", 75, "class intersection"),
                                 ("-(?i)MAIN", 75, "inline flag")):
        pattern = data["prefix"] + java
        assert load(spark, "kafka", data["servers"], {"subscribePattern": pattern}).count() == jvm_rows
        with pytest.raises(Exception, match=f"subscribePattern .*{what}.* is Java regex syntax"):
            load(spark, "kipkafka", data["servers"], {"subscribePattern": pattern}).count()


def test_offsets_as_json(spark: SparkSession, data: dict[str, str]) -> None:
    t = data["main"]
    got = same(spark, data, {"subscribe": t, "startingOffsets": {t: {"0": 5, "1": -2, "2": 3}},
                             "endingOffsets": {t: {"0": 30, "1": -1, "2": 7}}})
    assert len(got) == 25 + 25 + 4
    # Difference (docs/spark.md): a partition left out of startingOffsets JSON fails Spark's batch read;
    # kipkafka starts it at earliest.
    partial = {"subscribe": t, "startingOffsets": {t: {"0": 5}}}
    with pytest.raises(Exception, match="Partitions specified for Kafka start offsets don't match"):
        load(spark, "kafka", data["servers"], partial).count()
    assert load(spark, "kipkafka", data["servers"], partial).count() == 35 + 25 + 10


def test_offsets_by_timestamp(spark: SparkSession, data: dict[str, str]) -> None:
    t = data["main"]
    # p0: BASE + 100 i (40 records), p1: + 10 (25), p2: + 20 (10, the last at BASE + 920)
    assert len(same(spark, data, {"subscribe": t, "startingTimestamp": str(BASE_TS + 505)})) == 34 + 20 + 5
    same(spark, data, {"subscribe": t, "startingOffsetsByTimestamp":
                       {t: {"0": BASE_TS + 2000, "1": BASE_TS, "2": BASE_TS + 500}}})
    same(spark, data, {"subscribe": t, "endingTimestamp": str(BASE_TS + 1500)})
    same(spark, data, {"subscribe": t, "endingOffsetsByTimestamp":
                       {t: {"0": BASE_TS + 100, "1": BASE_TS + 10**7, "2": BASE_TS + 300}}})
    # past p2's last record: the default strategy fails the query on both, "latest" reads nothing
    late = {"subscribe": t, "startingTimestamp": str(BASE_TS + 1005)}
    for fmt, match in (("kafka", f"No offset matched .* {t}-2"), ("kipkafka", f"{t}-2 has no record")):
        with pytest.raises(Exception, match=match):
            load(spark, fmt, data["servers"], late).count()
    assert len(same(spark, data, {**late, "startingOffsetsByTimestampStrategy": "latest"})) == 29 + 15


def test_min_partitions_and_max_records_per_partition(spark: SparkSession, data: dict[str, str]) -> None:
    t = data["main"]
    _, jvm, kip = both(spark, data, {"subscribe": t, "minPartitions": "7"})
    assert kip.rdd.getNumPartitions() == jvm.rdd.getNumPartitions() == 7
    # Difference (docs/spark.md): Spark 4.2's connector ignores maxRecordsPerPartition in batch reads
    # (one input partition per Kafka partition); kipkafka cuts the ranges. Same rows.
    _, jvm, kip = both(spark, data, {"subscribe": t, "maxRecordsPerPartition": "12"})
    assert (jvm.rdd.getNumPartitions(), kip.rdd.getNumPartitions()) == (3, 4 + 3 + 1)


def test_read_committed_skips_the_aborted_transaction(spark: SparkSession, data: dict[str, str],
                                                     kafka_cluster: Any) -> None:
    from conftest import unique_name

    topic = unique_name("vsjvm-txn")
    kafka_cluster.create_topic(topic, 2, 1)
    p = KafkaProducer({"bootstrap.servers": data["servers"], "transactional.id": unique_name("tx")})
    try:
        p.init_transactions(30)
        for label, commit in (("c1", True), ("ab", False), ("c2", True)):
            p.begin_transaction()
            for i in range(6):
                p.send(topic, key=f"{label}{i}".encode(), value=f"{label}-{i}".encode(), partition=i % 2,
                       timestamp=BASE_TS + i)
            p.flush(30)
            p.commit_transaction(30) if commit else p.abort_transaction(30)
    finally:
        p.close()
    got = same(spark, data, {"subscribe": topic, "kafka.isolation.level": "read_committed"})
    want = sorted(f"{lab}-{i}".encode() for lab in ("c1", "c2") for i in range(6))
    assert sorted(r[4] for r in got) == want
    assert len(same(spark, data, {"subscribe": topic, "kafka.isolation.level": "read_uncommitted"})) == 18


def test_streaming_max_offsets_per_trigger(spark: SparkSession, data: dict[str, str]) -> None:
    """Trigger.AvailableNow with maxOffsetsPerTrigger: the same rows overall (the batches may be cut
    differently: kipkafka water-fills, Spark splits in proportion to the backlog)."""
    opts = {"subscribe": data["main"], "startingOffsets": "earliest", "maxOffsetsPerTrigger": "20",
            "includeHeaders": "true"}
    out: dict[str, list[tuple[Any, ...]]] = {}
    batches: dict[str, int] = {}
    for fmt in ("kafka", "kipkafka"):
        ck = tempfile.mkdtemp(prefix="vsjvm-ck-")
        collected: list[tuple[Any, ...]] = []
        try:
            q = (load(spark, fmt, data["servers"], opts, stream=True).writeStream
                 .foreachBatch(collect_into(collected))
                 .option("checkpointLocation", ck).trigger(availableNow=True).start())
            q.awaitTermination(180)
            assert q.exception() is None, q.exception()
            batches[fmt] = sum(1 for p in q.recentProgress if p["numInputRows"] > 0)
        finally:
            shutil.rmtree(ck, ignore_errors=True)
        out[fmt] = sorted(collected, key=lambda t: (t[0], t[1], t[2]))
    assert out["kipkafka"] == out["kafka"]
    assert len(out["kafka"]) == sum(COUNTS.values())
    assert batches["kipkafka"] == batches["kafka"] == 4  # 75 records, 20 per trigger


def test_log_append_time(spark: SparkSession, data: dict[str, str]) -> None:
    """A topic with message.timestamp.type=LogAppendTime: the broker's timestamps (not the producer's)
    and timestampType 1 from both, in batch and in a streaming micro-batch."""
    opts = {"subscribe": data["log_append"]}
    got = same(spark, data, opts)
    assert len(got) == 12 and {r[6] for r in got} == {1}
    assert all(r[5] // 1000 > BASE_TS + 3_000_000 for r in got)  # stamped by the broker, not BASE_TS + ...
    out: dict[str, list[tuple[Any, ...]]] = {}
    for fmt in ("kafka", "kipkafka"):
        ck = tempfile.mkdtemp(prefix="vsjvm-ck-")
        collected: list[tuple[Any, ...]] = []
        try:
            q = (load(spark, fmt, data["servers"], {**opts, "startingOffsets": "earliest"}, stream=True)
                 .writeStream.foreachBatch(collect_into(collected))
                 .option("checkpointLocation", ck).trigger(availableNow=True).start())
            q.awaitTermination(180)
            assert q.exception() is None, q.exception()
        finally:
            shutil.rmtree(ck, ignore_errors=True)
        out[fmt] = sorted(collected, key=lambda t: (t[0], t[1], t[2]))
    assert out["kipkafka"] == out["kafka"] == got


def test_sink_writes_the_same_records(spark: SparkSession, data: dict[str, str], kafka_cluster: Any) -> None:
    from conftest import unique_name

    header = F.array(
        F.struct(F.lit("id").alias("key"), F.col("id").cast("string").cast("binary").alias("value")),
        F.struct(F.lit("n").alias("key"), F.lit(None).cast("binary").alias("value")))
    df = spark.range(60).select(
        F.when(F.col("id") % 5 == 0, F.lit(None).cast("binary"))
        .otherwise(F.format_string("key-%d", "id").cast("binary")).alias("key"),
        F.format_string("value-%d", "id").cast("binary").alias("value"),
        F.when(F.col("id") % 3 == 0, F.lit(None)).otherwise(header).alias("headers"))
    written = {}
    # Spark's sink has no includeHeaders option: with "false" it still writes the headers column
    for fmt, opts in (("kafka", {}), ("kafka", {"includeHeaders": "false"}), ("kipkafka", {}),
                      ("kipkafka", {"includeHeaders": "true"})):
        topic = unique_name(f"vsjvm-sink-{fmt}")
        kafka_cluster.create_topic(topic, 3, 1)
        w = df.write.format(fmt).option("kafka.bootstrap.servers", data["servers"]).option("topic", topic)
        for k, v in opts.items():
            w = w.option(k, v)
        w.mode("append").save()
        back = rows(load(spark, "kafka", data["servers"], {"subscribe": topic, "includeHeaders": "true"}))
        written[fmt + "".join(f",{k}={v}" for k, v in opts.items())] = back
    # kipkafka refuses includeHeaders=false by name (honouring it would write other records than
    # Spark's sink; ignoring it would write headers the job asked not to write): docs/spark.md
    with pytest.raises(Exception, match="includeHeaders=false is refused"):
        df.write.format("kipkafka").option("kafka.bootstrap.servers", data["servers"]) \
            .option("topic", data["other"]).option("includeHeaders", "false").mode("append").save()
    # keyed records: same partition (murmur2), key, value, headers; null keys: same key/value/headers
    def keyed(rs: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return sorted((r[1], r[3], r[4], r[7]) for r in rs if r[3] is not None)

    def unkeyed(rs: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return sorted((r[4], r[7]) for r in rs if r[3] is None)

    want = written.pop("kafka")
    assert len(want) == 60 and sum(1 for r in want if r[7] is not None) == 40
    for name, got in written.items():
        assert len(got) == 60, name
        assert keyed(got) == keyed(want), name
        assert unkeyed(got) == unkeyed(want), name
    assert all(r[6] == 0 for rs in written.values() for r in rs)  # CreateTime on both


def test_sink_puts_keyed_records_where_the_java_partitioner_would(spark: SparkSession,
                                                                  kafka_cluster: Any) -> None:
    """format("kipkafka") written without a partition column: every keyed record lands on the partition
    the Java producer's default partitioner (murmur2) gives its key, as our Java peer computes it
    (``partition-for``), on a 7-partition topic."""
    import java_peer
    from conftest import unique_name

    from kipconsumer import KafkaConsumer, TopicPartition

    servers = kafka_cluster.bootstrap_servers
    topic = unique_name("vsjvm-murmur2")
    kafka_cluster.create_topic(topic, 7, 1)
    df = spark.range(300).select(F.format_string("key-%d", "id").cast("binary").alias("key"),
                                 F.format_string("value-%d", "id").cast("binary").alias("value"))
    df.write.format("kipkafka").option("kafka.bootstrap.servers", servers).option("topic", topic) \
        .mode("append").save()
    landed: dict[bytes, int] = {}
    c = KafkaConsumer({"bootstrap.servers": servers, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p) for p in range(7)]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        deadline = time.monotonic() + 30
        while len(landed) < 300 and time.monotonic() < deadline:
            for r in c.poll(0.5):
                assert r.key is not None and r.key not in landed
                landed[r.key] = r.partition
    finally:
        c.close()
    assert len(landed) == 300
    keys = sorted(landed)
    java = java_peer.partitions_for(keys, 7)
    assert [landed[k] for k in keys] == java
    assert len(set(java)) == 7  # the keys spread over every partition: the check is not vacuous
