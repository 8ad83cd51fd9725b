"""Issue 31: an AsyncKafkaProducer belongs to one event loop at a time.

What a loop that ended left (sends waiting for metadata, delivery reports that arrived after it
closed) is carried on by the next loop, so its ``flush()`` and ``close()`` return; a second loop using
the producer while the first runs gets ``IllegalStateError`` at once. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from kipconsumer import KafkaConsumer, TopicPartition
from kipconsumer.aio import AsyncKafkaProducer
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import IllegalStateError

pytestmark = pytest.mark.filterwarnings("ignore:AsyncKafkaProducer. its event loop was closed")


def _values(servers: str, topic: str, expected: int, timeout: float = 10.0) -> list[bytes]:
    with KafkaConsumer({"bootstrap.servers": servers, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(r.value for r in c.poll(0.2) if r.value is not None)
        return out


def test_sends_waiting_for_metadata_are_carried_on_by_the_next_loop() -> None:
    async def first(p: AsyncKafkaProducer, topic: str) -> int:
        for i in range(3):
            p.send(topic, b"v%d" % i)  # not awaited; the partitioner waits for the topic's metadata
        return len(p._backlog)

    # the case under test: sends left waiting for metadata by a loop that ended. A private broker
    # answers 400 ms late meanwhile, so the metadata cannot have arrived before first() returns.
    with EmbeddedBroker(num_brokers=1) as slow:
        topic = "aio-loops-metadata"
        slow.create_topic(topic, 1)
        p = AsyncKafkaProducer({"bootstrap.servers": slow.bootstrap_servers})
        slow.set_rtt(1, 400)
        assert asyncio.run(first(p, topic)) > 0
        slow.set_rtt(1, 0)

        async def second() -> None:
            t0 = time.monotonic()
            await asyncio.wait_for(p.flush(), 15)
            await asyncio.wait_for(p.close(), 15)
            assert time.monotonic() - t0 < 20

        asyncio.run(second())
        assert _values(slow.bootstrap_servers, topic, 3) == [b"v0", b"v1", b"v2"]



def test_delivery_reports_after_the_loop_closed_are_handed_over(
        broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(1)
    p = AsyncKafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 300})

    async def first() -> None:
        await p.send(topic, b"known", partition=0)  # metadata known from here on
        for i in range(3):
            p.send(topic, b"v%d" % i, partition=0)  # enqueued; delivered after this loop closed
        assert not p._backlog

    asyncio.run(first())
    time.sleep(1.0)  # the reports arrive while no loop runs

    async def second() -> None:
        await asyncio.wait_for(p.flush(5), 10)  # raised "timed out with 0 record(s) still pending"
        assert not p._reports
        md = await asyncio.wait_for(p.send(topic, b"next", partition=0), 10)
        assert md.offset == 4
        assert p.metrics()["records_delivered"] == 5
        await asyncio.wait_for(p.close(), 10)

    asyncio.run(second())


def test_a_second_running_loop_gets_illegal_state(
        broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(1)
    p = AsyncKafkaProducer({"bootstrap.servers": broker.bootstrap_servers})
    started, stop = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def owner() -> None:
        async def main() -> None:
            await p.send(topic, b"owner", partition=0)
            started.set()
            while not stop.is_set():
                await asyncio.sleep(0.01)

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            started.set()

    t = threading.Thread(target=owner, daemon=True)
    t.start()
    assert started.wait(15) and not errors

    async def intruder() -> None:
        with pytest.raises(IllegalStateError, match="another running event loop"):
            p.send(topic, b"intruder", partition=0)
        with pytest.raises(IllegalStateError, match="another running event loop"):
            await asyncio.wait_for(p.flush(1), 5)
        with pytest.raises(IllegalStateError, match="another running event loop"):
            await asyncio.wait_for(p.close(1), 5)

    try:
        asyncio.run(intruder())
    finally:
        stop.set()
        t.join(15)
    assert not t.is_alive() and not errors

    async def after() -> None:  # the owner's loop ended: this one takes over
        md = await asyncio.wait_for(p.send(topic, b"after", partition=0), 10)
        assert md.offset == 1
        await asyncio.wait_for(p.close(), 10)

    asyncio.run(after())
