"""KafkaProducer against the embedded broker (real TCP): KIP-19 bounds, delivery guarantees.

Fault-injecting tests start their own EmbeddedBroker. Timing assertions are bounds around the
configured timeouts (never speed). The large-volume test sends ``KC_PRODUCER_N`` records
(default 200 000; the issue's 1M run: ``KC_PRODUCER_N=1000000 pytest -k many_records``).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as CKTopicPartition

from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import (
    ConfigError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    SerializationError,
)
from kipconsumer.producer import KafkaProducer
from kipconsumer.structs import RecordMetadata

N_MANY = int(os.environ.get("KC_PRODUCER_N", "200000"))
_names = itertools.count()


def unique_name(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{os.getpid()}-{next(_names)}-{uuid.uuid4().hex[:6]}"


def _conf(bootstrap: str, **extra: object) -> dict[str, object]:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return conf


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    """A private 3-broker cluster for tests that inject faults."""
    with EmbeddedBroker(num_brokers=3) as b:
        yield b


class Ticker:
    """Another Python thread that counts loop iterations while the main thread blocks."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.count += 1

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def read_back(bootstrap: str, topic: str, partitions: int, expected: int,
              timeout: float = 40.0) -> list[Any]:
    """Every message of ``topic`` read by an independent client (confluent-kafka), from offset 0
    until ``expected`` messages arrived or nothing more came for a while."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"),
                  "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        c.assign([CKTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            msgs = c.consume(num_messages=10000, timeout=0.5)
            good = [m for m in msgs if m.error() is None]
            out.extend(good)
            if good:
                idle_since = time.monotonic()
            if len(out) >= expected and time.monotonic() - idle_since > 1.0:
                break
        return out
    finally:
        c.close()


# --------------------------------------------------------------------------------------------------
# Round trip
# --------------------------------------------------------------------------------------------------


def test_round_trip_keys_headers_timestamps(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-rt")
    broker.create_topic(topic, partitions=4)
    n = 10_000
    base_ts = 1_700_000_000_000
    callbacks: list[tuple[RecordMetadata | None, Exception | None]] = []
    cb_lock = threading.Lock()

    def on_delivery(md: RecordMetadata | None, exc: Exception | None) -> None:
        with cb_lock:
            callbacks.append((md, exc))

    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        futs = [
            p.send(topic, value=f"value-{i}".encode(), key=f"key-{i}",
                   headers=[("idx", str(i).encode()), ("kind", "text"), ("none", None)],
                   timestamp=base_ts + i, callback=on_delivery)
            for i in range(n)
        ]
        assert all(isinstance(f, concurrent.futures.Future) for f in futs)
        p.flush(timeout=30)
        assert all(f.done() for f in futs)
        mds = [f.result(timeout=0) for f in futs]
        assert p.metrics()["in_flight"] == 0
    assert len(callbacks) == n and all(e is None for _, e in callbacks)
    seen: set[tuple[int, int]] = set()
    for i, md in enumerate(mds):
        assert md.topic == topic
        assert 0 <= md.partition < 4
        assert md.offset >= 0
        assert md.serialized_key_size == len(f"key-{i}")
        assert md.serialized_value_size == len(f"value-{i}")
        seen.add((md.partition, md.offset))
    assert len(seen) == n  # distinct offsets

    msgs = read_back(broker.bootstrap_servers, topic, 4, n)
    assert len(msgs) == n
    by_idx = {}
    for m in msgs:
        i = int(m.value().decode().split("-")[1])
        by_idx[i] = m
    assert sorted(by_idx) == list(range(n))
    for i, m in by_idx.items():
        assert m.key() == f"key-{i}".encode()
        assert m.timestamp()[1] == base_ts + i
        assert m.headers() == [("idx", str(i).encode()), ("kind", b"text"), ("none", None)]
        assert (m.partition(), m.offset()) == (mds[i].partition, mds[i].offset)


def test_dict_headers_memoryview_bytearray_and_serializers(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-ser")
    broker.create_topic(topic, partitions=1)
    with KafkaProducer(_conf(broker.bootstrap_servers),
                       key_serializer=lambda k: str(k).encode(),
                       value_serializer=lambda v: repr(v)) as p:
        f1 = p.send(topic, value={"a": 1}, key=42, headers={"h": b"1"})
        with pytest.raises(SerializationError, match="value_serializer"):
            p.send(topic, value=_Unrepr())
        f1.result(10)
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        f2 = p.send(topic, value=memoryview(b"mv"), key=bytearray(b"ba"))
        f3 = p.send(topic, value="", key=None)
        f2.result(10)
        f3.result(10)
    msgs = read_back(broker.bootstrap_servers, topic, 1, 3)
    assert [(m.key(), m.value()) for m in msgs] == [(b"42", b"{'a': 1}"), (b"ba", b"mv"), (None, b"")]
    assert msgs[0].headers() == [("h", b"1")]


class _Unrepr:
    def __repr__(self) -> str:
        raise RuntimeError("cannot serialize")


def test_future_apis_and_callbacks_without_poll(broker: EmbeddedBroker,
                                                caplog: pytest.LogCaptureFixture) -> None:
    topic = unique_name("prod-fut")
    broker.create_topic(topic, partitions=2)
    done_cb: list[concurrent.futures.Future[RecordMetadata]] = []
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        f = p.send(topic, b"x")
        f.add_done_callback(done_cb.append)
        assert f.cancel() is False
        futs = [p.send(topic, b"y") for _ in range(100)]
        done, not_done = concurrent.futures.wait(futs, timeout=10)
        assert len(done) == 100 and not not_done
        assert len(list(concurrent.futures.as_completed(futs, timeout=10))) == 100
        assert isinstance(f.result(10), RecordMetadata)
        deadline = time.monotonic() + 5
        while not done_cb and time.monotonic() < deadline:
            time.sleep(0.01)
        assert done_cb == [f]
        # a failing callback is logged, the delivery thread keeps completing futures
        with caplog.at_level(logging.ERROR, logger="kipconsumer.producer"):
            bad = p.send(topic, b"z", callback=lambda md, exc: 1 / 0)
            bad.result(10)
            after = p.send(topic, b"w")
            after.result(10)
        assert p.metrics()["callback_errors"] == 1
        assert any("callback" in r.getMessage() for r in caplog.records)


def test_completed_futures_answer_without_a_condition(broker: EmbeddedBroker) -> None:
    """Futures nobody waited on are completed in place (C fields) and read without creating the
    threading.Condition; the RecordMetadata is built on first access and then cached."""
    topic = unique_name("prod-lazy")
    broker.create_topic(topic, partitions=3)
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        futs = [p.send(topic, f"v{i}".encode(), key=b"k") for i in range(50)]
        p.flush(10)
        for i, f in enumerate(futs):
            assert "_condition" not in f.__dict__
            assert f.done() and not f.cancelled() and f.running() is False
            assert f.exception(0) is None
            md = f.result(0)
            assert isinstance(md, RecordMetadata) and md.topic == topic
            assert (md.serialized_key_size, md.serialized_value_size) == (1, len(f"v{i}"))
            assert f.result(0) is md  # cached
            assert "_condition" not in f.__dict__
            assert "state=finished returned RecordMetadata" in repr(f)
        # same key, same partition: offsets in send order
        assert [f.result(0).offset for f in futs] == sorted(f.result(0).offset for f in futs)
        # done-callbacks added after completion run at once, in the caller's thread
        seen: list[concurrent.futures.Future[RecordMetadata]] = []
        futs[0].add_done_callback(seen.append)
        assert seen == [futs[0]]


def test_waiter_before_completion_is_notified(own_broker: EmbeddedBroker) -> None:
    """A thread that waits on a future before its report arrives is woken by the delivery thread."""
    topic = unique_name("prod-wait")
    own_broker.create_topic(topic, partitions=1)
    with KafkaProducer(_conf(own_broker.bootstrap_servers)) as p:
        p.send(topic, b"warm-up").result(10)
        own_broker.set_rtt(1, 300)
        own_broker.set_rtt(2, 300)
        own_broker.set_rtt(3, 300)
        f = p.send(topic, b"slow")
        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.append(f.result(10)))
        waiter.start()
        time.sleep(0.05)
        assert not f.done()
        waiter.join(10)
        assert len(got) == 1 and isinstance(got[0], RecordMetadata)
        assert f.result(0) is got[0] and f.exception(0) is None


def test_send_is_native_unless_overridden(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-bind")
    broker.create_topic(topic, partitions=1)
    with KafkaProducer(_conf(broker.bootstrap_servers),
                       key_serializer=lambda k: k.upper()) as p:
        assert p.__dict__["send"] == p._core.send  # the native method: no Python frame per record
        assert p.send(topic, value="v", key="k", headers=None, timestamp=None,
                      callback=None).result(10).serialized_key_size == 1

    class Counting(KafkaProducer):
        calls = 0

        def send(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[RecordMetadata]:
            Counting.calls += 1
            return super().send(*args, **kwargs)

    with Counting(_conf(broker.bootstrap_servers),
                  value_serializer=lambda v: None if v is None else str(v)) as c:
        assert c.send(topic, 7).result(10).serialized_value_size == 1
        assert Counting.calls == 1
        with pytest.raises(SerializationError, match="value_serializer"):
            c.send(topic, _Unrepr())


# --------------------------------------------------------------------------------------------------
# max.block.ms
# --------------------------------------------------------------------------------------------------


def test_send_unknown_topic_blocks_for_max_block_ms(own_broker: EmbeddedBroker) -> None:
    max_block = 1500
    p = KafkaProducer(_conf(own_broker.bootstrap_servers, **{"max.block.ms": max_block,
                                                              "allow.auto.create.topics": False}))
    try:
        with Ticker() as ticker:
            t0 = time.monotonic()
            with pytest.raises(KafkaTimeoutError) as ei:
                p.send("no-such-topic", b"v")
            elapsed = time.monotonic() - t0
        assert max_block / 1000 * 0.95 <= elapsed <= max_block / 1000 + 1.0, elapsed
        msg = str(ei.value)
        assert "metadata" in msg and "no-such-topic" in msg and "max.block.ms=1500" in msg
        assert ticker.count > 1000, "send() must release the GIL while it waits"
        assert p.metrics()["in_flight"] == 0 and p.metrics()["records_sent"] == 0
        with pytest.raises(KafkaTimeoutError, match="metadata"):
            p.partitions_for("no-such-topic")
    finally:
        p.close(0)


def test_send_blocks_for_max_block_ms_when_brokers_are_down(own_broker: EmbeddedBroker) -> None:
    max_block = 1200
    p = KafkaProducer(_conf(own_broker.bootstrap_servers, **{"max.block.ms": max_block}))
    try:
        for b in (1, 2, 3):
            own_broker.set_down(b)
        with Ticker() as ticker:
            t0 = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match="metadata of topic 'down-topic'"):
                p.send("down-topic", b"v")
            elapsed = time.monotonic() - t0
        assert max_block / 1000 * 0.95 <= elapsed <= max_block / 1000 + 1.0, elapsed
        assert ticker.count > 1000
    finally:
        p.close(0)


def test_full_buffer_blocks_then_raises(own_broker: EmbeddedBroker) -> None:
    topic = "full"
    own_broker.create_topic(topic, partitions=1)
    own_broker.set_leader(topic, 0, 1)
    max_block = 1500
    p = KafkaProducer(_conf(own_broker.bootstrap_servers, **{
        "max.block.ms": max_block, "queue.buffering.max.messages": 10,
        "delivery.timeout.ms": 60000}))
    try:
        p.send(topic, b"warm-up").result(10)  # metadata known: only the buffer can block now
        own_broker.set_down(1)  # stalled broker: nothing is acknowledged, the buffer stays full
        queued = [p.send(topic, f"r{i}".encode()) for i in range(10)]
        with Ticker() as ticker:
            t0 = time.monotonic()
            with pytest.raises(KafkaTimeoutError) as ei:
                p.send(topic, b"one too many")
            elapsed = time.monotonic() - t0
        assert max_block / 1000 * 0.95 <= elapsed <= max_block / 1000 + 1.0, elapsed
        assert "buffer space" in str(ei.value) and "max.block.ms=1500" in str(ei.value)
        assert ticker.count > 1000
        m = p.metrics()
        assert m["buffer_full_timeouts"] == 1 and m["in_flight"] == 10
        assert not any(f.done() for f in queued)
    finally:
        p.close(0)
    # close() failed every pending record with a typed error
    assert all(f.done() for f in queued)
    codes = [f.exception(0).code for f in queued]  # type: ignore[union-attr]
    assert set(codes) <= {"_PURGE_QUEUE", "_PURGE_INFLIGHT"} and len(codes) == 10


def test_buffer_space_freed_unblocks_send(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-tiny")
    broker.create_topic(topic, partitions=2)
    with KafkaProducer(_conf(broker.bootstrap_servers, **{"queue.buffering.max.messages": 5,
                                                           "max.block.ms": 10000})) as p:
        futs = [p.send(topic, str(i).encode()) for i in range(300)]  # waits for space many times
        p.flush(30)
        assert all(f.result(0).offset >= 0 for f in futs)
        assert p.metrics()["buffer_full_waits"] > 0


# --------------------------------------------------------------------------------------------------
# request.timeout.ms / delivery.timeout.ms
# --------------------------------------------------------------------------------------------------


def test_leader_down_fails_after_delivery_timeout(own_broker: EmbeddedBroker) -> None:
    topic = "leader-down"
    own_broker.create_topic(topic, partitions=1)
    own_broker.set_leader(topic, 0, 1)
    delivery = 3000
    p = KafkaProducer(_conf(own_broker.bootstrap_servers, **{
        "delivery.timeout.ms": delivery, "request.timeout.ms": 1000}))
    try:
        p.send(topic, b"warm-up").result(10)
        own_broker.set_down(1)
        failed_at: list[float] = []
        t0 = time.monotonic()
        fut = p.send(topic, b"lost", partition=0,
                     callback=lambda md, exc: failed_at.append(time.monotonic()))
        exc = fut.exception(timeout=delivery / 1000 + 10)
        elapsed = time.monotonic() - t0
        assert isinstance(exc, KafkaTimeoutError), exc
        assert delivery / 1000 <= elapsed <= delivery / 1000 + 2.0, elapsed
        assert failed_at and failed_at[0] - t0 >= delivery / 1000
        msg = str(exc)
        assert f"Expiring 1 record(s) for {topic}-0" in msg, msg
        assert "since batch creation" in msg and f"delivery.timeout.ms={delivery}" in msg
        waited_ms = int(msg.split(": ")[1].split(" ms")[0])
        assert delivery <= waited_ms <= delivery + 2000
        assert exc.code == "_MSG_TIMED_OUT"
        assert p.metrics()["records_timed_out"] == 1
    finally:
        own_broker.set_up(1)
        p.close(0)


def test_slow_broker_requests_time_out_are_retried_and_delivered(own_broker: EmbeddedBroker) -> None:
    """Responses slower than request.timeout.ms: requests time out and are retried; once the delay
    is removed (well before delivery.timeout.ms) every record is acknowledged exactly once.

    The embedded broker (librdkafka's mock) appends a request when it receives it and only delays
    the response, and it checks idempotent sequence numbers only for transactional producers
    (``rd_kafka_mock_validate_records`` returns early without a TransactionalId), so a retried
    batch is appended again there. Real brokers drop it (enable.idempotence=true, the default).
    What the client controls is checked strictly: every future succeeds exactly once, and the
    record stored at each acknowledged offset is the one that was sent; no record is lost.
    """
    topic = "slow"
    own_broker.create_topic(topic, partitions=1)
    own_broker.set_leader(topic, 0, 1)
    n = 300
    calls: list[int] = []
    p = KafkaProducer(_conf(own_broker.bootstrap_servers, **{
        "request.timeout.ms": 1000, "delivery.timeout.ms": 20000}))
    try:
        assert p._settings.rdkafka["enable.idempotence"] == "true"
        p.send(topic, b"warm-up").result(10)
        own_broker.set_rtt(1, 2500)  # every response comes after request.timeout.ms
        t0 = time.monotonic()
        futs = [p.send(topic, f"slow-{i}".encode(), callback=lambda md, exc, i=i: calls.append(i))
                for i in range(n)]
        time.sleep(3.5)  # the first requests time out (after ~1-2 s) and are retried
        assert not any(f.done() for f in futs), "a response slower than request.timeout.ms was accepted"
        own_broker.set_rtt(1, 0)  # well before delivery.timeout.ms
        p.flush(20)
        elapsed = time.monotonic() - t0
        results = [f.result(0) for f in futs]
        assert elapsed < 20
        assert sorted(calls) == list(range(n))  # each callback exactly once
        assert len({r.offset for r in results}) == n
        assert p.metrics()["records_failed"] == 0
    finally:
        own_broker.set_rtt(1, 0)
        p.close(5)
    msgs = read_back(own_broker.bootstrap_servers, topic, 1, n + 1)
    by_offset = {m.offset(): m.value() for m in msgs}
    for i, r in enumerate(results):
        assert by_offset[r.offset] == f"slow-{i}".encode()
    assert {m.value() for m in msgs} == {b"warm-up"} | {f"slow-{i}".encode() for i in range(n)}


# --------------------------------------------------------------------------------------------------
# Volume, close, errors
# --------------------------------------------------------------------------------------------------


def test_many_records_all_resolved_and_read_back(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-many")
    partitions = 24  # the mock keeps ~100k records / 5 MiB per partition
    broker.create_topic(topic, partitions=partitions)
    resolved = [0]
    errors: list[Exception] = []

    def cb(md: RecordMetadata | None, exc: Exception | None) -> None:
        resolved[0] += 1
        if exc is not None:
            errors.append(exc)

    payload = b"p" * 20
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        futs = [p.send(topic, payload, callback=cb) for _ in range(N_MANY)]
        p.flush(60)
        assert p.metrics()["in_flight"] == 0
    assert resolved[0] == N_MANY and not errors
    assert all(f.done() and f.exception(0) is None for f in futs)
    per_partition: dict[int, int] = {}
    for f in futs:
        md = f.result(0)
        per_partition[md.partition] = per_partition.get(md.partition, 0) + 1
    msgs = read_back(broker.bootstrap_servers, topic, partitions, N_MANY, timeout=60)
    assert len(msgs) == N_MANY
    read_per_partition: dict[int, int] = {}
    for m in msgs:
        read_per_partition[m.partition()] = read_per_partition.get(m.partition(), 0) + 1
    assert read_per_partition == per_partition


def test_close_with_pending_records_fails_every_future(own_broker: EmbeddedBroker) -> None:
    topic = "pending"
    own_broker.create_topic(topic, partitions=2)
    own_broker.set_leader(topic, 0, 1)
    own_broker.set_leader(topic, 1, 1)
    n = 500
    calls: list[Exception | None] = []
    p = KafkaProducer(_conf(own_broker.bootstrap_servers, **{"delivery.timeout.ms": 60000}))
    p.send(topic, b"warm-up").result(10)
    p.flush(10)  # in_flight drops just after the future completes (same batch): wait for it
    own_broker.set_down(1)
    futs = [p.send(topic, f"{i}".encode(), callback=lambda md, exc: calls.append(exc)) for i in range(n)]
    assert p.metrics()["in_flight"] == n
    t0 = time.monotonic()
    p.close(timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert sum(f.done() for f in futs) == n
    excs = [f.exception(0) for f in futs]
    assert all(isinstance(e, KafkaError) for e in excs)
    assert {e.code for e in excs if e is not None} <= {"_PURGE_QUEUE", "_PURGE_INFLIGHT"}
    assert len(calls) == n and all(c is not None for c in calls)
    assert p.metrics()["in_flight"] == 0
    p.close()  # idempotent
    with pytest.raises(IllegalStateError):
        p.send(topic, b"late")
    with pytest.raises(IllegalStateError):
        p.flush()
    own_broker.set_up(1)


def test_close_waits_for_delivery_within_timeout(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-close")
    broker.create_topic(topic, partitions=3)
    p = KafkaProducer(_conf(broker.bootstrap_servers, **{"linger.ms": 200}))
    futs = [p.send(topic, b"v") for _ in range(1000)]
    p.close(timeout=10)
    assert all(f.done() and f.exception(0) is None for f in futs)


def test_flush_timeout_raises_and_keeps_records(own_broker: EmbeddedBroker) -> None:
    topic = "flush-to"
    own_broker.create_topic(topic, partitions=1)
    own_broker.set_leader(topic, 0, 1)
    p = KafkaProducer(_conf(own_broker.bootstrap_servers, **{"delivery.timeout.ms": 60000}))
    try:
        p.send(topic, b"warm-up").result(10)
        own_broker.set_down(1)
        f = p.send(topic, b"stuck")
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="1 record"):
            p.flush(timeout=0.5)
        assert 0.45 <= time.monotonic() - t0 <= 3.0
        assert not f.done()
        own_broker.set_up(1)
        p.flush(30)
        assert f.result(0).offset == 1
    finally:
        own_broker.set_up(1)
        p.close(0)


@pytest.mark.parametrize("bad", [123, 1.5, object(), ["x"], {"a": 1}])
def test_bad_value_and_key_types_are_type_errors(broker: EmbeddedBroker, bad: object) -> None:
    topic = unique_name("prod-types")
    broker.create_topic(topic, partitions=1)
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        with pytest.raises(TypeError, match="value"):
            p.send(topic, value=bad)
        with pytest.raises(TypeError, match="key"):
            p.send(topic, value=b"ok", key=bad)
        with pytest.raises(TypeError, match="header"):
            p.send(topic, value=b"ok", headers=[("h", bad)])
        with pytest.raises(TypeError, match="partition"):
            p.send(topic, value=b"ok", partition="0")  # type: ignore[arg-type]
        assert p.metrics()["records_sent"] == 0 and p.metrics()["in_flight"] == 0


def test_topic_name_checked_once_per_topic(broker: EmbeddedBroker,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's topic name rule is checked on a topic's first send only (the hot path of later sends
    to a known topic does not run it), and an invalid name is refused before librdkafka sees it."""
    from kipconsumer import _producer
    from kipconsumer.producer import InvalidTopicError

    checked: list[str] = []
    real = _producer.check_topic_name  # type: ignore[attr-defined]  # module global, not in the stub

    def counting(topic: str, arg: str) -> str:
        checked.append(topic)
        return real(topic, arg)

    monkeypatch.setattr(_producer, "check_topic_name", counting, raising=True)
    a, b = unique_name("prod-name-a"), unique_name("prod-name-b")
    broker.create_topic(a, partitions=1)
    broker.create_topic(b, partitions=1)
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        futs = [p.send(t, b"v") for _ in range(500) for t in (a, b, a[:1] + a[1:])]  # equal, not identical
        p.flush(30)
        assert all(f.result(0).topic in (a, b) for f in futs)
        assert checked == [a, b]
        for bad in ("with space", f"{a}\x00suffix"):
            for _ in range(2):  # refused every time, never cached
                with pytest.raises(InvalidTopicError, match="invalid topic name") as ei:
                    p.send(bad, b"v")
                assert isinstance(ei.value, ValueError) and ei.value.code == "TOPIC_EXCEPTION"
        assert checked == [a, b, "with space", "with space", f"{a}\x00suffix", f"{a}\x00suffix"]
        assert p.metrics()["topics_known"] == 2 and p.metrics()["records_sent"] == 1500
    msgs = read_back(broker.bootstrap_servers, a, 1, 1000)
    assert len(msgs) == 1000  # the NUL-truncated name did not land in topic a


def test_bad_timestamps_and_falsy_headers_are_typed(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-bad")
    broker.create_topic(topic, partitions=1)
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        for ts in (2**63, -1, float("inf"), float("nan")):
            with pytest.raises(ValueError, match="timestamp must be epoch milliseconds in 0.."):
                p.send(topic, b"v", timestamp=ts)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="timestamp"):
            p.send(topic, b"v", timestamp="1")  # type: ignore[arg-type]
        for hdrs in ("", b"", 0):
            with pytest.raises(SerializationError, match="headers must be a list"):
                p.send(topic, b"v", headers=hdrs)  # type: ignore[arg-type]
        assert p.metrics()["records_sent"] == 0
        # the largest timestamp the client takes; Kafka refuses one further than
        # log.message.timestamp.after.max.ms (1 hour) in the future with a typed error (the mock
        # stores it)
        future = p.send(topic, b"v", timestamp=2**63 - 1, headers=[])
        if isinstance(broker, EmbeddedBroker):
            assert future.result(10).offset == 0
        else:
            with pytest.raises(KafkaError) as ei:
                future.result(10)
            assert ei.value.code == "INVALID_TIMESTAMP"
        day_ago = int(time.time() * 1000) - 86_400_000
        md = p.send(topic, b"v", timestamp=day_ago, headers=[]).result(10)
        # the mock acknowledges every record with a log-append time of 1234 (docs/broker.md)
        assert md.timestamp == (1234 if isinstance(broker, EmbeddedBroker) else day_ago)


def test_unknown_partition_is_typed_error(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-part")
    broker.create_topic(topic, partitions=2)
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        assert p.partitions_for(topic) == [0, 1]
        with pytest.raises(KafkaError) as ei:
            p.send(topic, b"v", partition=5)
        assert ei.value.code == "_UNKNOWN_PARTITION" and "partition 5" in str(ei.value)
        assert p.send(topic, b"v", partition=1).result(10).partition == 1


@pytest.mark.parametrize("conf, match", [
    ({"delivery.timeout.ms": 1000, "request.timeout.ms": 2000}, "delivery.timeout.ms"),
    ({"max.block.mss": 10}, "max.block.ms"),
    ({"max.block.ms": -5}, "max.block.ms"),
])
def test_config_errors_surface_as_config_error(conf: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        KafkaProducer({"bootstrap.servers": "127.0.0.1:1", **conf})


def test_defaults_idempotence_and_acks_all(broker: EmbeddedBroker) -> None:
    p = KafkaProducer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        rd = p._settings.rdkafka
        assert rd["enable.idempotence"] == "true" and rd["acks"] in ("all", "-1")
        m = p.metrics()
        assert m["max_block_ms"] == 60000 and m["delivery_timeout_ms"] == 120000
    finally:
        p.close()


def test_send_from_many_threads(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-mt")
    broker.create_topic(topic, partitions=3)
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        all_futs: list[concurrent.futures.Future[RecordMetadata]] = []
        lock = threading.Lock()

        def work(t: int) -> None:
            fs = [p.send(topic, f"{t}-{i}".encode()) for i in range(2000)]
            with lock:
                all_futs.extend(fs)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        p.flush(30)
    assert len(all_futs) == 8000 and all(f.exception(0) is None for f in all_futs)



def test_send_from_callback_and_float_timestamp(broker: EmbeddedBroker) -> None:
    topic = unique_name("prod-cbsend")
    broker.create_topic(topic, partitions=1)
    inner: list[concurrent.futures.Future[RecordMetadata]] = []
    with KafkaProducer(_conf(broker.bootstrap_servers)) as p:
        def cb(md: RecordMetadata | None, exc: Exception | None) -> None:
            inner.append(p.send(topic, b"from-callback"))

        p.send(topic, b"outer", timestamp=1_700_000_000_123.0, callback=cb).result(10)
        deadline = time.monotonic() + 5
        while not inner and time.monotonic() < deadline:
            time.sleep(0.01)
        assert inner and inner[0].result(10).offset == 1
    msgs = read_back(broker.bootstrap_servers, topic, 1, 2)
    assert msgs[0].timestamp()[1] == 1_700_000_000_123
    assert [m.value() for m in msgs] == [b"outer", b"from-callback"]


def test_broker_error_fails_future_with_librdkafka_error_name(own_broker: EmbeddedBroker) -> None:
    own_broker.create_topic("errs", partitions=1)
    with KafkaProducer(_conf(own_broker.bootstrap_servers)) as p:
        p.send("errs", b"warm-up").result(10)
        own_broker.push_request_errors("Produce", "INVALID_RECORD")
        exc = p.send("errs", b"secret-payload").exception(10)
        assert type(exc) is KafkaError and exc.code == "INVALID_RECORD"
        assert "errs-0" in str(exc) and "secret-payload" not in str(exc)
        assert p.send("errs", b"next").result(10).offset == 1
        assert p.metrics()["records_failed"] == 1
