"""The pure parts of ``kipconsumer.spark`` (options, offsets JSON, planning), without Spark: they
import neither pyspark nor pyarrow (checked in a fresh interpreter) and need no JVM or broker."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from kipconsumer.errors import ConfigError
from kipconsumer.spark.errors import OffsetForTimestampError
from kipconsumer.spark.offsets import offsets_from_json, offsets_to_json, parse_offsets_spec
from kipconsumer.spark.options import READ_OPTIONS, ReadOptions, WriteOptions, parse_duration_ms
from kipconsumer.spark.planning import (
    OffsetRange,
    TriggerPacer,
    offsets_at_timestamps,
    split_ranges,
    timestamps_for,
    water_fill,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}


def test_pure_modules_import_neither_pyspark_nor_pyarrow() -> None:
    code = ("import sys; import kipconsumer.spark.options, kipconsumer.spark.offsets, "
            "kipconsumer.spark.planning, kipconsumer.spark.metadata, kipconsumer.spark.executor; "
            "print(sorted(m for m in ('pyspark', 'pyarrow', 'py4j') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out


# ------------------------------------------------------------------------------ options
def test_every_read_option_of_sparks_source_is_accepted() -> None:
    opts = ReadOptions.parse({
        **BASE, "startingOffsetsByTimestamp": '{"t": {"0": 1000}}', "startingTimestamp": "5",
        "startingOffsetsByTimestampStrategy": "latest", "endingOffsetsByTimestamp": '{"t": {"0": 9}}',
        "endingTimestamp": "9", "failOnDataLoss": "false", "kafkaConsumer.pollTimeoutMs": "5000",
        "fetchOffset.numRetries": "0", "fetchOffset.retryIntervalMs": "1", "minPartitions": "4",
        "maxRecordsPerPartition": "100", "groupIdPrefix": "app", "includeHeaders": "true"}, False)
    assert opts.starting_timestamp == 5 and opts.starting_by_timestamp == {("t", 0): 1000}
    assert opts.ending_timestamp == 9 and opts.ending_by_timestamp == {("t", 0): 9}
    assert opts.starting_timestamp_strategy == "latest" and opts.fail_on_data_loss is False
    assert (opts.min_partitions, opts.max_records_per_partition, opts.include_headers) == (4, 100, True)
    assert (opts.fetch_offset_retries, opts.fetch_offset_retry_interval_ms) == (0, 1)
    assert opts.poll_timeout_ms == 5000
    assert dict(opts.kafka)["group.id"].startswith("app-")
    s = ReadOptions.parse({**BASE, "minOffsetsPerTrigger": "10", "maxTriggerDelay": "2s",
                           "maxOffsetsPerTrigger": "100"}, True)
    assert (s.min_offsets_per_trigger, s.max_trigger_delay_ms, s.max_offsets_per_trigger) == (10, 2000, 100)
    assert ReadOptions.parse(BASE, True).max_trigger_delay_ms == 15 * 60_000  # Spark's default 15m
    # Spark lower-cases keys
    assert ReadOptions.parse({k.lower(): v for k, v in {**BASE, "minPartitions": "3"}.items()}, True) \
        .min_partitions == 3


def test_group_id_rules() -> None:
    assert "group.id" not in dict(ReadOptions.parse(BASE, True).kafka)  # no group unless asked
    a = dict(ReadOptions.parse({**BASE, "groupIdPrefix": "p"}, True).kafka)["group.id"]
    b = dict(ReadOptions.parse({**BASE, "groupIdPrefix": "p"}, True).kafka)["group.id"]
    assert a != b and a.startswith("p-")  # a fresh group per query, as Spark
    given = ReadOptions.parse({**BASE, "groupIdPrefix": "p", "kafka.group.id": "mine"}, True)
    assert dict(given.kafka)["group.id"] == "mine"  # kafka.group.id wins over the prefix


@pytest.mark.parametrize("extra,match", [
    ({"includeHeader": "true"},
     r"unknown kipkafka read option 'includeHeader': did you mean 'includeHeaders'"),
    ({"minpartition": "2"}, r"did you mean 'minPartitions'.*supported: assign, subscribe"),
    ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset.*startingOffsets"),
    ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit"),
    ({"kafka.value.deserializer": "x"}, "kafka.value.deserializer.*binary"),
    ({"kafka.max.poll.recods": "5"}, "max.poll.recods.*did you mean 'max.poll.records'"),
    ({"endingOffsets": "latest"}, "endingOffsets is for batch reads only"),
    ({"endingTimestamp": "5"}, "endingTimestamp is for batch reads only"),
    ({"startingOffsets": "{bad"}, "startingOffsets"),
    ({"startingOffsets": "soon"}, "startingOffsets must be 'earliest', 'latest' or JSON"),
    ({"startingOffsetsByTimestamp": '{"t": {"0": -1}}'}, "startingOffsetsByTimestamp.*>= 0"),
    ({"startingTimestamp": "yesterday"}, "startingTimestamp must be an integer"),
    ({"startingOffsetsByTimestampStrategy": "earliest"}, "'error' or 'latest'"),
    ({"minPartitions": "0"}, "minPartitions must be >= 1"),
    ({"maxRecordsPerPartition": "x"}, "maxRecordsPerPartition must be an integer"),
    ({"maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
    ({"includeHeaders": "maybe"}, "includeHeaders must be true or false"),
    ({"subscribe": "", "subscribePattern": "("}, "subscribePattern is not a valid regex"),
    ({"groupIdPrefix": " "}, "groupIdPrefix must not be empty"),
])
def test_bad_read_options_raise_config_error_naming_them(extra: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ReadOptions.parse({**BASE, **extra}, True)


def test_read_option_rules() -> None:
    with pytest.raises(ConfigError, match="bootstrap"):
        ReadOptions.parse({"subscribe": "t"}, True)
    with pytest.raises(ConfigError, match="exactly one"):
        ReadOptions.parse({"kafka.bootstrap.servers": "x:1"}, True)
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger is for streaming reads only"):
        ReadOptions.parse({**BASE, "maxOffsetsPerTrigger": "5"}, False)
    with pytest.raises(ConfigError, match="latest is not valid for batch"):
        ReadOptions.parse({**BASE, "startingOffsets": "latest"}, False)
    with pytest.raises(ConfigError, match="-2"):
        ReadOptions.parse({**BASE, "endingOffsets": '{"t": {"0": -2}}'}, False)
    assert isinstance(ConfigError("x"), ValueError)
    assert len(READ_OPTIONS) == len(set(READ_OPTIONS)) == 21  # besides kafka.*


def test_write_options() -> None:
    w = WriteOptions.parse({"kafka.bootstrap.servers": "x:1", "topic": "out", "checkpointLocation": "/c"})
    assert (w.topic, w.include_headers, dict(w.kafka)["bootstrap.servers"]) == ("out", True, "x:1")
    assert WriteOptions.parse({"kafka.bootstrap.servers": "x:1", "includeHeaders": "true"}).include_headers
    with pytest.raises(ConfigError, match=r"includeHeaders=false is refused.*df.drop\('headers'\)"):
        WriteOptions.parse({"kafka.bootstrap.servers": "x:1", "includeHeaders": "false"})
    with pytest.raises(ConfigError, match="unknown kipkafka write option 'topics': did you mean 'topic'"):
        WriteOptions.parse({"kafka.bootstrap.servers": "x:1", "topics": "a"})
    with pytest.raises(ConfigError, match="kafka.value.serializer"):
        WriteOptions.parse({"kafka.bootstrap.servers": "x:1", "kafka.value.serializer": "s"})
    with pytest.raises(ConfigError, match="linger"):
        WriteOptions.parse({"kafka.bootstrap.servers": "x:1", "kafka.linger.ms": "-4"})


@pytest.mark.parametrize(("java", "python"), [
    (r"t-\p{Lower}+", "t-[a-z]+"),
    (r"t-\P{Digit}", "t-[^0-9]"),
    (r"[\p{Alpha}_]+-\p{IsDigit}", "[a-zA-Z_]+-[0-9]"),
    (r"a\Q.b*\E-.*\z", r"a\.b\*-.*\Z"),
    ("(?i)Events-.*", "(?i)Events-.*"),
    ("events-[^.]*", "events-[^.]*"),
])
def test_subscribe_pattern_java_syntax_is_translated(java: str, python: str) -> None:
    assert ReadOptions.parse({**BASE, "subscribe": "", "subscribePattern": java}, True).pattern == python


@pytest.mark.parametrize(("java", "match"), [
    ("t-[a-z&&[^o]]+", r"class intersection \(&&\)"),
    ("t-[a-z[0-9]]", "nested class"),
    ("t-(?i)MAIN", r"inline flag \(\?i\) after the start"),
    (r"\p{L}+", r"class \\p\{L\}"),
    (r"[\P{Alpha}]", "negated class"),
    (r"t\h", r"\\h is Java regex syntax"),
])
def test_subscribe_pattern_java_only_syntax_is_refused_by_name(java: str, match: str) -> None:
    with pytest.raises(ConfigError, match=f"subscribePattern .*{match}"):
        ReadOptions.parse({**BASE, "subscribe": "", "subscribePattern": java}, True)


def test_durations() -> None:
    assert [parse_duration_ms(v, "d") for v in ("250", "250ms", "3s", "2m", "2min", "1h", "1d")] == [
        250, 250, 3000, 120_000, 120_000, 3_600_000, 86_400_000]


# ------------------------------------------------------------------------------ offsets JSON
def test_offset_json_round_trip_and_specs() -> None:
    offs = {("b", 1): 5, ("a", 0): 7, ("a", 10): 0}
    js = offsets_to_json(offs)
    assert list(js) == ["a", "b"] and js["a"] == {"0": 7, "10": 0}
    assert offsets_from_json(js) == offs
    assert parse_offsets_spec(None, "latest", "x") == "latest"
    assert parse_offsets_spec(" Earliest ", "latest", "x") == "earliest"
    assert parse_offsets_spec('{"t": {"0": 23, "1": -2}}', "latest", "x") == {("t", 0): 23, ("t", 1): -2}
    with pytest.raises(ConfigError, match="int >= -2"):
        parse_offsets_spec('{"t": {"0": -3}}', "latest", "startingOffsets")


# ------------------------------------------------------------------------------ planning
def test_water_fill_shallow_partitions_are_never_starved() -> None:
    backlog = {("t", 0): 10_000, ("t", 1): 5, ("t", 2): 7, ("t", 3): 0}
    alloc = water_fill(backlog, 100)
    assert alloc[("t", 1)] == 5 and alloc[("t", 2)] == 7 and alloc[("t", 3)] == 0
    assert alloc[("t", 0)] == 88


def test_water_fill_equal_share_and_rotating_remainder() -> None:
    backlog = {("t", p): 1000 for p in range(3)}
    a = water_fill(backlog, 10, rotate=0)
    b = water_fill(backlog, 10, rotate=1)
    assert sorted(a.values()) == [3, 3, 4] and sum(b.values()) == 10
    assert a != b  # the extra record moves on
    # limit below the number of partitions: each still gets a turn over successive batches
    seen = set()
    for r in range(3):
        seen |= {k for k, v in water_fill(backlog, 1, rotate=r).items() if v}
    assert seen == set(backlog)
    # everything fits: whole backlog
    assert water_fill({("t", 0): 3, ("t", 1): 4}, 100) == {("t", 0): 3, ("t", 1): 4}


def test_water_fill_matches_max_min_fairness() -> None:
    rnd = random.Random(5)
    for _ in range(200):
        backlog = {("t", p): rnd.choice([0, 1, 3, 50, 400, 10_000]) for p in range(rnd.randint(1, 8))}
        limit = rnd.randint(1, 2000)
        alloc = water_fill(backlog, limit, rotate=rnd.randint(0, 9))
        assert sum(alloc.values()) == min(limit, sum(backlog.values()))
        for k, v in alloc.items():
            if v < backlog[k]:
                assert all(v >= other - 1 for other in alloc.values())


def _check_cover(ranges: list[OffsetRange], pieces: list[OffsetRange]) -> None:
    """The pieces cover every non-empty range exactly: contiguous, no gap, no overlap."""
    for r in ranges:
        mine = [p for p in pieces if (p.topic, p.partition) == (r.topic, r.partition)]
        if r.end <= r.start:
            assert not mine
            continue
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))
        assert all(p.end > p.start for p in mine)


def test_split_ranges_min_partitions_proportional_to_depth() -> None:
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 50, 150), OffsetRange("t", 2, 7, 7)]
    pieces = split_ranges(ranges, min_partitions=11)
    _check_cover(ranges, pieces)
    assert sum(1 for p in pieces if p.partition == 0) == 10  # round(1000/1100*11)
    assert sum(1 for p in pieces if p.partition == 1) == 1
    assert sorted({p.end - p.start for p in pieces if p.partition == 0}) == [100]
    # enough ranges already: unchanged
    assert split_ranges(ranges, min_partitions=2) == ranges[:2]
    assert split_ranges(ranges) == ranges[:2]


def test_split_ranges_max_records_per_partition() -> None:
    ranges = [OffsetRange("t", 0, 10, 35), OffsetRange("u", 3, 0, 4)]
    pieces = split_ranges(ranges, max_records_per_partition=10)
    _check_cover(ranges, pieces)
    assert [(p.start, p.end) for p in pieces if p.topic == "t"] == [(10, 19), (19, 27), (27, 35)]
    assert [(p.start, p.end) for p in pieces if p.topic == "u"] == [(0, 4)]
    rnd = random.Random(3)
    for _ in range(200):
        rs = [OffsetRange("t", i, s, s + rnd.choice([0, 1, 2, 9, 100, 5000]))
              for i, s in enumerate(rnd.choices(range(100), k=rnd.randint(1, 6)))]
        mrp = rnd.choice([None, 1, 7, 1000])
        ps = split_ranges(rs, rnd.choice([None, 1, 5, 40]), mrp)
        _check_cover(rs, ps)
        if mrp:
            assert all(p.end - p.start <= mrp for p in ps)


def test_offsets_at_timestamps_strategies() -> None:
    tps = [("t", 0), ("t", 1)]
    stamps = {("t", 0): 100, ("t", 1): 100}
    found = {("t", 0): 4, ("t", 1): None}
    latest = {("t", 0): 10, ("t", 1): 20}
    assert offsets_at_timestamps(tps, found, latest, missing="latest", option="o", timestamps=stamps) == {
        ("t", 0): 4, ("t", 1): 20}
    with pytest.raises(OffsetForTimestampError, match=r"t-1 has no record at or after timestamp 100"):
        offsets_at_timestamps(tps, found, latest, missing="error", option="o", timestamps=stamps)


def test_timestamps_for() -> None:
    tps = [("t", 0), ("t", 1)]
    assert timestamps_for(tps, None, 7, "startingTimestamp") == {("t", 0): 7, ("t", 1): 7}
    assert timestamps_for(tps, {("t", 0): 1, ("t", 1): 2}, None, "x") == {("t", 0): 1, ("t", 1): 2}
    with pytest.raises(ConfigError, match="startingOffsetsByTimestamp must give a timestamp for every "
                                          "partition read; missing: t-1"):
        timestamps_for(tps, {("t", 0): 1}, None, "startingOffsetsByTimestamp")


def test_trigger_pacer() -> None:
    p = TriggerPacer(min_offsets=10, max_delay_ms=1000)
    assert p.should_run(1, 0)          # the first batch always runs
    assert not p.should_run(5, 500)    # below the minimum, within the delay
    assert p.should_run(10, 600)       # the minimum is there
    assert not p.should_run(3, 1500)
    assert p.should_run(3, 1600)       # the delay passed since the last run (600)
    assert not p.should_run(0, 99_999)  # nothing to read: no batch


def test_options_lower_cased_keys_and_kafka_passthrough() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1"}
    with pytest.raises(ValueError, match="bootstrap"):
        ReadOptions.parse({"subscribe": "t"}, True)
    with pytest.raises(ValueError, match="exactly one"):
        ReadOptions.parse(base, True)
    with pytest.raises(ValueError, match="endingOffsets"):
        ReadOptions.parse({**base, "subscribe": "t", "endingOffsets": "latest"}, True)
    with pytest.raises(ValueError, match="startingOffsets"):
        ReadOptions.parse({**base, "subscribe": "t", "startingOffsets": "{bad"}, True)
    with pytest.raises(ValueError, match="maxOffsetsPerTrigger"):
        ReadOptions.parse({**base, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, True)
    o = ReadOptions.parse({**base, "subscribe": "a, b", "startingoffsets": '{"a": {"0": 5, "1": -2}}',
                           "maxoffsetspertrigger": "7", "kafka.fetch.max.wait.ms": "100"}, True)
    assert o.subscribe == ("a", "b") and o.starting == {("a", 0): 5, ("a", 1): -2}
    assert o.max_offsets_per_trigger == 7 and ("fetch.max.wait.ms", "100") in o.kafka
