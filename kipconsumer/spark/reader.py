"""The ``kipkafka`` readers (pyspark): batch and streaming planning on the driver, ``read()`` in
executor Python workers (``batches.read_arrow``)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kipconsumer.spark.batches import read_arrow
from kipconsumer.spark.errors import DataLossError
from kipconsumer.spark.metadata import Metadata
from kipconsumer.spark.offsets import TP, OffsetJson, offsets_from_json, offsets_to_json
from kipconsumer.spark.options import ReadOptions
from kipconsumer.spark.planning import OffsetRange, TriggerPacer, split_ranges, water_fill


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


def input_partitions(opts: ReadOptions, ranges: Sequence[OffsetRange]) -> list[KafkaRange]:
    """Ranges -> Spark input partitions, split by ``minPartitions`` / ``maxRecordsPerPartition``."""
    pieces = split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
    return [KafkaRange(r.topic, r.partition, r.start, r.end) for r in pieces]


class _ReaderBase:
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._md: Metadata | None = None

    @property
    def md(self) -> Metadata:
        if self._md is None:
            self._md = Metadata(self.opts)
        return self._md

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_md"] = None  # driver-side clients never travel to executors
        return state

    def read(self, partition: Any) -> Iterator[Any]:
        if not isinstance(partition, KafkaRange):
            return iter(())
        return read_arrow(self.opts, partition)


class KipKafkaBatchReader(_ReaderBase, DataSourceReader):
    """``spark.read.format("kipkafka")``: one input partition per topic-partition range (or more
    with ``minPartitions`` / ``maxRecordsPerPartition``)."""

    def partitions(self) -> list[KafkaRange]:
        tps = self.md.partitions(strict=True)
        starts = self.md.starting(tps, "earliest")
        ends = self.md.ending(tps)
        return input_partitions(self.opts, [OffsetRange(t, p, starts[(t, p)], ends[(t, p)]) for t, p in tps])


class KipKafkaStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kipkafka")``. Offsets: ``{"topic": {"partition": next_offset}}``."""

    def __init__(self, opts: ReadOptions) -> None:
        super().__init__(opts)
        self._target: dict[TP, int] | None = None
        self._latest: dict[TP, int] | None = None
        self._pacer: TriggerPacer | None = None
        if opts.min_offsets_per_trigger:
            self._pacer = TriggerPacer(opts.min_offsets_per_trigger, opts.max_trigger_delay_ms)
        self.committed: dict[TP, int] = {}

    def initialOffset(self) -> OffsetJson:
        tps = self.md.partitions(strict=False)
        return offsets_to_json(self.md.starting(tps, "earliest"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: the end offsets of now are the target; later records are not read
        (``minOffsetsPerTrigger`` does not hold such a query back)."""
        tps = self.md.partitions(strict=False)
        self._target = self.md.latest(tps)
        self._pacer = None

    def _start_of(self, start: dict[TP, int], tps: Sequence[TP]) -> dict[TP, int]:
        new = [tp for tp in tps if tp not in start]
        out = dict(start)
        if new:  # partitions added since the last batch start at their beginning (as Spark's source)
            out.update(self.md.earliest(new))
        return out

    def latestOffset(self, start: Mapping[str, Any], limit: ReadLimit) -> OffsetJson:
        given = offsets_from_json(start)
        tps = sorted(set(self.md.partitions(strict=False)) | set(given))
        begin = self._start_of(given, tps)
        latest = self.md.latest(tps)
        self._latest = dict(latest)
        if self._target is not None:
            latest = {tp: min(off, self._target.get(tp, begin[tp])) for tp, off in latest.items()}
        end = {tp: max(begin[tp], latest.get(tp, begin[tp])) for tp in tps}
        if self._pacer is not None:
            available = sum(end[tp] - begin[tp] for tp in tps)
            if not self._pacer.should_run(available, time.monotonic() * 1000.0):
                return offsets_to_json(given)  # no new micro-batch yet
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
        ranges = []
        for tp in sorted(e):
            lo, hi = s[tp], e[tp]
            if hi < lo:
                if self.opts.fail_on_data_loss:
                    raise DataLossError(f"kipkafka: offset of {tp[0]}-{tp[1]} went back from {lo} to {hi} "
                                        "(topic recreated or truncated?); set failOnDataLoss=false to go on")
                continue
            ranges.append(OffsetRange(tp[0], tp[1], lo, hi))
        return input_partitions(self.opts, ranges)

    def commit(self, end: Mapping[str, Any]) -> None:
        # Offsets live in Spark's checkpoint; nothing is committed to Kafka. Kept for inspection.
        self.committed = offsets_from_json(end)

    def stop(self) -> None:
        if self._md is not None:
            self._md.close()
            self._md = None
