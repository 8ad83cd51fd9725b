"""seek(), seek_to_beginning() and seek_to_end() win over whatever was fetched before them.

Against the embedded broker and Tansu, with the default ``auto.offset.reset`` (latest: librdkafka
resolves a start offset of its own right after ``assign()``, racing the seek) and a producer writing
while the consumer assigns and seeks. Tansu's ListOffsets "latest" is a batch short (FACTS.md), so a
fetch from it returns the partition's last batch: before the seek guard, ``assign()`` +
``seek_to_beginning()`` there returned only that batch of some partition, and ``position()`` claimed
the partition had been read.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from kc_testing import Tansu

from kipconsumer import KafkaConsumer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.producer import KafkaProducer

PARTITIONS = 4
PRELOAD = 2000  # records per partition before the consumer starts


class _Cluster:
    """A topic on one broker kind, a producer and a consumer factory."""

    def __init__(self, bootstrap: str, create: object) -> None:
        self.bootstrap = bootstrap
        self.topic: str = create(PARTITIONS)  # type: ignore[operator]

    def produce(self, n_per_partition: int) -> dict[int, int]:
        """Writes n records to each partition; returns the last offset written per partition."""
        last: dict[int, int] = {}
        with KafkaProducer({"bootstrap.servers": self.bootstrap, "linger.ms": 5}) as p:
            futs = [p.send(self.topic, value=b"x" * 20, partition=i % PARTITIONS)
                    for i in range(n_per_partition * PARTITIONS)]
            p.flush(30)
        for f in futs:
            md = f.result(0)
            last[md.partition] = max(last.get(md.partition, -1), md.offset)
        return last

    def consumer(self) -> KafkaConsumer:
        # default auto.offset.reset (latest): the hostile case
        return KafkaConsumer({"bootstrap.servers": self.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                              "enable.auto.commit": False})


@pytest.fixture(params=["embedded", "tansu"])
def cluster(request: pytest.FixtureRequest, broker: EmbeddedBroker) -> _Cluster:
    if request.param == "embedded":
        def create(n: int) -> str:
            name = f"seek-{uuid.uuid4().hex[:10]}"
            broker.create_topic(name, n)
            return name
        return _Cluster(broker.bootstrap_servers, create)
    t: Tansu = request.getfixturevalue("tansu")
    return _Cluster(t.bootstrap, t.create_topic)


class _LiveProducer(threading.Thread):
    """Writes to every partition until stopped; `last` holds the last acknowledged offsets."""

    def __init__(self, cluster: _Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stop_event = threading.Event()
        self.last: dict[int, int] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with KafkaProducer({"bootstrap.servers": self.cluster.bootstrap, "linger.ms": 2}) as p:
                futs = []
                while not self.stop_event.is_set():
                    futs += [p.send(self.cluster.topic, value=b"live", partition=i)
                             for i in range(PARTITIONS)]
                    time.sleep(0.002)
                p.flush(30)
            for f in futs:
                md = f.result(0)
                self.last[md.partition] = max(self.last.get(md.partition, -1), md.offset)
        except BaseException as exc:  # reported by the test
            self.error = exc


def _read_from(c: KafkaConsumer, targets: dict[TopicPartition, int], live: _LiveProducer,
               preload_last: dict[int, int]) -> dict[int, list[int]]:
    got: dict[int, list[int]] = {tp.partition: [] for tp in targets}
    stop_at = time.monotonic() + 1.0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if live.is_alive() and time.monotonic() >= stop_at:
            live.stop_event.set()
            live.join(30)
        for r in c.poll(0.2):
            got[r.partition].append(r.offset)
        if not live.is_alive():
            end = {p: max(live.last.get(p, -1), preload_last[p]) + 1 for p in got}
            if all(got[p] and got[p][-1] + 1 >= end[p] for p in got):
                break
    assert live.error is None
    return got


@pytest.mark.parametrize("how", ["seek", "seek_to_beginning", "seek_to_end"])
def test_seek_wins_with_live_producer(cluster: _Cluster, how: str) -> None:
    preload_last = cluster.produce(PRELOAD)
    for _round in range(2):
        live = _LiveProducer(cluster)
        live.start()
        c = cluster.consumer()
        try:
            tps = [TopicPartition(cluster.topic, i) for i in range(PARTITIONS)]
            c.assign(tps)
            if how == "seek":
                for tp in tps:
                    c.seek(tp, 7 + tp.partition)
            elif how == "seek_to_beginning":
                c.seek_to_beginning()
            else:
                c.seek_to_end()
            targets = {tp: c.position(tp) for tp in tps}
            if how == "seek":
                assert targets == {tp: 7 + tp.partition for tp in tps}
            elif how == "seek_to_beginning":
                assert targets == {tp: 0 for tp in tps}
            got = _read_from(c, targets, live, preload_last)
            end = {p: max(live.last.get(p, -1), preload_last[p]) + 1 for p in got}
            for tp, start in targets.items():
                offs = got[tp.partition]
                assert offs[:1] == [start], (how, tp, offs[:5], c.metrics())
                assert offs == list(range(start, end[tp.partition])), (how, tp, len(offs))
                assert c.position(tp) == end[tp.partition]
        finally:
            live.stop_event.set()
            live.join(30)
            c.close()


def test_seek_to_beginning_after_assign_reads_everything_tansu(tansu: Tansu) -> None:
    """The reproduction: 5,000 records per partition, assign() + seek_to_beginning() with the default
    auto.offset.reset, several fresh consumers: every one reads every record."""
    topic = tansu.create_topic(3)
    with KafkaProducer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5}) as p:
        for i in range(15_000):
            p.send(topic, value=f"v{i}".encode(), partition=i % 3)
        p.flush(30)
    tps = [TopicPartition(topic, i) for i in range(3)]
    for _round in range(4):
        with KafkaConsumer({"bootstrap.servers": tansu.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False}) as c:
            c.assign(tps)
            c.seek_to_beginning()
            counts = dict.fromkeys(range(3), 0)
            deadline = time.monotonic() + 30
            while sum(counts.values()) < 15_000 and time.monotonic() < deadline:
                for r in c.poll(0.2):
                    counts[r.partition] += 1
            assert counts == dict.fromkeys(range(3), 5000), c.metrics()
            assert [c.position(tp) for tp in tps] == [5000] * 3


def test_seek_onto_a_gap_in_the_log_returns_the_next_records(broker: EmbeddedBroker) -> None:
    """A seek to an offset that holds no record (here a transaction's commit marker) is confirmed by a
    second fetch that starts at the same later offset: those records are returned, once."""
    topic = f"seek-gap-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap_servers,
                  "transactional.id": f"tx-{uuid.uuid4().hex[:8]}", "log_level": 0})
    p.init_transactions(30)
    for batch in range(2):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, value=f"{batch}-{i}".encode(), partition=0)
        p.commit_transaction(30)
    # offsets: 0-2 records, 3 commit marker, 4-6 records, 7 commit marker
    tp = TopicPartition(topic, 0)
    with KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers,
                        "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                        "isolation.level": "read_committed"}) as c:
        c.assign([tp])
        c.seek(tp, 3)
        got: list[int] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got += [r.offset for r in c.poll(0.2)]
        for _ in range(3):
            got += [r.offset for r in c.poll(0.2)]
        assert got == [4, 5, 6], (got, c.metrics())
        assert c.metrics()["seek_retries"] >= 1
