"""Driver-side planning of the ``kipkafka`` source, pure functions (no pyspark, no broker):
how many records each partition may take per micro-batch (water-filling), how offset ranges are
split into Spark input partitions (``minPartitions``, ``maxRecordsPerPartition``), offsets from
timestamp lookups, and when ``minOffsetsPerTrigger`` lets a micro-batch run."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from kipconsumer.errors import ConfigError
from kipconsumer.spark.errors import OffsetForTimestampError
from kipconsumer.spark.offsets import TP


class OffsetRange(NamedTuple):
    """Offsets ``[start, end)`` of one topic-partition: what one Spark input partition reads."""

    topic: str
    partition: int
    start: int
    end: int


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


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Non-empty ``ranges`` cut into Spark input partitions with exact, contiguous boundaries.

    * ``max_records_per_partition``: no piece holds more records than this;
    * ``min_partitions``: when there are fewer pieces than this, each range is cut into
      ``max(1, round(size / total * min_partitions))`` pieces (Spark's Kafka source's rule: deep
      ranges get more pieces, every range at least one).

    A range cut in ``k`` pieces gets pieces of ``size // k`` or ``size // k + 1`` records.
    """
    live = [r for r in ranges if r.end > r.start]
    counts = {r: 1 for r in live}
    if max_records_per_partition:
        counts = {r: max(1, math.ceil((r.end - r.start) / max_records_per_partition)) for r in live}
    if min_partitions and sum(counts.values()) < min_partitions:
        total = sum(r.end - r.start for r in live)
        for r in live:
            share = max(1, round((r.end - r.start) / total * min_partitions))
            counts[r] = min(r.end - r.start, max(counts[r], share))
    out: list[OffsetRange] = []
    for r in live:
        k = counts[r]
        size = r.end - r.start
        start = r.start
        for i in range(k):
            end = start + size // k + (1 if i < size % k else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def offsets_at_timestamps(tps: Iterable[TP], found: Mapping[TP, int | None], latest: Mapping[TP, int],
                          *, missing: str, option: str, timestamps: Mapping[TP, int]) -> dict[TP, int]:
    """Concrete offsets from timestamp lookups (``KafkaConsumer.offsets_for_times``).

    ``found[tp]`` is the earliest offset at or after the partition's timestamp, or None when no
    record is that late; then ``missing="latest"`` takes ``latest[tp]`` and ``missing="error"``
    raises ``OffsetForTimestampError`` naming the partition and the timestamp (Spark's
    ``startingOffsetsByTimestampStrategy``; an ending timestamp without a match is always latest).
    """
    out: dict[TP, int] = {}
    for tp in tps:
        off = found.get(tp)
        if off is None:
            if missing != "latest":
                raise OffsetForTimestampError(
                    f"kipkafka: {option}: {tp[0]}-{tp[1]} has no record at or after timestamp "
                    f"{timestamps[tp]}; set startingOffsetsByTimestampStrategy=latest to start there "
                    "at the latest offset")
            off = latest[tp]
        out[tp] = off
    return out


def timestamps_for(tps: Iterable[TP], per_partition: Mapping[TP, int] | None, every: int | None,
                   option: str) -> dict[TP, int]:
    """The timestamp of each partition: ``every`` (``startingTimestamp``) for all, else the JSON of
    ``option``, which must name exactly these partitions (as Spark's Kafka source requires)."""
    tps = list(tps)
    if every is not None:
        return {tp: every for tp in tps}
    spec = dict(per_partition or {})
    missing = sorted(set(tps) - set(spec))
    if missing:
        names = ", ".join(f"{t}-{p}" for t, p in missing)
        raise ConfigError(f"option {option} must give a timestamp for every partition read; missing: {names}")
    return {tp: spec[tp] for tp in tps}


class TriggerPacer:
    """``minOffsetsPerTrigger`` + ``maxTriggerDelay``: a micro-batch runs when at least
    ``min_offsets`` records are available, or when ``max_delay_ms`` passed since the last one ran
    (the first one always runs), as in Spark's Kafka source."""

    def __init__(self, min_offsets: int, max_delay_ms: int) -> None:
        self.min_offsets = min_offsets
        self.max_delay_ms = max_delay_ms
        self.last_run_ms: float | None = None

    def should_run(self, available: int, now_ms: float) -> bool:
        if available <= 0:
            return False
        if (self.last_run_ms is None or available >= self.min_offsets
                or now_ms - self.last_run_ms >= self.max_delay_ms):
            self.last_run_ms = now_ms
            return True
        return False
