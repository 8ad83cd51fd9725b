"""Interoperability: kipconsumer and confluent-kafka consumers in one group, and records
produced by kcat, all over TCP against the session EmbeddedBroker."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from kipconsumer import KafkaConsumer
from kipconsumer.errors import CommitFailedError


def produce(broker, topic, nparts, per):
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
    for part in range(nparts):
        for i in range(per):
            p.produce(topic, value=f"{part}:{i}".encode(), key=str(i).encode(), partition=part)
        p.poll(0)
    assert p.flush(30) == 0


def test_kipconsumer_and_confluent_share_a_group_exactly_once(broker, topic_factory, unique_name):
    nparts, per = 6, 1500
    total = nparts * per
    topic = topic_factory(partitions=nparts)
    produce(broker, topic, nparts, per)
    group = unique_name("g")
    everything = {(topic, p) for p in range(nparts)}
    seen: Counter[tuple[int, int]] = Counter()
    by: Counter[str] = Counter()
    violations: list[tuple[str, int, int]] = []
    events: list[str] = []

    # -- kipconsumer member, commits as it goes and in on_partitions_revoked
    kc = KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                        "enable.auto.commit": False, "auto.offset.reset": "earliest",
                        "max.poll.records": 100, "session.timeout.ms": 6000,
                        "heartbeat.interval.ms": 500})

    class KListener:
        def on_partitions_revoked(self, parts):
            events.append(f"kip revoked {sorted(p.partition for p in parts)}")
            try:
                kc.commit_sync()
            except CommitFailedError as exc:   # the mock refuses commits during an eager join
                events.append(f"kip commit in revoke refused: {exc.code}")

        def on_partitions_assigned(self, parts):
            events.append(f"kip assigned {sorted(p.partition for p in parts)}")

    def kip_step() -> None:
        recs = kc.poll(0.05)
        owned = {(tp.topic, tp.partition) for tp in kc.assignment()}
        for r in recs:
            if (r.topic, r.partition) not in owned:
                violations.append(("kip", r.partition, r.offset))
            assert r.value == f"{r.partition}:{r.offset}".encode()
            seen[(r.partition, r.offset)] += 1
            by["kip"] += 1
        if len(recs):
            try:
                kc.commit_sync()
            except CommitFailedError:
                pass                              # retried after the next poll

    # -- confluent-kafka member, same strategy (range)
    cc_pos: dict[int, int] = {}
    cc: Consumer | None = None

    def cc_commit() -> None:
        if cc_pos and cc is not None:
            cc.commit(offsets=[CTopicPartition(topic, p, o) for p, o in cc_pos.items()], asynchronous=False)

    def cc_revoke(consumer, parts):
        events.append(f"confluent revoked {sorted(p.partition for p in parts)}")
        try:
            cc_commit()
        except Exception as exc:  # noqa: BLE001 - same mock limitation as above
            events.append(f"confluent commit in revoke refused: {exc}")
        for p in parts:
            cc_pos.pop(p.partition, None)

    def cc_assign(consumer, parts):
        events.append(f"confluent assigned {sorted(p.partition for p in parts)}")

    def cc_step() -> None:
        assert cc is not None
        msgs = cc.consume(100, 0.05)
        owned = {(tp.topic, tp.partition) for tp in cc.assignment()}
        for m in msgs:
            assert m.error() is None, m.error()
            if (m.topic(), m.partition()) not in owned:
                violations.append(("confluent", m.partition(), m.offset()))
            assert m.value() == f"{m.partition()}:{m.offset()}".encode()
            seen[(m.partition(), m.offset())] += 1
            by["confluent"] += 1
            cc_pos[m.partition()] = m.offset() + 1
        if msgs:
            try:
                cc_commit()
            except Exception:  # noqa: BLE001
                pass

    try:
        kc.subscribe([topic], listener=KListener())
        deadline = time.monotonic() + 30
        while sum(seen.values()) < total // 3:
            assert time.monotonic() < deadline
            kip_step()
        assert {(tp.topic, tp.partition) for tp in kc.assignment()} == everything
        # The mock coordinator refuses OffsetCommit while an eager (range) rebalance is
        # joining, where Kafka accepts it; so the kipconsumer member returns nothing
        # between the other member's JoinGroup and its own revoke.
        kc.pause(sorted(kc.assignment()))
        cc = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                       "enable.auto.commit": False, "auto.offset.reset": "earliest",
                       "partition.assignment.strategy": "range", "session.timeout.ms": 6000,
                       "heartbeat.interval.ms": 500})
        cc.subscribe([topic], on_assign=cc_assign, on_revoke=cc_revoke)
        deadline = time.monotonic() + 60
        while True:
            kip_step()
            cc_step()
            k_owned = {(tp.topic, tp.partition) for tp in kc.assignment()}
            c_owned = {(tp.topic, tp.partition) for tp in cc.assignment()}
            if k_owned and c_owned and not (k_owned & c_owned) and (k_owned | c_owned) == everything:
                break
            assert time.monotonic() < deadline, events
        assert kc.paused() == set()
        split = (sorted(p for _, p in k_owned), sorted(p for _, p in c_owned))
        deadline = time.monotonic() + 40
        while sum(seen.values()) < total:
            assert time.monotonic() < deadline, (sum(seen.values()), events)
            kip_step()
            cc_step()
        for _ in range(5):                        # nothing else trails in
            kip_step()
            cc_step()
    finally:
        kc.close()
        if cc is not None:
            cc.close()
    assert any(e.startswith("kip revoked") for e in events), events      # a real rebalance happened
    assert not violations, violations[:5]
    assert by["kip"] > 0 and by["confluent"] > 0, by
    assert split[0] and split[1], split           # each member got some partitions
    dup = [k for k, v in seen.items() if v > 1]
    assert not dup, (dup[:5], events)
    assert set(seen) == {(p, o) for p in range(nparts) for o in range(per)}


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_produced_records_with_keys_and_headers(broker, topic_factory, unique_name):
    topic = topic_factory(partitions=1)
    lines = "".join(f"key-{i}:value {i}\n" for i in range(20))
    proc = subprocess.run(
        ["kcat", "-P", "-b", broker.bootstrap_servers, "-t", topic, "-p", "0", "-K", ":",
         "-H", "source=kcat", "-H", "n=1"],
        input=lines.encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    got = []
    with KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": unique_name("g"),
                        "auto.offset.reset": "earliest", "enable.auto.commit": False}) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 20
        while len(got) < 20:
            assert time.monotonic() < deadline, len(got)
            got.extend(c.poll(0.2))
    assert [r.offset for r in got] == list(range(20))
    assert [r.key for r in got] == [f"key-{i}".encode() for i in range(20)]
    assert [r.value for r in got] == [f"value {i}".encode() for i in range(20)]
    assert all(r.headers == [("source", b"kcat"), ("n", b"1")] for r in got), got[0].headers
    assert all(r.topic == topic and r.partition == 0 for r in got)
