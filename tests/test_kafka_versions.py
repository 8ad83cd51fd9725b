"""A smoke of every feature on the session's real Kafka, whichever release it runs (``--kafka-version``;
``./dev.sh kafka-matrix`` runs this module on 3.7, 3.9, 4.0, 4.2 and 4.4): a classic group with eager
and cooperative rebalancing, transactions and read_committed, offsets by time, KIP-848 and share
groups where the release has them, and, where it has not, a typed error within seconds naming the
feature (never polls that stay empty)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from kipconsumer import KafkaConsumer, KafkaProducer, KafkaShareConsumer, TopicPartition
from kipconsumer.errors import ShareGroupsUnsupportedError, UnsupportedVersionError
from kipconsumer.testing import KafkaCluster
from kipconsumer.testing._releases import KafkaRelease, parse_release

pytestmark = pytest.mark.kafka

#: how long a refused feature may take to raise
REFUSAL_SECONDS = 10.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def release(kafka_cluster: KafkaCluster) -> KafkaRelease:
    return parse_release(kafka_cluster.version)


def _produce(cluster: KafkaCluster, topic: str, count: int, partitions: int = 1) -> None:
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0}) as p:
        for f in [p.send(topic, value=b"v%d" % i, partition=i % partitions) for i in range(count)]:
            f.result(30)


def _group_consumer(cluster: KafkaCluster, group: str, **extra: object) -> KafkaConsumer:
    conf: dict[str, object] = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                               "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(extra)
    return KafkaConsumer(conf)


def _poll_values(c: KafkaConsumer, count: int, timeout: float = 60.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += [r.value for r in c.poll(0.5)]
    return got


@pytest.fixture
def topic(kafka_cluster: KafkaCluster) -> Iterator[str]:
    name = _name("ver")
    kafka_cluster.create_topic(name, 2)
    yield name


def test_classic_group_consumes_and_commits(kafka_cluster: KafkaCluster, topic: str) -> None:
    _produce(kafka_cluster, topic, 20, 2)
    group = _name("g")
    with _group_consumer(kafka_cluster, group) as c:
        c.subscribe([topic])
        assert sorted(_poll_values(c, 20)) == sorted(b"v%d" % i for i in range(20))
        c.commit_sync()
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        assert {tp.partition: om.offset for tp, om in committed.items() if om is not None} == {0: 10, 1: 10}


def test_cooperative_rebalance_splits_the_partitions(kafka_cluster: KafkaCluster, topic: str) -> None:
    group = _name("g")
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    with _group_consumer(kafka_cluster, group, **conf) as a, \
            _group_consumer(kafka_cluster, group, **conf) as b:
        a.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(a.assignment()) < 2 and time.monotonic() < deadline:
            a.poll(0.2)
        assert len(a.assignment()) == 2
        b.subscribe([topic])
        while time.monotonic() < deadline and not (len(a.assignment()) == 1 and len(b.assignment()) == 1):
            a.poll(0.2)
            b.poll(0.2)
        assert a.assignment() | b.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        assert len(a.assignment()) == len(b.assignment()) == 1


def test_transactions_and_read_committed(kafka_cluster: KafkaCluster, topic: str) -> None:
    p = KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "transactional.id": _name("tx")})
    try:
        p.init_transactions(timeout=60)
        p.begin_transaction()
        p.send(topic, value=b"aborted", partition=0)
        p.abort_transaction(timeout=60)
        p.begin_transaction()
        p.send(topic, value=b"committed", partition=0)
        p.commit_transaction(timeout=60)
    finally:
        p.close(10)
    with KafkaConsumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "auto.offset.reset": "earliest",
                        "isolation.level": "read_committed"}) as c:
        c.assign([TopicPartition(topic, 0)])
        got = _poll_values(c, 1, 30)
        got += [r.value for r in c.poll(1.0)]
        assert got == [b"committed"]


def test_offsets_for_times(kafka_cluster: KafkaCluster, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    with KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "linger.ms": 0}) as p:
        for i, ts in enumerate((1_000_000, 2_000_000, 3_000_000)):
            p.send(topic, value=b"%d" % i, partition=0, timestamp=ts).result(30)
    with KafkaConsumer({"bootstrap.servers": kafka_cluster.bootstrap_servers}) as c:
        found = c.offsets_for_times({tp: 1_500_000}, timeout=30)[tp]
        assert found is not None and (found.offset, found.timestamp) == (1, 2_000_000)
        assert c.offsets_for_times({tp: 4_000_000}, timeout=30)[tp] is None


def test_consumer_protocol_joins_or_is_refused_at_once(
    kafka_cluster: KafkaCluster, release: KafkaRelease, topic: str
) -> None:
    _produce(kafka_cluster, topic, 10, 2)
    with _group_consumer(kafka_cluster, _name("g848"), **{"group.protocol": "consumer"}) as c:
        if release.consumer_protocol:
            c.subscribe([topic])
            assert sorted(_poll_values(c, 10)) == sorted(b"v%d" % i for i in range(10))
            assert len(c.assignment()) == 2
            return
        started = time.monotonic()
        with pytest.raises(UnsupportedVersionError, match=r"group\.protocol=consumer.*Kafka >= 4\.0") as e:
            c.subscribe([topic])
            while time.monotonic() - started < 30:  # librdkafka alone: empty polls, silently
                c.poll(0.5)
        assert e.value.code == "UNSUPPORTED_VERSION"
        assert time.monotonic() - started < REFUSAL_SECONDS


def test_share_consumer_reads_or_is_refused_at_once(
    kafka_cluster: KafkaCluster, release: KafkaRelease, topic: str
) -> None:
    _produce(kafka_cluster, topic, 10, 2)
    group = _name("sg")
    if release.share_groups:
        kafka_cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    with KafkaShareConsumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": group}) as c:
        started = time.monotonic()
        if not release.share_groups:
            with pytest.raises(ShareGroupsUnsupportedError, match=r"not serve share groups.*Kafka >= 4\.1"):
                c.subscribe([topic])
                while time.monotonic() - started < 30:
                    c.poll(0.5)
            assert time.monotonic() - started < REFUSAL_SECONDS
            return
        c.subscribe([topic])
        got: list[bytes] = []
        while len(got) < 10 and time.monotonic() - started < 60:
            got += [r.value for r in c.poll(0.5)]
        assert sorted(got) == sorted(b"v%d" % i for i in range(10))
