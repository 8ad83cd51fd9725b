"""Kafka semantics that only a real Apache Kafka broker can show (the ``kafka_cluster`` fixture).

The embedded broker (librdkafka's mock) answers every timestamp lookup with -1, filters no aborted
records and refuses commits while a group prepares a rebalance; Tansu answers timestamp lookups with 0
and filters no aborted records either (docs/broker.md). These tests assert Kafka's answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.errors import CommitFailedError
from kipconsumer.testing import KafkaCluster

pytestmark = pytest.mark.kafka


def _consumer(cluster: KafkaCluster, **extra: object) -> KafkaConsumer:
    conf: dict[str, object] = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return KafkaConsumer(conf)


def _drain(consumer: KafkaConsumer, expected: int, timeout: float = 30.0) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record polled until ``expected`` arrived (or timeout)."""
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        for r in consumer.poll(0.5):
            out.append((r.partition, r.offset, r.value))
    return out


# -- offsets by time ---------------------------------------------------------------------------------
def test_offsets_for_times_gives_first_record_at_or_after_the_timestamp(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("oft")
    kafka_cluster.create_topic(topic, 2, 1)
    base = int(time.time() * 1000) - 60_000
    with KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers}) as producer:
        # partition 0: timestamps base, base+100, ..., base+900; partition 1: base+50, base+150, ...
        for i in range(10):
            producer.send(topic, value=b"a%d" % i, partition=0, timestamp=base + 100 * i)
            producer.send(topic, value=b"b%d" % i, partition=1, timestamp=base + 50 + 100 * i)
        producer.flush(30)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    c = _consumer(kafka_cluster)
    try:
        exact = c.offsets_for_times({p0: base + 300, p1: base + 350}, timeout=10)
        assert exact[p0] is not None and (exact[p0].offset, exact[p0].timestamp) == (3, base + 300)
        assert exact[p1] is not None and (exact[p1].offset, exact[p1].timestamp) == (3, base + 350)
        between = c.offsets_for_times({p0: base + 301, p1: base + 1}, timeout=10)
        assert between[p0] is not None and (between[p0].offset, between[p0].timestamp) == (4, base + 400)
        assert between[p1] is not None and (between[p1].offset, between[p1].timestamp) == (0, base + 50)
        first = c.offsets_for_times({p0: 0}, timeout=10)
        assert first[p0] is not None and first[p0].offset == 0
        past = c.offsets_for_times({p0: base + 901, p1: base + 10_000}, timeout=10)
        assert past == {p0: None, p1: None}
        # seeking to the answer reads from exactly that record
        c.assign([p0])
        c.seek(p0, between[p0].offset)
        got = _drain(c, 6)
        assert [o for _, o, _ in got] == [4, 5, 6, 7, 8, 9]
    finally:
        c.close()


# -- read_committed --------------------------------------------------------------------------------
def _write_committed_aborted_committed(cluster: KafkaCluster, topic: str, txn_id: str) -> None:
    producer = KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id})
    try:
        producer.init_transactions(30)
        for label, commit in (("c1", True), ("ab", False), ("c2", True)):
            producer.begin_transaction()
            for p in range(2):
                for i in range(5):
                    producer.send(topic, value=f"{label}-{p}-{i}".encode(), partition=p)
            producer.flush(30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
    finally:
        producer.close()


def test_read_committed_never_returns_aborted_records_and_steps_over_markers(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("rc")
    kafka_cluster.create_topic(topic, 2, 1)
    _write_committed_aborted_committed(kafka_cluster, topic, unique_name("txn"))
    committed = sorted(f"{lab}-{p}-{i}".encode() for lab in ("c1", "c2") for p in range(2) for i in range(5))
    parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]

    c = _consumer(kafka_cluster, isolation_level="read_committed")
    try:
        c.assign(parts)
        got = _drain(c, 20, timeout=20)
        # nothing more comes: the aborted records stay hidden
        got += _drain(c, 1, timeout=2)
        assert sorted(v for _, _, v in got) == committed
        # each partition: 5 committed, marker, 5 aborted, marker, 5 committed, marker -> end offset 18
        for tp in parts:
            offsets = sorted(o for p, o, _ in got if p == tp.partition)
            assert offsets == [0, 1, 2, 3, 4, 12, 13, 14, 15, 16]
            assert c.position(tp) == 18
        assert c.end_offsets(parts) == {tp: 18 for tp in parts}
    finally:
        c.close()

    # to_arrow() sees the same filtered records
    c = _consumer(kafka_cluster, isolation_level="read_committed")
    try:
        c.assign(parts)
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < 20 and time.monotonic() < deadline:
            batch = c.poll(0.5).to_arrow()
            values.extend(batch.column("value").to_pylist())
        assert sorted(values) == committed
    finally:
        c.close()

    # read_uncommitted returns the aborted ones too (the control: the data is really there)
    c = _consumer(kafka_cluster, isolation_level="read_uncommitted")
    try:
        c.assign(parts)
        got = _drain(c, 30, timeout=20)
        assert len(got) == 30 and sum(v.startswith(b"ab-") for _, _, v in got) == 10
    finally:
        c.close()


# -- commits in the revoke listener ----------------------------------------------------------------
class _CommitOnRevoke:
    def __init__(self) -> None:
        self.consumer: KafkaConsumer | None = None
        self.errors: list[BaseException] = []
        self.revokes = 0

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        assert self.consumer is not None
        self.revokes += 1
        try:
            self.consumer.commit_sync()
        except CommitFailedError as e:
            self.errors.append(e)

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        pass


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_commit_sync_in_revoke_listener_is_accepted_while_the_group_rebalances(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str], strategy: str
) -> None:
    """The Java pattern: commit after every poll and once more in on_partitions_revoked. Kafka
    accepts a current member's commit while the group prepares a rebalance."""
    topic, group = unique_name("rev"), unique_name("g")
    kafka_cluster.create_topic(topic, 4, 1)
    with KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers}) as producer:
        for i in range(400):
            producer.send(topic, value=b"%d" % i, partition=i % 4)
        producer.flush(30)

    listeners = [_CommitOnRevoke(), _CommitOnRevoke()]
    consumers = [
        _consumer(kafka_cluster, group_id=group, partition_assignment_strategy=strategy, max_poll_records=7)
        for _ in listeners
    ]
    seen: list[set[tuple[int, int]]] = [set(), set()]
    stop = threading.Event()

    def member(i: int) -> None:
        c, listener = consumers[i], listeners[i]
        listener.consumer = c
        c.subscribe([topic], listener)
        while not stop.is_set():
            records = c.poll(0.2)
            for r in records:
                seen[i].add((r.partition, r.offset))
            if len(records):
                c.commit_sync()
                time.sleep(0.02)  # slow consumer: the rebalance lands between polls

    first = threading.Thread(target=member, args=(0,))
    first.start()
    deadline = time.monotonic() + 30
    while len(seen[0]) < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    second = threading.Thread(target=member, args=(1,))
    second.start()
    deadline = time.monotonic() + 60
    while len(seen[0] | seen[1]) < 400 and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    first.join(30)
    second.join(30)
    for c in consumers:
        c.close()
    assert listeners[0].revokes >= 1
    assert [e for lst in listeners for e in lst.errors] == []
    assert len(seen[0] | seen[1]) == 400
    # every record processed once: the commits in the listener left nothing to re-deliver
    assert not (seen[0] & seen[1])
