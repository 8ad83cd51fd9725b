"""Interoperability: kipconsumer and confluent-kafka consumers in one group, and records
produced by kcat, all over TCP against the session EmbeddedBroker."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from kc_testing import confluent_rebalance_callbacks, group_timeouts
from support import produce as produce_records

from kipconsumer import ConsumerRecord, KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import CommitFailedError
from kipconsumer.testing import KafkaCluster


def produce(broker, topic, nparts, per):
    produce_records(broker.bootstrap_servers, topic, dict.fromkeys(range(nparts), per),
                    value=lambda p, i: f"{p}:{i}".encode(), key=lambda p, i: str(i).encode(), linger_ms=20)


@pytest.mark.classic_only(reason="an eager (range) group of a kipconsumer and a confluent-kafka member; the "
                          "consumer protocol's mixed group: test_mixed_group.py (cooperative-sticky case) "
                          "and test_kip848.py::test_mixed_group_with_confluent_kafka_members")
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
                        "max.poll.records": 100, **group_timeouts(6000, 500)})

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
        cc.subscribe([topic], **confluent_rebalance_callbacks(False, cc_assign, cc_revoke))
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
    refused = any("refused" in e for e in events)
    if isinstance(broker, KafkaCluster) or not refused:
        assert not dup, (dup[:5], events)
    # else: the mock refused a commit of the revoke listener (it refuses commits while the group
    # joins, Kafka does not), so what kipconsumer returned after its last good commit came again
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


# -- kcat with compression, both directions -------------------------------------------------------
CODECS = ["gzip", "snappy", "lz4", "zstd"]


def _kcat_features() -> set[str]:
    """builtin.features of the librdkafka kcat runs on (``kcat -V``)."""
    out = subprocess.run(["kcat", "-V"], capture_output=True, timeout=30).stdout.decode()
    m = re.search(r"builtin\.features=([\w,]+)", out)
    return set(m.group(1).split(",")) if m else set()


def _need_kcat_codec(codec: str) -> None:
    if shutil.which("kcat") is None:
        pytest.skip("kcat not installed")
    features = _kcat_features()
    if codec not in features:
        reason = f"kcat's librdkafka lacks {codec} (builtin.features={sorted(features)})"
        print(f"SKIP {codec}: {reason}")
        pytest.skip(reason)


def _read_exactly(broker: EmbeddedBroker, topic: str, nparts: int, expected: int,
                  group: str) -> list[ConsumerRecord]:
    """Every record of ``topic`` read by a kipconsumer group member: exactly ``expected`` of them
    (nothing else arrives within 1 s after the last one; end offsets agree)."""
    got: list[ConsumerRecord] = []
    with KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                        "auto.offset.reset": "earliest", "enable.auto.commit": False}) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 20
        while len(got) < expected:
            assert time.monotonic() < deadline, (len(got), expected)
            got.extend(c.poll(0.2))
        quiet_until = time.monotonic() + 1.0
        while time.monotonic() < quiet_until:
            got.extend(c.poll(0.1))
        tps = [TopicPartition(topic, p) for p in range(nparts)]
        ends = c.end_offsets(tps)
    assert sum(ends.values()) == expected, ends
    return got


@pytest.mark.interop
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_each_codec_kipconsumer_reads_exactly(
        broker: EmbeddedBroker, topic_factory: Callable[..., str], unique_name: Callable[[str], str],
        codec: str) -> None:
    """kcat -P -z CODEC with keys (-K), null keys and values (-Z), repeated/null/empty headers (-H) on
    two partitions; kipconsumer reads exactly those records, in order, with keys/values/headers
    preserved. kcat's own debug log must show the batches were compressed with CODEC."""
    _need_kcat_codec(codec)
    topic = topic_factory(partitions=2)
    # per partition: (key, value) lines; "" key/value -> NULL with -Z; a line without ":" has no key
    lines = {
        0: [f"k{i}:{codec} value {i} " + "abc" * (i % 40) for i in range(150)]
           + ["no key delimiter", "null-value:", ":null-key", "ütf-8 ✓:välue\twith tab"],
        1: [f"p1-{i}:{'x' * 300}-{i}" for i in range(60)],
    }
    headers: dict[int, list[tuple[str, bytes | None]]] = {
        0: [("codec", codec.encode()), ("dup", b"1"), ("dup", b"2"), ("nul", None), ("empty", b"")],
        1: [("codec", codec.encode()), ("part", b"one")],
    }
    for part in (0, 1):
        hargs: list[str] = []
        for name, val in headers[part]:
            hargs += ["-H", name if val is None else f"{name}={val.decode()}"]
        proc = subprocess.run(
            ["kcat", "-P", "-b", broker.bootstrap_servers, "-t", topic, "-p", str(part), "-K", ":", "-Z",
             "-z", codec, "-X", "linger.ms=50", "-d", "msg", *hargs],
            input=("\n".join(lines[part]) + "\n").encode(), capture_output=True, timeout=60)
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode == 0, err[-2000:]
        produced = [ln for ln in err.splitlines() if "Produce MessageSet" in ln]
        assert produced and all(ln.rstrip().endswith(f"{codec})") for ln in produced), produced[:3]

    def expected(part: int) -> list[tuple[bytes | None, bytes | None]]:
        out = []
        for ln in lines[part]:
            k, sep, v = ln.partition(":")
            if not sep:
                k, v = "", ln  # no delimiter: all value, no key
            out.append((k.encode() or None, v.encode() or None))
        return out

    total = len(lines[0]) + len(lines[1])
    got = _read_exactly(broker, topic, 2, total, unique_name("g"))
    for part in (0, 1):
        recs = [r for r in got if r.partition == part]
        assert [r.offset for r in recs] == list(range(len(lines[part])))
        assert [(r.key, r.value) for r in recs] == expected(part)
        assert all(r.headers == headers[part] for r in recs), recs[0].headers
        assert all(r.topic == topic for r in recs)


def _kcat_consume(bootstrap: str, topic: str, expected: int) -> tuple[list[list[str]], str]:
    """kcat -C from the beginning to the end of every partition: one ``|``-separated row per record
    (partition, offset, timestamp, key length, key, value length, value, headers) and kcat's debug
    log."""
    proc = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-d", "msg",
         "-f", "%p|%o|%T|%K|%k|%S|%s|%h\n"], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    rows = [ln.split("|") for ln in proc.stdout.decode().split("\n") if ln]
    assert len(rows) == expected, (len(rows), expected)
    return rows, proc.stderr.decode(errors="replace")


@pytest.mark.interop
@pytest.mark.parametrize("codec", CODECS)
def test_kipconsumer_produces_each_codec_kcat_reads_exactly(
        broker: EmbeddedBroker, topic_factory: Callable[..., str], codec: str) -> None:
    """KafkaProducer with compression.type=CODEC: keys (and None), values (and None, b""), headers
    (repeated names, None and empty values, none at all), explicit timestamps, 3 partitions; kcat -C
    -f prints exactly those records, and kcat's debug log shows CODEC-compressed fetches."""
    _need_kcat_codec(codec)
    nparts, n = 3, 300
    topic = topic_factory(partitions=nparts)
    base_ts = 1_700_000_000_000
    sent: dict[tuple[int, int], tuple[Any, Any, Any, int]] = {}
    with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "compression.type": codec,
                        "linger.ms": 20}) as p:
        futs = []
        for i in range(n):
            key = None if i % 7 == 0 else f"key-{i}".encode()
            value = (None if i % 11 == 0 else b"" if i % 13 == 0
                     else f"{codec}-{i}-".encode() + b"z" * (i % 50))
            hdrs = [] if i % 5 == 0 else [("i", str(i).encode()), ("dup", b"a"), ("dup", b"b"),
                                          ("nul", None), ("empty", b""), ("txt", "ü")]
            futs.append((key, value, hdrs, base_ts + i,
                         p.send(topic, value=value, key=key, partition=i % nparts, headers=hdrs,
                                timestamp=base_ts + i)))
        p.flush(30)
        for key, value, hdrs, ts, fut in futs:
            md = fut.result(0)
            sent[(md.partition, md.offset)] = (key, value, hdrs, ts)
    assert len(sent) == n

    rows, log = _kcat_consume(broker.bootstrap_servers, topic, n)
    fetched = [ln for ln in log.splitlines() if "fetch queue" in ln and "Enqueue" in ln]
    assert fetched and all(ln.rstrip().endswith(f"{codec})") for ln in fetched), fetched[:3]
    seen = set()
    for r_part, r_off, r_ts, r_klen, r_key, r_vlen, r_value, r_hdrs in rows:
        k = (int(r_part), int(r_off))
        assert k in sent and k not in seen, k
        seen.add(k)
        skey, sval, shdrs, sts = sent[k]
        assert int(r_ts) == sts
        assert (int(r_klen), r_key.encode()) == ((-1, b"") if skey is None else (len(skey), skey))
        assert (int(r_vlen), r_value.encode()) == ((-1, b"") if sval is None else (len(sval), sval))
        want = ",".join(f"{name}={'NULL' if v is None else v if isinstance(v, str) else v.decode()}"
                        for name, v in shdrs)
        assert r_hdrs == want, (k, r_hdrs, want)
    assert seen == set(sent)
