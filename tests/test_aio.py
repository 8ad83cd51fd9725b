"""kipconsumer.aio against the embedded broker over TCP: the loop waits on the consumer's eventfd
(no thread, no executor), KIP-41 caps, cancellation loses nothing, commits, async listeners,
KIP-62 liveness with a blocked loop, the producer's bounds and futures, uvloop, a group of async,
sync and confluent-kafka members."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kc_testing import confluent_rebalance_callbacks, group_timeouts, session_consumer_protocol
from support import produce_ids

from kipconsumer import KafkaConsumer, TopicPartition
from kipconsumer.aio import AsyncKafkaConsumer, AsyncKafkaProducer
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import ConcurrentAccessError, IllegalStateError, KafkaTimeoutError, WakeupError

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is installed by ./dev.sh
    uvloop = None

LOOPS = ["asyncio"] + (["uvloop"] if uvloop is not None else [])


def run(coro: Coroutine[Any, Any, T], loop: str = "asyncio") -> T:
    if sys.version_info < (3, 11):  # no asyncio.Runner: the wheel tier runs this module on 3.10 too
        return uvloop.run(coro) if loop == "uvloop" and uvloop is not None else asyncio.run(coro)
    factory = uvloop.new_event_loop if loop == "uvloop" and uvloop is not None else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def conf(broker: EmbeddedBroker, group: str, **extra: object) -> dict[str, object]:
    c: dict[str, object] = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            **group_timeouts(6000, 500)}
    c.update({k.replace("_", "."): v for k, v in extra.items()})
    return c


def produce(broker: EmbeddedBroker, topic: str, n: int, partitions: int) -> None:
    """n records; record g goes to partition g % partitions with value b"<g>"."""
    _produce_spread(broker, topic, range(n), partitions)


class Ticker:
    """Counts how often the loop runs a 10 ms ticker, and its worst delay: proof the loop is free."""

    def __init__(self) -> None:
        self.ticks = 0
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, loop.time() - t0 - 0.01)
            self.ticks += 1

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


# -- consumer -----------------------------------------------------------------------------------
@pytest.mark.parametrize("loop", LOOPS)
def test_poll_caps_fairly_and_waits_on_the_loop(broker: EmbeddedBroker, topic_factory: Callable[..., str],
                                               unique_name: Callable[[str], str], loop: str) -> None:
    topic = topic_factory(partitions=4)
    produce(broker, topic, 2000, 4)

    async def main() -> tuple[Counter[tuple[int, int]], list[int], int, int]:
        seen: Counter[tuple[int, int]] = Counter()
        sizes: list[int] = []
        async with AsyncKafkaConsumer(conf(broker, unique_name("g"), max_poll_records=100)) as c:
            c.subscribe([topic])
            while sum(seen.values()) < 2000:
                records = await c.poll(10.0)
                sizes.append(len(records))
                for r in records:
                    seen[(r.partition, r.offset)] += 1
            # nothing more: the wait happens on the loop, which keeps running other tasks
            with Ticker() as ticker:
                empty = await c.poll(0.5)
            return seen, sizes, len(empty), ticker.ticks

    seen, sizes, empty, ticks = run(main(), loop)
    assert len(seen) == 2000 and set(seen.values()) == {1}
    assert max(sizes) <= 100
    assert empty == 0
    assert ticks >= 10, f"the loop ran the 10 ms ticker only {ticks} times during a 0.5 s poll()"


def test_cancelled_poll_hands_out_nothing_and_loses_nothing(broker: EmbeddedBroker,
                                                           topic_factory: Callable[..., str],
                                                           unique_name: Callable[[str], str]) -> None:
    topic = topic_factory(partitions=3)

    async def main() -> Counter[int]:
        seen: Counter[int] = Counter()
        async with AsyncKafkaConsumer(conf(broker, unique_name("g"))) as c:
            c.assign([TopicPartition(topic, p) for p in range(3)])
            for round_ in range(6):
                task = asyncio.create_task(c.poll(30.0))
                await asyncio.sleep(0.05)
                # records arrive while the poll() is pending; then it is cancelled
                await asyncio.get_running_loop().run_in_executor(
                    None, produce_range, broker, topic, round_ * 100, 100)
                task.cancel()
                try:
                    for r in await task:  # it may have completed before the cancel
                        seen[int(r.value)] += 1
                except asyncio.CancelledError:
                    pass
                with pytest.raises(asyncio.TimeoutError):  # the builtin one from 3.11, not on 3.10
                    await asyncio.wait_for(c.poll(30.0), 0.0)
            while sum(seen.values()) < 600:
                for r in await c.poll(5.0):
                    seen[int(r.value)] += 1
            assert len(await c.poll(0.3)) == 0
        return seen

    seen = run(main())
    assert sorted(seen) == list(range(600)) and set(seen.values()) == {1}


def produce_range(broker: EmbeddedBroker, topic: str, start: int, n: int) -> None:
    _produce_spread(broker, topic, range(start, start + n), 3)


def _produce_spread(broker: EmbeddedBroker, topic: str, ids: range, partitions: int) -> None:
    """Record g of ``ids`` goes to partition g % partitions with value b"<g>", in order."""
    produce_ids(broker.bootstrap_servers, topic, ids, partitions, linger_ms=1)


def test_async_for_and_commit_of_what_was_handed_out(broker: EmbeddedBroker,
                                                    topic_factory: Callable[..., str],
                                                    unique_name: Callable[[str], str]) -> None:
    topic = topic_factory(partitions=1)
    produce(broker, topic, 50, 1)
    group = unique_name("g")

    async def main() -> None:
        async with AsyncKafkaConsumer(conf(broker, group, max_poll_records=50)) as c:
            c.assign([TopicPartition(topic, 0)])
            offsets = []
            async for record in c:
                offsets.append(record.offset)
                if record.offset == 19:
                    break
            # the poll returned 50 records; only 20 were handed out, so only they are committed
            committed = await c.commit()
            assert committed[TopicPartition(topic, 0)].offset == 20
            assert offsets == list(range(20))
            with pytest.raises(IllegalStateError, match="async for"):
                await c.poll(0)
            async for record in c:  # the rest of the batch is still handed out
                offsets.append(record.offset)
                if record.offset == 49:
                    break
            assert offsets == list(range(50))
            assert (await c.commit())[TopicPartition(topic, 0)].offset == 50
        with KafkaConsumer(conf(broker, group)) as sync:
            assert sync.committed([TopicPartition(topic, 0)])[TopicPartition(topic, 0)].offset == 50  # type: ignore[union-attr]

    run(main())


def test_commit_async_runs_a_coroutine_callback_as_a_task_without_the_deprecated_asyncio_check(
        broker: EmbeddedBroker, topic_factory: Callable[..., str], unique_name: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``commit_async(callback=)``: a coroutine function runs as a task on the loop, a plain function is
    called, both with the committed offsets. Coroutine functions are told apart with
    ``inspect.iscoroutinefunction``: ``asyncio.iscoroutinefunction`` warns from Python 3.14
    (DeprecationWarning, an error under ``-W error``) and is gone in 3.16; made to fail here on every
    version, so the wheel tier is not needed to see it."""

    def deprecated(func: object) -> bool:
        raise AssertionError("asyncio.iscoroutinefunction: deprecated in Python 3.14, removed in 3.16")

    monkeypatch.setattr(asyncio, "iscoroutinefunction", deprecated)
    topic = topic_factory(partitions=1)
    produce(broker, topic, 10, 1)
    tp = TopicPartition(topic, 0)

    async def main() -> list[tuple[str, int, Exception | None]]:
        seen: list[tuple[str, int, Exception | None]] = []

        async def on_commit_coroutine(offsets: dict[TopicPartition, Any], exc: Exception | None) -> None:
            await asyncio.sleep(0)
            seen.append(("coroutine", offsets[tp].offset, exc))

        def on_commit(offsets: dict[TopicPartition, Any], exc: Exception | None) -> None:
            seen.append(("function", offsets[tp].offset, exc))

        async with AsyncKafkaConsumer(conf(broker, unique_name("g"))) as c:
            c.assign([tp])
            got = 0
            deadline = time.monotonic() + 30
            while got < 10 and time.monotonic() < deadline:
                got += len(await c.poll(1))
            assert got == 10
            for callback, expected in ((on_commit_coroutine, 1), (on_commit, 2)):
                c.commit_async(callback=callback)
                deadline = time.monotonic() + 30
                while len(seen) < expected and time.monotonic() < deadline:
                    await c.poll(0.2)  # the callback runs in a later poll(); a task then on the loop
        return seen

    assert run(main()) == [("coroutine", 10, None), ("function", 10, None)]


def test_async_commit_keeps_the_sync_consumers_thread_contract(broker: EmbeddedBroker,
                                                               topic_factory: Callable[..., str],
                                                               unique_name: Callable[[str], str]) -> None:
    """The asyncio consumer reaches its sync consumer's handle only through the thread contract: while
    another thread is inside a call of the same consumer, ``commit()`` raises ConcurrentAccessError
    (the other call goes on), never reads positions or runs callbacks beside it."""
    topic = topic_factory(partitions=1)
    produce(broker, topic, 10, 1)

    async def main() -> None:
        async with AsyncKafkaConsumer(conf(broker, unique_name("g"))) as c:
            c.assign([TopicPartition(topic, 0)])
            assert len(await c.poll(5)) > 0
            sync = c.consumer

            def wait_inside_poll() -> None:
                with pytest.raises(WakeupError):
                    sync.poll(20)  # no records left: it waits inside poll() until wakeup()

            t = threading.Thread(target=wait_inside_poll)
            t.start()
            try:
                deadline = time.monotonic() + 10
                while sync._thread.owner is None and time.monotonic() < deadline:  # inside the call
                    await asyncio.sleep(0.01)
                with pytest.raises(ConcurrentAccessError):
                    await c.commit()
            finally:
                sync.wakeup()
                t.join(15)
            assert not t.is_alive()
            assert (await c.commit())[TopicPartition(topic, 0)].offset == 10

    run(main())


def test_async_listener_commits_in_revoke_and_a_loop_wait_is_refused(
        broker: EmbeddedBroker, topic_factory: Callable[..., str], unique_name: Callable[[str], str]) -> None:
    topic = topic_factory(partitions=2)
    produce(broker, topic, 100, 2)
    group = unique_name("g")
    calls: list[str] = []

    class Listener:
        def __init__(self, consumer: AsyncKafkaConsumer) -> None:
            self.consumer = consumer

        async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
            calls.append(f"assigned {len(partitions)}")

        async def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
            calls.append(f"revoked {len(partitions)}")
            if partitions:
                await self.consumer.commit()

    class SleepyListener:
        async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
            await asyncio.sleep(0.01)

        async def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
            pass

    async def main() -> None:
        c = AsyncKafkaConsumer(conf(broker, group))
        c.subscribe([topic], Listener(c))
        n = 0
        while n < 100:
            n += len(await c.poll(10.0))
        await c.close()  # revokes: the async listener commits synchronously inside the rebalance
        c2 = AsyncKafkaConsumer(conf(broker, unique_name("g")))
        c2.subscribe([topic], SleepyListener())
        with pytest.raises(IllegalStateError, match="needs the event loop"):
            for _ in range(100):
                await c2.poll(0.2)
        await c2.close()

    run(main())
    assert calls[0] == "assigned 2" and calls[-1] == "revoked 2", calls
    with KafkaConsumer(conf(broker, group)) as sync:
        committed = sync.committed([TopicPartition(topic, p) for p in range(2)])
    assert {tp.partition: om.offset for tp, om in committed.items() if om} == {0: 50, 1: 50}


@pytest.mark.slow
@pytest.mark.classic_only(reason="blocks the loop for 3 x the member's own session.timeout.ms (2 s); "
                          "under the consumer protocol the session is the broker's")
def test_blocked_loop_keeps_membership(unique_name: Callable[[str], str]) -> None:
    """KIP-62: librdkafka's threads heartbeat while user code blocks the loop for 3 x session.timeout.ms
    (max.poll.interval.ms is longer): no rebalance, no revocation, same member."""
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("live", 2)
        produce(broker, "live", 20, 2)
        revoked: list[list[TopicPartition]] = []

        class Listener:
            def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
                pass

            def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
                revoked.append(partitions)

        async def main() -> tuple[str | None, str | None, int, int, int]:
            async with AsyncKafkaConsumer(conf(broker, unique_name("g"), session_timeout_ms=2000,
                                               heartbeat_interval_ms=300,
                                               max_poll_interval_ms=30000)) as c:
                c.subscribe(["live"], Listener())
                n = 0
                while n < 20:
                    n += len(await c.poll(10.0))
                before = c.member_id()
                time.sleep(6.0)  # user code blocks the event loop for 3 x session.timeout.ms
                await c.poll(1.0)
                return (before, c.member_id(), c.metrics().get("rebalances", 0), len(c.assignment()),
                        len(revoked))

        before, after, _rebalances, assigned, revocations = run(main())
        assert before is not None and before == after
        assert revocations == 0 and assigned == 2


# -- producer -----------------------------------------------------------------------------------
@pytest.mark.parametrize("loop", LOOPS)
def test_send_resolves_metadata_in_order(broker: EmbeddedBroker, topic_factory: Callable[..., str],
                                         loop: str) -> None:
    topic = topic_factory(partitions=2)

    async def main() -> list[Any]:
        async with AsyncKafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 1}) as p:
            one = await p.send(topic, value=b"first", partition=0)
            futures = [p.send(topic, value=b"%d" % i, partition=i % 2) for i in range(1000)]
            mds = await asyncio.gather(*futures)
            return [one, *mds]

    mds = run(main(), loop)
    assert mds[0].offset == 0 and mds[0].partition == 0
    by_part: dict[int, list[int]] = {0: [], 1: []}
    for md in mds[1:]:
        by_part[md.partition].append(md.offset)
    assert by_part[0] == list(range(1, 501)) and by_part[1] == list(range(500))


def test_send_waiting_for_metadata_does_not_block_the_loop_and_keeps_order() -> None:
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("slow", 1)
        broker.set_rtt(broker_id=1, rtt_ms=400)

        async def main() -> tuple[list[int], int, float]:
            async with AsyncKafkaProducer({"bootstrap.servers": broker.bootstrap_servers,
                                           "max.block.ms": 20000}) as p:
                with Ticker() as ticker:
                    t0 = time.monotonic()
                    futures = [p.send("slow", value=b"%d" % i) for i in range(20)]
                    returned = time.monotonic() - t0
                    mds = await asyncio.gather(*futures)
                    broker.set_rtt(broker_id=1, rtt_ms=0)
                return [md.offset for md in mds], ticker.ticks, returned

        offsets, ticks, returned = run(main())
        assert offsets == list(range(20))
        assert returned < 0.3, f"send() blocked the loop for {returned:.3f} s"
        assert ticks >= 20, ticks


def test_send_into_a_full_buffer_waits_on_the_loop_in_order() -> None:
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("full", 1)
        broker.set_rtt(broker_id=1, rtt_ms=100)

        async def main() -> tuple[list[int], int, int]:
            async with AsyncKafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5,
                                           "queue.buffering.max.messages": 50}) as p:
                await p.send("full", value=b"warm")
                with Ticker() as ticker:
                    futures = [p.send("full", value=b"%d" % i) for i in range(500)]
                    waited = len(p._backlog)
                    mds = await asyncio.gather(*futures)
                return [md.offset for md in mds], waited, ticker.ticks

        offsets, waited, ticks = run(main())
        assert offsets == list(range(1, 501))
        assert waited > 0, "the buffer never filled: the test did not exercise the wait"
        assert ticks >= 5, ticks


def test_send_bounded_by_max_block_ms_without_blocking_the_loop() -> None:
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.set_down(1)

        async def main() -> tuple[float, BaseException | None, int]:
            async with AsyncKafkaProducer({"bootstrap.servers": broker.bootstrap_servers,
                                           "max.block.ms": 600}) as p:
                with Ticker() as ticker:
                    t0 = time.monotonic()
                    try:
                        await p.send("nowhere", value=b"x")
                        exc: BaseException | None = None
                    except KafkaTimeoutError as e:
                        exc = e
                    took = time.monotonic() - t0
                return took, exc, ticker.ticks

        took, exc, ticks = run(main())
        assert isinstance(exc, KafkaTimeoutError) and "max.block.ms=600" in str(exc)
        assert 0.5 <= took < 5.0, took
        assert ticks >= 20, ticks


def test_cancelled_send_is_still_delivered_and_close_resolves_every_future(
        broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=1)

    async def main() -> tuple[dict[str, Any], int]:
        p = AsyncKafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 50})
        await p.send(topic, value=b"warm")
        task = asyncio.create_task(asyncio.wait_for(p.send(topic, value=b"cancelled"), 0.001))
        with pytest.raises(asyncio.TimeoutError):
            await task
        futures = [p.send(topic, value=b"%d" % i) for i in range(100)]
        await p.flush()
        metrics = p.metrics()
        await p.close()
        assert all(f.done() for f in futures)
        return metrics, sum(1 for f in futures if f.exception() is None)

    metrics, delivered = run(main())
    assert delivered == 100
    assert metrics["records_delivered"] == 102  # the cancelled awaiter's record was delivered too
    with KafkaConsumer(conf(broker, "reader")) as c:
        c.assign([TopicPartition(topic, 0)])
        values = []
        while len(values) < 102:
            values += [r.value for r in c.poll(5.0)]
    assert b"cancelled" in values


def test_two_consumers_and_a_producer_on_one_loop(broker: EmbeddedBroker, topic_factory: Callable[..., str],
                                                  unique_name: Callable[[str], str]) -> None:
    topic = topic_factory(partitions=2)

    async def consume(partition: int, n: int) -> list[bytes]:
        got: list[bytes] = []
        async with AsyncKafkaConsumer(conf(broker, unique_name("g"))) as c:
            c.assign([TopicPartition(topic, partition)])
            while len(got) < n:
                got += [r.value for r in await c.poll(10.0)]
        return got

    async def main() -> tuple[list[bytes], list[bytes]]:
        readers = asyncio.gather(consume(0, 300), consume(1, 300))
        async with AsyncKafkaProducer({"bootstrap.servers": broker.bootstrap_servers}) as p:
            for i in range(600):
                p.send(topic, value=b"%d" % i, partition=i % 2)
            await p.flush()
        a, b = await readers
        return a, b

    a, b = run(main())
    assert a == [b"%d" % i for i in range(0, 600, 2)] and b == [b"%d" % i for i in range(1, 600, 2)]


def test_closing_the_loop_with_clients_open_warns_and_does_not_crash(broker: EmbeddedBroker) -> None:
    script = f"""
import asyncio, gc, time, warnings
warnings.simplefilter("always")
from kipconsumer.aio import AsyncKafkaConsumer, AsyncKafkaProducer
async def main():
    p = AsyncKafkaProducer({{"bootstrap.servers": {broker.bootstrap_servers!r}, "linger.ms": 300}})
    c = AsyncKafkaConsumer({{"bootstrap.servers": {broker.bootstrap_servers!r}, "group.id": "gone"}})
    c.subscribe(["gone-topic"])
    await c.poll(0.1)
    await p.send("gone-topic", value=b"warm")  # the topic's metadata: later sends enqueue at once
    for i in range(10):
        p.send("gone-topic", value=b"x")
    return p, c
loop = asyncio.new_event_loop()
p, c = loop.run_until_complete(main())
loop.close()          # deliveries arrive after this
time.sleep(1.0)
del c
gc.collect()
p.producer.close(1)
print("survived")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "always"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "survived" in out.stdout
    assert "event loop was closed before the producer" in out.stderr
    assert "unclosed <AsyncKafkaConsumer" in out.stderr


# -- a group of async, sync and confluent-kafka members ------------------------------------------
@pytest.mark.slow
@pytest.mark.interop
def test_async_sync_and_confluent_members_share_partitions_exactly_once(
        unique_name: Callable[[str], str]) -> None:
    """An async kipconsumer member reads and commits a first half alone; a sync kipconsumer member and
    a confluent-kafka member join (a rebalance) and the three read the second half: every record is
    processed once, each partition's records by its owner at the time, from the committed offsets."""
    from confluent_kafka import Consumer as CConsumer

    nparts, half = 6, 3000
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("mixed", nparts)
        group = unique_name("mixed")
        session = group_timeouts(2500, 300)
        # under the session's consumer protocol the confluent-kafka member uses it too (incremental)
        incremental = session_consumer_protocol()
        protocol = {"group.protocol": "consumer"} if incremental else {}
        produce(broker, "mixed", half, nparts)
        seen: Counter[tuple[int, int]] = Counter()
        who: Counter[str] = Counter()
        lock = threading.Lock()
        stop = threading.Event()
        # each member's partitions (eager: all revoked, then all assigned; incremental: what moved)
        owned: dict[str, set[int]] = {"async": set(), "sync": set(), "confluent": set()}

        class Owned:
            def __init__(self, member: str) -> None:
                self.member = member

            def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
                owned[self.member] |= {tp.partition for tp in partitions}

            def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
                owned[self.member] -= {tp.partition for tp in partitions}

        def record(member: str, partition: int, offset: int) -> None:
            with lock:
                seen[(partition, offset)] += 1
                who[member] += 1

        def sync_member() -> None:
            c = KafkaConsumer({**conf(broker, group), **session})
            c.subscribe(["mixed"], Owned("sync"))
            while not stop.is_set():
                records = c.poll(0.2)
                for r in records:
                    record("sync", r.partition, r.offset)
                if len(records):
                    c.commit_sync()
            c.close()

        def confluent_member() -> None:
            c = CConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                           "enable.auto.commit": False, "auto.offset.reset": "earliest", **session,
                           **protocol})
            c.subscribe(["mixed"], **confluent_rebalance_callbacks(
                incremental, lambda _c, ps: owned["confluent"].update(tp.partition for tp in ps),
                lambda _c, ps: owned["confluent"].difference_update(tp.partition for tp in ps)))
            while not stop.is_set():
                msgs = c.consume(100, 0.2)
                for m in msgs:
                    if m.error() is None:
                        record("confluent", m.partition(), m.offset())
                if msgs:
                    c.commit(asynchronous=False)
            c.close()

        async def main() -> None:
            async with AsyncKafkaConsumer({**conf(broker, group), **session}) as c:
                c.subscribe(["mixed"], Owned("async"))
                while len(seen) < half:
                    records = await c.poll(1.0)
                    for r in records:
                        record("async", r.partition, r.offset)
                    if len(records):
                        await c.commit()
                threads = [threading.Thread(target=sync_member), threading.Thread(target=confluent_member)]
                for t in threads:
                    t.start()
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 60
                # the group rebalances to three members while the async one keeps polling
                while loop.time() < deadline and not (min(map(len, owned.values())) > 0
                                                      and sum(map(len, owned.values())) == nparts):
                    records = await c.poll(0.2)
                    for r in records:
                        record("async", r.partition, r.offset)
                    if len(records):
                        await c.commit()
                assert min(map(len, owned.values())) > 0, f"the group did not rebalance to 3 members: {owned}"
                await loop.run_in_executor(None, produce_second_half, broker, nparts, half)
                while len(seen) < 2 * half and loop.time() < deadline + 60:
                    records = await c.poll(0.2)
                    for r in records:
                        record("async", r.partition, r.offset)
                    if len(records):
                        await c.commit()
                stop.set()
                for t in threads:
                    await loop.run_in_executor(None, t.join)

        try:
            run(main())
        finally:
            stop.set()  # a failed main() must not leave the members polling (the run would not exit)
        assert len(seen) == 2 * half, f"{2 * half - len(seen)} records never processed"
        assert set(seen.values()) == {1}, [k for k, v in seen.items() if v > 1][:10]
        assert who["async"] > 0 and who["sync"] > 0 and who["confluent"] > 0, who


def produce_second_half(broker: EmbeddedBroker, nparts: int, half: int) -> None:
    _produce_spread(broker, "mixed", range(half, 2 * half), nparts)


def test_example_service_runs() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "aio_service.py")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "enriched 3000 records" in out.stdout
