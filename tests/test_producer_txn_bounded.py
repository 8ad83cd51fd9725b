"""Transactional calls stay bounded when librdkafka blocks inside them (TransactionBlockedError).

librdkafka 2.16's ``send_offsets_to_transaction()`` once blocked 8+ minutes after a broker freeze
(docs/reliability.md, Known upstream issues); that block cannot be produced on demand. These tests
make the real librdkafka calls against Tansu and hold their result on the helper thread
(``_set_txn_test_hold_ms``: the call returns to kipconsumer that much later, as the blocked call
did), so the caller's bound, the resumption, the refusal of other calls and the deferred release of
the handle are shown deterministically.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest
from kc_testing import Tansu

from kipconsumer import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kipconsumer._producer import _set_txn_test_hold_ms
from kipconsumer.errors import KafkaTimeoutError, TransactionBlockedError, TransactionOutcomeUnknownError

pytestmark = pytest.mark.interop


@pytest.fixture()
def hold() -> Iterator[None]:
    yield
    _set_txn_test_hold_ms(0)


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _setup(tansu: Tansu) -> tuple[KafkaProducer, KafkaConsumer, str, str]:
    topic, source = tansu.create_topic(1), tansu.create_topic(1)
    txid = f"tx-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer({"bootstrap.servers": tansu.bootstrap, "transactional.id": txid})
    consumer = KafkaConsumer({"bootstrap.servers": tansu.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                              "enable.auto.commit": False})
    consumer.assign([TopicPartition(source, 0)])
    p.init_transactions(timeout=30)
    p.begin_transaction()
    p.send(topic, value=b"v").result(30)
    return p, consumer, topic, source


def test_a_blocked_send_offsets_is_bounded_and_resumes(tansu: Tansu, hold: None) -> None:
    p, consumer, _, source = _setup(tansu)
    tp = TopicPartition(source, 0)
    try:
        _set_txn_test_hold_ms(4000)
        t0 = time.monotonic()
        with pytest.raises(TransactionBlockedError, match="send_offsets_to_transaction call has been"):
            p.send_offsets_to_transaction({tp: OffsetAndMetadata(7)}, consumer.group_metadata(), timeout=0.5)
        took = time.monotonic() - t0
        assert 1.4 <= took < 3.0, took  # the timeout plus librdkafka's 1 s grace, not the 4 s hold
        assert p.transaction_blocked
        # it is a KafkaTimeoutError: a caller that retries the same call goes on waiting for it
        assert issubclass(TransactionBlockedError, KafkaTimeoutError)
        with pytest.raises(TransactionBlockedError, match="Call send_offsets_to_transaction again"):
            p.commit_transaction(timeout=0.2)  # another call while it is blocked: refused at once
        _set_txn_test_hold_ms(0)
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(7)}, consumer.group_metadata(), timeout=10)
        assert not p.transaction_blocked
        p.commit_transaction(timeout=30)
        committed = consumer.committed([tp], timeout=10)[tp]
        assert committed is not None and committed.offset == 7
    finally:
        consumer.close()
        p.close(5)


def test_closing_a_producer_with_a_blocked_call_returns_at_once(tansu: Tansu, hold: None) -> None:
    """The blocked call keeps the handle; close() does not wait for it. A new producer of the same
    transactional.id fences the old one and aborts its transaction; the old handle is freed when the
    blocked call returns (the process goes on)."""
    p, consumer, topic, _ = _setup(tansu)
    txid = p._settings.rdkafka["transactional.id"]
    try:
        _set_txn_test_hold_ms(3000)
        # a blocked commit: its outcome is unknown (the producer allows only close() & co. now)
        with pytest.raises(TransactionOutcomeUnknownError) as info:
            p.commit_transaction(timeout=0.2)
        assert isinstance(info.value.__cause__, TransactionBlockedError)
        _set_txn_test_hold_ms(0)
        t0 = time.monotonic()
        p.close(0)
        assert time.monotonic() - t0 < 1.0
        with KafkaProducer({"bootstrap.servers": tansu.bootstrap, "transactional.id": txid}) as q:
            q.init_transactions(timeout=30)
            q.begin_transaction()
            q.send(topic, value=b"w")
            q.commit_transaction(timeout=30)
        threads_while_blocked = _native_threads()
        time.sleep(3.0)  # the held call returns meanwhile and its thread destroys the old handle
        # librdkafka's threads of the old handle (main, brokers) and the helper thread are gone
        assert _native_threads() <= threads_while_blocked - 3
    finally:
        consumer.close()
