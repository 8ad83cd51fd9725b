"""The prefetch thread (``poll.prefetch.thread``, csrc/prefetch_thread.h): fetched records move into
the fetch buffer between polls, so the first poll after a pause only drains, with KIP-41's share
rule intact; seek, pause, resume and reassignment keep their guarantees while the thread fills the
buffer concurrently.

Against the session ``EmbeddedBroker`` over TCP; data produced with confluent_kafka.
"""

from __future__ import annotations

import random
import time

import pytest
from kc_testing import make_consumer as consumer
from test_consumer_kip41 import produce, tps

from kipconsumer import TopicPartition

NPART, DEEP, SHALLOW, MPR = 6, 20_000, 200, 100


def _wait(done, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_buffer_fills_between_polls_and_the_first_poll_only_drains(broker, topic_factory, unique_name):
    topic = topic_factory(partitions=NPART)
    produce(broker, topic, {0: DEEP, **{p: SHALLOW for p in range(1, NPART)}})
    with consumer(broker, unique_name("g"), max_poll_records=MPR, poll_prefetch_thread=True) as c:
        assert c.metrics()["prefetch_thread"] is True
        c.assign(tps(topic, range(NPART)))
        # no poll() yet: the thread moves what librdkafka fetched, the shallow partitions included
        # (they sit behind partition 0's backlog in librdkafka's queue)
        _wait(lambda: all(c._native.buffered_first_offset(tp) is not None for tp in tps(topic, range(NPART))))
        m = c.metrics()
        assert m["buffered_records"] >= (NPART - 1) * SHALLOW, m
        assert m["prefetch_thread_records"] >= m["buffered_records"], m
        assert m["poll_moved_records"] == 0, m
        first = c.poll(5.0)
        after = c.metrics()
        # KIP-41: every partition with fetched data is in the first poll, which moved at most
        # one poll's worth from librdkafka's queue itself
        assert sorted({r.partition for r in first}) == list(range(NPART)), [r.partition for r in first]
        assert len(first) == MPR
        assert after["poll_moved_records"] <= MPR, after


def test_the_thread_runs_by_default(broker, unique_name):
    with consumer(broker, unique_name("g")) as c:
        assert c.metrics()["prefetch_thread"] is True


def test_without_the_thread_nothing_moves_until_poll(broker, topic_factory, unique_name):
    topic = topic_factory(partitions=NPART)
    produce(broker, topic, {0: DEEP, **{p: SHALLOW for p in range(1, NPART)}})
    with consumer(broker, unique_name("g"), max_poll_records=MPR, poll_prefetch_thread=False) as c:
        c.assign(tps(topic, range(NPART)))
        _wait(lambda: c.metrics()["prefetched_records"] >= DEEP + (NPART - 1) * SHALLOW)  # all fetched
        m = c.metrics()
        assert m["prefetch_thread"] is False
        assert m["buffered_records"] == 0 and m["prefetch_thread_records"] == 0, m
        first = c.poll(5.0)
        # the first poll moved the backlog itself (the share rule digs for the shallow partitions)
        assert sorted({r.partition for r in first}) == list(range(NPART))
        assert c.metrics()["poll_moved_records"] >= (NPART - 1) * SHALLOW


@pytest.mark.parametrize(("seed", "thread"), [(1, True), (2, True), (1, False)])
def test_seek_pause_resume_and_reassign_keep_order_while_the_thread_fills(broker, topic_factory,
                                                                          unique_name, seed, thread):
    """Random seeks, pauses, resumes and reassignments between polls while the thread moves records:
    per partition, every record follows the previous one returned (offset + 1), or is the target of
    the last seek; no record of a paused or unassigned partition is returned."""
    rng = random.Random(seed)
    nparts, per_part = 4, 5_000
    topic = topic_factory(partitions=nparts)
    produce(broker, topic, {p: per_part for p in range(nparts)})
    with consumer(broker, unique_name("g"), max_poll_records=50, poll_prefetch_thread=thread) as c:
        assigned = set(range(nparts))
        c.assign(tps(topic, assigned))
        expect: dict[int, int | None] = {p: 0 for p in range(nparts)}  # next offset, None: unknown
        paused: set[int] = set()
        returned = 0
        for step in range(200):
            recs = c.poll(0.1)  # empty while every assigned partition is paused or read
            for r in recs:
                assert r.partition in assigned and r.partition not in paused, (step, r.partition)
                want = expect[r.partition]
                assert want is None or r.offset == want, (step, r.partition, r.offset, want)
                expect[r.partition] = r.offset + 1
                assert r.value.startswith(f"{r.partition}-{r.offset}".encode())
            returned += len(recs)
            if step % 3:
                continue
            time.sleep(rng.choice((0, 0.01, 0.05)))  # let the thread move more meanwhile
            p = rng.randrange(nparts)
            action = rng.choice(("seek", "seek", "pause", "resume", "reassign"))
            if action == "seek" and p in assigned:
                off = rng.randrange(per_part)
                c.seek(TopicPartition(topic, p), off)
                expect[p] = off
            elif action == "pause" and p in assigned:
                c.pause([TopicPartition(topic, p)])
                paused.add(p)
            elif action == "resume" and p in paused:
                c.resume([TopicPartition(topic, p)])
                paused.discard(p)
            elif action == "reassign":
                assigned = set(rng.sample(range(nparts), rng.randint(1, nparts)))
                c.assign(tps(topic, assigned))
                paused.clear()
                for q in assigned:
                    c.seek(TopicPartition(topic, q), 0)
                    expect[q] = 0
        assert returned > 1_000


def test_close_from_another_thread_while_the_thread_fills(broker, topic_factory, unique_name):
    import threading

    topic = topic_factory(partitions=3)
    produce(broker, topic, {p: 3_000 for p in range(3)})
    for _ in range(5):
        c = consumer(broker, unique_name("g"), max_poll_records=10, poll_prefetch_thread=True)
        c.assign(tps(topic, range(3)))
        deadline = time.monotonic() + 20
        while not c.poll(0.2):
            assert time.monotonic() < deadline
        time.sleep(0.05)  # the thread moves more meanwhile
        closer = threading.Thread(target=c.close, args=(10.0,))
        closer.start()
        closer.join(30)
        assert not closer.is_alive()
        assert c.closed
