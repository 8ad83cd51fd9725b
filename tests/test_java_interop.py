"""kipconsumer against the Apache Kafka Java client (our peer, tests/java/KafkaPeer.java), on real Kafka.

* Partitioning: with default settings, kipconsumer's producers (sync, asyncio, and the Pipeline's sink
  with ``sink_partitioning="key"``) put every keyed record on the partition the Java producer puts it
  on (murmur2); ``partitioner=consistent_random`` (librdkafka's own default) is one setting away and
  disagrees for most keys; null keys spread over partitions.
* Records written by Java (keys, headers, timestamps, every compression codec, committed and
  aborted transactions) read by kipconsumer with read_committed, and the other way round.

The mixed consumer groups (Java and kipconsumer members in one group) are in
tests/test_java_group.py.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import java_peer
import pytest

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.aio import AsyncKafkaProducer
from kipconsumer.testing import KafkaCluster

pytestmark = pytest.mark.kafka

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
NPARTS = 12


def _keys(n: int) -> list[bytes]:
    """``n`` distinct keys of many shapes: ASCII ids, UTF-8 text, random bytes of 1..64 bytes, the
    empty key (Java hashes b'' with murmur2 like any other key)."""
    rng = random.Random(26)
    keys = [b"", b"\x00", "ключ-é".encode()]
    keys += [b"user-%d" % i for i in range(n // 2)]
    while len(keys) < n:
        k = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
        if k not in keys:
            keys.append(k)
    return keys


def _send_all(producer: KafkaProducer, topic: str, keys: list[bytes]) -> list[int]:
    futures = [producer.send(topic, value=b"v", key=k) for k in keys]
    producer.flush(60)
    return [f.result().partition for f in futures]


def test_default_partitioner_puts_every_key_where_the_java_producer_does(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    keys = _keys(3000)
    java_topic, kip_topic, old_topic = unique_name("pj"), unique_name("pk"), unique_name("po")
    for t in (java_topic, kip_topic, old_topic):
        kafka_cluster.create_topic(t, NPARTS, 1)
    # The Java producer itself (RecordMetadata.partition()), and its partitioner function offline.
    sent = java_peer.run("produce", kafka_cluster.bootstrap_servers, java_topic, "--keys-from-stdin",
                         stdin="".join(k.hex() + "\n" for k in keys), timeout=90)
    java = [e["partition"] for e in sorted(sent, key=lambda e: e["i"])]
    assert [bytes.fromhex(e["key"]) for e in sorted(sent, key=lambda e: e["i"])] == keys
    assert java == java_peer.partitions_for(keys, NPARTS)
    assert len(set(java)) == NPARTS

    with KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers}) as p:
        kip = _send_all(p, kip_topic, keys)
    differ = [(k, j, m) for k, j, m in zip(keys, java, kip, strict=True) if j != m]
    assert not differ, f"{len(differ)} of {len(keys)} keys elsewhere than Java puts them, e.g. {differ[:5]}"

    # The old behaviour, one documented setting away: librdkafka's CRC32 partitioner disagrees.
    with KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers,
                        "partitioner": "consistent_random"}) as p:
        old = _send_all(p, old_topic, keys)
    assert sum(j != o for j, o in zip(java, old, strict=True)) > len(keys) // 2


def test_asyncio_producer_partitions_keys_as_java_does(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    keys = _keys(1000)
    topic = unique_name("pa")
    kafka_cluster.create_topic(topic, NPARTS, 1)
    java = java_peer.partitions_for(keys, NPARTS)

    async def main() -> list[int]:
        async with AsyncKafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers}) as p:
            mds = await asyncio.gather(*(p.send(topic, value=b"v", key=k) for k in keys))
            return [md.partition for md in mds]

    assert asyncio.run(main()) == java


def test_null_keys_spread_over_partitions(kafka_cluster: KafkaCluster,
                                          unique_name: Callable[[str], str]) -> None:
    """Null keys: sticky per librdkafka's sticky.partitioning.linger.ms (10 ms), then another random
    partition, as the Java producer sticks to a partition per batch: spread over time, never hashed."""
    topic = unique_name("pn")
    kafka_cluster.create_topic(topic, NPARTS, 1)
    with KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers}) as p:
        futures = []
        for _ in range(40):
            futures += [p.send(topic, value=b"v") for _ in range(10)]
            time.sleep(0.03)
        p.flush(30)
    used = {f.result().partition for f in futures}
    assert len(used) >= 4, used


# -- records written by one client, read by the other ---------------------------------------------
TS_BASE = 1_700_000_000_000
TXN_SIZE = 10
PATTERN = "ca"  # transactions alternately committed and aborted


def _headers(i: int) -> list[tuple[str, bytes | None]]:
    """Record i's headers as the Java peer writes them (--headers): text, null, binary."""
    return [("h-index", str(i).encode()), ("h-null", None), ("h-bin", bytes([0, 255, i % 256]))]


def _kip_read(cluster: KafkaCluster, topic: str, isolation: str, expected: int) -> list[Any]:
    c = KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers, "isolation.level": isolation,
                       "enable.auto.commit": False})
    tps = [TopicPartition(topic, p) for p in range(3)]
    try:
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        end = c.end_offsets(tps, timeout=10)  # read_committed: the last stable offsets
        out: list[Any] = []
        deadline = time.monotonic() + 30
        while any(c.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
            for r in c.poll(0.5):
                out.append((r.partition, r.offset, r.key, r.value, r.timestamp, r.headers))
        assert len(out) == expected, f"read {len(out)} records, expected {expected} ({isolation})"
        return out
    finally:
        c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_java_writes_kipconsumer_reads(codec: str, kafka_cluster: KafkaCluster,
                                       unique_name: Callable[[str], str]) -> None:
    topic = unique_name(f"jk-{codec}")
    kafka_cluster.create_topic(topic, 3, 1)
    n = 200
    sent = java_peer.run("produce", kafka_cluster.bootstrap_servers, topic, "--count", str(n), "--headers",
                         "--compression", codec, "--timestamp-base", str(TS_BASE),
                         "--transactional-id", unique_name("jtx"), "--txn-size", str(TXN_SIZE),
                         "--txn-pattern", PATTERN, timeout=90)
    assert len(sent) == n
    committed = {e["i"] for e in sent if e["txn"] == "commit"}
    assert len(committed) == n // 2

    got = _kip_read(kafka_cluster, topic, "read_committed", len(committed))
    seen = set()
    for _partition, _offset, key, value, ts, headers in got:
        i = int(value[2:])
        assert i in committed, f"record {i} of an aborted transaction returned under read_committed"
        assert key == b"k-%d" % i and value == b"v-%d" % i
        assert ts == TS_BASE + i
        assert headers == _headers(i)
        seen.add(i)
    assert seen == committed
    # Where Java put each committed record is where kipconsumer found it.
    where = {e["i"]: (e["partition"], e["offset"]) for e in sent if e["txn"] == "commit"}
    assert {int(v[2:]): (p, o) for p, o, _, v, _, _ in got} == where
    # read_uncommitted returns the aborted ones too (so the filter above is the broker's and ours)
    assert len(_kip_read(kafka_cluster, topic, "read_uncommitted", n)) == n


@pytest.mark.parametrize("codec", CODECS)
def test_kipconsumer_writes_java_reads(codec: str, kafka_cluster: KafkaCluster,
                                       unique_name: Callable[[str], str]) -> None:
    topic = unique_name(f"kj-{codec}")
    kafka_cluster.create_topic(topic, 3, 1)
    n = 200
    p = KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "compression.type": codec,
                       "transactional.id": unique_name("ktx")})
    committed: dict[int, tuple[int, int]] = {}
    aborted: dict[int, tuple[int, int]] = {}
    try:
        p.init_transactions(30)
        for t in range(n // TXN_SIZE):
            p.begin_transaction()
            futures = {}
            for i in range(t * TXN_SIZE, (t + 1) * TXN_SIZE):
                futures[i] = p.send(topic, key=b"k-%d" % i, value=b"v-%d" % i, headers=_headers(i),
                                    timestamp=TS_BASE + i)
            p.flush(30)  # in the log before the transaction ends: aborted ones must be filtered
            written = {i: (f.result(0).partition, f.result(0).offset) for i, f in futures.items()}
            if PATTERN[t % len(PATTERN)] == "c":
                p.commit_transaction(30)
                committed.update(written)
            else:
                p.abort_transaction(30)
                aborted.update(written)
    finally:
        p.close(30)
    assert len(committed) == n // 2

    out = java_peer.run("consume", kafka_cluster.bootstrap_servers, topic, "--isolation", "read_committed",
                        timeout=90)
    records = [e for e in out if e["event"] == "record"]
    assert out[-1] == {"event": "end", "count": len(committed)}
    got = {}
    for r in records:
        value = bytes.fromhex(r["value"])
        i = int(value[2:])
        assert i in committed, f"Java returned record {i} of an aborted transaction under read_committed"
        assert bytes.fromhex(r["key"]) == b"k-%d" % i
        assert r["timestamp"] == TS_BASE + i and r["timestamp_type"] == "CreateTime"
        assert r["headers"] == [["h-index", str(i).encode().hex()], ["h-null", None],
                                ["h-bin", bytes([0, 255, i % 256]).hex()]]
        got[i] = (r["partition"], r["offset"])
    assert got == committed
    # Java's read_uncommitted sees the aborted records too
    raw = java_peer.run("consume", kafka_cluster.bootstrap_servers, topic, timeout=90)
    where = {(e["partition"], e["offset"]) for e in raw if e["event"] == "record"}
    assert set(aborted.values()) - where == set(), "aborted records (acknowledged) not read uncommitted"
    assert raw[-1] == {"event": "end", "count": n}


def test_pipeline_key_sink_partitioning_puts_outputs_where_java_would(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """kipconsumer.streams.Pipeline with sink_partitioning="key" leaves the sink partition to its
    producer's default partitioner: every output lands on the Java client's partition for its key."""
    from kipconsumer.streams import Pipeline

    keys = _keys(600)
    src, sink = unique_name("ps"), unique_name("pk")
    kafka_cluster.create_topic(src, 2, 1)
    kafka_cluster.create_topic(sink, NPARTS, 1)
    with KafkaProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers}) as p:
        _send_all(p, src, keys)

    def echo(record: Any) -> Any:
        yield record.key, record.value

    conf = {"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": unique_name("pg"),
            "commit.interval.ms": 100}
    with Pipeline(conf, src, echo, sink, sink_partitioning="key") as pipe:
        pipe.run(until=lambda: pipe.metrics()["outputs_acked"] >= len(keys), timeout=40)
    java = dict(zip(keys, java_peer.partitions_for(keys, NPARTS), strict=True))
    c = KafkaConsumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(sink, q) for q in range(NPARTS)]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        got: dict[bytes, int] = {}
        deadline = time.monotonic() + 20
        while len(got) < len(keys) and time.monotonic() < deadline:
            for r in c.poll(0.5):
                got[r.key] = r.partition
    finally:
        c.close()
    assert got == java
