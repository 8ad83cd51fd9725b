"""The ``kipkafka`` writers (pyspark): every record of a task sent by a KIP-19 ``KafkaProducer``
cached per worker process, flushed and checked before the task reports success."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from kipconsumer.errors import ConfigError
from kipconsumer.spark.errors import KafkaWriteError
from kipconsumer.spark.options import WriteOptions

if TYPE_CHECKING:
    from kipconsumer.producer import KafkaProducer


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
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.conf = opts.kafka
        self.topic = opts.topic
        self.include_headers = opts.include_headers
        names = set(schema.fieldNames())
        if "value" not in names:
            raise ConfigError("kipkafka write: the DataFrame needs a 'value' column (binary or string)")
        if opts.topic is None and "topic" not in names:
            raise ConfigError("kipkafka write: give option 'topic' or a 'topic' column")

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
                headers = _column(batch, "headers") if self.include_headers else None
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


