"""A ``KafkaConsumer.poll()`` whose records never reach the caller gives them back: the next ``poll()``
returns them again. Two ways records are taken and then lost to an exception: a signal's
``KeyboardInterrupt`` right after the native poll, and one raised while ``poll()`` leaves the thread
contract (``kipconsumer._owned``). Main lost both (their positions were already past them: with
auto-commit, committed). Embedded broker, one partition per topic or three."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kc_testing import make_consumer
from support import produce

from kipconsumer import KafkaConsumer, TopicPartition
from kipconsumer.broker import EmbeddedBroker


class _InterruptAfterNativePoll:
    """The consumer's native handle, with a KeyboardInterrupt raised right after every
    ``every``-th native poll that returned records: where a signal's handler runs (the first
    bytecode after the C call), the batch already taken from the fetch buffer."""

    def __init__(self, native: Any, every: int) -> None:
        self._native = native
        self.every = every
        self.nonempty = 0
        self.fired = 0

    def poll(self, timeout: float) -> Any:
        records = self._native.poll(timeout)
        if records:
            self.nonempty += 1
            if self.nonempty % self.every == 0:
                self.fired += 1
                raise KeyboardInterrupt
        return records

    def __getattr__(self, name: str) -> Any:
        return getattr(self._native, name)


def _drain(c: KafkaConsumer, total: int, catch: type[BaseException]) -> tuple[list[tuple[int, int]], int]:
    """Polls until ``total`` records came (30 s at most), catching ``catch``: the (partition, offset)
    of every record returned, in order, and how many polls raised."""
    seen: list[tuple[int, int]] = []
    raised = 0
    deadline = time.monotonic() + 30
    while len(seen) < total and time.monotonic() < deadline:
        try:
            batch = c.poll(0.2)
        except catch:
            raised += 1
            continue
        seen.extend((r.partition, r.offset) for r in batch)
    return seen, raised


def _every_record_once(seen: list[tuple[int, int]], per_partition: int, partitions: int) -> None:
    expected = sorted((p, o) for p in range(partitions) for o in range(per_partition))
    missing = sorted(set(expected) - set(seen))
    assert not missing, f"{len(missing)} records lost, e.g. {missing[:5]}"
    assert sorted(seen) == expected, "a record came twice"


def test_an_interrupt_after_the_native_poll_gives_the_batch_back(
        broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(3)
    produce(broker.bootstrap_servers, topic, {0: 200, 1: 200, 2: 200})
    with make_consumer(broker, max_poll_records=37) as c:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        hook = _InterruptAfterNativePoll(c._native, every=3)
        c._native = hook  # type: ignore[assignment]
        seen, raised = _drain(c, 600, KeyboardInterrupt)
        c._native = hook._native
    assert raised == hook.fired >= 4
    _every_record_once(seen, 200, 3)


def test_an_interrupt_while_poll_leaves_gives_the_batch_back(
        broker: EmbeddedBroker, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(1)
    produce(broker.bootstrap_servers, topic, {0: 300})
    with make_consumer(broker, max_poll_records=20) as c:
        c.assign([TopicPartition(topic, 0)])
        thread = c._thread
        calls = [0]

        class LeaveThenInterrupt:
            """The consumer's OwnerThread, with a KeyboardInterrupt raised right after every fourth
            leave() (where CPython runs a pending signal handler: after a C call returns)."""

            def __getattr__(self, name: str) -> object:
                return getattr(thread, name)

            def leave(self) -> bool:
                done: bool = thread.leave()
                calls[0] += 1
                if calls[0] % 4 == 0:
                    raise KeyboardInterrupt
                return done

        c._thread = LeaveThenInterrupt()  # type: ignore[assignment]
        seen, raised = _drain(c, 300, KeyboardInterrupt)
        c._thread = thread
    assert raised >= 3
    _every_record_once(seen, 300, 1)


@pytest.mark.parametrize("auto_commit", [False, True])
def test_records_given_back_are_what_a_commit_of_the_position_covers(
        broker: EmbeddedBroker, topic_factory: Callable[..., str], auto_commit: bool) -> None:
    """After the interrupted poll the position is the batch's first offset again (what commit_sync()
    and auto-commit store), not past it."""
    topic = topic_factory(1)
    produce(broker.bootstrap_servers, topic, {0: 50})
    tp = TopicPartition(topic, 0)
    with make_consumer(broker, group=f"g-{topic}", max_poll_records=10,
                       enable_auto_commit=auto_commit) as c:
        c.assign([tp])
        first = c.poll(5)
        assert len(first) == 10
        hook = _InterruptAfterNativePoll(c._native, every=1)
        c._native = hook  # type: ignore[assignment]
        with pytest.raises(KeyboardInterrupt):
            c.poll(5)
        c._native = hook._native
        assert c.position(tp) == 10
        c.commit_sync()
        again = c.poll(5)
        assert [r.offset for r in again][:1] == [10]
