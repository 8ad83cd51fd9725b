"""kipconsumer.tracing (issue #40 item 5): W3C traceparent carried in record headers from a producer's
span to the consumer's links and to a Pipeline's process spans, with the OpenTelemetry SDK's in-memory
span exporter; clients on the embedded broker. Off by default."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

from kipconsumer import ConsumerRecord, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kipconsumer.aio import AsyncKafkaProducer  # noqa: E402
from kipconsumer.broker import EmbeddedBroker  # noqa: E402
from kipconsumer.streams import Output, Pipeline  # noqa: E402
from kipconsumer.tracing import TRACEPARENT, disable_propagation, enable_propagation, links, traced  # noqa: E402


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _read(bootstrap: str, topic: str, n: int) -> list[ConsumerRecord]:
    with KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"r{time.monotonic_ns()}"}) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), 0)
        got: list[ConsumerRecord] = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            got += list(c.poll(0.2))
        return got


def test_the_producers_span_reaches_the_consumer_as_a_link(
        spans: tuple[TracerProvider, InMemorySpanExporter], broker: EmbeddedBroker,
        topic_factory: Callable[..., str]) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("test")
    topic = topic_factory(1, "trace")
    with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers}) as p:
        with tracer.start_as_current_span("before"):
            p.send(topic, b"off", partition=0).result(10)  # off by default: no header
        enable_propagation(p)
        enable_propagation(p)  # idempotent
        with tracer.start_as_current_span("send", kind=SpanKind.PRODUCER) as span:
            p.send(topic, b"on", partition=0, headers=[("h", b"1")]).result(10)
            own = b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"
            p.send(topic, b"own", partition=0, headers={TRACEPARENT: own}).result(10)
        p.send(topic, b"no span", partition=0).result(10)  # no current span: nothing added
        disable_propagation(p)
        with tracer.start_as_current_span("after"):
            p.send(topic, b"disabled", partition=0).result(10)
    records = _read(broker.bootstrap_servers, topic, 5)
    by_value = {r.value: r for r in records}
    assert [k for k, _ in by_value[b"off"].headers] == []
    assert [k for k, _ in by_value[b"no span"].headers] == []
    assert [k for k, _ in by_value[b"disabled"].headers] == []
    on = by_value[b"on"]
    assert on.headers[0] == ("h", b"1")
    sc = span.get_span_context()
    want = f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"
    assert dict(on.headers)[TRACEPARENT] == want.encode()
    assert dict(by_value[b"own"].headers)[TRACEPARENT].startswith(b"00-1111")  # the record's own is kept
    got = links(records)
    assert [(lk.context.trace_id, lk.context.span_id) for lk in got] == [
        (sc.trace_id, sc.span_id), (int("1" * 32, 16), int("2" * 16, 16))]
    assert got[0].attributes is not None and got[0].attributes["messaging.destination.name"] == topic
    assert {s.name for s in exporter.get_finished_spans()} == {"before", "send", "after"}


def _upper(record: ConsumerRecord) -> Iterator[Output]:
    yield record.key, (record.value or b"").upper()


def test_a_traced_pipeline_processes_each_record_in_a_span_linked_to_its_producer(
        spans: tuple[TracerProvider, InMemorySpanExporter], broker: EmbeddedBroker,
        topic_factory: Callable[..., str], unique_name: Callable[[str], str]) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("test")
    src, sink = topic_factory(1, "tsrc"), topic_factory(1, "tsink")
    with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers}) as p:
        enable_propagation(p)
        sent = {}
        for i in range(3):
            with tracer.start_as_current_span(f"send {i}", kind=SpanKind.PRODUCER) as span:
                p.send(src, b"v%d" % i, partition=0).result(10)
            sent[i] = span.get_span_context()
    conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": unique_name("tg"),
            "auto.offset.reset": "earliest", "commit.interval.ms": 100}
    with Pipeline(conf, src, traced(_upper, provider), sink) as pipe:
        pipe.run(until=lambda: pipe.metrics()["records_processed"] >= 3, timeout=30)
    process = sorted((s for s in exporter.get_finished_spans() if s.name == f"process {src}"),
                     key=lambda s: s.attributes["messaging.kafka.offset"] if s.attributes else -1)
    assert len(process) == 3
    for i, s in enumerate(process):
        assert s.kind == SpanKind.CONSUMER
        linked = [(lk.context.trace_id, lk.context.span_id) for lk in s.links]
        assert linked == [(sent[i].trace_id, sent[i].span_id)]
    assert sorted(r.value for r in _read(broker.bootstrap_servers, sink, 3)) == [b"V0", b"V1", b"V2"]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="producer must be a KafkaProducer or AsyncKafkaProducer"):
        enable_propagation(object())
    with pytest.raises(TypeError, match="process must be callable"):
        traced("not callable")  # type: ignore[arg-type]


def test_an_asyncio_producer_propagates_too(spans: tuple[TracerProvider, InMemorySpanExporter],
                                            broker: EmbeddedBroker,
                                            topic_factory: Callable[..., str]) -> None:
    provider, _ = spans
    tracer = provider.get_tracer("test")
    topic = topic_factory(1, "atrace")

    async def main() -> int:
        async with AsyncKafkaProducer({"bootstrap.servers": broker.bootstrap_servers}) as p:
            enable_propagation(p)
            with tracer.start_as_current_span("send") as span:
                await p.send(topic, b"a", partition=0)
            return span.get_span_context().span_id

    span_id = asyncio.run(main())
    (record,) = _read(broker.bootstrap_servers, topic, 1)
    assert dict(record.headers)[TRACEPARENT].split(b"-")[2] == b"%016x" % span_id
