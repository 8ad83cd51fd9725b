"""Helpers shared by the consumer test modules (not a test module itself)."""

from __future__ import annotations

from kipconsumer import KafkaConsumer
from kipconsumer.broker import EmbeddedBroker


def make_consumer(broker: EmbeddedBroker, group: str | None = None, **extra: object) -> KafkaConsumer:
    """A consumer on `broker` with test-friendly defaults (no auto-commit, earliest, short
    session); `extra` keys use underscores for dots: max_poll_records=10."""
    conf: dict[str, object] = {
        "bootstrap.servers": broker.bootstrap_servers,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    if group is not None:
        conf["group.id"] = group
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return KafkaConsumer(conf)
