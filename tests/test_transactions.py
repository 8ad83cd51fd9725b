"""Transactions (KIP-98 / KIP-447) on the native producer, against real brokers over TCP.

The tests of visibility, offsets and fencing run on real Apache Kafka (the ``kafka`` fixture); the
embedded broker (librdkafka's mock) accepts transactions but applies neither offsets nor fencing, so
only the client-side rules run on it. Aborted-record filtering for read_committed is asserted in
test_kafka_semantics.py.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from kc_testing import RealKafka

from kipconsumer import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionOutcomeUnknownError,
)
from kipconsumer.structs import ConsumerGroupMetadata


def _txid() -> str:
    return f"tx-{uuid.uuid4().hex[:8]}"


def _read(bootstrap: str, topic: str, isolation: str, seconds: float) -> list[bytes]:
    c = KafkaConsumer({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out += [r.value for r in c.poll(0.3)]
    c.close()
    return out


# -- real Kafka: visibility, offsets, fencing -----------------------------------------------------------
@pytest.mark.kafka
def test_open_transaction_is_held_back_until_commit_with_its_offsets(kafka: RealKafka) -> None:
    topic, source = kafka.create_topic(1), kafka.create_topic(1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": _txid()})
    consumer = KafkaConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                              "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(source, 0)])
    try:
        p.init_transactions(timeout=30)
        p.begin_transaction()
        futures = [p.send(topic, value=b"t%d" % i) for i in range(5)]
        p.flush()
        assert [f.result().offset for f in futures] == list(range(5))
        # written but not committed: a read_committed consumer does not see it, nor the offsets
        assert _read(kafka.bootstrap, topic, "read_committed", 2.0) == []
        tp = TopicPartition(source, 0)
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(42)}, consumer.group_metadata(), timeout=30)
        assert consumer.committed([tp])[tp] is None
        p.commit_transaction(timeout=30)
        assert _read(kafka.bootstrap, topic, "read_committed", 2.0) == [b"t%d" % i for i in range(5)]
        committed = consumer.committed([tp])[tp]
        assert committed is not None and committed.offset == 42
    finally:
        consumer.close()
        p.close(5)


@pytest.mark.kafka
def test_aborted_transaction_commits_no_offsets(kafka: RealKafka) -> None:
    topic, source = kafka.create_topic(1), kafka.create_topic(1)
    consumer = KafkaConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                              "enable.auto.commit": False})
    p = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": _txid()})
    tp = TopicPartition(source, 0)
    try:
        p.init_transactions(timeout=30)
        p.begin_transaction()
        p.send(topic, value=b"x")
        p.send_offsets_to_transaction({tp: 7}, consumer.group_metadata(), timeout=30)
        p.abort_transaction(timeout=30)
        assert consumer.committed([tp])[tp] is None
        p.begin_transaction()  # the producer is usable again
        p.send(topic, value=b"y")
        p.commit_transaction(timeout=30)
    finally:
        consumer.close()
        p.close(5)


@pytest.mark.kafka
def test_a_newer_producer_of_the_same_id_fences_the_older(kafka: RealKafka) -> None:
    topic = kafka.create_topic(1)
    txid = _txid()
    old = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": txid})
    new = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": txid})
    try:
        old.init_transactions(timeout=30)
        old.begin_transaction()
        old.send(topic, value=b"old")
        old.commit_transaction(timeout=30)
        new.init_transactions(timeout=30)
        with pytest.raises(ProducerFencedError, match="transactional.id took over"):
            old.begin_transaction()
            old.send(topic, value=b"zombie")
            old.commit_transaction(timeout=30)
        new.begin_transaction()
        new.send(topic, value=b"new")
        new.commit_transaction(timeout=30)
        assert _read(kafka.bootstrap, topic, "read_committed", 2.0) == [b"old", b"new"]
    finally:
        old.close(2)
        new.close(5)


@pytest.mark.kafka
def test_a_commit_without_a_result_condemns_the_producer(kafka: RealKafka) -> None:
    """The only node is frozen across commit_transaction() (2-3 s, short of its fencing): the commit gives
    no result within its timeout. Without KIP-890 no more work may go on that producer epoch, as if the
    commit had failed or succeeded: it raises TransactionOutcomeUnknownError (application_recoverable) and
    every later send() or transactional call raises it again; close(), flush() and metrics() work. A new
    producer of the same transactional.id ends the transaction (committed or aborted, once) and goes on."""
    topic = kafka.create_topic(1)
    txid = _txid()
    p = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": txid})
    try:
        p.init_transactions(timeout=30)
        p.begin_transaction()
        p.send(topic, value=b"first").result(30)
        kafka.freeze()
        try:
            no_result = r"commit_transaction\(\) gave no result"
            with pytest.raises(TransactionOutcomeUnknownError, match=no_result) as info:
                p.commit_transaction(timeout=1.0)
            assert info.value.category == "application_recoverable" and not info.value.retriable
            refused: list[tuple[str, Callable[[], object]]] = [
                ("commit_transaction", lambda: p.commit_transaction(timeout=1.0)),
                ("abort_transaction", lambda: p.abort_transaction(timeout=1.0)),
                ("begin_transaction", p.begin_transaction),
                ("init_transactions", lambda: p.init_transactions(timeout=1.0)),
                ("send", lambda: p.send(topic, value=b"zombie")),
            ]
            for name, call in refused:
                t0 = time.monotonic()
                with pytest.raises(TransactionOutcomeUnknownError, match="refused: this producer's last "
                                                                         "commit_transaction"):
                    call()
                assert time.monotonic() - t0 < 0.5, name  # refused at once, nothing sent
            assert isinstance(p.metrics(), dict)
        finally:
            kafka.thaw()
        p.flush(10)
    finally:
        p.close(0)
    with KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": txid}) as q:
        q.init_transactions(timeout=60)  # completes or aborts the transaction of the old epoch
        q.begin_transaction()
        q.send(topic, value=b"second")
        q.commit_transaction(timeout=30)
    got = _read(kafka.bootstrap, topic, "read_committed", 3.0)
    assert got in ([b"first", b"second"], [b"second"]), got
    assert b"zombie" not in _read(kafka.bootstrap, topic, "read_uncommitted", 2.0)


@pytest.mark.kafka
def test_read_committed_serves_other_partitions_while_one_holds_an_open_transaction(kafka: RealKafka) -> None:
    """KIP-41 with read_committed: a partition whose records wait behind an open transaction (last
    stable offset) starves none of the others; its records come once the transaction commits, by
    iteration and by to_arrow(), with no control record."""
    topic = kafka.create_topic(3)
    plain = KafkaProducer({"bootstrap.servers": kafka.bootstrap})
    tx = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": _txid()})
    c = KafkaConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                       "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                       "enable.auto.commit": False, "max.poll.records": 10})
    held, others = TopicPartition(topic, 0), [TopicPartition(topic, 1), TopicPartition(topic, 2)]
    try:
        tx.init_transactions(timeout=30)
        tx.begin_transaction()
        for i in range(40):
            tx.send(topic, value=b"tx-%d" % i, partition=0)
        tx.flush(30)
        for i in range(40):
            for tp in others:
                plain.send(topic, value=b"p%d-%d" % (tp.partition, i), partition=tp.partition)
        plain.flush(30)
        c.assign([held, *others])
        got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
        deadline = time.monotonic() + 30
        while (len(got[1]) < 40 or len(got[2]) < 40) and time.monotonic() < deadline:
            batch = c.poll(0.5)
            assert len(batch) <= 10
            for r in batch:
                got[r.partition].append(r.value)
        assert got[1] == [b"p1-%d" % i for i in range(40)]
        assert got[2] == [b"p2-%d" % i for i in range(40)]
        assert got[0] == []  # the open transaction's records wait
        tx.commit_transaction(timeout=30)
        deadline = time.monotonic() + 30
        tables = []
        while len(got[0]) < 40 and time.monotonic() < deadline:
            records = c.poll(0.5)
            if records:
                tables.append(records.to_arrow())
            got[0] += [r.value for r in records if r.partition == 0]
        assert got[0] == [b"tx-%d" % i for i in range(40)]  # no control record among them
        arrow_values = [v for t in tables for v in t.column("value").to_pylist()]
        assert arrow_values == got[0]
    finally:
        c.close()
        plain.close(5)
        tx.close(5)


@pytest.mark.kafka
def test_read_committed_position_and_commit_step_over_the_commit_marker(kafka: RealKafka) -> None:
    """After the last record of a committed transaction, position() and commit_sync() are past its
    COMMIT marker (no lag of 1 left behind, as with librdkafka's and Java's positions); a seek back
    afterwards is not undone by it."""
    topic = kafka.create_topic(1)
    tp = TopicPartition(topic, 0)
    tx = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": _txid()})
    c = KafkaConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                       "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                       "enable.auto.commit": False})
    try:
        tx.init_transactions(timeout=30)
        tx.begin_transaction()
        for i in range(40):
            tx.send(topic, value=b"tx-%d" % i)
        tx.commit_transaction(timeout=30)  # the COMMIT marker is offset 40
        c.assign([tp])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            got += [r.value for r in c.poll(0.5)]
        assert len(got) == 40
        deadline = time.monotonic() + 5
        while c.position(tp) != 41 and time.monotonic() < deadline:
            assert not c.poll(0.2)
        assert c.position(tp) == 41
        c.commit_sync()
        assert c.committed([tp])[tp].offset == 41  # type: ignore[union-attr]
        c.seek(tp, 10)
        assert c.position(tp) == 10
        again: list[int] = []
        deadline = time.monotonic() + 30
        while len(again) < 30 and time.monotonic() < deadline:
            again += [r.offset for r in c.poll(0.5)]
        assert again == list(range(10, 40))
        assert c.position(tp) == 41
    finally:
        c.close()
        tx.close(5)


# -- embedded broker: API rules, bounds, futures, signals ------------------------------------------
def test_transactions_need_a_transactional_id_and_the_right_order() -> None:
    with EmbeddedBroker(num_brokers=1) as broker:
        plain = KafkaProducer({"bootstrap.servers": broker.bootstrap_servers})
        with pytest.raises(IllegalStateError, match="no transactional.id"):
            plain.init_transactions()
        plain.close(1)
        p = KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": _txid()})
        try:
            with pytest.raises(KafkaError, match="begin transaction"):
                p.begin_transaction()  # before init_transactions()
            p.init_transactions(timeout=10)
            with pytest.raises(TypeError, match="group_metadata"):
                p.send_offsets_to_transaction({TopicPartition("t", 0): 1}, b"raw")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="offset"):
                p.send_offsets_to_transaction({TopicPartition("t", 0): -1}, ConsumerGroupMetadata("g", b""))
            with pytest.raises(ValueError, match="timeout"):
                p.commit_transaction(timeout=float("nan"))
        finally:
            p.close(1)


def test_init_transactions_is_bounded_and_resumes() -> None:
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.set_down(1)
        p = KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": _txid()})
        try:
            t0 = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match="Call the same method again"):
                p.init_transactions(timeout=1.0)
            took = time.monotonic() - t0
            assert 0.9 <= took < 3.0, took
            broker.set_up(1)
            p.init_transactions(timeout=20)  # resumes
            broker.create_topic("after", 1)
            p.begin_transaction()
            f = p.send("after", value=b"v")
            p.commit_transaction(timeout=20)
            assert f.result(5).offset == 0
        finally:
            p.close(1)


def test_abort_resolves_every_future_with_a_typed_error() -> None:
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("ab", 1)
        p = KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": _txid(),
                           "linger.ms": 3000})
        try:
            p.init_transactions(timeout=10)
            p.begin_transaction()
            futures = [p.send("ab", value=b"%d" % i) for i in range(20)]
            p.abort_transaction(timeout=10)
            errors = [f.exception(5) for f in futures]
            assert all(isinstance(e, KafkaError) for e in errors), errors
            codes = {e.code for e in errors if isinstance(e, KafkaError)}
            assert codes <= {"_PURGE_QUEUE", "_PURGE_INFLIGHT"}, codes
        finally:
            p.close(1)


def test_sigint_interrupts_a_transactional_wait_which_can_resume() -> None:
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("sig", 1)
        p = KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": _txid()})
        try:
            p.init_transactions(timeout=10)
            p.begin_transaction()
            p.send("sig", value=b"v")
            broker.set_rtt(broker_id=1, rtt_ms=3000)
            main = threading.get_ident()
            timer = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
            t0 = time.monotonic()
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                p.commit_transaction(timeout=30)
            assert time.monotonic() - t0 < 1.5
            broker.set_rtt(broker_id=1, rtt_ms=0)
            p.commit_transaction(timeout=30)  # resumes the interrupted commit
        finally:
            p.close(2)
