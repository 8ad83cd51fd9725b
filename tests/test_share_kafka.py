"""Share groups (KIP-932) on real Apache Kafka 4.2 (the session's KafkaCluster): KafkaShareConsumer's
acknowledgement semantics as the broker applies them.

Each test uses a fresh topic and share group (share.auto.offset.reset=earliest, 2 s record lock,
see share_support). The broker's delivery count limit is its default, 5.
"""

from __future__ import annotations

import threading
import time

import pytest
from share_support import LOCK_MS, consumer, poll_until, produce, share_group, unique_name

from kipconsumer import AcknowledgeType
from kipconsumer._records import ConsumerRecord
from kipconsumer.errors import IllegalStateError
from kipconsumer.testing import KafkaCluster

pytestmark = pytest.mark.kafka

DELIVERY_COUNT_LIMIT = 5  # Kafka's default group.share.delivery.count.limit


def _topic(cluster: KafkaCluster, partitions: int = 1) -> str:
    name = unique_name("share")
    cluster.create_topic(name, partitions)
    return name


def test_implicit_mode_bounded_fair_polls_and_accepts(kafka_cluster: KafkaCluster) -> None:
    topic = _topic(kafka_cluster, 3)
    produced = produce(kafka_cluster, topic, 3, 300)
    group = share_group(kafka_cluster)
    with consumer(kafka_cluster, group, max_poll_records=40) as c:
        c.subscribe([topic])
        sizes: list[int] = []
        got = poll_until(c, lambda g: len(g) >= 300, on_batch=lambda b: sizes.append(len(b)))
        assert {(r.partition, r.offset) for r in got} == produced
        assert len(got) == 300, "a record came twice although every one was accepted"
        assert max(sizes) <= 40
        assert all(r.delivery_count == 1 for r in got)
        assert c.metrics()["records_returned"] == 300
    # polls accepted every batch but the last, close() the last: another member of the group gets none
    with consumer(kafka_cluster, group) as c2:
        c2.subscribe([topic])
        assert poll_until(c2, lambda g: False, timeout=LOCK_MS / 1000 + 2) == []


def test_poll_to_arrow(kafka_cluster: KafkaCluster) -> None:
    pa = pytest.importorskip("pyarrow")
    topic = _topic(kafka_cluster)
    produce(kafka_cluster, topic, 1, 5)
    with consumer(kafka_cluster, share_group(kafka_cluster)) as c:
        c.subscribe([topic])
        got = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            records = c.poll(0.5)
            if records:
                got = records
                break
        assert got is not None
        table = got.to_arrow()
        assert isinstance(table, pa.RecordBatch)
        assert table.num_rows == len(got)
        assert table.column("value").to_pylist() == [r.value for r in got]
        assert table.schema.names[-1] == "delivery_count"
        assert table.column("delivery_count").to_pylist() == [r.delivery_count for r in got] == [1] * len(got)
        with_headers = got.to_arrow(timestamp_type=True, headers=True)
        assert with_headers.schema.names[-3:] == ["timestamp_type", "headers", "delivery_count"]
        assert c.poll(0).to_arrow().schema.names[-1] == "delivery_count"  # an empty poll: same columns


def test_release_redelivers_with_higher_delivery_count(kafka_cluster: KafkaCluster) -> None:
    topic = _topic(kafka_cluster)
    produce(kafka_cluster, topic, 1, 1)
    with consumer(kafka_cluster, share_group(kafka_cluster), "explicit") as c:
        c.subscribe([topic])
        first = poll_until(c, lambda g: len(g) >= 1)
        assert [r.delivery_count for r in first] == [1]
        with pytest.raises(IllegalStateError, match="unacknowledged"):
            c.poll(0)
        c.acknowledge(first[0], AcknowledgeType.RELEASE)
        with pytest.raises(IllegalStateError, match="already acknowledged"):
            c.acknowledge(first[0], AcknowledgeType.ACCEPT)
        assert all(e is None for e in c.commit_sync(10).values())
        again = poll_until(c, lambda g: len(g) >= 1)
        assert [(r.offset, r.delivery_count) for r in again] == [(first[0].offset, 2)]
        c.acknowledge(again[0], AcknowledgeType.ACCEPT)


def test_reject_never_returns_and_max_deliveries_archive(kafka_cluster: KafkaCluster) -> None:
    topic = _topic(kafka_cluster)
    produce(kafka_cluster, topic, 1, 2)  # offset 0: rejected; offset 1: released until archived
    counts: list[int | None] = []

    def ack(batch: list[ConsumerRecord]) -> None:
        for r in batch:
            if r.offset == 0:
                c.acknowledge(r, AcknowledgeType.REJECT)
            else:
                counts.append(r.delivery_count)
                c.acknowledge(r, AcknowledgeType.RELEASE)

    with consumer(kafka_cluster, share_group(kafka_cluster), "explicit") as c:
        c.subscribe([topic])
        got = poll_until(c, lambda g: len(counts) >= DELIVERY_COUNT_LIMIT, on_batch=ack)
        assert [r.delivery_count for r in got if r.offset == 0] == [1], "a rejected record came back"
        assert counts == list(range(1, DELIVERY_COUNT_LIMIT + 1))
        c.commit_sync(10)
        # past the limit the record is archived: nothing more, even after a lock duration
        late = poll_until(c, lambda g: False, timeout=LOCK_MS / 1000 + 2, on_batch=ack)
        assert late == []


@pytest.mark.parametrize("how", ["stalled", "closed"])
def test_unacknowledged_record_goes_to_another_member(kafka_cluster: KafkaCluster, how: str) -> None:
    topic = _topic(kafka_cluster)
    produce(kafka_cluster, topic, 1, 1)
    group = share_group(kafka_cluster)
    c1 = consumer(kafka_cluster, group, "explicit")
    c2 = consumer(kafka_cluster, group, "explicit")
    try:
        c1.subscribe([topic])
        held = poll_until(c1, lambda g: len(g) >= 1)
        assert [r.delivery_count for r in held] == [1]
        start = time.monotonic()
        if how == "closed":
            c1.close()
        c2.subscribe([topic])
        got = poll_until(c2, lambda g: len(g) >= 1, timeout=30)
        assert [(r.offset, r.delivery_count) for r in got] == [(held[0].offset, 2)]
        if how == "stalled":  # c1 kept heartbeating: only the lock's expiry freed the record
            assert time.monotonic() - start >= LOCK_MS / 1000 - 0.5
        c2.acknowledge(got[0], AcknowledgeType.ACCEPT)
        c2.commit_sync(10)
    finally:
        c1.close()
        c2.close()


def test_more_consumers_than_partitions_all_get_work(kafka_cluster: KafkaCluster) -> None:
    topic = _topic(kafka_cluster, 1)
    produced = produce(kafka_cluster, topic, 1, 400)
    group = share_group(kafka_cluster)
    members = [consumer(kafka_cluster, group, max_poll_records=10) for _ in range(3)]
    got: dict[int, list[tuple[int, int]]] = {i: [] for i in range(3)}
    stop = threading.Event()

    def run(i: int) -> None:
        c = members[i]
        c.subscribe([topic])
        while not stop.is_set():
            for r in c.poll(0.2):
                got[i].append((r.partition, r.offset))
            time.sleep(0.05)  # "processing": the others get records meanwhile
        c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < len(produced) and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(30)
    all_got = [x for v in got.values() for x in v]
    assert set(all_got) == produced
    assert len(all_got) == len(produced), "a record was delivered twice although accepted"
    assert all(got[i] for i in range(3)), {i: len(v) for i, v in got.items()}


def test_implicit_mode_never_accepts_records_it_did_not_return(kafka_cluster: KafkaCluster) -> None:
    """librdkafka 2.16 hands over a whole acquired batch (100 records here) whatever max.poll.records
    says; kipconsumer returns 10 per poll and keeps the rest. Closing after one poll accepts those 10
    only: the 90 never returned go to the next member (delivery count 2)."""
    from kipconsumer import KafkaProducer

    topic = _topic(kafka_cluster)
    with KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "linger.ms": 50}) as p:
        for i in range(100):
            p.send(topic, value=b"%d" % i)
        p.flush(30)
    group = share_group(kafka_cluster)
    with consumer(kafka_cluster, group, max_poll_records=10) as c1:
        c1.subscribe([topic])
        first = poll_until(c1, lambda g: len(g) >= 1)
        assert len(first) == 10
        assert c1.metrics()["buffered_records"] == 90  # one batch of 100 came (else the test is void)
    returned = {r.offset for r in first}
    with consumer(kafka_cluster, group, max_poll_records=100) as c2:
        c2.subscribe([topic])
        rest = poll_until(c2, lambda g: len(g) >= 90, timeout=30)
        assert {r.offset for r in rest} == set(range(100)) - returned
        assert {r.delivery_count for r in rest} == {2}


def test_explicit_acknowledgements_are_sent_by_close(kafka_cluster: KafkaCluster) -> None:
    topic = _topic(kafka_cluster)
    produce(kafka_cluster, topic, 1, 3)
    group = share_group(kafka_cluster)
    with consumer(kafka_cluster, group, "explicit") as c1:
        c1.subscribe([topic])
        got = poll_until(c1, lambda g: len(g) >= 3)
        for r in got:
            c1.acknowledge(r, AcknowledgeType.ACCEPT)
        # no commit: close() sends them
    with consumer(kafka_cluster, group) as c2:
        c2.subscribe([topic])
        assert poll_until(c2, lambda g: False, timeout=LOCK_MS / 1000 + 2) == []


def test_commit_async_callback_outcomes_and_metrics(kafka_cluster: KafkaCluster) -> None:
    """Issue #30: the acknowledgement commit callback gets each partition's acknowledged offsets (None:
    done) on the polling thread, and an error for acknowledgements of records whose lock had expired;
    metrics() counts both and the records returned per partition."""
    from kipconsumer import TopicPartition
    from kipconsumer.errors import KafkaError

    topic = _topic(kafka_cluster, 2)
    produced = produce(kafka_cluster, topic, 2, 20)
    group = share_group(kafka_cluster)
    outcomes: list[tuple[dict[TopicPartition, set[int]], KafkaError | None, int]] = []

    def cb(offsets: dict[TopicPartition, set[int]], exc: KafkaError | None) -> None:
        outcomes.append((offsets, exc, threading.get_ident()))

    def accepted() -> set[tuple[int, int]]:
        return {(tp.partition, o)
                for d, e, _ in outcomes if e is None for tp, offs in d.items() for o in offs}

    with consumer(kafka_cluster, group, "explicit") as c:
        # set first: acknowledgements also travel with the polls, whose outcomes come before the commit's
        c.set_acknowledgement_commit_callback(cb)
        c.subscribe([topic])
        def accept(batch: list[ConsumerRecord]) -> None:
            for r in batch:
                c.acknowledge(r, AcknowledgeType.ACCEPT)

        got = poll_until(c, lambda g: len(g) >= 20, on_batch=accept)
        assert {(r.partition, r.offset) for r in got} == produced
        c.commit_async(cb)
        deadline = time.monotonic() + 20
        while accepted() != produced and time.monotonic() < deadline:
            c.poll(0.2)  # outcomes are served by later calls
        assert accepted() == produced, outcomes
        assert {tid for _, _, tid in outcomes} == {threading.get_ident()}
        m = c.metrics()
        assert m["acknowledgement_commits"] >= 2 and m["acknowledgement_commit_errors"] == 0
        assert m["partition_records_returned"] == {TopicPartition(topic, p): 10 for p in (0, 1)}
        # a record held past its lock: the broker refuses its acknowledgement
        late = produce(kafka_cluster, topic, 2, 1)
        batch = poll_until(c, lambda g: len(g) >= 1)
        assert {(r.partition, r.offset) for r in batch} == late
        time.sleep(LOCK_MS / 1000 + 1.5)
        for r in batch:
            c.acknowledge(r, AcknowledgeType.ACCEPT)
        c.commit_async()
        deadline = time.monotonic() + 20
        while not any(e is not None for _, e, _ in outcomes) and time.monotonic() < deadline:
            accept(list(c.poll(0.2)))  # the expired record comes back (delivery count 2)
        errors = [(d, e) for d, e, _ in outcomes if e is not None]
        assert errors and all(isinstance(e, KafkaError) for _, e in errors), outcomes
        assert c.metrics()["acknowledgement_commit_errors"] >= 1
        # acknowledgements sent by close(): their outcome comes to the callback inside close()
        last = produce(kafka_cluster, topic, 2, 1)
        outcomes.clear()
        poll_until(c, lambda g: last <= {(r.partition, r.offset) for r in g}, on_batch=accept)
    assert last <= accepted(), outcomes


def test_async_close_after_a_cancelled_poll_releases_what_no_poll_handed_out(
        kafka_cluster: KafkaCluster) -> None:
    """Issue #38 D1: ``wait_for(c.poll(9), 0.2)`` times out, records arrive for the worker's poll that
    goes on, the application leaves ``async with``: close() releases those records (another member
    gets every one, those with delivery count 2), it does not accept them."""
    import asyncio

    from kipconsumer.aio import AsyncKafkaShareConsumer

    topic = _topic(kafka_cluster)
    group = share_group(kafka_cluster)
    conf = {"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": group}

    async def main() -> tuple[int, int]:
        async with AsyncKafkaShareConsumer(conf) as c:
            await c.subscribe([topic])
            for _ in range(6):  # joins the group; nothing there yet
                assert not await c.poll(0.5)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.poll(9.0), 0.2)
            await asyncio.get_running_loop().run_in_executor(None, produce, kafka_cluster, topic, 1, 20)
            deadline = time.monotonic() + 9
            while not c.consumer.metrics()["records_returned"] and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            fetched = c.consumer.metrics()["records_returned"]
        return fetched, c.metrics()["acknowledged"]

    fetched, acknowledged = asyncio.run(main())
    assert fetched, "the test needs the cancelled poll's worker call to get records"
    with consumer(kafka_cluster, group) as c2:
        c2.subscribe([topic])
        got = poll_until(c2, lambda g: len(g) >= 20, timeout=LOCK_MS / 1000 + 20)
    assert sorted(r.offset for r in got) == list(range(20)), "records accepted at close were lost"
    assert acknowledged == 0
    assert sum(r.delivery_count == 2 for r in got) >= fetched  # released: delivered again
