"""kipconsumer: a high-throughput Kafka client on librdkafka."""

from kipconsumer import _loader

_loader.load()

from kipconsumer._native import librdkafka_version  # noqa: E402

__all__ = ["librdkafka_version"]
__version__ = "0.1.0"
