"""PySpark data source ``kipkafka``: read and write Kafka from Spark through kipconsumer.

Usage::

    from kipconsumer.spark import register
    register(spark)                                   # once per SparkSession
    df = (spark.readStream.format("kipkafka")
          .option("kafka.bootstrap.servers", servers)
          .option("subscribe", "events")
          .option("maxOffsetsPerTrigger", 100000)
          .load())

Options (they mirror Spark's own Kafka source where they apply; see docs/spark.md):

* ``kafka.bootstrap.servers`` (required) and any ``kafka.<name>`` client config, passed to the
  kipconsumer consumer (reads) or producer (writes) without the ``kafka.`` prefix;
* exactly one of ``subscribe`` (comma list of topics), ``subscribePattern`` (regex) or ``assign``
  (JSON ``{"topic": [0, 1]}``);
* ``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or per-partition JSON
  ``{"topic": {"0": 23, "1": -2}}`` (-2 = earliest, -1 = latest); ``endingOffsets`` is for batch
  reads only; defaults: streaming ``latest``, batch ``earliest`` .. ``latest``;
* ``maxOffsetsPerTrigger``: at most this many records per micro-batch, split over the partitions
  with backlog by water-filling (a shallow partition always gets its whole backlog or an equal
  share; a deep one never starves it); ``Trigger.AvailableNow`` honours it;
* ``failOnDataLoss`` (default true): fail if records in the planned range were deleted;
* ``kafkaConsumer.pollTimeoutMs`` (default 120000): fail a task that gets no record for this long.

Schema of reads: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int``. Each Spark input partition is one topic-partition offset
range ``[start, end)``; ``read()`` runs in executor Python workers and yields Arrow record batches
built in C by ``ConsumerRecords.to_arrow()``, stopping exactly at ``end``. Consumers (assign-only,
no group) are cached per worker process and continue where the previous micro-batch stopped.

Offsets live in Spark's checkpoint (the source commits nothing to Kafka), so a query restarted
from its checkpoint replays exactly the uncommitted micro-batches: with a file sink every record
lands exactly once.

Writes (``df.write.format("kipkafka")`` / ``writeStream``) use the KIP-19 ``KafkaProducer``: column
``value`` (binary or string) is required; ``key``, ``topic``, ``partition`` (int), ``headers``
(``array<struct<key: string, value: binary>>``) and ``timestamp`` are optional; option ``topic``
overrides the column. Every send is flushed and checked before the task reports success; any
failed record fails the Spark task.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

try:
    import pyarrow as pa
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        DataSourceStreamArrowWriter,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
    from pyspark.sql.types import StructType
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "kipconsumer.spark needs pyspark>=4.2, pyarrow and pandas<3: "
        "pip install 'pyspark>=4.2' pyarrow 'pandas>=2.2,<3'"
    ) from exc

from kipconsumer.consumer import KafkaConsumer
from kipconsumer.errors import KafkaError
from kipconsumer.structs import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kipconsumer._records import ConsumerRecords
    from kipconsumer.producer import KafkaProducer

__all__ = [
    "register",
    "KipKafkaDataSource",
    "KafkaRange",
    "SCHEMA",
    "water_fill",
    "local_session",
    "consumer_cache_stats",
    "clear_consumer_cache",
    "KafkaWriteError",
    "DataLossError",
]

NAME = "kipkafka"
SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
#: The Arrow schema Spark expects from read() (pyspark's to_arrow_schema of SCHEMA, UTC).
ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
])
_TS_US_UTC = pa.timestamp("us", tz="UTC")

EARLIEST = -2
LATEST = -1
#: Records per executor poll() (a Spark Arrow batch is at least this big when data is there).
DEFAULT_MAX_POLL_RECORDS = 10_000
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_FETCH_MAX_WAIT_MS = 100
#: Consumers kept per executor worker process (least recently used are closed beyond this).
CONSUMER_CACHE_CAPACITY = int(os.environ.get("KIPKAFKA_CONSUMER_CACHE", "64"))

TP = tuple[str, int]
OffsetJson = dict[str, dict[str, int]]


class DataLossError(KafkaError):
    """Records of a planned offset range are gone (retention) and ``failOnDataLoss`` is true."""


class KafkaWriteError(KafkaError):
    """At least one record of a Spark write task was not acknowledged."""


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------
def _opt(options: Mapping[str, str], name: str) -> str | None:
    """Option lookup that ignores case (Spark lower-cases keys; CaseInsensitiveDict or not)."""
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return str(v)
    return None


def _bool_opt(options: Mapping[str, str], name: str, default: bool) -> bool:
    v = _opt(options, name)
    if v is None:
        return default
    if v.strip().lower() in ("true", "1", "yes"):
        return True
    if v.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name} must be true or false, got {v!r}")


def _int_opt(options: Mapping[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    v = _opt(options, name)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"option {name} must be an integer, got {v!r}") from None
    if n < minimum:
        raise ValueError(f"option {name} must be >= {minimum}, got {n}")
    return n


def parse_offsets_spec(value: str | None, default: str, name: str) -> str | dict[TP, int]:
    """``earliest`` / ``latest`` or the per-partition JSON of Spark's Kafka source."""
    if value is None:
        return default
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return v.lower()
    try:
        obj = json.loads(v)
    except json.JSONDecodeError:
        raise ValueError(
            f"option {name} must be 'earliest', 'latest' or JSON like "
            f"{{\"topic\": {{\"0\": 23, \"1\": -2}}}}, got {value!r}") from None
    out: dict[TP, int] = {}
    if not isinstance(obj, dict):
        raise ValueError(f"option {name}: expected a JSON object of topic -> {{partition: offset}}, got {v}")
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise ValueError(
                f"option {name}: topic {topic!r} must map to {{partition: offset}}, got {parts!r}")
        for p, off in parts.items():
            if not isinstance(off, int) or off < -2:
                raise ValueError(f"option {name}: offset of {topic}-{p} must be an int >= -2, got {off!r}")
            out[(str(topic), int(p))] = off
    return out


def _kafka_config(options: Mapping[str, str]) -> dict[str, str]:
    conf = {k[len("kafka."):]: str(v) for k, v in options.items() if k.lower().startswith("kafka.")}
    if not conf.get("bootstrap.servers"):
        raise ValueError("option kafka.bootstrap.servers is required by the kipkafka data source")
    return conf


@dataclass(frozen=True)
class ReadOptions:
    """Validated read options (picklable: travels to executor workers with the reader)."""

    kafka: tuple[tuple[str, str], ...]
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TP, ...] = ()
    starting: str | dict[TP, int] = "latest"
    ending: str | dict[TP, int] = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        conf = _kafka_config(options)
        for bad in ("enable.auto.commit", "auto.offset.reset"):
            if bad in conf:
                raise ValueError(f"option kafka.{bad} is not supported: offsets are managed by Spark "
                                 "(use startingOffsets)")
        subscribe = _opt(options, "subscribe")
        pattern = _opt(options, "subscribePattern")
        assign = _opt(options, "assign")
        given = [n for n, v in (("subscribe", subscribe), ("subscribePattern", pattern), ("assign", assign))
                 if v]
        if len(given) != 1:
            raise ValueError("exactly one of the options subscribe, subscribePattern, assign is required, "
                             f"got {given or 'none'}")
        topics: tuple[str, ...] = ()
        if subscribe:
            topics = tuple(t.strip() for t in subscribe.split(",") if t.strip())
            if not topics:
                raise ValueError(f"option subscribe must list topics, got {subscribe!r}")
        assigned: tuple[TP, ...] = ()
        if assign:
            try:
                obj = json.loads(assign)
                assigned = tuple(sorted((str(t), int(p)) for t, ps in obj.items() for p in ps))
            except (ValueError, AttributeError, TypeError):
                raise ValueError(
                    f"option assign must be JSON like {{\"topic\": [0, 1]}}, got {assign!r}") from None
        if pattern:
            re.compile(pattern)
        starting = parse_offsets_spec(_opt(options, "startingOffsets"), "latest" if streaming else "earliest",
                                      "startingOffsets")
        ending_raw = _opt(options, "endingOffsets")
        if streaming and ending_raw is not None:
            raise ValueError("option endingOffsets is for batch reads only (use Trigger.AvailableNow to stop "
                             "a streaming query at the current end)")
        if not streaming and starting == "latest":
            raise ValueError("startingOffsets=latest is not valid for batch reads")
        ending = parse_offsets_spec(ending_raw, "latest", "endingOffsets")
        if ending == "earliest":
            raise ValueError("endingOffsets=earliest is not valid")
        if isinstance(ending, dict) and any(v == EARLIEST for v in ending.values()):
            raise ValueError("endingOffsets: -2 (earliest) is not a valid ending offset")
        conf.setdefault("max.poll.records", str(DEFAULT_MAX_POLL_RECORDS))
        if "fetch.max.wait.ms" not in conf and "fetch.wait.max.ms" not in conf:
            # a range never waits for new records (it ends at or below the high watermark), but a
            # seek waits for the consumer's in-flight long-poll fetch: keep that short
            conf["fetch.max.wait.ms"] = str(DEFAULT_FETCH_MAX_WAIT_MS)
        conf.setdefault("client.id", "kipkafka-spark")
        conf["enable.auto.commit"] = "false"
        conf["auto.offset.reset"] = "earliest"
        return cls(
            kafka=tuple(sorted(conf.items())),
            subscribe=topics,
            pattern=pattern,
            assign=assigned,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=_int_opt(options, "maxOffsetsPerTrigger", None),
            fail_on_data_loss=_bool_opt(options, "failOnDataLoss", True),
            poll_timeout_ms=_int_opt(options, "kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS) or 0,
        )


# ---------------------------------------------------------------------------------------------
# Offsets: JSON <-> dict, water-filling
# ---------------------------------------------------------------------------------------------
def offsets_to_json(offsets: Mapping[TP, int]) -> OffsetJson:
    out: OffsetJson = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def offsets_from_json(obj: Mapping[str, Any] | None) -> dict[TP, int]:
    out: dict[TP, int] = {}
    for t, parts in (obj or {}).items():
        for p, off in parts.items():
            out[(str(t), int(p))] = int(off)
    return out


def water_fill(backlog: Mapping[TP, int], limit: int, rotate: int = 0) -> dict[TP, int]:
    """How many records each partition may take so that the total is ``min(limit, sum)``.

    Water-filling (max-min fairness): every partition with backlog gets ``min(backlog, level)`` for
    the highest common ``level`` that fits; the few records left over (fewer than the partitions
    still above the level) go one each to the deeper partitions, starting at ``rotate`` so that no
    partition is always last. A shallow partition is thus never starved by a deep one.
    """
    alloc = {k: 0 for k in backlog}
    keys = sorted(k for k, b in backlog.items() if b > 0)
    if limit <= 0 or not keys:
        return alloc
    if sum(backlog[k] for k in keys) <= limit:
        for k in keys:
            alloc[k] = backlog[k]
        return alloc
    by_depth = sorted(keys, key=lambda k: (backlog[k], k))
    n = len(by_depth)
    remaining = limit
    level = 0
    for i, k in enumerate(by_depth):
        need = (backlog[k] - level) * (n - i)
        if need <= remaining:
            remaining -= need
            level = backlog[k]
            continue
        inc = remaining // (n - i)
        level += inc
        remaining -= inc * (n - i)
        break
    for k in keys:
        alloc[k] = min(backlog[k], level)
    deep = [k for k in keys if backlog[k] > level]
    if deep:
        first = rotate % len(deep)
        for j in range(remaining):
            alloc[deep[(first + j) % len(deep)]] += 1
    return alloc


# ---------------------------------------------------------------------------------------------
# Driver side: metadata and watermarks
# ---------------------------------------------------------------------------------------------
class _Metadata:
    """Partition discovery (librdkafka metadata through confluent-kafka, which carries the library)
    and watermarks (an assign-only kipconsumer). Created lazily, never pickled."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._consumer: KafkaConsumer | None = None
        self._meta: Any = None

    def _conf(self) -> dict[str, str]:
        return dict(self.opts.kafka)

    def consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = KafkaConsumer(self._conf())
        return self._consumer

    def _meta_client(self) -> Any:
        if self._meta is None:
            import confluent_kafka

            from kipconsumer.config import consumer_settings

            rd = dict(consumer_settings(self._conf()).rdkafka)
            for k in ("enable.auto.offset.store", "enable.partition.eof", "enable.auto.commit",
                      "auto.commit.interval.ms", "auto.offset.reset"):
                rd.pop(k, None)
            rd.setdefault("group.id", "kipkafka-metadata")  # required by the handle; never joins
            self._meta = confluent_kafka.Consumer(rd)
        return self._meta

    def partitions(self, strict: bool) -> list[TP]:
        o = self.opts
        if o.assign:
            return list(o.assign)
        client = self._meta_client()
        timeout = 30.0
        out: list[TP] = []
        if o.pattern:
            md = client.list_topics(timeout=timeout)
            rx = re.compile(o.pattern)
            for name, t in md.topics.items():
                if rx.fullmatch(name) and t.error is None:
                    out.extend((name, p) for p in t.partitions)
            return sorted(out)
        for topic in o.subscribe:
            md = client.list_topics(topic, timeout=timeout)
            t = md.topics.get(topic)
            if t is None or t.error is not None or not t.partitions:
                if strict:
                    err = t.error if t is not None else "not in metadata"
                    raise ValueError(f"kipkafka: topic {topic!r} not found ({err})")
                continue
            out.extend((topic, p) for p in t.partitions)
        return sorted(out)

    def earliest(self, tps: Sequence[TP]) -> dict[TP, int]:
        r = self.consumer().beginning_offsets([TopicPartition(t, p) for t, p in tps])
        return {(tp.topic, tp.partition): off for tp, off in r.items()}

    def latest(self, tps: Sequence[TP]) -> dict[TP, int]:
        r = self.consumer().end_offsets([TopicPartition(t, p) for t, p in tps])
        return {(tp.topic, tp.partition): off for tp, off in r.items()}

    def resolve(self, spec: str | dict[TP, int], tps: Sequence[TP], default: str) -> dict[TP, int]:
        """Concrete offsets of ``tps`` for ``earliest`` / ``latest`` / per-partition JSON (-2/-1
        resolved; partitions missing from the JSON use ``default``)."""
        kinds: dict[TP, int] = {}
        for tp in tps:
            if isinstance(spec, dict):
                kinds[tp] = spec.get(tp, EARLIEST if default == "earliest" else LATEST)
            else:
                kinds[tp] = EARLIEST if spec == "earliest" else LATEST
        need_e = [tp for tp, k in kinds.items() if k == EARLIEST]
        need_l = [tp for tp, k in kinds.items() if k == LATEST]
        e = self.earliest(need_e) if need_e else {}
        lt = self.latest(need_l) if need_l else {}
        return {tp: (e[tp] if k == EARLIEST else lt[tp] if k == LATEST else k) for tp, k in kinds.items()}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._meta is not None:
            self._meta.close()
            self._meta = None


# ---------------------------------------------------------------------------------------------
# Input partitions and the executor-side reader
# ---------------------------------------------------------------------------------------------
class KafkaRange(InputPartition):
    """One Spark input partition: offsets ``[start, end)`` of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


@dataclass
class _Entry:
    consumer: KafkaConsumer
    tp: TopicPartition
    next_offset: int | None = None          # where the records returned so far stop
    pending: tuple[ConsumerRecords, int] | None = None   # polled records at/after next_offset


_cache: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
_cache_lock = threading.Lock()
_stats = {"created": 0, "reused": 0, "continued": 0, "seeks": 0, "closed": 0}


def consumer_cache_stats() -> dict[str, int]:
    """Counters of this process's consumer cache: created, reused, continued (a micro-batch
    that started where the cached consumer stopped: no seek, prefetched records kept), seeks,
    closed, cached."""
    with _cache_lock:
        return dict(_stats, cached=len(_cache))


def _close_quietly(c: KafkaConsumer) -> None:
    try:
        c.close()
    except Exception:  # pragma: no cover - best effort
        pass
    _stats["closed"] += 1


def _acquire(conf: tuple[tuple[str, str], ...], topic: str, partition: int) -> _Entry:
    key = (conf, topic, partition)
    with _cache_lock:
        entry = _cache.pop(key, None)
        if entry is not None:
            _stats["reused"] += 1
            return entry
        _stats["created"] += 1
    return _Entry(KafkaConsumer(dict(conf)), TopicPartition(topic, partition))


def _release(conf: tuple[tuple[str, str], ...], entry: _Entry) -> None:
    key = (conf, entry.tp.topic, entry.tp.partition)
    evicted: list[_Entry] = []
    with _cache_lock:
        old = _cache.pop(key, None)
        if old is not None:
            evicted.append(old)
        _cache[key] = entry
        while len(_cache) > CONSUMER_CACHE_CAPACITY:
            evicted.append(_cache.popitem(last=False)[1])
    for e in evicted:
        _close_quietly(e.consumer)


def clear_consumer_cache() -> None:
    """Closes every cached consumer of this process."""
    with _cache_lock:
        entries = list(_cache.values())
        _cache.clear()
    for e in entries:
        _close_quietly(e.consumer)


def _seek(entry: _Entry, offset: int) -> None:
    c = entry.consumer
    if c.assignment() != {entry.tp}:
        c.assign([entry.tp])
    deadline = time.monotonic() + 30.0
    while True:
        try:
            c.seek(entry.tp, offset)
            break
        except KafkaError as e:
            # librdkafka refuses a seek until the fresh assignment has started (ERR__STATE)
            if getattr(e, "code", None) != "_STATE" or time.monotonic() > deadline:
                raise
            time.sleep(0.002)
    entry.next_offset = offset
    entry.pending = None
    _stats["seeks"] += 1


def _chunks(opts: ReadOptions, rng: KafkaRange) -> Iterator[tuple[ConsumerRecords, int, int]]:
    """Yields ``(records, lo, hi)``: records[lo:hi] are the next records of ``rng`` in offset
    order, ending exactly at ``rng.end`` (a poll that straddles the end is cut; its tail is kept
    with the cached consumer for the next micro-batch)."""
    start, end = rng.start, rng.end
    if end <= start:
        return
    entry = _acquire(opts.kafka, rng.topic, rng.partition)
    done = broken = False
    try:
        if entry.next_offset == start:
            _stats["continued"] += 1
        else:
            _seek(entry, start)
        expected = start
        pending, entry.pending = entry.pending, None
        entry.next_offset = None  # unknown until the range completes
        last_progress = time.monotonic()
        timeout_s = opts.poll_timeout_ms / 1000.0
        while True:
            if pending is not None:
                recs, lo = pending
                pending = None
            else:
                recs = entry.consumer.poll(timeout=min(1.0, timeout_s))
                lo = 0
                if not recs:
                    if time.monotonic() - last_progress > timeout_s:
                        raise TimeoutError(
                            f"kipkafka: no record of {rng.topic}-{rng.partition} at offset {expected} within "
                            f"kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms} (range {start}..{end})")
                    continue
                last_progress = time.monotonic()
            n = len(recs)
            if recs[lo].offset < expected:  # never expected after a seek; be exact anyway
                lo = bisect.bisect_left(_OffsetView(recs), expected, lo, n)
                if lo == n:
                    continue
            first = recs[lo].offset
            if first > expected and opts.fail_on_data_loss:
                low = entry.consumer.beginning_offsets([entry.tp])[entry.tp]
                if low > expected:
                    raise DataLossError(
                        f"kipkafka: records {expected}..{min(low, end) - 1} of {rng.topic}-{rng.partition} "
                        f"were deleted before Spark read them (log start offset {low}); set "
                        "failOnDataLoss=false to skip them")
            last = recs[n - 1].offset
            if last < end:
                hi = n
            else:
                hi = bisect.bisect_left(_OffsetView(recs), end, lo, n)
            if hi > lo:
                yield recs, lo, hi
                expected = recs[hi - 1].offset + 1
            if hi < n:
                entry.pending = (recs, hi)
                break
            if last >= end - 1:
                break
        done = True
        entry.next_offset = end
    except GeneratorExit:  # the task stopped early (e.g. a LIMIT): the consumer stays usable
        raise
    except BaseException:
        broken = True
        raise
    finally:
        if not done:
            entry.pending = None
            entry.next_offset = None
        if broken:  # an error: do not hand this consumer to the next task
            _close_quietly(entry.consumer)
        else:
            _release(opts.kafka, entry)
        _dump_stats()


def _dump_stats() -> None:
    """With ``KIPKAFKA_STATS_DIR`` set, each worker process writes its consumer-cache counters to
    ``<dir>/<pid>.json`` after every range (for tests and benchmarks; executors are processes)."""
    d = os.environ.get("KIPKAFKA_STATS_DIR")
    if not d:
        return
    try:
        tmp = os.path.join(d, f".{os.getpid()}.tmp")
        with open(tmp, "w") as fh:
            json.dump(consumer_cache_stats(), fh)
        os.replace(tmp, os.path.join(d, f"{os.getpid()}.json"))
    except OSError:  # pragma: no cover - diagnostics only
        pass


class _OffsetView(Sequence[int]):
    """``records[i].offset`` as a sequence, for bisect."""

    def __init__(self, recs: ConsumerRecords) -> None:
        self._recs = recs

    def __len__(self) -> int:
        return len(self._recs)

    def __getitem__(self, i: Any) -> Any:
        return self._recs[i].offset


def to_spark_batch(rb: Any) -> Any:
    """``ConsumerRecords.to_arrow(timestamp_type=True)`` -> a batch of the ``kipkafka`` schema."""
    return pa.RecordBatch.from_arrays(
        [rb.column("key"), rb.column("value"), rb.column("topic"), rb.column("partition"),
         rb.column("offset"), rb.column("timestamp").cast(_TS_US_UTC), rb.column("timestamp_type")],
        schema=ARROW_SCHEMA,
    )


def _concat(batches: list[Any]) -> Any:
    if len(batches) == 1:
        return batches[0]
    concat = getattr(pa, "concat_batches", None)
    if concat is not None:
        return concat(batches)
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]  # pragma: no cover


def read_arrow(opts: ReadOptions, rng: Any) -> Iterator[Any]:
    """Arrow record batches (``kipkafka`` schema) of one input partition. Polls are coalesced
    into batches of at least ``max.poll.records`` rows (fewer Arrow IPC round trips to Spark)."""
    if not isinstance(rng, KafkaRange):
        return
    target = int(dict(opts.kafka).get("max.poll.records", DEFAULT_MAX_POLL_RECORDS))
    held: list[Any] = []
    rows = 0
    for recs, lo, hi in _chunks(opts, rng):
        rb = recs.to_arrow(timestamp_type=True)
        if lo or hi < rb.num_rows:
            rb = rb.slice(lo, hi - lo)
        held.append(to_spark_batch(rb))
        rows += hi - lo
        if rows >= target:
            yield _concat(held)
            held, rows = [], 0
    if held:
        yield _concat(held)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def read_tuples(opts: ReadOptions, rng: Any) -> Iterator[tuple[Any, ...]]:
    """The same records as plain Python tuples (a reference point for benchmarks)."""
    if not isinstance(rng, KafkaRange):
        return
    from datetime import timedelta

    for recs, lo, hi in _chunks(opts, rng):
        for i in range(lo, hi):
            r = recs[i]
            ts = r.timestamp
            yield (r.key, r.value, r.topic, r.partition, r.offset,
                   _EPOCH + timedelta(milliseconds=ts) if ts >= 0 else None, r.timestamp_type)


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------
class _ReaderBase:
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._md: _Metadata | None = None

    @property
    def md(self) -> _Metadata:
        if self._md is None:
            self._md = _Metadata(self.opts)
        return self._md

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_md"] = None  # driver-side clients never travel to executors
        return state

    def read(self, partition: Any) -> Iterator[Any]:
        return read_arrow(self.opts, partition)


class KipKafkaBatchReader(_ReaderBase, DataSourceReader):
    """``spark.read.format("kipkafka")``: one input partition per topic-partition range."""

    def partitions(self) -> list[KafkaRange]:
        tps = self.md.partitions(strict=True)
        starts = self.md.resolve(self.opts.starting, tps, "earliest")
        ends = self.md.resolve(self.opts.ending, tps, "latest")
        out = []
        for tp in tps:
            s, e = starts[tp], ends[tp]
            if e > s:
                out.append(KafkaRange(tp[0], tp[1], s, e))
        return out


class KipKafkaStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kipkafka")``. Offsets: ``{"topic": {"partition": next_offset}}``."""

    def __init__(self, opts: ReadOptions) -> None:
        super().__init__(opts)
        self._target: dict[TP, int] | None = None
        self._latest: dict[TP, int] | None = None
        self.committed: dict[TP, int] = {}

    def initialOffset(self) -> OffsetJson:
        tps = self.md.partitions(strict=False)
        return offsets_to_json(self.md.resolve(self.opts.starting, tps, "earliest"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: the end offsets of now are the target; later records are not read."""
        tps = self.md.partitions(strict=False)
        self._target = self.md.latest(tps)

    def _start_of(self, start: dict[TP, int], tps: Sequence[TP]) -> dict[TP, int]:
        new = [tp for tp in tps if tp not in start]
        out = dict(start)
        if new:  # partitions added since the last batch start at their beginning (as Spark's source)
            out.update(self.md.earliest(new))
        return out

    def latestOffset(self, start: Mapping[str, Any], limit: ReadLimit) -> OffsetJson:
        begin = offsets_from_json(start)
        tps = sorted(set(self.md.partitions(strict=False)) | set(begin))
        begin = self._start_of(begin, tps)
        latest = self.md.latest(tps)
        self._latest = dict(latest)
        if self._target is not None:
            latest = {tp: min(off, self._target.get(tp, begin[tp])) for tp, off in latest.items()}
        end = {tp: max(begin[tp], latest.get(tp, begin[tp])) for tp in tps}
        max_rows = getattr(limit, "max_rows", None)
        if isinstance(max_rows, int):
            backlog = {tp: end[tp] - begin[tp] for tp in tps}
            alloc = water_fill(backlog, max_rows, rotate=sum(begin.values()))
            end = {tp: begin[tp] + alloc[tp] for tp in tps}
        return offsets_to_json(end)

    def reportLatestOffset(self) -> OffsetJson | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> list[KafkaRange]:
        s = offsets_from_json(start)
        e = offsets_from_json(end)
        missing = [tp for tp in e if tp not in s]
        if missing:
            s.update(self.md.earliest(missing))
        out = []
        for tp in sorted(e):
            lo, hi = s[tp], e[tp]
            if hi < lo:
                if self.opts.fail_on_data_loss:
                    raise DataLossError(f"kipkafka: offset of {tp[0]}-{tp[1]} went back from {lo} to {hi} "
                                        "(topic recreated or truncated?); set failOnDataLoss=false to go on")
                continue
            if hi > lo:
                out.append(KafkaRange(tp[0], tp[1], lo, hi))
        return out

    def commit(self, end: Mapping[str, Any]) -> None:
        # Offsets live in Spark's checkpoint; nothing to commit to Kafka. Kept for inspection.
        self.committed = offsets_from_json(end)

    def stop(self) -> None:
        if self._md is not None:
            self._md.close()
            self._md = None


# ---------------------------------------------------------------------------------------------
# Writers
# ---------------------------------------------------------------------------------------------
@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    records: int = 0
    topics: dict[str, int] = field(default_factory=dict)


_producers: dict[tuple[tuple[str, str], ...], KafkaProducer] = {}
_producers_lock = threading.Lock()


def _producer(conf: tuple[tuple[str, str], ...]) -> KafkaProducer:
    from kipconsumer.producer import KafkaProducer

    with _producers_lock:
        p = _producers.get(conf)
        if p is None or p.closed:
            p = KafkaProducer(dict(conf))
            _producers[conf] = p
        return p


def _drop_producer(conf: tuple[tuple[str, str], ...], p: KafkaProducer) -> None:
    with _producers_lock:
        if _producers.get(conf) is p:
            del _producers[conf]
    try:
        p.close(0)
    except Exception:  # pragma: no cover - best effort
        pass


def _column(batch: Any, name: str) -> list[Any] | None:
    if name not in batch.schema.names:
        return None
    col: list[Any] = batch.column(name).to_pylist()
    return col


def _check_futures(futures: list[Future[Any]], sent: int) -> list[Future[Any]]:
    """Raises on the first failed future; returns the ones still pending."""
    pending = []
    for f in futures:
        if not f.done():
            pending.append(f)
            continue
        exc = f.exception()
        if exc is not None:
            raise KafkaWriteError(
                f"kipkafka: a record of this task was not written ({sent} sent): "
                f"{type(exc).__name__}: {exc}") from exc  # the cause's class: Spark shows one traceback
    return pending


class _WriterBase:
    def __init__(self, conf: tuple[tuple[str, str], ...], topic: str | None, schema: StructType) -> None:
        self.conf = conf
        self.topic = topic
        names = set(schema.fieldNames())
        if "value" not in names:
            raise ValueError("kipkafka write: the DataFrame needs a 'value' column (binary or string)")
        if topic is None and "topic" not in names:
            raise ValueError("kipkafka write: give option 'topic' or a 'topic' column")

    def _write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        p = _producer(self.conf)
        futures: list[Future[Any]] = []
        sent = 0
        per_topic: dict[str, int] = {}
        try:
            for batch in iterator:
                values = _column(batch, "value") or []
                keys = _column(batch, "key")
                topics = _column(batch, "topic")
                parts = _column(batch, "partition")
                headers = _column(batch, "headers")
                stamps = _column(batch, "timestamp")
                for i in range(batch.num_rows):
                    topic = self.topic if self.topic is not None else (topics[i] if topics else None)
                    if not topic:
                        raise KafkaWriteError(f"kipkafka: row {sent} has no topic (null 'topic' column and "
                                              "no 'topic' option)")
                    hdrs = None
                    if headers is not None and headers[i]:
                        hdrs = [(h["key"], h["value"]) for h in headers[i]]
                    ts = None
                    if stamps is not None and stamps[i] is not None:
                        ts = int(stamps[i].timestamp() * 1000)
                    futures.append(p.send(topic, value=values[i], key=keys[i] if keys else None,
                                          partition=parts[i] if parts else None, headers=hdrs, timestamp=ts))
                    sent += 1
                    per_topic[topic] = per_topic.get(topic, 0) + 1
                    if len(futures) >= 50_000:
                        futures = _check_futures(futures, sent)
            p.flush()
            pending = _check_futures(futures, sent)
            if pending:  # flush() returned, so every future is done: never expected
                raise KafkaWriteError(f"kipkafka: {len(pending)} record(s) still pending after flush()")
        except BaseException:
            # a failed task must not leave records of its own in a producer that a retry reuses
            _drop_producer(self.conf, p)
            raise
        return KafkaCommitMessage(records=sent, topics=per_topic)


class KipKafkaWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("kipkafka")``: at-least-once, every record acknowledged or the task fails."""

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass


class KipKafkaStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """``writeStream.format("kipkafka")``: each micro-batch's records acknowledged before it commits."""

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# The data source
# ---------------------------------------------------------------------------------------------
class KipKafkaDataSource(DataSource):
    """The ``kipkafka`` data source (see the module docstring for options)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> KipKafkaBatchReader:
        return KipKafkaBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> KipKafkaStreamReader:
        return KipKafkaStreamReader(ReadOptions.parse(self.options, streaming=True))

    def _write_conf(self) -> tuple[tuple[str, str], ...]:
        conf = _kafka_config(self.options)
        conf.setdefault("client.id", "kipkafka-spark")
        return tuple(sorted(conf.items()))

    def writer(self, schema: StructType, overwrite: bool) -> KipKafkaWriter:
        return KipKafkaWriter(self._write_conf(), _opt(self.options, "topic"), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KipKafkaStreamWriter:
        return KipKafkaStreamWriter(self._write_conf(), _opt(self.options, "topic"), schema)


def register(spark: SparkSession) -> None:
    """Registers the ``kipkafka`` data source with ``spark``."""
    spark.dataSource.register(KipKafkaDataSource)


def local_session(app_name: str = "kipkafka", cores: int = 2, shuffle_partitions: int = 2,
                  extra: Mapping[str, str] | None = None) -> SparkSession:
    """A ``local[cores]`` SparkSession whose Python workers run this interpreter, with
    ``kipkafka`` registered. Small defaults for a laptop / CI machine."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
         .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", "1g")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.streaming.stopActiveRunOnRestart", "true"))
    for k, v in (extra or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark

