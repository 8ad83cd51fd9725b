"""Java API parity of the consumer: ``key.deserializer`` / ``value.deserializer`` (applied lazily, once per
record and field, never to ``to_arrow()``; failures typed and naming the record, as Java's
RecordDeserializationException) and ``current_lag`` (Java's ``currentLag``) with per-partition lag in
``metrics()``, compared with the Java client's own ``currentLag`` (our peer). Deserializers run on the
shared ``broker``; lag needs real Kafka's watermarks and last stable offsets (marked ``kafka``)."""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Callable
from typing import Any

import java_peer
import pytest

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.config import consumer_settings
from kipconsumer.errors import (
    ConfigError,
    IllegalStateError,
    KafkaError,
    RecordDeserializationError,
    SerializationError,
)
from kipconsumer.testing import KafkaCluster


def _fill(servers: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    with KafkaProducer({"bootstrap.servers": servers}) as p:
        for k, v in records:
            p.send(topic, key=k, value=v, partition=0)
        p.flush(30)


def _read(conf: dict[str, object], topic: str, n: int) -> list[Any]:
    """Polls (assigned partition 0 from offset 0) until n records came; returns the batches."""
    c = KafkaConsumer(conf)
    batches = []
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got, deadline = 0, time.monotonic() + 20
        while got < n and time.monotonic() < deadline:
            b = c.poll(0.5)
            got += len(b)
            if b:
                batches.append(b)
    finally:
        c.close()
    assert sum(len(b) for b in batches) == n
    return batches


# -- deserializers ------------------------------------------------------------------------------
def test_deserializers_apply_lazily_once_and_leave_arrow_raw(broker: Any,
                                                             unique_name: Callable[[str], str]) -> None:
    topic = unique_name("des")
    broker.create_topic(topic, 1)
    records: list[tuple[bytes | None, bytes | None]] = [(b'"k%d"' % i, json.dumps({"i": i}).encode())
                                                        for i in range(20)]
    records += [(None, None), (b'"k"', None)]
    _fill(broker.bootstrap_servers, topic, records)
    calls: list[bytes] = []

    def value_de(b: bytes) -> Any:
        calls.append(b)
        return json.loads(b)

    conf = {"bootstrap.servers": broker.bootstrap_servers,
            "key.deserializer": lambda b: json.loads(b).upper(), "value.deserializer": value_de}
    batches = _read(conf, topic, len(records))
    assert calls == []  # nothing deserialized by poll(): only when a field is read
    flat = [r for b in batches for r in b]
    assert [r.key for r in flat] == [f"K{i}" for i in range(20)] + [None, "K"]
    assert [r.value for r in flat] == [{"i": i} for i in range(20)] + [None, None]
    assert [r.value for r in flat] == [{"i": i} for i in range(20)] + [None, None]  # again: cached
    assert len(calls) == 20  # once per record with a value; never for a null value
    assert flat[3].value is flat[3].value
    # to_arrow(): the raw bytes, zero copy, deserializers not involved
    arrow = batches[0].to_arrow()
    assert arrow.column("key").to_pylist()[:2] == [b'"k0"', b'"k1"']
    assert arrow.column("value").to_pylist()[0] == b'{"i": 0}'
    assert len(calls) == 20
    # a record pickles as plain data with the deserialized fields
    assert pickle.loads(pickle.dumps(flat[5])).value == {"i": 5}


def test_failing_deserializer_raises_a_typed_error_naming_the_record(
    broker: Any, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("desx")
    broker.create_topic(topic, 1)
    _fill(broker.bootstrap_servers, topic, [(b"a", b"1"), (b"b", b"not a number"), (b"c", b"3")])
    conf = {"bootstrap.servers": broker.bootstrap_servers, "value.deserializer": int}
    flat = [r for b in _read(conf, topic, 3) for r in b]
    assert flat[0].value == 1 and flat[2].value == 3
    with pytest.raises(RecordDeserializationError) as exc:
        _ = flat[1].value
    e = exc.value
    assert isinstance(e, SerializationError) and isinstance(e, KafkaError)
    assert (e.topic, e.partition, e.offset, e.origin) == (topic, 0, 1, "value")
    assert f"value.deserializer failed on the value of record {topic}-0 at offset 1" in str(e)
    assert isinstance(e.__cause__, ValueError)
    assert flat[1].key == b"b"  # the other field and the record stay readable
    assert "offset=1" in repr(flat[1]) and "key=b'b'" in repr(flat[1])  # repr shows raw bytes, never raises
    # the error survives pickling (e.g. across Spark workers) with its fields
    back = pickle.loads(pickle.dumps(e))
    assert (back.topic, back.partition, back.offset, back.origin) == (topic, 0, 1, "value")


@pytest.mark.parametrize("key", ["key.deserializer", "value.deserializer"])
def test_deserializer_config_must_be_callable(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"config '{key}' must be a callable .* got str "
                                          r"'org.apache.kafka.common.serialization.StringDeserializer'"):
        consumer_settings({"bootstrap.servers": "x:1",
                           key: "org.apache.kafka.common.serialization.StringDeserializer"})
    s = consumer_settings({"bootstrap.servers": "x:1", key: bytes.decode})
    assert getattr(s, key.replace(".", "_")) is bytes.decode
    assert key not in s.rdkafka
    assert consumer_settings({"bootstrap.servers": "x:1", key: None}).key_deserializer is None


# -- current_lag -----------------------------------------------------------------------------------
def test_current_lag_is_none_until_known_and_refuses_unassigned_partitions() -> None:
    # nothing listens there: no fetch response ever, so neither position nor end offset is known
    c = KafkaConsumer({"bootstrap.servers": "127.0.0.1:9", "reconnect.backoff.ms": 1000})
    try:
        tp = TopicPartition("t", 0)
        with pytest.raises(IllegalStateError, match="No current assignment for partition t-0"):
            c.current_lag(tp)
        c.assign([tp])
        assert c.current_lag(tp) is None
        assert c.metrics()["partition_lag"] == {tp: None}
    finally:
        c.close(1)


@pytest.mark.kafka
def test_current_lag_follows_position_and_the_last_stable_offset(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    servers = kafka_cluster.bootstrap_servers
    topic = unique_name("lag")
    kafka_cluster.create_topic(topic, 1, 1)
    tp = TopicPartition(topic, 0)
    _fill(servers, topic, [(None, b"%d" % i) for i in range(100)])  # offsets 0..99
    c = KafkaConsumer({"bootstrap.servers": servers, "max.poll.records": 30, "auto.offset.reset": "earliest"})
    try:
        c.assign([tp])
        got: list[int] = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got += [r.offset for r in c.poll(0.5)]
        assert got == list(range(30))
        assert c.current_lag(tp) == 70  # end offset 100 - position 30
        assert c.metrics()["partition_lag"] == {tp: 70}
        while len(got) < 100 and time.monotonic() < deadline:
            got += [r.offset for r in c.poll(0.5)]
        assert c.current_lag(tp) == 0 and c.position(tp) == 100
    finally:
        c.close()

    # An open transaction of 20 records after them: read_uncommitted sees 20 more, read_committed
    # measures to the last stable offset (the open transaction's first offset), as Java does.
    p = KafkaProducer({"bootstrap.servers": servers, "transactional.id": unique_name("lagtx")})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(20):
            p.send(topic, value=b"open-%d" % i, partition=0)
        p.flush(30)
        lags = {}
        for level in ("read_uncommitted", "read_committed"):
            c = KafkaConsumer({"bootstrap.servers": servers, "max.poll.records": 100,
                               "isolation.level": level, "auto.offset.reset": "earliest"})
            try:
                c.assign([tp])
                n, deadline = 0, time.monotonic() + 20
                while n < 100 and time.monotonic() < deadline:
                    n += len(c.poll(0.5))
                lag = c.current_lag(tp)  # read_committed: the first call asks for the LSO, answers None
                while lag is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                    lag = c.current_lag(tp)
                lags[level] = (c.position(tp), lag)
                assert c.metrics()["partition_lag"] == {tp: lag}
            finally:
                c.close()
        # read_uncommitted: high watermark 120; read_committed: last stable offset 100 (and no more)
        position = lags["read_uncommitted"][0]
        assert 100 <= position <= 120 and lags["read_uncommitted"][1] == 120 - position
        assert lags["read_committed"] == (100, 0)
        p.abort_transaction(30)
    finally:
        p.close(10)


@pytest.mark.kafka
def test_current_lag_equals_the_java_clients_current_lag(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """The same partition state read by Java's currentLag (our peer) and kipconsumer's current_lag,
    both after a first poll of at most 30 records from offset 0: 100 plain records then an open
    transaction of 20. read_uncommitted: 120 - 30; read_committed: 100 (the last stable offset) - 30."""
    servers = kafka_cluster.bootstrap_servers
    topic = unique_name("lagj")
    kafka_cluster.create_topic(topic, 1, 1)
    tp = TopicPartition(topic, 0)
    _fill(servers, topic, [(None, b"%d" % i) for i in range(100)])
    p = KafkaProducer({"bootstrap.servers": servers, "transactional.id": unique_name("lagjtx")})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(20):
            p.send(topic, value=b"open-%d" % i, partition=0)
        p.flush(30)
        for level, expected in (("read_uncommitted", 90), ("read_committed", 70)):
            (java,) = java_peer.run("lag", servers, topic, "--isolation", level, "--max-poll-records", "30")
            c = KafkaConsumer({"bootstrap.servers": servers, "max.poll.records": 30, "isolation.level": level,
                               "enable.auto.commit": False})
            try:
                c.assign([tp])
                c.seek(tp, 0)
                deadline = time.monotonic() + 10
                while not c.poll(0.2) and time.monotonic() < deadline:
                    pass
                lag = c.current_lag(tp)
                while lag is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                    lag = c.current_lag(tp)
                ours = {"position": c.position(tp), "lag": lag}
            finally:
                c.close()
            assert ours == java == {"position": 30, "lag": expected}, level
        p.abort_transaction(30)
    finally:
        p.close(10)
