"""Misuse gets an error that names what to change (or, for a record, simply works)."""

from __future__ import annotations

import copy
import pickle
import time
from collections.abc import Callable

import pytest

from kipconsumer import ConsumerRecordData, KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import ConfigError, InvalidTopicError, KafkaError


def _consumer(broker: EmbeddedBroker, **extra: object) -> KafkaConsumer:
    conf: dict[str, object] = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "g-errors",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(extra)
    return KafkaConsumer(conf)


def test_subscribe_invalid_regex_names_the_pattern(broker: EmbeddedBroker) -> None:
    with _consumer(broker) as c:
        with pytest.raises(InvalidTopicError, match=r"'\^foo\(\[' starts with '\^'.*regular expression"):
            c.subscribe(["^foo(["])
        assert c.subscription() == set()
        c.subscribe(["^foo.*"])  # a valid one is still accepted
        assert c.subscription() == {"^foo.*"}


def test_assign_duplicate_partitions_names_the_partition(
    broker: EmbeddedBroker, topic_factory: Callable[..., str],
) -> None:
    topic = topic_factory(2)
    with _consumer(broker) as c:
        c.assign([TopicPartition(topic, 1)])
        with pytest.raises(ValueError, match=rf"partitions: TopicPartition\(topic='{topic}', partition=0\) "
                                             r"is given more than once"):
            c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 0)])
        assert c.assignment() == {TopicPartition(topic, 1)}  # unchanged


def test_record_above_message_max_bytes_names_the_client_limit(
    broker: EmbeddedBroker, topic_factory: Callable[..., str],
) -> None:
    topic = topic_factory(1)
    with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "message.max.bytes": 100_000}) as p:
        with pytest.raises(KafkaError, match=r"larger than message\.max\.bytes=100000, the producer's "
                                             r"client-side limit \(config key 'message\.max\.bytes'\)"):
            p.send(topic, value=b"x" * 200_000).result(10)
        assert p.send(topic, value=b"small").result(10).offset == 0


def test_records_pickle_as_plain_data_batches_say_what_to_pickle(
    broker: EmbeddedBroker, topic_factory: Callable[..., str],
) -> None:
    topic = topic_factory(1)
    with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers}) as p:
        p.send(topic, value=b"v", key=b"k", headers=[("h", b"1"), ("n", None)]).result(10)
    with _consumer(broker) as c:
        c.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 10
        records = c.poll(0.2)
        while not records and time.monotonic() < deadline:
            records = c.poll(0.2)
        assert len(records) == 1
        r = records[0]
        for clone in (pickle.loads(pickle.dumps(r)), copy.copy(r)):
            assert isinstance(clone, ConsumerRecordData)
            assert (clone.topic, clone.partition, clone.offset, clone.key, clone.value, clone.timestamp,
                    clone.timestamp_type, clone.headers, clone.serialized_key_size,
                    clone.serialized_value_size) == (
                r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.headers,
                r.serialized_key_size, r.serialized_value_size)
            assert clone.topic_partition() == r.topic_partition()
        assert pickle.loads(pickle.dumps(list(records)))[0].value == b"v"
        with pytest.raises(TypeError, match=r"ConsumerRecords cannot be pickled.*list\(records\)"):
            pickle.dumps(records)


def test_repr_of_a_client_whose_constructor_failed() -> None:
    seen: list[str] = []

    class Consumer(KafkaConsumer):
        def __init__(self, conf: dict[str, object]) -> None:
            try:
                super().__init__(conf)
            except ConfigError:
                seen.append(repr(self))
                assert self.closed
                raise

    class Producer(KafkaProducer):
        def __init__(self, conf: dict[str, object]) -> None:
            try:
                super().__init__(conf)
            except ConfigError:
                seen.append(repr(self))
                assert self.closed
                raise

    bad = {"bootstrap.servers": "127.0.0.1:1", "debug": "no-such-context"}
    with pytest.raises(ConfigError):
        Consumer(bad)
    with pytest.raises(ConfigError):
        Producer(bad)
    assert seen == ["KafkaConsumer(<constructor failed>)", "<KafkaProducer (constructor failed)>"]
