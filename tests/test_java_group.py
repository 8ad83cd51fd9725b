"""Mixed consumer groups on real Kafka: Java client members (our peer, tests/java/KafkaPeer.java) and
kipconsumer members share one topic, with the classic protocol (cooperative-sticky on both sides) and
with KIP-848 (``group.protocol=consumer``).

Scenario (each run well under 60 s): a kipconsumer producer writes records with unique values the whole
time; a Java member and a kipconsumer member join; a second Java member joins (a rebalance); the first
Java member is SIGKILLed (a crash: no commit, no leave; its partitions move after the session timeout);
the producer stops; the survivors drain the topic and close cleanly. Every member commits
synchronously right after processing each poll's records.

Asserted:
* no loss: every acknowledged record was processed;
* duplicates only where at-least-once allows them: a record processed twice was first processed by a
  member none of whose successful commits covered it before it was processed again (the killed
  member's uncommitted tail, or a member whose commit failed). The counts are printed (``-s``);
* the group's committed offsets equal the log end offsets at the end;
* every member got partitions at some point, the killed member's partitions were processed by others
  after the kill.

And with default settings on both sides (Java's assignors range + cooperative-sticky, kipconsumer's
range) one Java and one kipconsumer member form a group that splits the partitions (the claim of
docs/configuration.md's defaults table).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import java_peer
import pytest

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.errors import KafkaError
from kipconsumer.testing import KafkaCluster

pytestmark = pytest.mark.kafka

NPARTS = 6


@dataclass
class KipMember:
    """A kipconsumer member in a thread: poll, process (record), commit_sync, repeat."""

    name: str
    conf: dict[str, object]
    topic: str
    processed: list[tuple[int, int, bytes, float]] = field(default_factory=list)  # ..., when
    assigned: list[int] = field(default_factory=list)
    commit_failures: list[str] = field(default_factory=list)
    log: list[tuple[float, str, object]] = field(default_factory=list)  # (time, what, detail)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def on_partitions_assigned(self, parts: list[TopicPartition]) -> None:
        self.assigned += [tp.partition for tp in parts]
        self.log.append((time.monotonic(), "assigned", sorted(tp.partition for tp in parts)))

    def on_partitions_revoked(self, parts: list[TopicPartition]) -> None:
        self.log.append((time.monotonic(), "revoked", sorted(tp.partition for tp in parts)))

    def on_partitions_lost(self, parts: list[TopicPartition]) -> None:
        self.log.append((time.monotonic(), "lost", sorted(tp.partition for tp in parts)))

    def _run(self) -> None:
        c = KafkaConsumer(self.conf)
        try:
            c.subscribe([self.topic], listener=self)
            while not self.stop.is_set():
                records = c.poll(0.2)
                if not records:
                    continue
                offsets = {}
                for r in records:
                    self.processed.append((r.partition, r.offset, r.value, time.monotonic()))
                    offsets[r.partition] = r.offset + 1
                self.log.append((time.monotonic(), "processed", dict(offsets)))
                try:
                    c.commit_sync(timeout=10)
                except KafkaError as e:  # at least once: its records may come again (explained below)
                    self.commit_failures.append(repr(e))
                    continue
                self.log.append((time.monotonic(), "committed", dict(offsets)))
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            c.close(10)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), f"{self.name} did not close"


def _produce_until(stop: threading.Event, servers: str, topic: str,
                   acked: list[tuple[int, int, bytes]]) -> None:
    with KafkaProducer({"bootstrap.servers": servers, "linger.ms": 5}) as p:
        i = 0
        futures = []
        while not stop.is_set():
            for _ in range(20):
                futures.append((b"v-%d" % i, p.send(topic, key=b"k-%d" % (i % 97), value=b"v-%d" % i)))
                i += 1
            time.sleep(0.02)
        p.flush(30)
        acked.extend((f.result().partition, f.result().offset, v) for v, f in futures)


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _commits(kip: KipMember, *java: java_peer.GroupMember) -> dict[str, list[tuple[float, int, int]]]:
    """Each member's successful commits: (when, partition, committed offset). kipconsumer's when
    commit_sync() returned, the Java members' when the test read their "committed" line."""
    out: dict[str, list[tuple[float, int, int]]] = {
        kip.name: [(t, p, o) for t, what, offs in kip.log if what == "committed"
                   for p, o in offs.items()]}  # type: ignore[attr-defined]
    for m in java:
        out[m.member] = [(e["_t"], int(p), o) for e in m.events if e["event"] == "committed"
                         for p, o in e["offsets"].items()]
    return out


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_mixed_java_and_kipconsumer_group_processes_every_record_once_across_rebalance_and_kill(
    protocol: str, kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    servers = kafka_cluster.bootstrap_servers
    topic, group = unique_name("jg"), unique_name("jgg")
    kafka_cluster.create_topic(topic, NPARTS, 1)
    conf: dict[str, object] = {"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False,
                               "auto.offset.reset": "earliest", "max.poll.records": 100,
                               "group.protocol": protocol}
    if protocol == "classic":
        conf.update({"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 1000})
    stop_producing = threading.Event()
    acked: list[tuple[int, int, bytes]] = []
    producer = threading.Thread(target=_produce_until, args=(stop_producing, servers, topic, acked),
                                daemon=True)
    producer.start()
    java1 = java_peer.GroupMember(servers, topic, group, "java-1", protocol=protocol)
    java2: java_peer.GroupMember | None = None
    kip = KipMember("kip-1", conf, topic)
    try:
        java1.wait_for("assigned", 30)
        _wait(lambda: bool(kip.assigned) and any(e["event"] == "record" for e in java1.events), 30,
              "both first members to get partitions and java-1 to process records")
        java2 = java_peer.GroupMember(servers, topic, group, "java-2", protocol=protocol)
        _wait(lambda: any(e["event"] == "record" for e in java2.events), 30, "java-2 to process records")
        time.sleep(1.0)
        java1_parts = {e["partition"] for e in java1.records()}
        java1.kill()  # a crash: no commit, no LeaveGroup
        time.sleep(2.0)
        stop_producing.set()
        producer.join(60)
        assert not producer.is_alive() and acked
        want = {v for _, _, v in acked}

        def processed_values() -> set[bytes]:
            assert java2 is not None
            java = [bytes.fromhex(e["value"]) for m in (java1, java2) for e in m.records()]
            return {v for _, _, v, _ in kip.processed} | set(java)

        _wait(lambda: want <= processed_values(), 45, "every acknowledged record to be processed")
        assert java2.stop() == 0
        kip.close()
        assert kip.error is None, kip.error
    finally:
        stop_producing.set()
        for m in (java1, java2):
            if m is not None and m.proc.poll() is None:
                m.kill()
        kip.stop.set()

    # (member, partition, offset, value, when): kipconsumer's processing time, or when the test read
    # the Java member's line (after it processed the record, before its commit)
    deliveries: list[tuple[str, int, int, bytes, float]] = [("kip-1", *d) for d in kip.processed]
    for m in (java1, java2):
        deliveries += [(m.member, e["partition"], e["offset"], bytes.fromhex(e["value"]), e["_t"])
                       for e in m.records()]
    deliveries.sort(key=lambda d: d[4])
    where = {v: (p, o) for p, o, v in acked}
    for member, p, o, v, _ in deliveries:
        assert where.get(v) == (p, o), f"{member} processed {v!r} at {p}/{o}, acknowledged at {where.get(v)}"
    # no loss
    missing = want - {d[3] for d in deliveries}
    assert not missing, f"{len(missing)} acknowledged records never processed"
    # duplicates only where no successful commit of the first processor covered the record
    commits = _commits(kip, java1, java2)
    first: dict[tuple[int, int], str] = {}
    again: dict[tuple[int, int], float] = {}  # when a record was processed the second time
    counts: Counter[tuple[int, int]] = Counter()
    for member, p, o, _, t in deliveries:
        if (p, o) in first and (p, o) not in again:
            again[(p, o)] = t
        first.setdefault((p, o), member)
        counts[(p, o)] += 1
    dups = {po: n for po, n in counts.items() if n > 1}
    # unexplained: its first processor had committed past it before it was processed again
    unexplained = [(po, first[po]) for po in dups
                   if any(q == po[0] and off > po[1] and t < again[po] for t, q, off in commits[first[po]])]
    by_member = Counter(first[po] for po in dups)
    print(f"\n{protocol}: {len(acked)} records, {len(deliveries)} deliveries, {len(dups)} duplicated "
          f"(first processed by {dict(by_member)}), kip commit failures {len(kip.commit_failures)}, "
          f"java commit failures {sum(e['event'] == 'commit_failed' for e in java2.events)}; "
          f"{sorted(set(kip.commit_failures))}")
    if unexplained:  # the story of the first one, for the failure report
        (p0, o0), _ = unexplained[0]
        print("deliveries:", [d[:3] + (d[4],) for d in deliveries if (d[1], d[2]) == (p0, o0)])
        print("kip-1:", [e for e in kip.log if e[1] != "processed" and p0 in e[2]])  # type: ignore[operator]
        for m in (java1, java2):
            print(m.member, [e for e in m.events if e["event"] in ("assigned", "revoked", "lost")])
    assert not unexplained, f"records processed again although their first processor committed them: " \
                            f"{unexplained[:10]}"
    # only the killed member's uncommitted tail, or a member whose commit failed, may cause duplicates
    failed = {"kip-1"} if kip.commit_failures else set()
    failed |= {m.member for m in (java1, java2) if any(e["event"] == "commit_failed" for e in m.events)}
    assert set(by_member) <= {"java-1"} | failed, by_member
    # the killed member's partitions were taken over: later records of each were processed by others
    for p in java1_parts:
        last = max(e["offset"] for e in java1.records() if e["partition"] == p)
        assert any(q == p and o > last for m, q, o, _, _ in deliveries if m != "java-1"), p
    check = KafkaConsumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p) for p in range(NPARTS)]
        end = check.end_offsets(tps, timeout=10)
        got = check.committed(tps, timeout=10)
        assert {tp: (got[tp].offset if got[tp] else None) for tp in tps} == end
    finally:
        check.close()


def test_default_java_and_default_kipconsumer_members_share_a_group(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """docs/configuration.md's defaults table: Java's default assignors (range, cooperative-sticky) and
    kipconsumer's default (range) meet on range, so members of both with default settings form one
    group: both get partitions (eager range: each half of 4) and every record is processed once."""
    servers = kafka_cluster.bootstrap_servers
    topic, group = unique_name("jd"), unique_name("jdg")
    kafka_cluster.create_topic(topic, 4, 1)
    with KafkaProducer({"bootstrap.servers": servers}) as p:
        for i in range(400):
            p.send(topic, key=b"k-%d" % i, value=b"v-%d" % i)
        p.flush(30)
    java = java_peer.GroupMember(servers, topic, group, "java-d", assignor="default")
    kip = KipMember("kip-d", {"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False,
                              "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                              "heartbeat.interval.ms": 1000}, topic)
    try:
        java.wait_for("assigned", 30)

        def values() -> list[bytes]:
            return [v for _, _, v, _ in kip.processed] + [bytes.fromhex(e["value"]) for e in java.records()]

        def last_assigned() -> tuple[list[int], list[int]]:
            k = [e[2] for e in kip.log if e[1] == "assigned"]
            j = [e["partitions"] for e in java.events if e["event"] == "assigned"]
            return (k[-1] if k else []), (j[-1] if j else [])  # type: ignore[return-value]

        _wait(lambda: len(set(values())) == 400 and [len(a) for a in last_assigned()] == [2, 2], 40,
              "both members to hold two partitions each and every record to be processed")
        # the split while both were members (after the Java member leaves, the survivor may be handed
        # all four before its own close(): that later assignment is not what this test is about)
        final_kip, final_java = last_assigned()
        # SIGTERM: the peer's shutdown hook wakes the poll loop, which commits, leaves and closes
        # (the JVM then exits with 128 + 15)
        assert java.terminate() == 143
        assert [e["event"] for e in java.events if e["event"] in ("closed", "record")][-1] == "closed"
        kip.close()
        assert kip.error is None, kip.error
    finally:
        if java.proc.poll() is None:
            java.kill()
        kip.stop.set()
    assert sorted(final_kip + final_java) == [0, 1, 2, 3]  # range split the 4 partitions between them
    assert sorted(values()) == sorted(b"v-%d" % i for i in range(400))  # once each
