"""A ``prometheus_client`` collector of kipconsumer clients (``pip install kipconsumer[prometheus]``).

``register(client, registry=None, prefix="kipconsumer")`` adds a client to the collector of that
registry and prefix (created and registered on first use; ``None``: prometheus_client's
``REGISTRY``) and returns the collector. ``KipconsumerCollector()`` registers itself on a
``CollectorRegistry`` (the default one unless told); ``register_client()`` adds a KafkaConsumer,
KafkaProducer, KafkaShareConsumer, one of their asyncio classes or a Pipeline. A scrape calls each
live, open client's ``metrics()`` on the scraping thread; a dropped client disappears (held
weakly), a closed one is skipped. Names and labels: ``docs/metrics.md``."""

from __future__ import annotations

import re
import threading
import weakref
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

__all__ = ["KipconsumerCollector", "register"]

DEFAULT_PREFIX = "kipconsumer"


class KipconsumerCollector(Collector):
    """Exposes the registered clients' ``metrics()`` at scrape time. Thread-safe.

    ``registry``: the ``CollectorRegistry`` to register on (default: prometheus_client's global
    ``REGISTRY``; None: do not register, call ``registry.register(collector)`` yourself).
    ``prefix``: the first word of every metric name (``<prefix>_consumer_records_total``); a
    Prometheus metric name component: letters, digits and ``_``, not starting with a digit."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY, prefix: str = DEFAULT_PREFIX) -> None:
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            raise ValueError(f"prefix must match [a-zA-Z_][a-zA-Z0-9_]*, got {prefix!r}")
        self._prefix = prefix
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
        return list(_families([], self._prefix))

    def collect(self) -> Iterable[Metric]:
        return list(_families(self._clients.samples(), self._prefix))


_PREFIX = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: registry -> prefix -> its collector (a registry that is dropped takes its collectors with it)
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, KipconsumerCollector]] = (
    weakref.WeakKeyDictionary())
_collectors_lock = threading.Lock()


def register(client: C, registry: CollectorRegistry | None = None,
             prefix: str = DEFAULT_PREFIX) -> KipconsumerCollector:
    """Export ``client`` (held weakly) through the collector of ``registry`` (None: prometheus_client's
    ``REGISTRY``) and ``prefix``, made and registered on the registry on first use; returns it.
    ``TypeError`` for an object that is not a kipconsumer client."""
    target = REGISTRY if registry is None else registry
    with _collectors_lock:
        by_prefix = _collectors.setdefault(target, {})
        collector = by_prefix.get(prefix)
        if collector is None:
            collector = by_prefix[prefix] = KipconsumerCollector(target, prefix)
    collector.register_client(client)
    return collector


def _families(samples: list[Sample], prefix: str) -> Iterator[Metric]:
    by_key: dict[str, list[Sample]] = {}
    for s in samples:
        by_key.setdefault(s.key, []).append(s)
    for key, spec in METRICS.items():
        fam: CounterMetricFamily | GaugeMetricFamily
        if spec.kind == "counter":
            fam = CounterMetricFamily(f"{prefix}_{spec.prom}", spec.help, labels=spec.labels)
        else:
            fam = GaugeMetricFamily(f"{prefix}_{spec.prom}", spec.help, labels=spec.labels)
        for s in by_key.get(key, ()):
            fam.add_metric(list(s.labels), s.value)
        yield fam
