"""A ``prometheus_client`` collector of kipconsumer clients (``pip install kipconsumer[prometheus]``).

``KipconsumerCollector()`` registers itself on a ``CollectorRegistry`` (the default one unless told);
``register_client()`` adds a KafkaConsumer, KafkaProducer, KafkaShareConsumer, one of their asyncio
classes or a Pipeline. A scrape calls each live, open client's ``metrics()`` on the scraping thread;
a dropped client disappears (held weakly), a closed one is skipped. Names and labels:
``docs/metrics.md``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

try:
    from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("kipconsumer.metrics.prometheus needs prometheus_client: "
                      "pip install 'kipconsumer[prometheus]'") from exc

from kipconsumer.metrics._readings import METRICS, ClientRegistry, Sample

C = TypeVar("C")

__all__ = ["KipconsumerCollector"]


class KipconsumerCollector(Collector):
    """Exposes the registered clients' ``metrics()`` at scrape time. Thread-safe.

    ``registry``: the ``CollectorRegistry`` to register on (default: prometheus_client's global
    ``REGISTRY``; None: do not register, call ``registry.register(collector)`` yourself)."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        self._clients = ClientRegistry()
        if registry is not None:
            registry.register(self)

    def register_client(self, client: C) -> C:
        """Adds ``client`` (held weakly) and returns it. ``TypeError`` for an object that is none of
        KafkaConsumer, KafkaProducer, KafkaShareConsumer, their asyncio classes, Pipeline."""
        self._clients.add(client)
        return client

    def unregister_client(self, client: Any) -> None:
        """Removes ``client`` (nothing if it was not registered)."""
        self._clients.remove(client)

    def describe(self) -> Iterable[Metric]:
        return list(_families([]))

    def collect(self) -> Iterable[Metric]:
        return list(_families(self._clients.samples()))


def _families(samples: list[Sample]) -> Iterator[Metric]:
    by_key: dict[str, list[Sample]] = {}
    for s in samples:
        by_key.setdefault(s.key, []).append(s)
    for key, spec in METRICS.items():
        fam: CounterMetricFamily | GaugeMetricFamily
        if spec.kind == "counter":
            fam = CounterMetricFamily(spec.prom, spec.help, labels=spec.labels)
        else:
            fam = GaugeMetricFamily(spec.prom, spec.help, labels=spec.labels)
        for s in by_key.get(key, ()):
            fam.add_metric(list(s.labels), s.value)
        yield fam
