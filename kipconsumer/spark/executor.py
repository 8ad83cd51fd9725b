"""Executor side of the ``kipkafka`` source (no pyspark): reading one offset range with an
assign-only kipconsumer that stops exactly at the range's end, and the per-process cache of those
consumers (a micro-batch that starts where the cached consumer stopped continues without a seek)."""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kipconsumer.consumer import KafkaConsumer
from kipconsumer.errors import KafkaError
from kipconsumer.spark.errors import DataLossError
from kipconsumer.spark.options import ReadOptions
from kipconsumer.structs import TopicPartition

if TYPE_CHECKING:
    from kipconsumer._records import ConsumerRecords

#: Consumers kept per executor worker process (least recently used are closed beyond this).
CONSUMER_CACHE_CAPACITY = int(os.environ.get("KIPKAFKA_CONSUMER_CACHE", "64"))


class RangeLike(Protocol):
    """Offsets ``[start, end)`` of one topic-partition (``OffsetRange``, ``KafkaRange``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


@dataclass
class _Entry:
    consumer: KafkaConsumer
    tp: TopicPartition
    next_offset: int | None = None          # where the records returned so far stop
    pending: tuple[ConsumerRecords, int] | None = None   # polled records at/after next_offset


_cache: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
_cache_lock = threading.Lock()
_stats = {"created": 0, "reused": 0, "continued": 0, "seeks": 0, "closed": 0}


#: Seconds this process spent creating consumers, seeking and in poll() (waiting for and taking
#: fetched records), and building the Arrow batches handed to Spark (batches.read_arrow).
timings = {"create_s": 0.0, "seek_s": 0.0, "poll_s": 0.0, "arrow_s": 0.0}


def consumer_cache_stats() -> dict[str, float]:
    """Counters of this process's consumer cache: created, reused, continued (a micro-batch
    that started where the cached consumer stopped: no seek, prefetched records kept), seeks,
    closed, cached; and the seconds of ``timings``."""
    with _cache_lock:
        return dict(_stats, cached=len(_cache), **timings)


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
    t0 = time.perf_counter()
    entry = _Entry(KafkaConsumer(dict(conf)), TopicPartition(topic, partition))
    timings["create_s"] += time.perf_counter() - t0
    return entry


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
    t0 = time.perf_counter()
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
    timings["seek_s"] += time.perf_counter() - t0


def read_range(opts: ReadOptions, rng: RangeLike) -> Iterator[tuple[ConsumerRecords, int, int]]:
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
                t0 = time.perf_counter()
                recs = entry.consumer.poll(timeout=min(1.0, timeout_s))
                timings["poll_s"] += time.perf_counter() - t0
                lo = 0
                if not recs:
                    # the range's last offsets may hold no record for this reader: transaction markers,
                    # or records of aborted transactions under read_committed; the consumer's position
                    # has stepped over them
                    if entry.consumer.position(entry.tp, timeout=timeout_s) >= end:
                        break
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

