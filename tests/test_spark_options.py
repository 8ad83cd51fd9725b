"""Options of Spark's Kafka source on the ``kipkafka`` source, run for real: Spark local[2] and the
driver-side planning against the embedded broker (and Tansu for offsets by timestamp). The pure
logic behind them is in test_spark_planning.py. Data is small (2 shared cores)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install pyspark pandas)")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402
from support import produce as produce_records  # noqa: E402

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kipconsumer.broker import EmbeddedBroker  # noqa: E402
from kipconsumer.spark import KipKafkaStreamReader, ReadOptions, local_session  # noqa: E402
from kipconsumer.spark.metadata import Metadata  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    s = local_session("kipkafka-options-tests", cores=2, shuffle_partitions=2)
    yield s
    s.stop()


def produce(servers: str, topic: str, counts: dict[int, int], headers: bool = False) -> None:
    """counts: partition -> records; values 'v-<partition>-<i>'; with headers, record i carries
    none (i % 3 == 0), [("a", b"<i>")] or [("a", b"<i>"), ("b", None)]."""

    def hdrs(p: int, i: int) -> Any:
        if not headers or i % 3 == 0:
            return None
        return [("a", str(i).encode())] + ([("b", None)] if i % 3 == 2 else [])

    produce_records(servers, topic, counts, headers=hdrs, linger_ms=2)


def read(spark: SparkSession, servers: str, topic: str, **opts: Any) -> Any:
    r = spark.read.format("kipkafka").option("kafka.bootstrap.servers", servers).option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def test_include_headers_column(spark: SparkSession, broker: EmbeddedBroker,
                                topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    produce(broker.bootstrap_servers, topic, {0: 90, 1: 30}, headers=True)
    df = read(spark, broker.bootstrap_servers, topic, includeHeaders="true")
    assert df.schema.fields[-1].name == "headers"
    assert df.schema.fields[-1].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = df.select("partition", "offset", "headers").collect()
    assert len(rows) == 120
    for r in rows:
        i = r.offset
        want = None if i % 3 == 0 else [("a", str(i).encode())] + ([("b", None)] if i % 3 == 2 else [])
        got = None if r.headers is None else [(h.key, None if h.value is None else bytes(h.value))
                                              for h in r.headers]
        assert got == want, (r, want)
    # without the option: Spark's 7 columns
    assert [f.name for f in read(spark, broker.bootstrap_servers, topic).schema.fields][-1] == "timestampType"


def test_headers_written_are_read_back(spark: SparkSession, broker: EmbeddedBroker,
                                       topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=1)
    df = spark.range(50).select(
        F.format_string("value-%d", "id").cast("binary").alias("value"),
        F.array(F.struct(F.lit("id").alias("key"), F.col("id").cast("string").cast("binary").alias("value")),
                F.struct(F.lit("trace").alias("key"), F.lit(None).cast("binary").alias("value")))
        .alias("headers"))
    df.write.format("kipkafka").option("kafka.bootstrap.servers", broker.bootstrap_servers) \
        .option("topic", topic).mode("append").save()
    back = read(spark, broker.bootstrap_servers, topic, includeHeaders="true").select("value", "headers")
    rows = back.collect()
    assert len(rows) == 50
    for r in rows:
        i = int(bytes(r.value).split(b"-")[1])
        assert [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers] == [
            ("id", str(i).encode()), ("trace", None)]
    # includeHeaders=false on the write is refused by name (Spark's sink ignores it and writes the
    # headers: test_spark_vs_jvm::test_sink_writes_the_same_records); dropping the column works
    topic2 = topic_factory(partitions=1)
    with pytest.raises(Exception, match="includeHeaders=false is refused"):
        df.write.format("kipkafka").option("kafka.bootstrap.servers", broker.bootstrap_servers) \
            .option("topic", topic2).option("includeHeaders", "false").mode("append").save()
    df.drop("headers").write.format("kipkafka").option("kafka.bootstrap.servers", broker.bootstrap_servers) \
        .option("topic", topic2).mode("append").save()
    back2 = read(spark, broker.bootstrap_servers, topic2, includeHeaders="true")
    assert back2.count() == 50 and back2.where("headers IS NOT NULL").count() == 0


def test_min_partitions_and_max_records_per_partition_split_ranges(
        spark: SparkSession, broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    produce(broker.bootstrap_servers, topic, {0: 900, 1: 100})
    want = {(p, o) for p, n in ((0, 900), (1, 100)) for o in range(n)}
    for opts, parts in (({}, 2), ({"minPartitions": 10}, 10), ({"maxRecordsPerPartition": 250}, 5),
                        ({"minPartitions": 3, "maxRecordsPerPartition": 1000}, 4)):  # 3 + 1 (p1 gets one)
        df = read(spark, broker.bootstrap_servers, topic, **opts)
        assert df.rdd.getNumPartitions() == parts, opts
        rows = df.select("partition", "offset").collect()
        assert len(rows) == 1000 and {(r.partition, r.offset) for r in rows} == want, opts
        # each input partition is one contiguous offset range of one topic-partition
        spans = df.select(F.spark_partition_id().alias("sp"), "partition", "offset").groupBy("sp") \
            .agg(F.countDistinct("partition").alias("tps"), F.min("offset").alias("lo"),
                 F.max("offset").alias("hi"), F.count("*").alias("n")).collect()
        assert all(s.tps == 1 and s.hi - s.lo + 1 == s.n for s in spans), (opts, spans)
        if "maxRecordsPerPartition" in opts:
            assert max(s.n for s in spans) <= opts["maxRecordsPerPartition"]


@pytest.mark.embedded_only
def test_timestamp_options_on_the_embedded_broker(spark: SparkSession, broker: EmbeddedBroker,
                                                  topic_factory: Callable[..., str]) -> None:
    # The embedded broker finds no offset for any timestamp (FACTS.md): the start strategy decides.
    topic = topic_factory(partitions=2)
    produce(broker.bootstrap_servers, topic, {0: 20, 1: 10})
    now = int(time.time() * 1000)
    with pytest.raises(Exception, match=f"{topic}-0 has no record at or after timestamp {now}"):
        read(spark, broker.bootstrap_servers, topic, startingTimestamp=now).count()
    assert read(spark, broker.bootstrap_servers, topic, startingTimestamp=now,
                startingOffsetsByTimestampStrategy="latest").count() == 0
    by_ts = json.dumps({topic: {"0": now, "1": now}})
    assert read(spark, broker.bootstrap_servers, topic, startingOffsetsByTimestamp=by_ts,
                startingOffsetsByTimestampStrategy="latest").count() == 0
    # an ending timestamp with no record that late ends at the latest offset
    assert read(spark, broker.bootstrap_servers, topic, endingTimestamp=now).count() == 30
    assert read(spark, broker.bootstrap_servers, topic,
                endingOffsetsByTimestamp=json.dumps({topic: {"0": now, "1": 0}})).count() == 30
    with pytest.raises(Exception, match="must give a timestamp for every partition read; missing: "
                                        f"{topic}-1"):
        read(spark, broker.bootstrap_servers, topic,
             startingOffsetsByTimestamp=json.dumps({topic: {"0": now}})).count()


@pytest.mark.kafka
def test_timestamp_options_give_the_first_record_at_or_after_the_timestamp_on_kafka(
        spark: SparkSession, kafka_cluster: Any, unique_name: Callable[[str], str]) -> None:
    """Real Kafka answers offsets by time: a starting timestamp starts at the first record at or after
    it, an ending timestamp ends (exclusive) there, a timestamp past the last record follows the
    strategy (Spark's rules)."""
    topic = unique_name("spark-ts")
    kafka_cluster.create_topic(topic, 2, 1)
    servers = kafka_cluster.bootstrap_servers
    base = int(time.time() * 1000) - 60_000
    with KafkaProducer({"bootstrap.servers": servers}) as p:
        for i in range(20):  # p0: base + 100 i, p1: base + 100 i + 50
            p.send(topic, value=b"a%d" % i, partition=0, timestamp=base + 100 * i)
            p.send(topic, value=b"b%d" % i, partition=1, timestamp=base + 100 * i + 50)
        p.flush(30)

    def offsets(df: Any) -> dict[int, list[int]]:
        rows = df.select("partition", "offset").collect()
        return {q: sorted(r.offset for r in rows if r.partition == q) for q in (0, 1)}

    assert offsets(read(spark, servers, topic, startingTimestamp=base + 1000)) == {
        0: list(range(10, 20)), 1: list(range(10, 20))}
    by_ts = json.dumps({topic: {"0": base + 1001, "1": base}})
    assert offsets(read(spark, servers, topic, startingOffsetsByTimestamp=by_ts)) == {
        0: list(range(11, 20)), 1: list(range(0, 20))}
    assert offsets(read(spark, servers, topic, endingTimestamp=base + 1500)) == {
        0: list(range(0, 15)), 1: list(range(0, 15))}
    ends = json.dumps({topic: {"0": base + 100, "1": base + 1_000_000}})
    assert offsets(read(spark, servers, topic, endingOffsetsByTimestamp=ends)) == {
        0: [0], 1: list(range(0, 20))}
    late = base + 1_000_000
    with pytest.raises(Exception, match=f"{topic}-0 has no record at or after timestamp {late}"):
        read(spark, servers, topic, startingTimestamp=late).count()
    assert read(spark, servers, topic, startingTimestamp=late,
                startingOffsetsByTimestampStrategy="latest").count() == 0


@pytest.mark.kafka
def test_read_committed_source_returns_no_aborted_record_on_kafka(
        spark: SparkSession, kafka_cluster: Any, unique_name: Callable[[str], str]) -> None:
    """Committed, aborted, committed transactions: with kafka.isolation.level=read_committed the
    source returns the committed records only and ends past the last COMMIT marker (a batch read's
    latest offset is a marker's + 1); read_uncommitted returns all three."""
    topic = unique_name("spark-rc")
    kafka_cluster.create_topic(topic, 2, 1)
    servers = kafka_cluster.bootstrap_servers
    p = KafkaProducer({"bootstrap.servers": servers, "transactional.id": unique_name("tx")})
    try:
        p.init_transactions(30)
        for label, commit in (("c1", True), ("ab", False), ("c2", True)):
            p.begin_transaction()
            for i in range(10):
                p.send(topic, value=f"{label}-{i}".encode(), partition=i % 2)
            p.flush(30)
            p.commit_transaction(30) if commit else p.abort_transaction(30)
    finally:
        p.close()
    committed = read(spark, servers, topic, **{"kafka.isolation.level": "read_committed"})
    rows = committed.select("value").collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(
        f"{lab}-{i}".encode() for lab in ("c1", "c2") for i in range(10))
    everything = read(spark, servers, topic, **{"kafka.isolation.level": "read_uncommitted"}).count()
    assert everything == 30


def test_starting_offsets_by_timestamp_follow_offsets_for_times_on_tansu(tansu: Any) -> None:
    topic = tansu.create_topic(2)
    produce(tansu.bootstrap, topic, {0: 30, 1: 5})
    stamp = int(time.time() * 1000) - 60_000
    opts = ReadOptions.parse({"kafka.bootstrap.servers": tansu.bootstrap, "subscribe": topic,
                              "startingTimestamp": str(stamp),
                              "startingOffsetsByTimestampStrategy": "latest"}, False)
    md = Metadata(opts)
    c = KafkaConsumer({"bootstrap.servers": tansu.bootstrap})
    try:
        tps = md.partitions(strict=True)
        answers = c.offsets_for_times({TopicPartition(t, p): stamp for t, p in tps}, timeout=30)
        latest = md.latest(tps)
        want = {(tp.topic, tp.partition): (a.offset if a is not None else latest[(tp.topic, tp.partition)])
                for tp, a in answers.items()}
        assert md.starting(tps, "earliest") == want
        assert md.ending(tps) == want if opts.ends_by_timestamp else md.ending(tps) == latest
    finally:
        c.close()
        md.close()


def test_min_offsets_per_trigger_and_max_trigger_delay(broker: EmbeddedBroker,
                                                       topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    servers = broker.bootstrap_servers
    produce(servers, topic, {0: 5})
    opts = ReadOptions.parse({"kafka.bootstrap.servers": servers, "subscribe": topic,
                              "startingOffsets": "earliest", "minOffsetsPerTrigger": "10",
                              "maxTriggerDelay": "1500ms"}, True)
    reader = KipKafkaStreamReader(opts)
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, ReadAllAvailable())
        assert first == {topic: {"0": 5, "1": 0}}            # the first batch always runs
        t_first = time.monotonic()
        produce(servers, topic, {1: 4})
        assert reader.latestOffset(first, ReadAllAvailable()) == first  # 4 < 10: held back
        produce(servers, topic, {0: 3, 1: 3})
        second = reader.latestOffset(first, ReadAllAvailable())
        assert second == {topic: {"0": 8, "1": 7}}           # 10 available: runs
        produce(servers, topic, {0: 2})
        held = reader.latestOffset(second, ReadAllAvailable())
        if time.monotonic() - t_first < 1.4:                 # (a slow machine may pass the delay)
            assert held == second
        time.sleep(1.6)
        assert reader.latestOffset(second, ReadAllAvailable()) == {topic: {"0": 10, "1": 7}}  # delay passed
        # Trigger.AvailableNow is never held back
        produce(servers, topic, {1: 1})
        reader.prepareForTriggerAvailableNow()
        nxt = reader.latestOffset({topic: {"0": 10, "1": 7}}, ReadAllAvailable())
        assert nxt == {topic: {"0": 10, "1": 8}}
    finally:
        reader.stop()


def test_group_id_options(spark: SparkSession, broker: EmbeddedBroker, topic_factory: Callable[..., str],
                          unique_name: Callable[[str], str]) -> None:
    topic = topic_factory(partitions=2)
    produce(broker.bootstrap_servers, topic, {0: 40, 1: 40})
    group = unique_name("spark-group")
    assert read(spark, broker.bootstrap_servers, topic, **{"kafka.group.id": group}).count() == 80
    assert read(spark, broker.bootstrap_servers, topic, groupIdPrefix="app").count() == 80
    # the source commits nothing to Kafka, with a group or without
    with KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group}) as c:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        assert c.committed(tps) == {tp: None for tp in tps}


def test_unknown_and_refused_options_fail_the_query(spark: SparkSession, broker: EmbeddedBroker,
                                                    topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=1)
    with pytest.raises(Exception, match="unknown kipkafka read option 'includeheader'.*includeHeaders"):
        read(spark, broker.bootstrap_servers, topic, includeHeader="true").count()
    with pytest.raises(Exception, match="kafka.auto.offset.reset"):
        read(spark, broker.bootstrap_servers, topic, **{"kafka.auto.offset.reset": "latest"}).count()
    with pytest.raises(Exception, match="unknown kipkafka write option 'topics'"):
        spark.range(1).select(F.lit(b"x").alias("value")).write.format("kipkafka") \
            .option("kafka.bootstrap.servers", broker.bootstrap_servers).option("topics", topic) \
            .mode("append").save()


def test_assign_and_subscribe_pattern(spark: SparkSession, broker: EmbeddedBroker,
                                      topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3, prefix="pattern-only")
    produce(broker.bootstrap_servers, topic, {0: 10, 1: 20, 2: 30})
    r = spark.read.format("kipkafka").option("kafka.bootstrap.servers", broker.bootstrap_servers)
    assigned = r.option("assign", json.dumps({topic: [0, 2]})).load()
    assert sorted(set(row.partition for row in assigned.select("partition").collect())) == [0, 2]
    assert assigned.count() == 40
    pattern = spark.read.format("kipkafka").option("kafka.bootstrap.servers", broker.bootstrap_servers) \
        .option("subscribePattern", topic.replace("-", ".") + "$").load()
    assert pattern.count() == 60 and {r.topic for r in pattern.select("topic").collect()} == {topic}


def test_poll_timeout_and_fetch_offset_retries(broker: EmbeddedBroker,
                                               topic_factory: Callable[..., str]) -> None:
    from kipconsumer.errors import KafkaError
    from kipconsumer.spark import OffsetRange, read_arrow

    topic = topic_factory(partitions=1)
    produce(broker.bootstrap_servers, topic, {0: 5})
    # a range past the end: the task fails after kafkaConsumer.pollTimeoutMs without a record
    opts = ReadOptions.parse({"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic,
                              "kafkaConsumer.pollTimeoutMs": "1200"}, True)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="kafkaConsumer.pollTimeoutMs=1200"):
        list(read_arrow(opts, OffsetRange(topic, 0, 0, 10)))
    assert 1.0 < time.monotonic() - t0 < 30
    # fetchOffset.numRetries: the driver's offset queries are tried 1 + n times
    dead = ReadOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": topic,
                              "kafka.default.api.timeout.ms": "300", "fetchOffset.numRetries": "2",
                              "fetchOffset.retryIntervalMs": "200"}, True)
    md = Metadata(dead)
    t0 = time.monotonic()
    try:
        with pytest.raises(KafkaError):
            md.latest([(topic, 0)])
        assert time.monotonic() - t0 >= 3 * 0.3 + 2 * 0.2 - 0.05
    finally:
        md.close()
