"""Mixed consumer groups under churn: kipconsumer and confluent-kafka members in ONE group.

One 12-partition topic on the session EmbeddedBroker (over TCP). A KafkaProducer thread writes
records with unique values while members of both clients join and leave the group repeatedly
(a fixed schedule of additions and graceful closes, both clients always present). Each member runs
in its own thread, polls, processes, commits every 0.5 s and in ``on_partitions_revoked`` /
``on_revoke``. All members use the same protocol: eager (``range`` or ``roundrobin``) or
incremental (``cooperative-sticky``).

Checked (each is an assertion; a summary is printed, see it with ``-s``):

* no loss: every acknowledged record was processed at least once, with the value that was sent;
* exclusive ownership: no partition was assigned to two live members at the same time -- the
  assignment intervals (assign callback -> end of the revoke/lost callback, or the start of
  ``close()``, after which the member processes nothing) of different members never overlap,
  and every record was processed by a member that owned its partition at that moment;
* order and no gap: within one ownership period a partition's offsets are contiguous and
  increasing, and a new period starts at or before the next offset not yet processed by anyone;
* commits: a successful commit never moves a partition's committed offset backwards, only covers
  partitions the member owns; at the end the group's committed offsets equal the log end offsets,
  before and after every member is closed.

The embedded broker (librdkafka's mock cluster) refuses OffsetCommit while an eager group is
joining (docs/broker.md): a commit refused in the revoke callback is tolerated; its records are
processed again by the next owner (counted as duplicates, never as losses).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer as CConsumer
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from kc_testing import (
    EAGER_IS_CLASSIC,
    assignor,
    confluent_rebalance_callbacks,
    group_timeouts,
    session_consumer_protocol,
)

from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import KafkaError

pytestmark = pytest.mark.interop

NPARTS = 12
COMMIT_EVERY = 0.5
# The mock coordinator completes a rebalance about session.timeout.ms - 1 s after it started, unless
# every member has rejoined already (docs/broker.md, "Group timing"): 2.5 s keeps each one short.
SESSION_MS = 2500
FOREVER = float("inf")


# -- what every member reports ------------------------------------------------------------------
@dataclass
class Period:
    """One member's ownership of one partition: assign callback -> revoke/lost/close."""

    member: str
    partition: int
    start: float
    end: float = FOREVER
    how: str = ""
    first: int | None = None  # first / last offset processed in this period
    last: int | None = None


@dataclass
class Journal:
    """Shared, lock-protected record of everything the members did."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    processed: Counter[tuple[int, int]] = field(default_factory=Counter)
    values: dict[tuple[int, int], bytes] = field(default_factory=dict)
    by_member: Counter[str] = field(default_factory=Counter)
    periods: list[Period] = field(default_factory=list)
    frontier: dict[int, int] = field(default_factory=dict)  # partition -> max offset processed + 1
    committed: dict[int, int] = field(default_factory=dict)  # last successful commit per partition
    commits_ok: Counter[str] = field(default_factory=Counter)
    commits_failed: Counter[str] = field(default_factory=Counter)
    assignments: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, msg: str) -> None:
        with self.lock:
            self.problems.append(msg)


class Member:
    """One group member (kipconsumer or confluent-kafka) polling in its own thread."""

    def __init__(self, name: str, client: str, broker: EmbeddedBroker, topic: str, group: str,
                 strategy: str, journal: Journal) -> None:
        self.name, self.client, self.topic, self.strategy = name, client, topic, strategy
        self.journal = journal
        self.conf: dict[str, Any] = {
            "bootstrap.servers": broker.bootstrap_servers, "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            **assignor(strategy), **group_timeouts(SESSION_MS, 300), "max.poll.interval.ms": 30000,
        }
        if session_consumer_protocol():  # confluent-kafka's members too (kipconsumer's follow the session)
            self.conf["group.protocol"] = "consumer"
        self.owned: dict[int, Period] = {}  # partition -> current period
        self.positions: dict[int, int] = {}  # partition -> next offset (this period)
        self.dirty = False
        self.stop = threading.Event()
        self.started = threading.Event()
        self.closed_at: float | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    # -- ownership bookkeeping (runs on the member's own thread, inside poll()/consume()) --
    def assigned(self, parts: list[int]) -> None:
        now = time.monotonic()
        j = self.journal
        with j.lock:
            j.assignments += 1
            for p in parts:
                if p in self.owned:
                    j.problems.append(f"{self.name}: assigned partition {p} it already owns")
                    continue
                period = Period(self.name, p, now)
                self.owned[p] = period
                j.periods.append(period)

    def released(self, parts: list[int], how: str, at: float | None = None) -> None:
        now = time.monotonic() if at is None else at
        with self.journal.lock:
            for p in parts:
                period = self.owned.pop(p, None)
                if period is None:
                    self.journal.problems.append(f"{self.name}: {how} partition {p} it does not own")
                    continue
                period.end, period.how = now, how
                self.positions.pop(p, None)

    def process(self, partition: int, offset: int, value: bytes | None) -> None:
        j = self.journal
        with j.lock:
            period = self.owned.get(partition)
            if period is None:
                j.problems.append(f"{self.name}: record {partition}:{offset} of a partition it does not own")
            else:
                if period.last is None:
                    period.first = offset
                    front = j.frontier.get(partition, 0)
                    if offset > front:
                        j.problems.append(f"{self.name}: gap on partition {partition}: period starts at "
                                          f"{offset}, next unprocessed offset is {front}")
                elif offset != period.last + 1:
                    j.problems.append(f"{self.name}: partition {partition}: offset {offset} after "
                                      f"{period.last} in one ownership period")
                period.last = offset
            j.processed[(partition, offset)] += 1
            j.by_member[self.name] += 1
            if value is not None:
                j.values.setdefault((partition, offset), value)
            j.frontier[partition] = max(j.frontier.get(partition, 0), offset + 1)
        self.positions[partition] = offset + 1
        self.dirty = True

    def commit_result(self, why: str, offsets: dict[int, int] | None, err: str | None) -> None:
        j = self.journal
        with j.lock:
            if err is not None:
                j.commits_failed[f"{why}:{err}"] += 1
                return
            j.commits_ok[why] += 1
            for p, off in (offsets or {}).items():
                if p not in self.owned:
                    j.problems.append(f"{self.name}: committed partition {p} it does not own")
                if off < j.committed.get(p, 0):
                    j.problems.append(f"{self.name}: commit moved partition {p} back from "
                                      f"{j.committed[p]} to {off}")
                j.committed[p] = off

    # -- the two clients --
    def _run(self) -> None:
        try:
            if self.client == "kip":
                self._run_kip()
            else:
                self._run_confluent()
        except BaseException as e:  # reported by the driver
            self.error = e
            self.started.set()

    def _close(self, consumer: Any) -> None:
        """close() serves the last revoke (callback) and leaves the group. Partitions still owned
        when it returns end their period when close() started: the member processed nothing
        after that, and its LeaveGroup gave them back."""
        start = time.monotonic()
        try:
            consumer.close()
        finally:
            self.closed_at = time.monotonic()
            self.released(sorted(self.owned), "close", at=start)

    def _run_kip(self) -> None:
        c = KafkaConsumer(dict(self.conf, **{"max.poll.records": 200}))
        member = self

        def commit(why: str) -> None:
            if not member.positions:
                member.dirty = False
                return
            expected = dict(member.positions)
            try:
                done = c.commit_sync(timeout=5.0)  # default: positions of the records returned
            except KafkaError as e:  # CommitFailedError / RebalanceInProgressError / timeout
                member.commit_result(why, None, f"{type(e).__name__}:{e.code}")
                return
            member.dirty = False
            offsets = {tp.partition: om.offset for tp, om in done.items() if tp.topic == member.topic}
            if offsets != expected:
                member.journal.problem(f"{member.name}: commit_sync() committed {offsets}, "
                                       f"the records returned end at {expected}")
            member.commit_result(why, offsets, None)

        class Listener:
            def on_partitions_assigned(self, parts: list[TopicPartition]) -> None:
                member.assigned([tp.partition for tp in parts])

            def on_partitions_revoked(self, parts: list[TopicPartition]) -> None:
                if member.dirty:
                    commit("revoked")
                member.released([tp.partition for tp in parts], "revoked")

            def on_partitions_lost(self, parts: list[TopicPartition]) -> None:
                member.released([tp.partition for tp in parts], "lost")

        c.subscribe([self.topic], listener=Listener())
        self.started.set()
        last_commit = time.monotonic()
        try:
            while not self.stop.is_set():
                try:
                    records = c.poll(0.1)
                except KafkaError as e:
                    self.journal.problem(f"{self.name}: poll raised {type(e).__name__}: {e}")
                    continue
                for r in records:
                    self.process(r.partition, r.offset, r.value)
                if self.dirty and time.monotonic() - last_commit >= COMMIT_EVERY:
                    commit("periodic")
                    last_commit = time.monotonic()
        finally:
            self._close(c)

    def _run_confluent(self) -> None:
        c = CConsumer(self.conf)
        member = self

        def commit(why: str, parts: list[int] | None = None) -> None:
            offs = {p: o for p, o in member.positions.items() if parts is None or p in parts}
            if not offs:
                return
            try:
                c.commit(offsets=[CTopicPartition(self.topic, p, o) for p, o in offs.items()],
                         asynchronous=False)
            except KafkaException as e:
                member.commit_result(why, None, f"KafkaException:{e.args[0].name()}")
                return
            member.dirty = False
            member.commit_result(why, offs, None)

        def on_assign(consumer: Any, parts: list[Any]) -> None:
            member.assigned([tp.partition for tp in parts])

        def on_revoke(consumer: Any, parts: list[Any]) -> None:
            commit("revoked", [tp.partition for tp in parts])
            member.released([tp.partition for tp in parts], "revoked")

        def on_lost(consumer: Any, parts: list[Any]) -> None:
            member.released([tp.partition for tp in parts], "lost")

        c.subscribe([self.topic], **confluent_rebalance_callbacks(
            self.strategy == "cooperative-sticky", on_assign, on_revoke, on_lost))
        self.started.set()
        last_commit = time.monotonic()
        try:
            while not self.stop.is_set():
                for m in c.consume(200, 0.1):
                    if m.error() is not None:
                        self.journal.problem(f"{self.name}: consume error {m.error()}")
                        continue
                    part, off = m.partition(), m.offset()
                    assert part is not None and off is not None
                    self.process(part, off, m.value())
                if self.dirty and time.monotonic() - last_commit >= COMMIT_EVERY:
                    commit("periodic")
                    last_commit = time.monotonic()
        finally:
            self._unsubscribe_confluent(c)
            self._close(c)

    def _unsubscribe_confluent(self, c: Any) -> None:
        """Gives the partitions back before close(): unsubscribe() and consume() until the revoke
        callback has run (10 s at most). A rebalance callback that runs inside confluent-kafka's
        close() can block in librdkafka for good while it holds the GIL: the answer
        (``incremental_unassign``) waits on the terminating group's queue (librdkafka issue 4041),
        which froze a whole pytest process in ``test_mixed_group_under_fast_churn`` (2026-11-24).
        Records consumed meanwhile are processed as usual."""
        try:
            c.unsubscribe()
            deadline = time.monotonic() + 10
            while self.owned and time.monotonic() < deadline:
                for m in c.consume(200, 0.1):
                    if m.error() is None and m.partition() is not None and m.offset() is not None:
                        self.process(m.partition(), m.offset(), m.value())
        except KafkaException as e:
            self.journal.problem(f"{self.name}: unsubscribe before close failed: {e}")

    def start(self) -> Member:
        self.thread.start()
        assert self.started.wait(30), f"{self.name} did not start"
        return self

    def close(self, timeout: float = 30.0) -> None:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.name}: close() did not return within {timeout} s"


# -- the producer ----------------------------------------------------------------------------------
class ProducerThread:
    """Writes records (value = unique id) round robin over the partitions at ``rate`` records/s
    until stopped; collects (partition, offset) -> value of every acknowledged record."""

    def __init__(self, broker: EmbeddedBroker, topic: str, rate: float) -> None:
        self.broker, self.topic, self.rate = broker, topic, rate
        self.acked: dict[tuple[int, int], bytes] = {}
        self.failed: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def _run(self) -> None:
        futs = []
        with KafkaProducer({"bootstrap.servers": self.broker.bootstrap_servers, "linger.ms": 5}) as p:
            t0 = time.monotonic()
            i = 0
            while not self.stop.is_set():
                value = f"id-{i}".encode()
                futs.append((value, p.send(self.topic, value, key=str(i), partition=i % NPARTS)))
                i += 1
                if i % 60 == 0:  # pace: i records after i / rate seconds
                    ahead = t0 + i / self.rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
            p.flush(60)
        for value, fut in futs:
            exc = fut.exception(0)
            if exc is not None:
                self.failed.append(exc)
            else:
                md = fut.result(0)
                self.acked[(md.partition, md.offset)] = value


# -- the run ---------------------------------------------------------------------------------------
def schedule(changes: int) -> list[tuple[str, str]]:
    """Alternating additions and closes; both clients are always in the group (2-4 members)."""
    # (kip members, confluent members) from (1, 1): (2,1) (2,2) (1,2) (1,1) (1,2) (2,2) (2,1) (1,1)
    # (2,1) (1,1), and again
    base = [("add", "kip"), ("add", "confluent"), ("close", "kip"), ("close", "confluent"),
            ("add", "confluent"), ("add", "kip"), ("close", "confluent"), ("close", "kip"),
            ("add", "kip"), ("close", "kip")]
    return [base[i % len(base)] for i in range(changes)]


def _committed(broker: EmbeddedBroker, group: str, topic: str) -> dict[int, int | None]:
    with KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                        "enable.auto.commit": False}) as c:
        got = c.committed([TopicPartition(topic, p) for p in range(NPARTS)], timeout=10)
    return {tp.partition: (om.offset if om is not None else None) for tp, om in got.items()}


def _ends(broker: EmbeddedBroker, topic: str) -> dict[int, int]:
    with KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "enable.auto.commit": False}) as c:
        got = c.end_offsets([TopicPartition(topic, p) for p in range(NPARTS)])
    return {tp.partition: off for tp, off in got.items()}


def _overlaps(periods: list[Period]) -> list[str]:
    by_part: dict[int, list[Period]] = defaultdict(list)
    for p in periods:
        by_part[p.partition].append(p)
    out = []
    for part, ps in by_part.items():
        ps.sort(key=lambda p: p.start)
        for i, a in enumerate(ps):
            for b in ps[i + 1:]:
                if b.start >= a.end:
                    continue
                if a.member != b.member:
                    out.append(f"partition {part}: {a.member} [{a.start:.3f}, {a.end:.3f} {a.how}] overlaps "
                               f"{b.member} [{b.start:.3f}, {b.end:.3f} {b.how}]")
    return out


def run_mixed_group(broker: EmbeddedBroker, unique_name: Callable[[str], str], strategy: str, *,
                    changes: int, gap: float, wait_stable: bool, rate: float) -> dict[str, Any]:
    """Starts a kipconsumer and a confluent-kafka member, then makes ``changes`` membership
    changes (``schedule``): with ``wait_stable`` each one after the previous rebalance completed
    and ``gap`` s of processing, else every ``gap`` s (rebalances overlap). Records are produced
    at ``rate``/s from the first assignment to the last change."""
    topic = unique_name("mixed")
    group = unique_name("mixed-g")
    broker.create_topic(topic, NPARTS)
    journal = Journal()
    members: dict[str, Member] = {}
    live: dict[str, list[str]] = {"kip": [], "confluent": []}
    counter = Counter[str]()
    events: list[str] = []
    settle: list[float] = []

    def add(client: str) -> None:
        counter[client] += 1
        name = f"{'K' if client == 'kip' else 'C'}{counter[client]}"
        members[name] = Member(name, client, broker, topic, group, strategy, journal).start()
        live[client].append(name)
        events.append(f"+{name}")

    def close_oldest(client: str) -> None:
        name = live[client].pop(0)
        members[name].close()
        events.append(f"-{name}")

    def stable() -> bool:
        """Every live member owns some partitions and together exactly the 12, once each."""
        with journal.lock:
            owned = [set(members[n].owned) for n in live["kip"] + live["confluent"]]
        return (all(owned) and sum(len(o) for o in owned) == NPARTS
                and set().union(*owned) == set(range(NPARTS)))

    def wait_until_stable(what: str) -> None:
        t0 = time.monotonic()
        deadline = t0 + 25
        while not stable():
            bad = {m.name: repr(m.error) for m in members.values() if m.error is not None}
            assert not bad, bad
            assert time.monotonic() < deadline, (f"no stable assignment 25 s after {what}: {events}; "
                                                 f"{journal.problems[:5]}")
            time.sleep(0.02)
        settle.append(time.monotonic() - t0)

    t_start = time.monotonic()
    producer = ProducerThread(broker, topic, rate)
    try:
        add("kip")
        add("confluent")
        wait_until_stable("the first join")
        producer.thread.start()
        for op, client in schedule(changes):
            time.sleep(gap)
            if op == "add":
                add(client)
            else:
                close_oldest(client)
            if wait_stable:
                wait_until_stable(events[-1])
            bad = {m.name: repr(m.error) for m in members.values() if m.error is not None}
            assert not bad, bad
        time.sleep(gap)
        producer.stop.set()
        producer.thread.join(60)
        assert not producer.thread.is_alive(), "producer did not finish"
        assert not producer.failed, producer.failed[:3]
        # drain: every acknowledged record processed, then the group commits the log end
        wait_until_stable("the last change")
        deadline = time.monotonic() + 30
        while not set(producer.acked) <= set(journal.processed):
            missing = len(set(producer.acked) - set(journal.processed))
            assert time.monotonic() < deadline, f"{missing} records never processed; {events}"
            time.sleep(0.1)
        ends = _ends(broker, topic)
        deadline = time.monotonic() + 20
        committed = _committed(broker, group, topic)
        while committed != ends:
            assert time.monotonic() < deadline, f"commits did not reach the log end: {committed} vs {ends}"
            time.sleep(0.3)
            committed = _committed(broker, group, topic)
    finally:
        producer.stop.set()
        for name in list(live["kip"]) + list(live["confluent"]):
            try:
                members[name].close()
            except AssertionError as e:
                journal.problem(str(e))
        if producer.thread.is_alive():
            producer.thread.join(60)
    committed_after_close = _committed(broker, group, topic)
    errors = {m.name: repr(m.error) for m in members.values() if m.error is not None}
    dups = sum(n - 1 for n in journal.processed.values() if n > 1)
    summary = {
        "strategy": strategy, "changes": changes, "events": events, "records": len(producer.acked),
        "processed": sum(journal.processed.values()), "duplicates": dups,
        "by_member": dict(journal.by_member), "assignments": journal.assignments,
        "commits_ok": dict(journal.commits_ok), "commits_failed": dict(journal.commits_failed),
        "settle_s": [round(x, 1) for x in settle], "seconds": round(time.monotonic() - t_start, 1),
    }
    print(f"\nmixed group summary: {summary}")
    # -- the checks
    assert not errors, errors
    assert not journal.problems, sorted(Counter(p.split(":")[0] + ":" + p.split(":")[1][:30]
                                                for p in journal.problems).items())[:10]
    lost = set(producer.acked) - set(journal.processed)
    assert not lost, f"{len(lost)} acknowledged records never processed: {sorted(lost)[:10]}"
    wrong = [k for k, v in producer.acked.items() if journal.values.get(k) != v]
    assert not wrong, f"records with another value than sent: {wrong[:5]}"
    assert not set(journal.processed) - set(producer.acked), "processed records that were never sent"
    overlaps = _overlaps(journal.periods)
    assert not overlaps, overlaps[:5]
    assert committed_after_close == ends, (committed_after_close, ends)
    assert sum(ends.values()) == len(producer.acked)
    kip_names = [n for n, m in members.items() if m.client == "kip"]
    conf_names = [n for n, m in members.items() if m.client == "confluent"]
    assert any(journal.by_member[n] for n in kip_names) and any(journal.by_member[n] for n in conf_names)
    return summary


def test_the_checks_catch_what_they_look_for() -> None:
    """The bookkeeping itself (no broker): overlapping ownership, records of a partition not owned,
    a gap inside a period and at a handover, a commit that goes backwards or covers a partition the
    member does not own are all reported."""
    j = Journal()
    fake: Any = type("FakeBroker", (), {"bootstrap_servers": "127.0.0.1:9"})()
    a, b, c = (Member(n, "kip", fake, "t", "g", "cooperative-sticky", j) for n in "ABC")
    a.assigned([0, 1])
    a.process(0, 0, b"v")
    a.process(0, 2, b"v")                      # offset 1 skipped within A's period
    b.assigned([1])                            # A still owns partition 1
    b.process(0, 3, b"v")                      # B does not own partition 0
    a.commit_result("periodic", {0: 3}, None)
    b.commit_result("periodic", {0: 1}, None)  # backwards, and not B's partition
    a.released([0, 1], "revoked")
    c.assigned([0])
    c.process(0, 9, b"v")                      # handover gap: 4..8 never processed
    assert len(j.problems) == 5, j.problems
    for words in ("offset 2 after 0", "does not own", "back from 3 to 1", "committed partition 0",
                  "period starts at 9, next unprocessed offset is 4"):
        assert any(words in p for p in j.problems), (words, j.problems)
    overlaps = _overlaps(j.periods)
    assert len(overlaps) == 1 and overlaps[0].startswith("partition 1: A ") and "overlaps B" in overlaps[0]
    assert not _overlaps([Period("A", 0, 1.0, 2.0), Period("B", 0, 2.0), Period("A", 1, 0.0, 5.0)])


# -- tests -----------------------------------------------------------------------------------------
STRATEGIES = [pytest.param("range", marks=EAGER_IS_CLASSIC),
              pytest.param("roundrobin", marks=EAGER_IS_CLASSIC), "cooperative-sticky"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_mixed_group_under_churn(broker: EmbeddedBroker, unique_name: Callable[[str], str],
                                 strategy: str) -> None:
    """9 membership changes (2-4 members, both clients always present), each after the previous
    rebalance completed and 0.5 s of processing; ~500 records/s meanwhile."""
    s = run_mixed_group(broker, unique_name, strategy, changes=9, gap=0.5, wait_stable=True, rate=500)
    assert s["assignments"] >= 9
    assert len(s["events"]) == 11


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_mixed_group_under_fast_churn(broker: EmbeddedBroker, unique_name: Callable[[str], str],
                                      strategy: str) -> None:
    """KIP_MIXED_CHANGES (default 10, CI-sized; 20 or more by hand) membership changes 1 s apart,
    without waiting for the rebalances to complete (they overlap and restart), 1000 records/s."""
    changes = int(os.environ.get("KIP_MIXED_CHANGES", "10"))
    run_mixed_group(broker, unique_name, strategy, changes=changes, gap=1.0, wait_stable=False, rate=1000)
