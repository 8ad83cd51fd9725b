"""Share groups on the embedded broker (librdkafka's mock share groups): the basics that the mock
serves: consuming, bounded polls, release and redelivery with a higher delivery count, reject, and the
asyncio class. Each test starts its own EmbeddedBroker (share settings are cluster-wide there)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from share_support import embedded_jobs

from kipconsumer import AcknowledgeType, KafkaShareConsumer
from kipconsumer.aio import AsyncKafkaShareConsumer
from kipconsumer.broker import EmbeddedBroker


@pytest.fixture
def mock() -> Iterator[EmbeddedBroker]:
    with embedded_jobs() as b:
        yield b


def _conf(b: EmbeddedBroker, mode: str = "implicit", **kw: object) -> dict[str, object]:
    return {"bootstrap.servers": b.bootstrap_servers, "group.id": "sg", "share.acknowledgement.mode": mode,
            **kw}


def test_consume_all_bounded(mock: EmbeddedBroker) -> None:
    with KafkaShareConsumer(_conf(mock, **{"max.poll.records": 3})) as c:
        c.subscribe(["jobs"])
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            batch = c.poll(0.5)
            assert len(batch) <= 3
            assert batch.to_arrow().column("delivery_count").to_pylist() == [r.delivery_count for r in batch]
            got += [(r.partition, r.offset) for r in batch]
        assert sorted(got) == sorted((i % 2, i // 2) for i in range(20))


def test_release_and_reject(mock: EmbeddedBroker) -> None:
    with KafkaShareConsumer(_conf(mock, "explicit")) as c:
        c.subscribe(["jobs"])
        seen: dict[tuple[int, int], list[int]] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(seen.get((0, 0), [])) < 2 or len(seen) < 20):
            for r in c.poll(0.5):
                key = (r.partition, r.offset)
                seen.setdefault(key, []).append(r.delivery_count)
                if key == (0, 0) and r.delivery_count == 1:
                    c.acknowledge(r, AcknowledgeType.RELEASE)
                elif key == (1, 0):
                    c.acknowledge(r, AcknowledgeType.REJECT)
                else:
                    c.acknowledge(r, AcknowledgeType.ACCEPT)
        assert seen[(0, 0)] == [1, 2]
        assert seen[(1, 0)] == [1], "a rejected record came back"
        assert len(seen) == 20 and all(v == [1] for k, v in seen.items() if k != (0, 0))


def test_async_poll(mock: EmbeddedBroker) -> None:
    async def main() -> int:
        async with AsyncKafkaShareConsumer(_conf(mock)) as c:
            await c.subscribe(["jobs"])
            n = 0
            deadline = time.monotonic() + 30
            while n < 20 and time.monotonic() < deadline:
                try:  # a cancelled poll loses nothing: the next one returns its records
                    n += len(await asyncio.wait_for(c.poll(0.5), 0.01))
                except asyncio.TimeoutError:
                    pass
            return n

    assert asyncio.run(main()) == 20
