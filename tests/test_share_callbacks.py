"""Issue #30: the acknowledgement commit callback of KafkaShareConsumer (``commit_async(callback)`` /
``set_acknowledgement_commit_callback``, Java's ``AcknowledgementCommitCallback``) and the share
consumer's metrics, on the embedded broker (librdkafka's mock share groups). Each test starts its own
EmbeddedBroker (share settings are cluster-wide there)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from share_support import embedded_jobs

from kipconsumer import AcknowledgeType, KafkaShareConsumer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import IllegalStateError, KafkaError

Outcome = tuple[dict[TopicPartition, set[int]], "KafkaError | None", int]


@pytest.fixture
def mock() -> Iterator[EmbeddedBroker]:
    with embedded_jobs() as b:
        yield b


def _consumer(b: EmbeddedBroker, mode: str = "explicit") -> KafkaShareConsumer:
    return KafkaShareConsumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "sg",
                               "share.acknowledgement.mode": mode})


def _recorder(out: list[Outcome]):  # type: ignore[no-untyped-def]
    def cb(offsets: dict[TopicPartition, set[int]], exc: KafkaError | None) -> None:
        out.append((offsets, exc, threading.get_ident()))
    return cb


def _poll_all(c: KafkaShareConsumer, n: int, ack: bool = True) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        for r in c.poll(0.3):
            got.append((r.partition, r.offset))
            if ack:
                c.acknowledge(r, AcknowledgeType.ACCEPT)
    return got


def _wait(c: KafkaShareConsumer, cond, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "no acknowledgement commit outcome in time"
        c.poll(0.1)


def test_commit_async_callback_gets_per_partition_outcomes_on_the_owner_thread(mock: EmbeddedBroker) -> None:
    out: list[Outcome] = []
    with _consumer(mock) as c:
        c.subscribe(["jobs"])
        # installs the callback (acknowledgements sent with later polls get it too, as Java's)
        c.commit_async(_recorder(out))
        assert len(_poll_all(c, 20)) == 20
        c.commit_async()
        assert all(tid == threading.get_ident() for _, _, tid in out)
        _wait(c, lambda: sum(len(o) for d, _, _ in out for o in d.values()) >= 20)
        acked = {tp: offs for d, _, _ in out for tp, offs in d.items()}
        assert acked == {TopicPartition("jobs", p): set(range(10)) for p in (0, 1)}
        assert all(exc is None and tid == threading.get_ident() for _, exc, tid in out)
        m = c.metrics()
        assert m["acknowledgement_commits"] == len(out) and m["acknowledgement_commit_errors"] == 0
        assert m["partition_records_returned"] == {TopicPartition("jobs", p): 10 for p in (0, 1)}
        assert m["records_returned"] == 20 and m["polls"] >= 1 and m["partitions_fetched"] == 2


def test_expired_lock_outcome_is_an_error(mock: EmbeddedBroker) -> None:
    out: list[Outcome] = []
    with _consumer(mock) as c:
        c.set_acknowledgement_commit_callback(_recorder(out))
        c.subscribe(["jobs"])
        deadline = time.monotonic() + 30
        batch = c.poll(0.5)
        while not batch and time.monotonic() < deadline:
            batch = c.poll(0.5)
        assert batch
        time.sleep(2.5)  # the 1 s lock expires: the broker refuses the acknowledgement
        for r in batch:
            c.acknowledge(r, AcknowledgeType.ACCEPT)
        c.commit_async()
        _wait(c, lambda: any(exc is not None for _, exc, _ in out))
        errors = [exc for _, exc, _ in out if exc is not None]
        assert all(isinstance(e, KafkaError) for e in errors), errors
        assert c.metrics()["acknowledgement_commit_errors"] >= 1


def test_callback_exception_propagates_and_reentry_is_refused(mock: EmbeddedBroker) -> None:
    calls: list[str] = []

    def cb(offsets: dict[TopicPartition, set[int]], exc: KafkaError | None) -> None:
        calls.append("cb")
        with pytest.raises(IllegalStateError, match="acknowledgement commit callback"):
            c.poll(0)
        with pytest.raises(IllegalStateError, match="acknowledgement commit callback"):
            c.close()
        c.metrics()  # allowed
        raise RuntimeError("from the callback")

    c = _consumer(mock, "implicit")
    try:
        c.subscribe(["jobs"])
        c.set_acknowledgement_commit_callback(cb)
        got: list[tuple[int, int]] = []
        raised = 0
        deadline = time.monotonic() + 30
        while (len(got) < 20 or not raised) and time.monotonic() < deadline:
            try:  # the implicit acknowledgements travel with the polls; their outcomes come later
                got += [(r.partition, r.offset) for r in c.poll(0.3)]
            except RuntimeError as exc:
                assert "from the callback" in str(exc)
                raised += 1
        assert raised and calls
        assert sorted(got) == sorted((i % 2, i // 2) for i in range(20)), "a callback's raise lost records"
    finally:
        try:
            c.close()
        except RuntimeError:
            pass  # a last outcome's callback raised inside close(): after the close, as KafkaConsumer


def test_callback_type_checked(mock: EmbeddedBroker) -> None:
    with _consumer(mock) as c:
        with pytest.raises(TypeError):
            c.commit_async(callback=42)  # type: ignore[arg-type]


def test_metrics_statistics_summary(mock: EmbeddedBroker) -> None:
    """statistics.interval.ms > 0: metrics()["statistics"] summarises librdkafka's last statistics
    document (served by poll()), as KafkaConsumer's; None without."""
    with KafkaShareConsumer({"bootstrap.servers": mock.bootstrap_servers, "group.id": "sg",
                             "statistics.interval.ms": 200}) as c, _consumer(mock) as plain:
        c.subscribe(["jobs"])
        # what poll() returned per partition: records and value bytes (a record whose 1 s lock expired
        # on a loaded machine before the next poll accepted it is fetched, and returned, again)
        got = {p: [0, 0] for p in (0, 1)}
        values: set[bytes] = set()

        def poll() -> None:
            for r in c.poll(0.2):
                got[r.partition][0] += 1
                got[r.partition][1] += len(r.value)
                values.add(r.value)

        deadline = time.monotonic() + 15
        while c.metrics()["statistics"] is None and time.monotonic() < deadline:
            poll()
        stats = c.metrics()["statistics"]
        assert stats is not None and stats["brokers_up"] >= 1 and stats["rx"] > 0 and stats["tx"] > 0
        assert stats["group"]["state"] == "up" and stats["group"]["assigned_partitions"] == 2
        deadline = time.monotonic() + 15
        want: dict[TopicPartition, dict[str, int]] = {}
        while time.monotonic() < deadline:  # the 20 records fetched, then a document after it
            poll()
            parts = c.metrics()["statistics"]["partitions"]
            want = {TopicPartition("jobs", p): {"fetched_records": n, "fetched_bytes": size}
                    for p, (n, size) in got.items()}
            if len(values) == 20 and parts == want:
                break
        assert len(values) == 20
        assert parts == want
        assert plain.metrics()["statistics"] is None


def test_async_commit_async_callback_runs_on_the_loop(mock: EmbeddedBroker) -> None:
    import asyncio

    from kipconsumer.aio import AsyncKafkaShareConsumer

    async def main() -> tuple[set[int], set[int]]:
        loop_thread = threading.get_ident()
        threads: set[int] = set()
        offsets: set[int] = set()

        def cb(done: dict[TopicPartition, set[int]], exc: KafkaError | None) -> None:
            threads.add(threading.get_ident())
            for offs in done.values():
                offsets.update(offs)

        conf = {"bootstrap.servers": mock.bootstrap_servers, "group.id": "sg"}
        async with AsyncKafkaShareConsumer(conf) as c:
            await c.subscribe(["jobs"])
            await c.commit_async(cb)
            n = 0
            deadline = time.monotonic() + 30
            while (n < 20 or len(offsets) < 10) and time.monotonic() < deadline:
                n += len(await c.poll(0.3))
            assert n == 20
        return threads, {loop_thread}

    threads, loop_thread = asyncio.run(main())
    assert threads == loop_thread


def test_callback_exception_inside_close_is_raised_after_the_close(mock: EmbeddedBroker) -> None:
    """Outcomes of the acknowledgements close() sends reach the callback inside close(); its exception
    is raised once the consumer is closed (as KafkaConsumer's close() does with a callback's)."""
    seen: list[int] = []

    def cb(offsets: dict[TopicPartition, set[int]], exc: KafkaError | None) -> None:
        seen.append(len(offsets))
        raise RuntimeError("from the callback in close")

    c = _consumer(mock)
    c.subscribe(["jobs"])
    batch: list[Any] = []
    deadline = time.monotonic() + 30
    while not batch and time.monotonic() < deadline:
        batch = list(c.poll(0.3))
    assert batch
    c.set_acknowledgement_commit_callback(cb)
    for r in batch:
        c.acknowledge(r, AcknowledgeType.ACCEPT)
    with pytest.raises(RuntimeError, match="in close"):
        c.close()
    assert seen
    with pytest.raises(IllegalStateError):
        c.poll(0)
    c.close()  # closed: does nothing
