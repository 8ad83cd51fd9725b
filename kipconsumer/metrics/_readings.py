"""What the exporters export: the metric table and the reading of registered clients.

Each client's ``metrics()`` is read when the exporter collects (a Prometheus scrape, an OpenTelemetry
collection), on the collecting thread; nothing runs on the clients' hot paths. Every client's
``metrics()`` may be called from any thread (consumers and share consumers read native counters
without the owner lock, the producer's counters are guarded by its core, the Pipeline's are best
effort), so the exporters read the clients directly rather than a snapshot published by the owner.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("kipconsumer.metrics")

CONSUMER = ("client_id", "group")
PARTITION = ("client_id", "group", "topic", "partition")
PRODUCER = ("client_id",)
BROKER = ("client_id", "client_type", "broker")


@dataclass(frozen=True)
class Metric:
    """One exported metric: its Prometheus name without the prefix (counters without ``_total``,
    which the exposition adds), its OpenTelemetry instrument name and unit, kind (``counter`` or
    ``gauge``), label names, help text and the messaging operation it counts (OpenTelemetry)."""

    prom: str
    otel: str
    unit: str
    kind: str
    labels: tuple[str, ...]
    help: str
    #: ``messaging.operation.name`` for the semantic conventions' metrics, which require it
    operation: str = ""


def _m(prom: str, otel: str, unit: str, kind: str, labels: tuple[str, ...], help: str) -> Metric:
    operation = {"messaging.client.consumed.messages": "poll", "messaging.client.sent.messages": "send"}
    return Metric(prom, otel, unit, kind, labels, help, operation.get(otel, ""))


_STATS = " (librdkafka statistics: needs statistics.interval.ms > 0)"

#: Every metric, keyed by the name the readers below use.
METRICS: dict[str, Metric] = {
    # KafkaConsumer / AsyncKafkaConsumer (and a Pipeline's consumer)
    "consumer_records": _m("consumer_records", "messaging.client.consumed.messages",
        "{message}", "counter", CONSUMER,
        "Records returned by poll()"),
    "consumer_polls": _m("consumer_polls", "kipconsumer.consumer.polls",
        "{call}", "counter", CONSUMER,
        "poll() calls"),
    "consumer_poll_time": _m("consumer_poll_seconds", "kipconsumer.consumer.poll.time",
        "s", "counter", CONSUMER,
        "Time spent inside poll(), summed; mean poll latency = rate(this) / "
        "rate(kipconsumer_consumer_polls_total)"),
    "consumer_rebalances": _m("consumer_rebalances", "kipconsumer.consumer.rebalances",
        "{rebalance}", "counter", CONSUMER,
        "Assignments served"),
    "consumer_rebalance_time": _m("consumer_rebalance_seconds", "kipconsumer.consumer.rebalance.time",
        "s", "counter", CONSUMER,
        "Time spent serving rebalance events (assign, revoke, lost; the "
        "rebalance listener included), summed"),
    "consumer_commit_failures": _m("consumer_commit_failures", "kipconsumer.consumer.commit.failures",
        "{commit}", "counter", CONSUMER,
        "Offset commits refused (sync or async)"),
    "consumer_poll_interval_expiries": _m(
        "consumer_poll_interval_expiries", "kipconsumer.consumer.poll_interval.expiries",
        "{event}", "counter", CONSUMER,
        "Times the member left the group for max.poll.interval.ms"),
    "consumer_assigned_partitions": _m(
        "consumer_assigned_partitions", "kipconsumer.consumer.assigned_partitions",
        "{partition}", "gauge", CONSUMER,
        "Partitions assigned"),
    "consumer_buffered_records": _m("consumer_buffered_records", "kipconsumer.consumer.buffered.records",
        "{message}", "gauge", CONSUMER,
        "Records in the fetch buffer"),
    "consumer_buffered_bytes": _m("consumer_buffered_bytes", "kipconsumer.consumer.buffered.size",
        "By", "gauge", CONSUMER,
        "Bytes in the fetch buffer"),
    "consumer_since_poll": _m(
        "consumer_time_since_last_poll_seconds", "kipconsumer.consumer.time_since_last_poll",
        "s", "gauge", CONSUMER,
        "Time since the application's last poll()"),
    "consumer_lag": _m("consumer_lag_records", "kipconsumer.consumer.lag",
        "{message}", "gauge", PARTITION,
        "Records between the partition's position and its high watermark (last "
        "stable offset with read_committed)"),
    "consumer_fetched_records": _m("consumer_fetched_records", "kipconsumer.consumer.fetched.messages",
        "{message}", "counter", CONSUMER,
        "Records fetched from brokers" + _STATS),
    "consumer_fetched_bytes": _m("consumer_fetched_bytes", "kipconsumer.consumer.fetched.size",
        "By", "counter", CONSUMER,
        "Record bytes fetched from brokers" + _STATS),
    # KafkaShareConsumer / AsyncKafkaShareConsumer
    "share_records": _m("share_consumer_records_consumed", "messaging.client.consumed.messages",
        "{message}", "counter", CONSUMER,
        "Records returned by a share consumer's poll()"),
    "share_polls": _m("share_consumer_polls", "kipconsumer.share_consumer.polls",
        "{call}", "counter", CONSUMER,
        "poll() calls"),
    "share_acknowledged": _m("share_consumer_records_acknowledged", "kipconsumer.share_consumer.acknowledged",
        "{message}", "counter", CONSUMER,
        "Records acknowledged (ACCEPT, RELEASE, REJECT)"),
    "share_ack_commits": _m(
        "share_consumer_acknowledgement_commits", "kipconsumer.share_consumer.acknowledgement.commits",
        "{partition}", "counter", CONSUMER,
        "Per-partition acknowledgement commit outcomes the broker reported"),
    "share_ack_commit_failures": _m(
        "share_consumer_acknowledgement_commit_failures",
        "kipconsumer.share_consumer.acknowledgement.commit.failures",
        "{partition}", "counter", CONSUMER,
        "Per-partition acknowledgement commits that failed"),
    "share_buffered_records": _m(
        "share_consumer_buffered_records", "kipconsumer.share_consumer.buffered.records",
        "{message}", "gauge", CONSUMER,
        "Records fetched and not yet returned"),
    "share_unacknowledged": _m(
        "share_consumer_unacknowledged_records", "kipconsumer.share_consumer.unacknowledged",
        "{message}", "gauge", CONSUMER,
        "Records returned and not acknowledged yet (explicit mode)"),
    "share_rebalances": _m("share_consumer_rebalances", "kipconsumer.share_consumer.rebalances",
        "{rebalance}", "counter", CONSUMER,
        "Share group rebalances" + _STATS),
    "share_fetched_bytes": _m("share_consumer_fetched_bytes", "kipconsumer.share_consumer.fetched.size",
        "By", "counter", CONSUMER,
        "Record bytes fetched from brokers" + _STATS),
    # KafkaProducer / AsyncKafkaProducer (and a Pipeline's producer)
    "producer_sent": _m("producer_records", "messaging.client.sent.messages",
        "{message}", "counter", PRODUCER,
        "Records handed to send()"),
    "producer_delivered": _m("producer_records_delivered", "kipconsumer.producer.delivered",
        "{message}", "counter", PRODUCER,
        "Records the brokers acknowledged"),
    "producer_failed": _m("producer_delivery_failures", "kipconsumer.producer.delivery.failures",
        "{message}", "counter", PRODUCER,
        "Records whose delivery failed (timeouts included)"),
    "producer_timed_out": _m("producer_delivery_timeouts", "kipconsumer.producer.delivery.timeouts",
        "{message}", "counter", PRODUCER,
        "Records not acknowledged within delivery.timeout.ms"),
    "producer_in_flight": _m("producer_in_flight_records", "kipconsumer.producer.in_flight",
        "{message}", "gauge", PRODUCER,
        "Records sent whose future is not done yet"),
    "producer_buffer_full_waits": _m("producer_buffer_full_waits", "kipconsumer.producer.buffer_full.waits",
        "{wait}", "counter", PRODUCER,
        "send() calls that waited for buffer space"),
    "producer_txn_committed": _m(
        "producer_transactions_committed", "kipconsumer.producer.transactions.committed",
        "{transaction}", "counter", PRODUCER,
        "Transactions committed"),
    "producer_txn_aborted": _m("producer_transactions_aborted", "kipconsumer.producer.transactions.aborted",
        "{transaction}", "counter", PRODUCER,
        "Transactions aborted"),
    "producer_sent_bytes": _m("producer_sent_bytes", "kipconsumer.producer.sent.size",
        "By", "counter", PRODUCER,
        "Record bytes sent to brokers" + _STATS),
    # Pipeline
    "pipeline_processed": _m("pipeline_records_processed", "kipconsumer.pipeline.processed",
        "{message}", "counter", CONSUMER,
        "Records process() handled"),
    "pipeline_outputs_acked": _m("pipeline_outputs_acked", "kipconsumer.pipeline.outputs.acked",
        "{message}", "counter", CONSUMER,
        "Output records acknowledged"),
    "pipeline_outputs_resent": _m("pipeline_outputs_resent", "kipconsumer.pipeline.outputs.resent",
        "{message}", "counter", CONSUMER,
        "Output records sent again"),
    "pipeline_stalls": _m("pipeline_stalls", "kipconsumer.pipeline.stalls",
        "{stall}", "counter", CONSUMER,
        "Task steps that timed out"),
    "pipeline_stalled": _m("pipeline_stalled_partitions", "kipconsumer.pipeline.stalled_partitions",
        "{partition}", "gauge", CONSUMER,
        "Partitions skipped now after a timeout"),
    "pipeline_commits": _m("pipeline_commits", "kipconsumer.pipeline.commits",
        "{commit}", "counter", CONSUMER,
        "Commits (offsets, or transactions with exactly_once_v2)"),
    "pipeline_commit_failures": _m("pipeline_commit_failures", "kipconsumer.pipeline.commit.failures",
        "{commit}", "counter", CONSUMER,
        "Commits that failed"),
    "pipeline_txn_committed": _m(
        "pipeline_transactions_committed", "kipconsumer.pipeline.transactions.committed",
        "{transaction}", "counter", CONSUMER,
        "Transactions committed"),
    "pipeline_txn_aborted": _m("pipeline_transactions_aborted", "kipconsumer.pipeline.transactions.aborted",
        "{transaction}", "counter", CONSUMER,
        "Transactions aborted"),
    "pipeline_txn_timed_out": _m(
        "pipeline_transactions_timed_out", "kipconsumer.pipeline.transactions.timed_out",
        "{transaction}", "counter", CONSUMER,
        "Transactions the broker aborted after transaction.timeout.ms"),
    "pipeline_producer_replacements": _m(
        "pipeline_producer_replacements", "kipconsumer.pipeline.producer.replacements",
        "{producer}", "counter", CONSUMER,
        "Producers replaced after a stuck transaction call"),
    # any client with statistics.interval.ms > 0
    "broker_rtt": _m("broker_rtt_seconds", "kipconsumer.broker.rtt",
        "s", "gauge", BROKER,
        "Mean request round trip to the broker over the last statistics window" + _STATS),
    "broker_throttle": _m("broker_throttle_seconds", "kipconsumer.broker.throttle",
        "s", "gauge", BROKER,
        "Mean broker throttle time over the last statistics window" + _STATS),
}


@dataclass(frozen=True)
class Sample:
    """One value of a metric of :data:`METRICS` (``key``) with its label values."""

    key: str
    labels: tuple[str, ...]
    value: float


class ClientRegistry:
    """The clients an exporter reads, held weakly (a dropped client disappears; a closed one is
    skipped). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refs: dict[int, weakref.ref[Any]] = {}

    def add(self, client: Any) -> None:
        """Registers ``client``; ``TypeError`` naming the allowed types for anything else."""
        kind(client)
        with self._lock:
            self._refs[id(client)] = weakref.ref(client)

    def remove(self, client: Any) -> None:
        with self._lock:
            ref = self._refs.get(id(client))
            if ref is not None and ref() is client:
                del self._refs[id(client)]

    def clients(self) -> list[Any]:
        """The registered clients still alive (dead references are dropped)."""
        with self._lock:
            live = [(k, r()) for k, r in self._refs.items()]
            for k, c in live:
                if c is None:
                    del self._refs[k]
        return [c for _, c in live if c is not None]

    def samples(self) -> list[Sample]:
        """Every sample of every live, open client; samples with equal labels (two clients sharing a
        client.id and group) are summed."""
        total: dict[tuple[str, tuple[str, ...]], float] = {}
        for client in self.clients():
            try:
                samples = list(read(client))
            except Exception as exc:  # a client closing under the scrape: skip it this time
                log.debug("metrics of %r not read: %s", client, exc)
                continue
            for s in samples:
                k = (s.key, s.labels)
                total[k] = total.get(k, 0.0) + s.value
        return [Sample(k, labels, v) for (k, labels), v in total.items()]


_ALLOWED = ("KafkaConsumer, KafkaProducer, KafkaShareConsumer, AsyncKafkaConsumer, AsyncKafkaProducer, "
            "AsyncKafkaShareConsumer or Pipeline")


def kind(client: Any) -> str:
    """``consumer``, ``producer``, ``share_consumer`` or ``pipeline``: the kind of a registrable
    client (the asyncio classes are their sync client's kind). ``TypeError`` for anything else."""
    from kipconsumer.aio import AsyncKafkaConsumer, AsyncKafkaProducer, AsyncKafkaShareConsumer
    from kipconsumer.consumer import KafkaConsumer
    from kipconsumer.producer import KafkaProducer
    from kipconsumer.share import KafkaShareConsumer
    from kipconsumer.streams import Pipeline

    if isinstance(client, (KafkaConsumer, AsyncKafkaConsumer)):
        return "consumer"
    if isinstance(client, (KafkaProducer, AsyncKafkaProducer)):
        return "producer"
    if isinstance(client, (KafkaShareConsumer, AsyncKafkaShareConsumer)):
        return "share_consumer"
    if isinstance(client, Pipeline):
        return "pipeline"
    raise TypeError(f"client must be a {_ALLOWED}, not {type(client).__name__}")


def _sync(client: Any) -> Any:
    """The synchronous client under an asyncio one, or ``client``."""
    from kipconsumer.aio import AsyncKafkaConsumer, AsyncKafkaProducer, AsyncKafkaShareConsumer

    if isinstance(client, (AsyncKafkaConsumer, AsyncKafkaShareConsumer)):
        return client.consumer
    if isinstance(client, AsyncKafkaProducer):
        return client.producer
    return client


def _closed(client: Any) -> bool:
    closed = getattr(client, "closed", None)
    return bool(getattr(client, "_closed", False) if closed is None else closed)


def read(client: Any) -> Iterator[Sample]:
    """The samples of one client, from one ``metrics()`` call each (a Pipeline: its own, its
    consumer's and its producer's). Nothing for a closed client."""
    k = kind(client)
    client = _sync(client)
    if _closed(client):
        return
    if k == "pipeline":
        group = client.consumer.settings.group_id or ""
        labels = (_client_id(client.consumer), group)
        yield from _pipeline(client.metrics(), labels)
        yield from read(client.consumer)
        yield from read(client.producer)
        return
    if k == "producer":
        yield from _producer(client.metrics(), (_client_id(client),))
    elif k == "consumer":
        yield from _consumer(client.metrics(), (_client_id(client), client.settings.group_id or ""))
    else:
        yield from _share(client.metrics(), (_client_id(client), client.settings.group_id))


def _client_id(client: Any) -> str:
    return str(client._settings.rdkafka.get("client.id", "rdkafka"))


def _pick(m: dict[str, Any], labels: tuple[str, ...], pairs: Iterable[tuple[str, str]],
          scale: Callable[[str, float], float] | None = None) -> Iterator[Sample]:
    for key, field in pairs:
        v = m.get(field)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            yield Sample(key, labels, float(v) if scale is None else scale(field, float(v)))


def _statistics(stats: dict[str, Any] | None, labels: tuple[str, ...], client_type: str,
                pairs: Iterable[tuple[str, str]]) -> Iterator[Sample]:
    if not stats:
        return
    yield from _pick(stats, labels, pairs)
    for node, b in sorted(stats.get("brokers", {}).items()):
        bl = (labels[0], client_type, str(node))
        yield Sample("broker_rtt", bl, b.get("rtt_avg_us", 0) / 1e6)
        yield Sample("broker_throttle", bl, b.get("throttle_avg_ms", 0) / 1e3)


def _consumer(m: dict[str, Any], labels: tuple[str, ...]) -> Iterator[Sample]:
    if m.get("closed"):
        return
    yield from _pick(m, labels, [
        ("consumer_records", "records_returned"), ("consumer_polls", "polls"),
        ("consumer_rebalances", "rebalances"), ("consumer_commit_failures", "commit_failures"),
        ("consumer_poll_interval_expiries", "poll_interval_expiries"),
        ("consumer_assigned_partitions", "assigned_partitions"),
        ("consumer_buffered_records", "buffered_records"), ("consumer_buffered_bytes", "buffered_bytes")])
    yield from _pick(m, labels, [("consumer_poll_time", "poll_time_ms"),
                                 ("consumer_rebalance_time", "rebalance_time_ms")],
                     lambda _f, v: v / 1e3)
    since = m.get("time_since_last_poll_ms", -1)
    if isinstance(since, int) and since >= 0:
        yield Sample("consumer_since_poll", labels, since / 1e3)
    for tp, lag in sorted(m.get("partition_lag", {}).items()):
        if lag is not None:
            yield Sample("consumer_lag", (*labels, tp.topic, str(tp.partition)), float(lag))
    yield from _statistics(m.get("statistics"), labels, "consumer",
                           [("consumer_fetched_records", "rxmsgs"),
                            ("consumer_fetched_bytes", "rxmsg_bytes")])


def _share(m: dict[str, Any], labels: tuple[str, ...]) -> Iterator[Sample]:
    yield from _pick(m, labels, [
        ("share_records", "records_returned"), ("share_polls", "polls"),
        ("share_acknowledged", "acknowledged"),
        ("share_ack_commits", "acknowledgement_commits"),
        ("share_ack_commit_failures", "acknowledgement_commit_errors"),
        ("share_buffered_records", "buffered_records"), ("share_unacknowledged", "unacknowledged")])
    stats = m.get("statistics")
    yield from _statistics(stats, labels, "share_consumer", [("share_fetched_bytes", "rxmsg_bytes")])
    group = (stats or {}).get("group")
    if group:
        yield Sample("share_rebalances", labels, float(group.get("rebalances", 0)))


def _producer(m: dict[str, Any], labels: tuple[str, ...]) -> Iterator[Sample]:
    if m.get("closed"):
        return
    yield from _pick(m, labels, [
        ("producer_sent", "records_sent"), ("producer_delivered", "records_delivered"),
        ("producer_failed", "records_failed"), ("producer_timed_out", "records_timed_out"),
        ("producer_in_flight", "in_flight"), ("producer_buffer_full_waits", "buffer_full_waits"),
        ("producer_txn_committed", "transactions_committed"),
        ("producer_txn_aborted", "transactions_aborted")])
    yield from _statistics(m.get("statistics"), labels, "producer", [("producer_sent_bytes", "txmsg_bytes")])


def _pipeline(m: dict[str, Any], labels: tuple[str, ...]) -> Iterator[Sample]:
    yield from _pick(m, labels, [
        ("pipeline_processed", "records_processed"), ("pipeline_outputs_acked", "outputs_acked"),
        ("pipeline_outputs_resent", "outputs_resent"), ("pipeline_stalls", "stalls"),
        ("pipeline_commits", "commits"), ("pipeline_commit_failures", "commit_failures"),
        ("pipeline_txn_committed", "transactions_committed"),
        ("pipeline_txn_aborted", "transactions_aborted"),
        ("pipeline_txn_timed_out", "transactions_timed_out"),
        ("pipeline_producer_replacements", "producer_replacements")])
    yield Sample("pipeline_stalled", labels, float(len(m.get("stalled", ()))))
