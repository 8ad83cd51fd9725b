"""Issue 31: a record whose ``process()`` fails or returns a malformed output is never skipped.

``run()`` raises ``ProcessingError`` naming ``process()`` and the record; nothing of the record is sent
and ``close()`` commits up to it, so a restarted pipeline processes it again. On the embedded broker
(at_least_once, and exactly_once_v2 for what the mock shows: no output of the record in the sink's raw
log); on real Kafka (which applies transactional offset commits) for the committed offset under
exactly_once_v2; on real Kafka for what a read_committed reader sees.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kc_testing import RealKafka
from support import produce as produce_records
from txn_log import read_committed_log

from kipconsumer import ConsumerRecord, KafkaConsumer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import KafkaError, ProcessingError
from kipconsumer.streams import Output, Pipeline

BAD = 5
N = 10


def _bad_outputs(kind: str) -> Callable[[ConsumerRecord], list[Any]]:
    def process(record: ConsumerRecord) -> list[Any]:
        if record.offset != BAD:
            return [(record.key, b"out-%d" % record.offset)]
        if kind == "three-tuple":
            return [(None, b"first-of-5"), (None, b"second-of-5", b"extra")]
        if kind == "int-value":
            return [(None, b"first-of-5"), (None, 12345)]
        raise RuntimeError("process() blew up on purpose")

    return process


def _good(record: ConsumerRecord) -> list[Output]:
    return [(record.key, b"out-%d" % record.offset)]


def _produce(bootstrap: str, topic: str, n: int = N) -> None:
    produce_records(bootstrap, topic, {0: n}, value=lambda p, i: b"%d" % i)


def _committed(bootstrap: str, group: str, topic: str) -> int | None:
    with KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}) as c:
        om = c.committed([TopicPartition(topic, 0)], timeout=10)[TopicPartition(topic, 0)]
    return None if om is None else om.offset


def _raw_values(bootstrap: str, topic: str, expected: int, timeout: float = 10.0) -> list[bytes]:
    """Every record value in the topic's log (read_uncommitted: aborted and open ones included)."""
    with KafkaConsumer({"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted",
                        "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out.extend(r.value for r in c.poll(0.3) if r.value is not None)
            if len(out) >= expected:
                deadline = min(deadline, time.monotonic() + 0.5)  # and a little more, to see extras
        return out


def _run_until_error(conf: dict[str, Any], src: str, sink: str, kind: str) -> ProcessingError:
    pipe = Pipeline(conf, src, _bad_outputs(kind), sink)
    try:
        with pytest.raises(ProcessingError) as info:
            pipe.run(timeout=30)
    finally:
        pipe.close(10)
    return info.value


def _check_error(err: ProcessingError, src: str, kind: str) -> None:
    assert (err.topic, err.partition, err.offset) == (src, 0, BAD)
    assert "process()" in str(err) and f"{src}-0@{BAD}" in str(err)
    if kind == "raises":
        assert isinstance(err.__cause__, RuntimeError)
    else:
        assert "malformed output" in str(err) and "output 1" in str(err)


def _restarted_first_offset(conf: dict[str, Any], src: str, sink: str) -> int:
    seen: list[int] = []

    def record_offsets(record: ConsumerRecord) -> Iterator[Output]:
        seen.append(record.offset)
        yield from _good(record)

    with Pipeline(conf, src, record_offsets, sink) as pipe:
        pipe.run(until=lambda: bool(seen) and seen[-1] == N - 1, timeout=30)
    return seen[0]


@pytest.mark.parametrize("kind", ["three-tuple", "int-value", "raises"])
def test_at_least_once_bad_record_is_not_skipped(broker: EmbeddedBroker, kind: str) -> None:
    src, sink, group = (f"{p}-{uuid.uuid4().hex[:8]}" for p in ("src", "sink", "grp"))
    broker.create_topic(src, 1)
    broker.create_topic(sink, 1)
    _produce(broker.bootstrap_servers, src)
    # the mock lets a new member join only once the closed one's session expired
    conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "commit.interval.ms": 100,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    _check_error(_run_until_error(conf, src, sink, kind), src, kind)
    assert _committed(broker.bootstrap_servers, group, src) == BAD
    values = _raw_values(broker.bootstrap_servers, sink, BAD)
    assert values == [b"out-%d" % i for i in range(BAD)]  # nothing of record 5
    assert _restarted_first_offset(conf, src, sink) == BAD


@pytest.mark.parametrize("kind", ["three-tuple", "int-value", "raises"])
def test_exactly_once_bad_record_sends_nothing_of_it(broker: EmbeddedBroker, kind: str) -> None:
    """The mock neither applies transactional offsets nor filters aborted records: check that not one
    output of record 5 reached the sink's log (so no transaction can ever hold part of them)."""
    src, sink, group = (f"{p}-{uuid.uuid4().hex[:8]}" for p in ("src", "sink", "grp"))
    broker.create_topic(src, 1)
    broker.create_topic(sink, 1)
    _produce(broker.bootstrap_servers, src)
    conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
            "processing.guarantee": "exactly_once_v2"}
    _check_error(_run_until_error(conf, src, sink, kind), src, kind)
    values = _raw_values(broker.bootstrap_servers, sink, BAD)
    assert b"first-of-5" not in values and values == [b"out-%d" % i for i in range(BAD)]


def _eos_on_kafka(kafka: RealKafka) -> tuple[str, str, str, dict[str, Any]]:
    """A filled source topic, an empty sink, a group and an exactly_once_v2 Pipeline config on Kafka."""
    src, sink, group = kafka.create_topic(1), kafka.create_topic(1), f"grp-{uuid.uuid4().hex[:8]}"
    _produce(kafka.bootstrap, src)
    conf = {"bootstrap.servers": kafka.bootstrap, "group.id": group,
            "processing.guarantee": "exactly_once_v2", "transactional.id": f"{group}-t"}
    return src, sink, group, conf


@pytest.mark.kafka
def test_exactly_once_bad_record_committed_offset_on_kafka(kafka: RealKafka) -> None:
    """Kafka applies transactional offset commits: close() commits the records before the bad one."""
    src, sink, group, conf = _eos_on_kafka(kafka)
    _check_error(_run_until_error(conf, src, sink, "int-value"), src, "int-value")
    assert _committed(kafka.bootstrap, group, src) == BAD
    assert _restarted_first_offset(conf, src, sink) == BAD
    log = read_committed_log(kafka.bootstrap, sink, 1)
    committed = [v for pl in log.values() for _, _, v in pl.committed]
    assert committed == [b"out-%d" % i for i in range(N)]


def _two_outputs(record: ConsumerRecord) -> list[Output]:
    if record.offset == BAD:
        return [(None, b"first-of-5"), (None, b"second-of-5")]
    return [(record.key, b"out-%d" % record.offset)]


def _fail_second_output_of_bad(pipe: Pipeline) -> None:
    """The producer's send() fails (not a timeout) for record 5's second output, after its first."""
    real = pipe.producer.send

    def send(topic: str, value: Any = None, key: Any = None, partition: Any = None) -> Any:
        if value == b"second-of-5":
            raise KafkaError("injected: the second output of record 5 cannot be sent", code="_INJECTED")
        return real(topic, value=value, key=key, partition=partition)

    pipe.producer.send = send  # type: ignore[method-assign]


def _run_with_failing_send(conf: dict[str, Any], src: str, sink: str) -> Pipeline:
    pipe = Pipeline(conf, src, _two_outputs, sink)
    _fail_second_output_of_bad(pipe)
    try:
        with pytest.raises(KafkaError, match="injected"):
            pipe.run(timeout=30)
    finally:
        pipe.close(10)
    return pipe


def test_exactly_once_send_failing_mid_record_aborts_the_transaction(broker: EmbeddedBroker) -> None:
    """Part of record 5's outputs is in the transaction when a send fails: it is aborted, not left for
    close() to commit (the mock shows the abort in the metrics; real Kafka below shows the log)."""
    src, sink, group = (f"{p}-{uuid.uuid4().hex[:8]}" for p in ("src", "sink", "grp"))
    broker.create_topic(src, 1)
    broker.create_topic(sink, 1)
    _produce(broker.bootstrap_servers, src)
    conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
            "processing.guarantee": "exactly_once_v2"}
    m = _run_with_failing_send(conf, src, sink).metrics()
    assert m["transactions_aborted"] == 1 and m["transactions_committed"] == 0


@pytest.mark.kafka
def test_exactly_once_send_failing_mid_record_is_never_committed_on_kafka(kafka: RealKafka) -> None:
    src, sink, group, conf = _eos_on_kafka(kafka)
    m = _run_with_failing_send(conf, src, sink).metrics()
    assert m["transactions_aborted"] == 1
    committed_offset = _committed(kafka.bootstrap, group, src)
    assert committed_offset is None or committed_offset <= BAD
    log = read_committed_log(kafka.bootstrap, sink, 1)
    assert b"first-of-5" not in [v for pl in log.values() for _, _, v in pl.committed]


# -- real Kafka (run by the kafka_cluster fixture of kipconsumer.testing) --------------------------------

@pytest.mark.kafka
@pytest.mark.parametrize("kind", ["int-value", "raises"])
def test_exactly_once_bad_record_read_committed_on_kafka(kafka_cluster: Any, kind: str) -> None:
    src, sink, group = (f"{p}-{uuid.uuid4().hex[:8]}" for p in ("src", "sink", "grp"))
    kafka_cluster.create_topic(src, partitions=1, replication_factor=1)
    kafka_cluster.create_topic(sink, partitions=1, replication_factor=1)
    servers = kafka_cluster.bootstrap_servers
    _produce(servers, src)
    conf = {"bootstrap.servers": servers, "group.id": group, "processing.guarantee": "exactly_once_v2",
            "transactional.id": f"{group}-t"}
    _check_error(_run_until_error(conf, src, sink, kind), src, kind)
    assert _committed(servers, group, src) == BAD
    assert _restarted_first_offset(conf, src, sink) == BAD
    with KafkaConsumer({"bootstrap.servers": servers, "isolation.level": "read_committed",
                        "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(sink, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < N and time.monotonic() < deadline:
            got.extend(r.value for r in c.poll(0.5) if r.value is not None)
    assert b"first-of-5" not in got
    assert got == [b"out-%d" % i for i in range(N)]
