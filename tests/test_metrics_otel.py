"""kipconsumer.metrics.otel with the OpenTelemetry SDK's InMemoryMetricReader: clients on the embedded
broker, read at collection time (messaging semantic-convention names and attributes where defined)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402

from kipconsumer import KafkaConsumer, KafkaProducer  # noqa: E402
from kipconsumer.broker import EmbeddedBroker  # noqa: E402
from kipconsumer.metrics.otel import OtelInstrumentation, instrument  # noqa: E402

Points = dict[str, list[tuple[dict[str, Any], float]]]


def _collect(reader: InMemoryMetricReader) -> Points:
    out: Points = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            assert sm.scope.name == "kipconsumer"
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(
                    (dict(p.attributes or {}), float(p.value)) for p in m.data.data_points)
    return out


def _of(points: Points, name: str, **attrs: str) -> list[float]:
    return [v for a, v in points.get(name, []) if all(a.get(k) == val for k, val in attrs.items())]


def test_otel_instruments_read_the_clients_at_collection(broker: EmbeddedBroker,
                                                         topic_factory: Callable[..., str],
                                                         unique_name: Callable[[str], str]) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    topic, cid, pid, group = topic_factory(2, "otel"), unique_name("oc"), unique_name("op"), unique_name("og")
    with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "client.id": pid}) as p, \
            KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "client.id": cid, "group.id": group,
                           "auto.offset.reset": "earliest"}) as c:
        inst = instrument(p, c, meter_provider=provider)
        for i in range(50):
            p.send(topic, b"%d" % i, partition=i % 2)
        p.flush(10)
        c.subscribe([topic])
        n, deadline = 0, time.monotonic() + 30
        while n < 50 and time.monotonic() < deadline:
            n += len(c.poll(0.2))
        pts = _collect(reader)
        mine = {"messaging.system": "kafka", "messaging.client.id": cid,
                "messaging.consumer.group.name": group}
        polled = {**mine, "messaging.operation.name": "poll"}
        assert _of(pts, "messaging.client.consumed.messages", **polled) == [50.0]
        assert _of(pts, "messaging.client.sent.messages", **{"messaging.client.id": pid,
                                                             "messaging.operation.name": "send"}) == [50.0]
        lag = [(a["messaging.destination.name"], a["messaging.destination.partition.id"], v)
               for a, v in pts["kipconsumer.consumer.lag"] if a.get("messaging.client.id") == cid]
        assert sorted(lag) == [(topic, "0", 0.0), (topic, "1", 0.0)]
        assert _of(pts, "kipconsumer.consumer.rebalances", **mine) == [1.0]
        assert _of(pts, "kipconsumer.consumer.poll.time", **mine)[0] > 0
        assert _of(pts, "kipconsumer.producer.delivered", **{"messaging.client.id": pid}) == [50.0]
        c.close()
        time.sleep(0.6)  # past the shared reading's max_age
        pts = _collect(reader)
        assert _of(pts, "messaging.client.consumed.messages", **{"messaging.client.id": cid}) == []
        assert _of(pts, "messaging.client.sent.messages", **{"messaging.client.id": pid}) == [50.0]
        inst.unregister_client(p)
        time.sleep(0.6)
        assert _of(_collect(reader), "messaging.client.sent.messages", **{"messaging.client.id": pid}) == []
    provider.shutdown()


def test_otel_one_collection_reads_each_client_once(broker: EmbeddedBroker,
                                                    unique_name: Callable[[str], str]) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    inst = OtelInstrumentation(provider)
    calls = [0]

    class Counted(KafkaProducer):
        def metrics(self) -> dict[str, Any]:
            calls[0] += 1
            return super().metrics()

    p = Counted({"bootstrap.servers": broker.bootstrap_servers, "client.id": unique_name("once")})
    inst.register_client(p)
    _collect(reader)
    assert calls[0] == 1
    p.close()
    del p
    gc.collect()
    time.sleep(0.6)
    assert _collect(reader).get("kipconsumer.producer.in_flight", []) == []
    provider.shutdown()


def test_otel_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_age must be a number of seconds"):
        OtelInstrumentation(MeterProvider(), max_age=-1)
    inst = OtelInstrumentation(MeterProvider())
    with pytest.raises(TypeError, match="client must be a KafkaConsumer"):
        inst.register_client("not a client")
