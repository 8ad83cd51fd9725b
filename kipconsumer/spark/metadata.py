"""Driver-side broker queries of the ``kipkafka`` source (no pyspark): partition discovery with
librdkafka metadata (through confluent-kafka, which carries the library), watermarks and
offsets by timestamp with an assign-only kipconsumer. Created lazily, never pickled."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kipconsumer.consumer import KafkaConsumer
from kipconsumer.errors import ConfigError, KafkaError
from kipconsumer.spark.offsets import EARLIEST, LATEST, TP
from kipconsumer.spark.options import ReadOptions
from kipconsumer.spark.planning import offsets_at_timestamps, timestamps_for
from kipconsumer.spark.topicpattern import compile_topic_pattern
from kipconsumer.structs import TopicPartition

T = TypeVar("T")


class Metadata:
    """The driver's view of the source's partitions and their offsets."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._consumer: KafkaConsumer | None = None
        self._meta: Any = None
        # the metadata client's error_cb: its latest errors (confluent-kafka's KafkaError objects)
        self._meta_errors: deque[Any] = deque(maxlen=16)

    def _conf(self) -> dict[str, str]:
        return dict(self.opts.kafka)

    def consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = KafkaConsumer(self._conf())
        return self._consumer

    def _retrying(self, query: Callable[[], T]) -> T:
        """``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``: offset queries are retried
        on a broker error."""
        for attempt in range(self.opts.fetch_offset_retries + 1):
            try:
                return query()
            except KafkaError:
                if attempt >= self.opts.fetch_offset_retries:
                    raise
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000.0)
        raise AssertionError("unreachable")  # pragma: no cover

    def _meta_client(self) -> Any:
        if self._meta is None:
            import confluent_kafka

            from kipconsumer.config import consumer_settings

            rd = dict(consumer_settings(self._conf()).rdkafka)
            for k in ("enable.auto.offset.store", "enable.partition.eof", "enable.auto.commit",
                      "auto.commit.interval.ms", "auto.offset.reset"):
                rd.pop(k, None)
            rd.setdefault("group.id", "kipkafka-metadata")  # required by the handle; never joins
            self._meta = confluent_kafka.Consumer({**rd, "error_cb": self._meta_errors.append})
        return self._meta

    def _list_topics(self, topic: str | None, timeout: float) -> Any:
        """librdkafka metadata (of ``topic``, or all), asked in 1 s slices up to ``timeout``: a refused
        login or TLS handshake between them raises its typed error (kipconsumer._security_errors)
        instead of a transport error after ``timeout``."""
        from kipconsumer._security_errors import security_error

        client = self._meta_client()
        deadline = time.monotonic() + timeout
        while True:
            try:
                return client.list_topics(topic, timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except Exception:
                client.poll(0)  # serves error_cb
                errors = list(self._meta_errors)
                self._meta_errors.clear()
                for err in errors:
                    sec = security_error(err.name(), err.str(), what="kipkafka: partition metadata")
                    if sec is not None:
                        raise sec from None
                if time.monotonic() >= deadline:
                    raise

    def partitions(self, strict: bool) -> list[TP]:
        from kipconsumer._security_errors import security_error

        o = self.opts
        if o.assign:
            return list(o.assign)
        timeout = 30.0
        out: list[TP] = []
        if o.pattern:
            md = self._list_topics(None, timeout)
            rx = compile_topic_pattern(o.pattern)  # linear time: no backtracking on any topic name
            for name, t in md.topics.items():
                if t.error is None and rx.fullmatch(name):
                    out.extend((name, p) for p in t.partitions)
            return sorted(out)
        for topic in o.subscribe:
            md = self._list_topics(topic, timeout)
            t = md.topics.get(topic)
            if t is not None and t.error is not None:
                # a topic the ACLs refuse is no missing topic: its typed error, also when not strict
                sec = security_error(t.error.name(), t.error.str(), what="kipkafka: partition metadata",
                                     topics=(topic,))
                if sec is not None:
                    raise sec
            if t is None or t.error is not None or not t.partitions:
                if strict:
                    err = t.error if t is not None else "not in metadata"
                    raise ConfigError(f"kipkafka: topic {topic!r} of option subscribe not found ({err})")
                continue
            out.extend((topic, p) for p in t.partitions)
        return sorted(out)

    def earliest(self, tps: Sequence[TP]) -> dict[TP, int]:
        r = self._retrying(lambda: self.consumer().beginning_offsets([TopicPartition(t, p) for t, p in tps]))
        return {(tp.topic, tp.partition): off for tp, off in r.items()}

    def latest(self, tps: Sequence[TP]) -> dict[TP, int]:
        r = self._retrying(lambda: self.consumer().end_offsets([TopicPartition(t, p) for t, p in tps]))
        return {(tp.topic, tp.partition): off for tp, off in r.items()}

    def for_times(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        """Earliest offset at or after each partition's timestamp (None: no such record)."""
        query = {TopicPartition(t, p): ts for (t, p), ts in timestamps.items()}
        r = self._retrying(lambda: self.consumer().offsets_for_times(query))
        return {(tp.topic, tp.partition): (None if a is None else a.offset) for tp, a in r.items()}

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

    def starting(self, tps: Sequence[TP], default: str) -> dict[TP, int]:
        """Start offsets: by timestamp (``startingTimestamp`` > ``startingOffsetsByTimestamp``) or by
        ``startingOffsets``, Spark's order of precedence."""
        o = self.opts
        if not o.starts_by_timestamp:
            return self.resolve(o.starting, tps, default)
        option = "startingTimestamp" if o.starting_timestamp is not None else "startingOffsetsByTimestamp"
        stamps = timestamps_for(tps, o.starting_by_timestamp, o.starting_timestamp, option)
        found = self.for_times(stamps)
        latest = self.latest(list(tps)) if any(v is None for v in found.values()) else {}
        return offsets_at_timestamps(tps, found, latest, missing=o.starting_timestamp_strategy,
                                     option=option, timestamps=stamps)

    def ending(self, tps: Sequence[TP]) -> dict[TP, int]:
        """End offsets of a batch read: by timestamp (``endingTimestamp`` > ``endingOffsetsByTimestamp``;
        no record that late: latest) or by ``endingOffsets``."""
        o = self.opts
        if not o.ends_by_timestamp:
            return self.resolve(o.ending, tps, "latest")
        option = "endingTimestamp" if o.ending_timestamp is not None else "endingOffsetsByTimestamp"
        stamps = timestamps_for(tps, o.ending_by_timestamp, o.ending_timestamp, option)
        found = self.for_times(stamps)
        latest = self.latest(list(tps))
        return offsets_at_timestamps(tps, found, latest, missing="latest", option=option, timestamps=stamps)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._meta is not None:
            self._meta.close()
            self._meta = None
