"""The options of the ``kipkafka`` source and sink, checked in this one place (no pyspark).

Every option of Spark's Kafka source is either supported here or refused with a ``ConfigError``
that names it (docs/spark.md has the table); an unknown option is refused with a did-you-mean
suggestion and the list of supported ones. Spark lower-cases option keys: lookups ignore case.
``kafka.<name>`` options are the kipconsumer client config, checked by ``kipconsumer.config``.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from kipconsumer._validate import check_topic_name, suggest
from kipconsumer.config import consumer_settings, is_secret, producer_settings
from kipconsumer.errors import ConfigError
from kipconsumer.spark.javaregex import java_pattern_to_python
from kipconsumer.spark.offsets import (
    EARLIEST,
    INT32_MAX,
    INT64_MAX,
    TP,
    parse_assign_spec,
    parse_offsets_spec,
    parse_timestamps_spec,
    shown,
)
from kipconsumer.spark.topicpattern import compile_topic_pattern

#: Records per executor poll() (a Spark Arrow batch is at least this big when data is there).
DEFAULT_MAX_POLL_RECORDS = 10_000
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_FETCH_MAX_WAIT_MS = 100
DEFAULT_MAX_TRIGGER_DELAY = "15m"

#: Read options (besides ``kafka.*``), as Spark spells them.
READ_OPTIONS = (
    "assign", "subscribe", "subscribePattern",
    "startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp",
    "failOnDataLoss", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "minPartitions", "maxRecordsPerPartition", "groupIdPrefix", "includeHeaders",
)
#: Write options (besides ``kafka.*``); Spark hands a streaming sink its checkpointLocation too.
WRITE_OPTIONS = ("topic", "includeHeaders", "checkpointLocation")

#: Options of Spark's Kafka source that this source refuses, with why.
_REFUSED = {
    "kafka.auto.offset.reset": "offsets are managed by Spark: use startingOffsets",
    "kafka.enable.auto.commit": "offsets live in Spark's checkpoint: nothing is committed to Kafka",
    "kafka.key.deserializer": "keys are read as binary: cast them in the query",
    "kafka.value.deserializer": "values are read as binary: cast them in the query",
    "kafka.key.serializer": "keys are written from the 'key' column (binary or string)",
    "kafka.value.serializer": "values are written from the 'value' column (binary or string)",
    "kafka.interceptor.classes": "Java interceptors do not apply to a librdkafka client",
}

_BATCH_ONLY = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
_STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")

_TIME_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
#: An integer option's text: ASCII digits with an optional sign (no '1_000', no other scripts' digits).
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def check_names(options: Mapping[str, str], allowed: tuple[str, ...], what: str) -> None:
    """Raises ``ConfigError`` for a refused or unknown option, naming it and the allowed ones."""
    known = {name.lower(): name for name in allowed}
    for key in options:
        low = str(key).lower()
        for refused, why in _REFUSED.items():
            if low == refused:
                raise ConfigError(f"kipkafka {what} option {refused!r} is not supported: {why}")
        if low.startswith("kafka.") or low in known:
            continue
        hint = suggest(low, known)
        for lowered, spelled in known.items():
            hint = hint.replace(repr(lowered), repr(spelled))
        raise ConfigError(
            f"unknown kipkafka {what} option {key!r}{hint}; supported: "
            f"{', '.join(allowed)} and kafka.<client config>")


def _get(low: Mapping[str, str], name: str) -> str | None:
    return low.get(name.lower())


def _bool(low: Mapping[str, str], name: str, default: bool) -> bool:
    v = _get(low, name)
    if v is None:
        return default
    if v.strip().lower() in ("true", "1", "yes"):
        return True
    if v.strip().lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name} must be true or false, got {v!r}")


def _int(low: Mapping[str, str], name: str, default: int | None, minimum: int = 1,
         maximum: int = INT64_MAX) -> int | None:
    """An integer option in ``minimum..maximum`` (Spark's Long options: up to 2^63 - 1)."""
    v = _get(low, name)
    if v is None:
        return default
    text = v.strip()
    if _INTEGER.fullmatch(text) is None or len(text) > 25:
        raise ConfigError(f"option {name} must be an integer in {minimum}..{maximum} written with the digits "
                          f"0-9, got {shown(v)}")
    n = int(text)
    if n < minimum:
        raise ConfigError(f"option {name} must be >= {minimum}, got {n}")
    if n > maximum:
        raise ConfigError(f"option {name} must be <= {maximum}, got {n}")
    return n


def parse_duration_ms(value: str, name: str) -> int:
    """Spark's time strings: ``500ms``, ``30s``, ``15m``, ``1h``, ``2d``; a bare number is ms. At most
    2^63 - 1 ms (a Java long)."""
    m = re.fullmatch(r"\s*([0-9]{1,25})\s*(ms|s|m|min|h|d)?\s*", value.lower())
    if m is None:
        raise ConfigError(f"option {name} must be a duration like 500ms, 30s, 15m or 1h (digits 0-9; units "
                          f"ms, s, m, min, h, d), got {shown(value)}")
    ms = int(m.group(1)) * _TIME_UNITS_MS[m.group(2) or "ms"]
    if ms > INT64_MAX:
        raise ConfigError(f"option {name} must be at most {INT64_MAX} ms, got {shown(value)}")
    return ms


def _options_repr(self: object) -> str:
    """dataclass-style repr with the values of secret ``kafka.*`` options masked (``config.is_secret``);
    the object itself keeps them (it is pickled to the executors, which need them)."""
    parts = []
    for f in dataclasses.fields(self):  # type: ignore[arg-type]
        value = getattr(self, f.name)
        if f.name == "kafka":
            value = tuple((k, "***" if is_secret(k) else v) for k, v in value)
        parts.append(f"{f.name}={value!r}")
    return f"{type(self).__name__}({', '.join(parts)})"


def kafka_config(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without the prefix; ``kafka.bootstrap.servers`` is required."""
    conf = {str(k)[len("kafka."):]: str(v) for k, v in options.items() if str(k).lower().startswith("kafka.")}
    if not conf.get("bootstrap.servers"):
        raise ConfigError("option kafka.bootstrap.servers is required by the kipkafka data source")
    return conf


@dataclass(frozen=True)
class ReadOptions:
    """Validated read options (picklable: travels to executor workers with the reader)."""

    kafka: tuple[tuple[str, str], ...]
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None  # subscribePattern as a Python re pattern (javaregex), matched by topicpattern
    assign: tuple[TP, ...] = ()
    starting: str | dict[TP, int] = "latest"
    starting_by_timestamp: dict[TP, int] | None = None
    starting_timestamp: int | None = None
    starting_timestamp_strategy: str = "error"
    ending: str | dict[TP, int] = "latest"
    ending_by_timestamp: dict[TP, int] | None = None
    ending_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10

    __repr__ = _options_repr

    @property
    def starts_by_timestamp(self) -> bool:
        return self.starting_timestamp is not None or self.starting_by_timestamp is not None

    @property
    def ends_by_timestamp(self) -> bool:
        return self.ending_timestamp is not None or self.ending_by_timestamp is not None

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        check_names(options, READ_OPTIONS, "read")
        low = _lower(options)
        conf = kafka_config(options)
        for name in _BATCH_ONLY if streaming else _STREAM_ONLY:
            if _get(low, name) is not None:
                kind = "batch" if streaming else "streaming"
                hint = (" (use Trigger.AvailableNow to stop a streaming query at the current end)"
                        if streaming else "")
                raise ConfigError(f"option {name} is for {kind} reads only{hint}")
        subscribe = _get(low, "subscribe")
        pattern = _get(low, "subscribePattern")
        assign = _get(low, "assign")
        given = [n for n, v in (("subscribe", subscribe), ("subscribePattern", pattern), ("assign", assign))
                 if v]
        if len(given) != 1:
            raise ConfigError("exactly one of the options subscribe, subscribePattern, assign is required, "
                              f"got {given or 'none'}")
        topics: tuple[str, ...] = ()
        if subscribe:
            topics = tuple(t.strip() for t in subscribe.split(",") if t.strip())
            if not topics:
                raise ConfigError(f"option subscribe must list topics, got {shown(subscribe)}")
            for t in topics:
                check_topic_name(t, "option subscribe", error=ConfigError)
        assigned: tuple[TP, ...] = ()
        if assign:
            assigned = parse_assign_spec(assign)
        if pattern:
            # a Java regex in Spark's connector: translated to Python's re or refused by name, then
            # compiled once here for the driver's linear-time matcher (refusals surface now)
            pattern = java_pattern_to_python(pattern)
            compile_topic_pattern(pattern)
        starting = parse_offsets_spec(_get(low, "startingOffsets"), "latest" if streaming else "earliest",
                                      "startingOffsets")
        if not streaming and starting == "latest":
            raise ConfigError("option startingOffsets=latest is not valid for batch reads")
        ending = parse_offsets_spec(_get(low, "endingOffsets"), "latest", "endingOffsets")
        if ending == "earliest":
            raise ConfigError("option endingOffsets=earliest is not valid")
        if isinstance(ending, dict) and any(v == EARLIEST for v in ending.values()):
            raise ConfigError("option endingOffsets: -2 (earliest) is not a valid ending offset")
        raw = _get(low, "startingOffsetsByTimestamp")
        starting_by_ts = parse_timestamps_spec(raw, "startingOffsetsByTimestamp") if raw else None
        raw = _get(low, "endingOffsetsByTimestamp")
        ending_by_ts = parse_timestamps_spec(raw, "endingOffsetsByTimestamp") if raw else None
        strategy = (_get(low, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise ConfigError(f"option startingOffsetsByTimestampStrategy must be 'error' or 'latest', "
                              f"got {strategy!r}")
        delay_raw = _get(low, "maxTriggerDelay")
        prefix = _get(low, "groupIdPrefix")
        if "group.id" not in conf and prefix is not None:
            if not prefix.strip():
                raise ConfigError("option groupIdPrefix must not be empty")
            # Spark's rule: a fresh group id per query, so queries never share offsets or quotas
            conf["group.id"] = f"{prefix}-{uuid.uuid4()}"
        conf.setdefault("max.poll.records", str(DEFAULT_MAX_POLL_RECORDS))
        if "fetch.max.wait.ms" not in conf and "fetch.wait.max.ms" not in conf:
            # a range never waits for new records (it ends at or below the high watermark), but a
            # seek waits for the consumer's in-flight long-poll fetch: keep that short
            conf["fetch.max.wait.ms"] = str(DEFAULT_FETCH_MAX_WAIT_MS)
        conf.setdefault("client.id", "kipkafka-spark")
        conf["enable.auto.commit"] = "false"
        conf["auto.offset.reset"] = "earliest"
        consumer_settings(conf)  # the client config, checked where every config is (ConfigError)
        return cls(
            kafka=tuple(sorted(conf.items())),
            subscribe=topics,
            pattern=pattern,
            assign=assigned,
            starting=starting,
            starting_by_timestamp=starting_by_ts,
            starting_timestamp=_int(low, "startingTimestamp", None, minimum=0),
            starting_timestamp_strategy=strategy,
            ending=ending,
            ending_by_timestamp=ending_by_ts,
            ending_timestamp=_int(low, "endingTimestamp", None, minimum=0),
            max_offsets_per_trigger=_int(low, "maxOffsetsPerTrigger", None),
            min_offsets_per_trigger=_int(low, "minOffsetsPerTrigger", None),
            max_trigger_delay_ms=parse_duration_ms(delay_raw or DEFAULT_MAX_TRIGGER_DELAY, "maxTriggerDelay"),
            min_partitions=_int(low, "minPartitions", None, maximum=INT32_MAX),
            max_records_per_partition=_int(low, "maxRecordsPerPartition", None),
            include_headers=_bool(low, "includeHeaders", False),
            fail_on_data_loss=_bool(low, "failOnDataLoss", True),
            poll_timeout_ms=_int(low, "kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS) or 0,
            fetch_offset_retries=_int(low, "fetchOffset.numRetries", 3, minimum=0, maximum=INT32_MAX) or 0,
            # slept between retries: bounded as a sleep can be
            fetch_offset_retry_interval_ms=_int(low, "fetchOffset.retryIntervalMs", 10, minimum=0,
                                                maximum=INT32_MAX) or 0,
        )


@dataclass(frozen=True)
class WriteOptions:
    """Validated write options: the producer config, the ``topic`` option. A ``headers`` column is
    written whenever present, as Spark's Kafka sink does (``includeHeaders=true`` is accepted,
    ``false`` refused by name)."""

    kafka: tuple[tuple[str, str], ...]
    topic: str | None = None
    include_headers: bool = True

    __repr__ = _options_repr

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        check_names(options, WRITE_OPTIONS, "write")
        low = _lower(options)
        conf = kafka_config(options)
        conf.setdefault("client.id", "kipkafka-spark")
        producer_settings(conf)
        topic = _get(low, "topic")
        if topic is not None:
            check_topic_name(topic, "write option topic", error=ConfigError)
        if not _bool(low, "includeHeaders", True):
            # Spark's Kafka sink has no includeHeaders option: it writes a headers column whenever the
            # DataFrame has one, whatever the option says. Honouring false would write other records
            # than format("kafka"); ignoring it would write headers the job asked not to write.
            raise ConfigError(
                "write option includeHeaders=false is refused: Spark's Kafka sink ignores it and writes "
                "the headers column whenever there is one; to write records without headers, drop the "
                "column (df.drop('headers'))")
        return cls(kafka=tuple(sorted(conf.items())), topic=topic, include_headers=True)
