"""ConsumerRecords' accessors over real polls: the partition groups (partitions(), records(tp),
last_offsets(), record.topic) are built on first use, whichever accessor comes first, and
to_arrow() reuses one imported schema per column set.

Against the session EmbeddedBroker over TCP; data produced with confluent_kafka.Producer.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from kc_testing import make_consumer

from kipconsumer import TopicPartition


def _fill(bootstrap: str, topics: list[str], per_partition: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for t in topics:
        for part in range(partitions):
            for i in range(per_partition):
                p.produce(t, value=f"{t}/{part}/{i}".encode(), partition=part)
    assert p.flush(30) == 0


def _batches(c, want: int) -> list:
    """Polls until `want` records were returned; every batch that has records."""
    out, got = [], 0
    deadline = time.monotonic() + 30
    while got < want:
        assert time.monotonic() < deadline, f"only {got} of {want} records"
        recs = c.poll(0.5)
        if len(recs):
            out.append(recs)
            got += len(recs)
    return out


def _expected_groups(records: list) -> list[tuple[TopicPartition, int, int]]:
    """(tp, first index, end index) runs of one partition, from the records themselves."""
    groups: list[tuple[TopicPartition, int, int]] = []
    for i, r in enumerate(records):
        tp = TopicPartition(r.value.decode().split("/")[0], r.partition)
        if groups and groups[-1][0] == tp:
            groups[-1] = (tp, groups[-1][1], i + 1)
        else:
            groups.append((tp, i, i + 1))
    return groups


@pytest.mark.parametrize("first", ["iterate", "partitions", "records", "last_offsets", "topic", "repr"])
def test_groups_built_on_first_use_by_any_accessor(broker, topic_factory, unique_name, first):
    topics = [topic_factory(partitions=3), topic_factory(partitions=3)]
    _fill(broker.bootstrap_servers, topics, 40, 3)
    with make_consumer(broker, unique_name("g"), max_poll_records=50) as c:
        c.assign([TopicPartition(t, p) for t in topics for p in range(3)])
        time.sleep(1.0)  # every partition's records arrive: the first polls hold all six
        most_groups = 0
        for recs in _batches(c, 2 * 3 * 40):
            if first == "iterate":
                values = [r.value for r in recs]
            elif first == "partitions":
                recs.partitions()
            elif first == "records":
                assert recs.records(TopicPartition("no-such-topic", 0)) == []
            elif first == "last_offsets":
                recs.last_offsets()
            elif first == "topic":
                assert recs[len(recs) - 1].topic in topics
            else:
                assert repr(recs).startswith(f"ConsumerRecords(count={len(recs)}, partitions=")
            listed = list(recs)
            values = [r.value for r in listed]
            groups = _expected_groups(listed)
            most_groups = max(most_groups, len(groups))
            assert recs.partitions() == [g[0] for g in groups]
            assert repr(recs) == f"ConsumerRecords(count={len(recs)}, partitions={len(groups)})"
            assert recs.last_offsets() == {tp: listed[e - 1].offset for tp, _, e in groups}
            for tp, s, e in groups:
                assert [r.value for r in recs.records(tp)] == values[s:e]
                assert all(r.topic == tp.topic and r.partition == tp.partition for r in listed[s:e])
        assert most_groups >= 4  # batches spanning both topics and several partitions were checked


def test_to_arrow_schema_per_column_set(broker, topic_factory, unique_name):
    """Alternating timestamp_type=False/True: each batch carries its own column set and the values of
    its own records (the schema is imported once per set and reused)."""
    pa = pytest.importorskip("pyarrow")
    topic = topic_factory(partitions=2)
    _fill(broker.bootstrap_servers, [topic], 60, 2)
    with make_consumer(broker, unique_name("g"), max_poll_records=20) as c:
        c.assign([TopicPartition(topic, p) for p in range(2)])
        for k, recs in enumerate(_batches(c, 120)):
            with_type = k % 2 == 1
            rb = recs.to_arrow(timestamp_type=with_type)
            names = ["topic", "partition", "offset", "timestamp", "key", "value"]
            assert rb.schema.names == names + (["timestamp_type"] if with_type else [])
            assert rb.schema.field("value").type == pa.binary()
            assert rb.column("value").to_pylist() == [r.value for r in recs]
            assert rb.column("offset").to_pylist() == [r.offset for r in recs]
            if with_type:
                assert rb.column("timestamp_type").to_pylist() == [r.timestamp_type for r in recs]


def test_to_arrow_batches_and_columns_outlive_later_batches(broker, topic_factory, unique_name):
    """to_arrow()'s buffers come from a pool that the next batches reuse once a batch is released
    (csrc/arrow_batch.c): a batch, a column taken from a dropped batch, a slice and a table built
    from batches keep their own values while later batches are built and released, on this thread
    and on another one."""
    pa = pytest.importorskip("pyarrow")
    import threading

    topic = topic_factory(partitions=3)
    _fill(broker.bootstrap_servers, [topic], 200, 3)
    kept: list[tuple[object, list]] = []  # (arrow object, the values it must hold)
    with make_consumer(broker, unique_name("g"), max_poll_records=37) as c:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        for k, recs in enumerate(_batches(c, 600)):
            values = [r.value for r in recs]
            rb = recs.to_arrow(timestamp_type=k % 2 == 1)  # the kept RecordBatches share one schema
            if k % 4 == 0:
                kept.append((rb, values))
            elif k % 4 == 1:
                kept.append((rb.column(5), values))  # the batch itself is dropped below
            elif k % 4 == 2:
                kept.append((rb.slice(1), values[1:]))
            else:  # released on another thread, while this one builds the next batch
                t = threading.Thread(target=lambda b=rb: b.column("value").to_pylist())
                t.start()
                t.join()
            del rb, recs
        assert len(kept) >= 6
        table = pa.Table.from_batches([b for b, _ in kept if isinstance(b, pa.RecordBatch)])
        expected_table = [v for b, vals in kept if isinstance(b, pa.RecordBatch) for v in vals]
        for _ in range(3):  # more batches through the pool while the kept ones are alive
            c.seek_to_beginning()
            for recs in _batches(c, 100):
                recs.to_arrow()
    for obj, values in kept:
        col = obj if isinstance(obj, pa.Array) else obj.column(5)
        assert col.to_pylist() == values
    assert table.column("value").to_pylist() == expected_table


_CYCLE_SCRIPT = """
import gc
from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
with EmbeddedBroker(num_brokers=1) as b:
    b.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    with KafkaProducer({"bootstrap.servers": b.bootstrap_servers}) as p:
        p.send("t", value=b"x", partition=0)
        p.flush(10)
    c = KafkaConsumer({"bootstrap.servers": b.bootstrap_servers})
    c.assign([tp])
    c.seek(tp, 0)
    batch = None
    for _ in range(40):
        batch = c.poll(0.5)
        if batch:
            break
    assert batch
    gc.disable()
    cycle = [batch]           # cyclic garbage holding the batch: the collector visits the batch first
    cycle.append(cycle)
    del batch
    c.close()
    del c, cycle
    gc.collect()
print("collected")
"""


def test_a_batch_in_cyclic_garbage_is_collected_without_a_deadlock() -> None:
    """A batch reached only from a reference cycle (a stored exception's traceback holding a record,
    a deserializer's closure) is freed by the cycle collector: its handle reference must outlive its
    messages, else the handle's rd_kafka_destroy() waits for them forever (hung before the fix)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _CYCLE_SCRIPT], capture_output=True, text=True, timeout=60,
                          env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "collected", proc.stderr[-2000:]


def test_groups_built_while_another_thread_reads_the_same_batch(broker, topic_factory, unique_name,
                                                                monkeypatch):
    """A batch handed to another thread: the partition groups were published before they were filled
    (Python code runs while they are built, and another thread runs meanwhile), so that thread found
    partitions() empty, or read a record's topic through an index not yet written. Here the first
    builder is held inside the build until the other thread has read the batch."""
    import threading

    from kipconsumer import _records

    topics = [topic_factory(partitions=2)]
    _fill(broker.bootstrap_servers, topics, 10, 2)
    with make_consumer(broker, unique_name("g"), max_poll_records=50) as c:
        c.assign([TopicPartition(topics[0], p) for p in range(2)])
        time.sleep(1.0)  # both partitions' records arrive: the first poll holds both
        batch = max(_batches(c, 20), key=len)
    expected = [g[0] for g in _expected_groups(list(batch))]  # built on a copy: `batch` stays unbuilt
    assert expected
    real_tp = _records.TopicPartition
    inside, reader_done = threading.Event(), threading.Event()
    builder: list[int] = []

    def held_topic_partition(topic: str, partition: int) -> TopicPartition:
        if builder and threading.get_ident() == builder[0] and not inside.is_set():
            inside.set()  # the first group is being built: the reader goes now
            reader_done.wait(10)
        return real_tp(topic, partition)

    seen: dict[str, object] = {}

    def reader() -> None:
        assert inside.wait(10)
        try:
            seen["partitions"] = batch.partitions()
            seen["counts"] = [len(batch.records(tp)) for tp in expected]
            if seen["partitions"] == expected:  # else the topic index is not written yet: not read
                seen["topics"] = {r.topic for r in batch}
        finally:
            reader_done.set()

    monkeypatch.setattr(_records, "TopicPartition", held_topic_partition)
    th = threading.Thread(target=reader)
    th.start()
    builder.append(threading.get_ident())
    mine = batch.partitions()
    th.join(10)
    assert not th.is_alive()
    assert mine == expected
    assert seen["partitions"] == expected, seen
    assert sum(seen["counts"]) == len(batch), seen  # type: ignore[arg-type]
    assert seen["topics"] == {topics[0]}, seen


@pytest.mark.parametrize("first", ["partitions", "records", "last_offsets", "repr"])
def test_an_empty_poll_answers_every_accessor(broker, topic_factory, unique_name, first):
    """An empty batch (a poll that found nothing) has no message to build groups from: every accessor
    answers "nothing", whichever comes first (a build that read the first message crashed)."""
    topic = topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    with make_consumer(broker, unique_name("g")) as c:
        c.assign([tp])
        recs = c.poll(0)
        assert len(recs) == 0
        if first == "partitions":
            assert not recs.partitions()
        elif first == "records":
            assert recs.records(tp) == []
        elif first == "last_offsets":
            assert not recs.last_offsets()
        else:
            assert repr(recs)
        assert not recs.partitions() and recs.records(tp) == [] and list(recs) == []
