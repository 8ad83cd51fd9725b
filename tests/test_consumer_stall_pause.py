"""``poll.stall.fetch.pause.ms`` (csrc/stall_pause.h): while the application does not call poll(), the
consumer pauses librdkafka's fetchers and releases what librdkafka queued; the next poll() resumes
them. Checked: librdkafka stops fetching during a stall (its queue stays empty; the control without the
setting fills it), every record still comes exactly once and in order, the application's own pause()
wins, seek() after a stall, close() during one, and a max.poll.interval.ms expiry during a stall
(KIP-62: the member leaves, the next poll() rejoins) as without the setting.

Against the session ``EmbeddedBroker`` over TCP; data produced with confluent_kafka.
"""

from __future__ import annotations

import time

import pytest
from kc_testing import make_consumer as consumer
from test_consumer_kip41 import produce, tps

from kipconsumer import KafkaConsumer, TopicPartition
from kipconsumer.errors import CommitFailedError, ConfigError

NPART, PER, MPR = 4, 15_000, 500
PAUSE_MS = 200
#: librdkafka's prefetch bounds well below the backlog (60,000 records of ~120 B): a fetcher that runs
#: refills librdkafka's queue whenever something takes from it
BOUNDS = {"queued_min_messages": 2000, "queued_max_messages_kbytes": 256}


def _stall(c: KafkaConsumer, seconds: float) -> list[dict[str, float]]:
    """No poll() for `seconds`; samples librdkafka's queue length and the stall counters meanwhile."""
    samples: list[dict[str, float]] = []
    t0 = time.monotonic()
    while (t := time.monotonic() - t0) < seconds:
        m = c.metrics()
        samples.append({"t": t, "prefetched": m["prefetched_records"], "paused": m["stall_fetch_paused"]})
        time.sleep(0.05)
    return samples


def _read(c: KafkaConsumer, got: dict[int, list[int]], total: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(v) for v in got.values()) < total:
        assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
        for r in c.poll(0.2):
            got[r.partition].append(r.offset)


def _first_records(c: KafkaConsumer, got: dict[int, list[int]]) -> None:
    deadline = time.monotonic() + 30
    while not any(got.values()):
        assert time.monotonic() < deadline, "no records"
        for r in c.poll(0.2):
            got[r.partition].append(r.offset)


def _filled(broker, topic_factory) -> str:
    topic = topic_factory(partitions=NPART)
    produce(broker, topic, {p: PER for p in range(NPART)}, value_size=100)
    return topic


@pytest.mark.parametrize("thread", [True, False], ids=["prefetch-thread", "no-prefetch-thread"])
def test_a_stall_pauses_the_fetchers_and_every_record_comes_once_after(broker, topic_factory, unique_name,
                                                                        thread):
    """With the prefetch thread (the default) the fetch buffer is released too and fetched again after
    the stall (the seek guard watches the refetch); without it the buffer keeps what poll() moved."""
    topic = _filled(broker, topic_factory)
    with consumer(broker, None, max_poll_records=MPR, poll_stall_fetch_pause_ms=PAUSE_MS,
                  poll_prefetch_thread=thread, **BOUNDS) as c:
        c.assign(tps(topic, range(NPART)))
        got: dict[int, list[int]] = {p: [] for p in range(NPART)}
        _first_records(c, got)
        samples = _stall(c, 2.0)
        m = c.metrics()
        assert m["stall_fetch_paused"] is True and m["stall_fetch_pauses"] == 1, m
        # librdkafka's queue was released at the pause and stays empty: its fetchers do not run
        late = [s["prefetched"] for s in samples if s["t"] >= 4 * PAUSE_MS / 1000]
        assert late and max(late) == 0, samples
        assert m["stall_released_records"] > 0, m
        if thread:
            assert m["buffered_records"] == 0 and m["stall_refetch_records"] > 0, m
        else:
            assert m["buffered_records"] > 0 and m["stall_refetch_records"] == 0, m
        _read(c, got, NPART * PER)
        assert c.metrics()["stall_fetch_paused"] is False
        for p in range(NPART):  # none lost, none twice, in order
            assert got[p] == list(range(PER)), (p, len(got[p]), got[p][:5])


def test_without_the_setting_librdkafka_keeps_fetching_while_stalled(broker, topic_factory, unique_name):
    """The control of the test above: the same stall fills librdkafka's queue."""
    topic = _filled(broker, topic_factory)
    with consumer(broker, None, max_poll_records=MPR, **BOUNDS) as c:
        c.assign(tps(topic, range(NPART)))
        got: dict[int, list[int]] = {p: [] for p in range(NPART)}
        _first_records(c, got)
        samples = _stall(c, 2.0)
        m = c.metrics()
        assert m["stall_fetch_pauses"] == 0 and m["stall_fetch_paused"] is False, m
        late = [s["prefetched"] for s in samples if s["t"] >= 4 * PAUSE_MS / 1000]
        assert min(late) >= MPR, samples
        _read(c, got, NPART * PER)
        for p in range(NPART):
            assert got[p] == list(range(PER)), (p, len(got[p]))


def test_a_partition_the_application_paused_stays_paused(broker, topic_factory, unique_name):
    """Paused before the stall (partition 0) or during it, before the next poll() (partition 1): the
    resume after the stall leaves both paused: librdkafka fetches nothing of them (its position
    does not move) and poll() returns nothing of them until the application resumes them."""
    topic = _filled(broker, topic_factory)
    with consumer(broker, None, max_poll_records=MPR, poll_stall_fetch_pause_ms=PAUSE_MS, **BOUNDS) as c:
        c.assign(tps(topic, range(NPART)))
        got: dict[int, list[int]] = {p: [] for p in range(NPART)}
        _first_records(c, got)
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        c.pause([tp0])
        _stall(c, 1.0)
        assert c.metrics()["stall_fetch_paused"] is True
        c.pause([tp1])  # the stall thread paused it too: the application's pause wins
        pos = {tp: c._native.librdkafka_position(tp) for tp in (tp0, tp1)}
        before = {0: len(got[0]), 1: len(got[1])}
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # the others are read meanwhile
            for r in c.poll(0.1):
                got[r.partition].append(r.offset)
        assert c.metrics()["stall_fetch_paused"] is False
        assert {tp0, tp1} <= c.paused()
        assert {tp: c._native.librdkafka_position(tp) for tp in (tp0, tp1)} == pos
        assert {0: len(got[0]), 1: len(got[1])} == before
        assert len(got[2]) > before.get(2, 0) or len(got[2]) == PER
        c.resume([tp0, tp1])
        _read(c, got, NPART * PER)
        for p in range(NPART):
            assert got[p] == list(range(PER)), (p, len(got[p]))


def test_seek_after_a_stall_and_close_during_one(broker, topic_factory, unique_name):
    topic = _filled(broker, topic_factory)
    c = consumer(broker, None, max_poll_records=MPR, poll_stall_fetch_pause_ms=PAUSE_MS, **BOUNDS)
    try:
        c.assign(tps(topic, range(NPART)))
        got: dict[int, list[int]] = {p: [] for p in range(NPART)}
        _first_records(c, got)
        _stall(c, 1.0)
        assert c.metrics()["stall_fetch_paused"] is True
        tp2 = TopicPartition(topic, 2)
        c.seek(tp2, 100)  # before the poll that resumes: the fetcher restarts at the seek
        got = {p: [] for p in range(NPART)}
        deadline = time.monotonic() + 30
        while len(got[2]) < PER - 100:
            assert time.monotonic() < deadline, len(got[2])
            for r in c.poll(0.2):
                got[r.partition].append(r.offset)
        assert got[2] == list(range(100, PER))
        _stall(c, 1.0)
        assert c.metrics()["stall_fetch_paused"] is True
        t0 = time.monotonic()
        c.close()  # while librdkafka's fetchers are paused
        assert time.monotonic() - t0 < 10
    finally:
        c.close()


@pytest.mark.slow
@pytest.mark.classic_only(reason="it sets session.timeout.ms (the broker's under the consumer protocol) and "
                          "checks the classic leave at a poll-interval expiry")
def test_a_poll_interval_expiry_during_a_stall_leaves_and_rejoins(broker, topic_factory, unique_name):
    """KIP-62 as without the setting: the pause's release of librdkafka's queue moves librdkafka's
    poll timer by at most the pause (<= max.poll.interval.ms / 20), so the member still leaves; the
    next poll() reports the expiry, rejoins and reads on from the committed offsets, once each."""
    topic = _filled(broker, topic_factory)
    interval = 3000
    c = consumer(broker, unique_name("g-stall"), max_poll_records=MPR, session_timeout_ms=interval,
                 max_poll_interval_ms=interval, poll_stall_fetch_pause_ms=interval // 20)
    try:
        c.subscribe([topic])
        got: dict[int, list[int]] = {p: [] for p in range(NPART)}
        deadline = time.monotonic() + 30
        while sum(len(v) for v in got.values()) < 4 * MPR:
            assert time.monotonic() < deadline
            for r in c.poll(0.2):
                got[r.partition].append(r.offset)
        c.commit_sync()
        committed = {p: (got[p][-1] + 1 if got[p] else 0) for p in range(NPART)}
        _stall(c, interval / 1000 + 3.0)  # past the interval, and past the pause's grace
        assert c.metrics()["stall_fetch_pauses"] >= 1
        with pytest.raises(CommitFailedError):
            c.commit_sync()
        after: dict[int, list[int]] = {p: [] for p in range(NPART)}
        deadline = time.monotonic() + 60
        while sum(len(v) for v in after.values()) < sum(PER - committed[p] for p in range(NPART)):
            assert time.monotonic() < deadline, {p: len(v) for p, v in after.items()}
            for r in c.poll(0.2):
                after[r.partition].append(r.offset)
        m = c.metrics()
        assert m["poll_interval_expiries"] == 1, m
        for p in range(NPART):  # from the committed offsets on, each record once, in order
            assert after[p] == list(range(committed[p], PER)), (p, after[p][:3], committed[p])
    finally:
        c.close()


@pytest.mark.parametrize("value, interval", [(-1, 300_000), (60_001, 3_000_000), (15_001, 300_000),
                                             (151, 3000), ("x", 300_000)])
def test_the_setting_is_checked(broker, value, interval):
    with pytest.raises(ConfigError, match="poll.stall.fetch.pause.ms") as info:
        # no group: the classic rule, effective max.poll.interval.ms = max(it, session.timeout.ms)
        consumer(broker, None, poll_stall_fetch_pause_ms=value, max_poll_interval_ms=interval,
                 session_timeout_ms=3000, heartbeat_interval_ms=1000)
    if value == 151:  # at most max.poll.interval.ms / 20
        assert "1..150" in str(info.value)


def test_the_stall_thread_can_give_back_what_librdkafkas_allocator_holds():
    """The release's memory goes back through librdkafka's own allocator: the bundled jemalloc's
    mallctl is found (its arenas are purged) exactly when librdkafka allocates with it."""
    from kipconsumer._loader import allocator, allocator_mallctl

    assert (allocator_mallctl() != 0) == allocator().startswith("jemalloc"), allocator()
