"""W3C trace context in record headers, with OpenTelemetry (``pip install kipconsumer[otel]``); off
unless enabled.

- :func:`enable_propagation` makes a producer's ``send()`` add the current OpenTelemetry context as a
  ``traceparent`` (and ``tracestate``) header (W3C Trace Context), unless the record already has one.
  Only the producer it is called for pays for it; every other producer keeps the native ``send()``.
- :func:`link` / :func:`links` turn the ``traceparent`` of consumed records into span links, and
  :func:`traced` wraps a ``Pipeline`` process function so that each record is processed inside a
  CONSUMER span linked to the span that produced it (docs/metrics.md, "Tracing")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("kipconsumer.tracing needs opentelemetry-api: pip install 'kipconsumer[otel]'") from exc

from kipconsumer._version import __version__

__all__ = ["TRACEPARENT", "disable_propagation", "enable_propagation", "link", "links", "traced"]

#: the W3C Trace Context header (its value: ``00-<trace id>-<span id>-<flags>``)
TRACEPARENT = "traceparent"

_W3C = TraceContextTextMapPropagator()
_ORIGINAL = "_kipconsumer_untraced_send"


def _with_context(headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None) -> Any:
    """``headers`` plus the current context's ``traceparent``/``tracestate``; unchanged without a
    current span or when they carry a ``traceparent`` already."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    if not carrier:
        return headers
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
    if any(isinstance(h, tuple) and h and h[0] == TRACEPARENT for h in items):
        return headers
    return items + [(k, v.encode()) for k, v in carrier.items()]


def enable_propagation(producer: Any) -> None:
    """From now on ``producer`` (a ``KafkaProducer`` or ``AsyncKafkaProducer``) adds the current
    OpenTelemetry context to each record it sends, as W3C ``traceparent``/``tracestate`` headers.
    ``TypeError`` for any other object. Idempotent."""
    from kipconsumer.aio import AsyncKafkaProducer
    from kipconsumer.producer import KafkaProducer

    sync = producer.producer if isinstance(producer, AsyncKafkaProducer) else producer
    if not isinstance(sync, KafkaProducer):
        raise TypeError(f"producer must be a KafkaProducer or AsyncKafkaProducer, "
                        f"not {type(producer).__name__}")
    if _ORIGINAL in sync.__dict__:
        return
    send, send_nowait = sync.send, sync._send_nowait

    def traced_send(topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                    headers: Any = None, *args: Any, **kwargs: Any) -> Any:
        return send(topic, value, key, partition, _with_context(headers), *args, **kwargs)

    def traced_send_nowait(topic: str, value: Any, key: Any, partition: int | None, headers: Any,
                           *args: Any) -> Any:
        return send_nowait(topic, value, key, partition, _with_context(headers), *args)

    sync.__dict__[_ORIGINAL] = (sync.__dict__.get("send"), sync.__dict__.get("_send_nowait"))
    sync.__dict__["send"] = traced_send
    sync.__dict__["_send_nowait"] = traced_send_nowait


def disable_propagation(producer: Any) -> None:
    """Undoes :func:`enable_propagation` (nothing if it was not enabled)."""
    sync = getattr(producer, "producer", producer)
    original = sync.__dict__.pop(_ORIGINAL, None)
    if original is None:
        return
    for name, value in zip(("send", "_send_nowait"), original, strict=True):
        if value is None:
            sync.__dict__.pop(name, None)
        else:
            sync.__dict__[name] = value


def link(record: Any) -> Link | None:
    """A span link to the context in ``record``'s ``traceparent`` header (attributes: its topic,
    partition and offset), or None when it has none or an invalid one."""
    carrier = {k: v.decode("ascii", "replace") for k, v in record.headers
               if k in (TRACEPARENT, "tracestate") and isinstance(v, bytes)}
    if TRACEPARENT not in carrier:
        return None
    ctx = trace.get_current_span(_W3C.extract(carrier)).get_span_context()
    if not ctx.is_valid:
        return None
    return Link(ctx, {"messaging.system": "kafka", "messaging.destination.name": record.topic,
                      "messaging.destination.partition.id": str(record.partition),
                      "messaging.kafka.offset": record.offset})


def links(records: Iterable[Any]) -> list[Link]:
    """:func:`link` of each record that carries a valid ``traceparent`` (e.g. for a span around a
    whole ``poll()`` batch)."""
    return [lk for lk in (link(r) for r in records) if lk is not None]


def traced(process: Callable[[Any], Iterable[Any]],
           tracer_provider: TracerProvider | None = None) -> Callable[[Any], list[Any]]:
    """``process`` (a ``Pipeline`` process function) run inside a CONSUMER span ``process <topic>``
    per record, linked to the record's ``traceparent``; the outputs are collected inside the span.
    Exceptions propagate (recorded on the span)."""
    if not callable(process):
        raise TypeError(f"process must be callable(record) -> iterable of (key, value), got {process!r}")
    tracer = trace.get_tracer("kipconsumer", __version__, tracer_provider)

    def traced_process(record: Any) -> list[Any]:
        lk = link(record)
        with tracer.start_as_current_span(
                f"process {record.topic}", kind=SpanKind.CONSUMER, links=[lk] if lk else None,
                attributes={"messaging.system": "kafka", "messaging.operation.name": "process",
                            "messaging.destination.name": record.topic,
                            "messaging.destination.partition.id": str(record.partition),
                            "messaging.kafka.offset": record.offset}):
            return list(process(record))

    return traced_process
