"""Exporters of the clients' ``metrics()`` to Prometheus and OpenTelemetry (optional extras).

``kipconsumer.metrics.prometheus`` (``pip install kipconsumer[prometheus]``) and
``kipconsumer.metrics.otel`` (``pip install kipconsumer[otel]``); each client is registered
explicitly, held weakly, and read when the exporter collects, never on a client's hot path
(``docs/metrics.md``)."""
