"""OpenTelemetry metrics of kipconsumer clients (``pip install kipconsumer[otel]``).

``instrument(*clients, meter_provider=None)`` creates observable instruments on a meter named
``kipconsumer`` and registers the clients; the meter provider's reader collects them by calling each
live, open client's ``metrics()`` (once per collection, on the collecting thread). Messaging
semantic conventions are followed where they define a metric (``messaging.client.consumed.messages``
and ``messaging.client.sent.messages``, with their ``messaging.operation.name`` ``poll`` / ``send``;
attributes ``messaging.system``, ``messaging.client.id``, ``messaging.consumer.group.name``,
``messaging.destination.name``, ``messaging.destination.partition.id``); the rest are
``kipconsumer.*`` (``docs/metrics.md``).
``messaging.client.operation.duration`` is a histogram recorded per call, which would put work on
``poll()``'s path: poll time is exported as ``kipconsumer.consumer.poll.time`` (a sum) and
``kipconsumer.consumer.polls`` instead."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any, TypeVar

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("kipconsumer.metrics.otel needs opentelemetry-api: "
                      "pip install 'kipconsumer[otel]'") from exc

from kipconsumer._version import __version__
from kipconsumer.metrics._readings import METRICS, ClientRegistry, Sample

C = TypeVar("C")

__all__ = ["OtelInstrumentation", "instrument"]

_ATTRS = {"client_id": "messaging.client.id", "group": "messaging.consumer.group.name",
          "topic": "messaging.destination.name", "partition": "messaging.destination.partition.id",
          "client_type": "kipconsumer.client.type", "broker": "kipconsumer.broker.id"}


class OtelInstrumentation:
    """The instruments of one meter provider and the clients they read. Thread-safe.

    The instruments' callbacks share one reading of the clients taken at most ``max_age`` seconds
    earlier, so one collection calls each client's ``metrics()`` once."""

    def __init__(self, meter_provider: MeterProvider | None = None, *, max_age: float = 0.5) -> None:
        if not isinstance(max_age, (int, float)) or isinstance(max_age, bool) or not 0 <= max_age < 3600:
            raise ValueError(f"max_age must be a number of seconds in [0, 3600), not {max_age!r}")
        provider = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
        meter = provider.get_meter("kipconsumer", __version__)
        self._clients = ClientRegistry()
        self._max_age = float(max_age)
        self._lock = threading.Lock()
        self._taken = -1e18
        self._samples: list[Sample] = []
        by_name: dict[str, list[str]] = {}
        for key, spec in METRICS.items():
            by_name.setdefault(spec.otel, []).append(key)
        for name, keys in by_name.items():
            spec = METRICS[keys[0]]
            callback = self._callback(frozenset(keys))
            if spec.kind == "counter":
                meter.create_observable_counter(name, [callback], unit=spec.unit, description=spec.help)
            else:
                meter.create_observable_gauge(name, [callback], unit=spec.unit, description=spec.help)

    def register_client(self, client: C) -> C:
        """Adds ``client`` (held weakly) and returns it. ``TypeError`` for an object that is none of
        KafkaConsumer, KafkaProducer, KafkaShareConsumer, their asyncio classes, Pipeline."""
        self._clients.add(client)
        return client

    def unregister_client(self, client: Any) -> None:
        """Removes ``client`` (nothing if it was not registered)."""
        self._clients.remove(client)

    def _reading(self) -> list[Sample]:
        with self._lock:
            now = time.monotonic()
            if now - self._taken > self._max_age:
                self._samples = self._clients.samples()
                self._taken = time.monotonic()
            return self._samples

    def _callback(self, keys: frozenset[str]) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            total: dict[tuple[tuple[str, str], ...], float] = {}
            for s in self._reading():
                if s.key in keys:
                    spec = METRICS[s.key]
                    named = zip(spec.labels, s.labels, strict=True)
                    attrs = (("messaging.system", "kafka"), *((_ATTRS[n], v) for n, v in named if v != ""))
                    if spec.operation:
                        attrs = (*attrs, ("messaging.operation.name", spec.operation))
                    total[attrs] = total.get(attrs, 0.0) + s.value
            return [Observation(v, dict(a)) for a, v in total.items()]
        return observe


def instrument(*clients: Any, meter_provider: MeterProvider | None = None) -> OtelInstrumentation:
    """Instruments of ``meter_provider`` (default: the global one) reading ``clients``; register
    more with the result's ``register_client()``."""
    inst = OtelInstrumentation(meter_provider)
    for c in clients:
        inst.register_client(c)
    return inst
