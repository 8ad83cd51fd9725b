"""Issue 31: errors found by a hostile probe are typed and name their cause (never a secret)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kc_testing import Tansu

from kipconsumer import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kipconsumer.aio import AsyncKafkaConsumer
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import ConfigError, IllegalStateError, KafkaError, ProducerFencedError
from kipconsumer.streams import Pipeline
from kipconsumer.structs import ConsumerGroupMetadata

SECRET = "S3cr3t-MARKER-\udcff-tail"
NOWHERE = "127.0.0.1:1"
FENCED_CODES = ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")


# -- send_offsets_to_transaction arguments ----------------------------------------------------------------
@pytest.mark.parametrize("offsets,error,match", [
    ({TopicPartition("t", 0): 2**63}, ValueError, r"offsets\[.*partition=0\).*0\.\.9223372036854775807"),
    ({TopicPartition("t", 0): OffsetAndMetadata(2**63)}, ValueError, r"offsets\[.*0\.\.9223372036854775807"),
    ({TopicPartition("t", 0): None}, ValueError, r"offsets\[.*got None"),
    (None, TypeError, r"offsets must be a dict .* got NoneType"),
    ([1], TypeError, r"offsets must be a dict .* got list"),
])
def test_send_offsets_to_transaction_bad_offsets_are_typed(offsets: Any, error: type[Exception],
                                                          match: str) -> None:
    with KafkaProducer({"bootstrap.servers": NOWHERE, "transactional.id": f"t-{uuid.uuid4().hex}"}) as p:
        with pytest.raises(error, match=match) as info:
            p.send_offsets_to_transaction(offsets, ConsumerGroupMetadata("g", b""), timeout=0.1)
        assert not isinstance(info.value, (OverflowError, AttributeError))
        p.close(0)


# -- config values that cannot be encoded ------------------------------------------------------------------
@pytest.mark.parametrize("key", ["ssl.ca.location", "sasl.password", "sasl.username",
                                 "ssl.key.password"])
@pytest.mark.parametrize("client", ["producer", "consumer", "pipeline"])
def test_unencodable_passthrough_value_names_the_key_not_the_secret(client: str, key: str) -> None:
    conf = {"bootstrap.servers": NOWHERE, "group.id": "g", key: SECRET}
    make: Callable[[], object] = {
        "producer": lambda: KafkaProducer({k: v for k, v in conf.items() if k != "group.id"}),
        "consumer": lambda: KafkaConsumer(conf),
        "pipeline": lambda: Pipeline(conf, "src", lambda r: [], "sink"),
    }[client]
    with pytest.raises(ConfigError) as info:
        make()
    text = str(info.value)
    assert repr(key) in text and "UTF-8" in text
    if "password" in key:
        for part in ("S3cr3t", "MARKER", "tail", "\\udcff", "position"):
            assert part not in text
        assert info.value.__cause__ is None and info.value.__suppress_context__


# -- consumer arguments and state ----------------------------------------------------------------------
def test_pause_resume_none_name_the_argument(broker: EmbeddedBroker) -> None:
    with KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"}) as c:
        for call in (c.pause, c.resume):
            with pytest.raises(TypeError, match=r"partitions must be a list of TopicPartition, got NoneType"):
                call(None)  # type: ignore[arg-type]


def test_seeks_on_a_closed_consumer_raise(broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(1)
    c = KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"})
    c.assign([TopicPartition(topic, 0)])
    c.close()
    for name, call in [("seek_to_beginning()", c.seek_to_beginning), ("seek_to_end()", c.seek_to_end),
                       ("seek_to_beginning([tp])", lambda: c.seek_to_beginning([TopicPartition(topic, 0)])),
                       ("seek(tp, 0)", lambda: c.seek(TopicPartition(topic, 0), 0))]:
        with pytest.raises(IllegalStateError, match="closed"):
            call()
            pytest.fail(f"{name} on a closed consumer did nothing")


# -- async revoke listener --------------------------------------------------------------------------------
class _AwaitsTheLoop:
    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        pass

    async def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        if self.mode == "finally-raises":
            try:
                await asyncio.sleep(0.01)
            finally:
                raise ValueError("listener cleanup failed")
        try:
            await asyncio.sleep(0.01)
        except BaseException:  # swallows GeneratorExit: closing the coroutine raises RuntimeError
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("mode,cause", [("finally-raises", ValueError), ("ignores-close", RuntimeError)])
def test_async_revoke_listener_cleanup_does_not_replace_the_error(
        broker: EmbeddedBroker, topic_factory: Callable[..., str], mode: str, cause: type[Exception]) -> None:
    topic = topic_factory(1)

    async def main() -> None:
        c = AsyncKafkaConsumer({"bootstrap.servers": broker.bootstrap_servers,
                                "group.id": f"g-{uuid.uuid4()}", "session.timeout.ms": 6000})
        c.subscribe([topic], listener=_AwaitsTheLoop(mode))
        deadline = time.monotonic() + 20
        while not c.assignment():
            assert time.monotonic() < deadline, "no assignment"
            await c.poll(0.2)
        with pytest.raises(IllegalStateError,
                           match=r"on_partitions_revoked\(\) awaited .*needs the event loop") as info:
            await c.close()
        assert isinstance(info.value.__cause__, cause)
        assert c.closed

    asyncio.run(main())


# -- fencing --------------------------------------------------------------------------------------------
def _fenced_commit(servers: str, topic: str) -> None:
    txid = f"fence-{uuid.uuid4().hex[:8]}"
    old = KafkaProducer({"bootstrap.servers": servers, "transactional.id": txid})
    try:
        old.init_transactions(30)
        old.begin_transaction()
        first = old.send(topic, b"before the fence")
        first.result(30)
        with KafkaProducer({"bootstrap.servers": servers, "transactional.id": txid}) as new:
            new.init_transactions(30)
            try:
                old.send(topic, b"after the fence").result(30)
            except KafkaError as exc:  # the old epoch's produce request is refused
                assert isinstance(exc, ProducerFencedError) or exc.code not in FENCED_CODES, exc
            with pytest.raises(ProducerFencedError):
                old.commit_transaction(30)
            new.close(10)
    finally:
        old.close(0)


@pytest.mark.interop
def test_fenced_producer_gets_producer_fenced_error_on_tansu(tansu: Tansu) -> None:
    _fenced_commit(tansu.bootstrap, tansu.create_topic(1))



@pytest.mark.kafka
def test_fenced_producer_gets_producer_fenced_error_on_kafka(kafka_cluster: Any) -> None:
    topic = f"fence-{uuid.uuid4().hex[:8]}"
    kafka_cluster.create_topic(topic, partitions=1, replication_factor=1)
    _fenced_commit(kafka_cluster.bootstrap_servers, topic)
