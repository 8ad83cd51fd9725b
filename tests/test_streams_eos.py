"""Pipeline with processing.guarantee=exactly_once_v2, on Tansu (it applies transactional offset commits,
fences an older producer of a transactional.id and aborts its open transaction).

The sink is read the way a read_committed consumer must read it, from the COMMIT/ABORT markers in its log
(``txn_log.read_committed_log``): Tansu 0.6 does not filter aborted records for read_committed fetches
(see docs/reliability.md). Each test also checks that the raw log holds what the rule removed (aborted
or open records), so a reader that ignored the markers would fail it.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kc_testing import RealKafka, Tansu
from support import produce_ids
from txn_log import PartitionLog, read_committed_log

from kipconsumer import ConsumerRecord, KafkaConsumer, KafkaProducer, TopicPartition
from kipconsumer._producer import _set_txn_test_hold_ms
from kipconsumer.errors import ConfigError
from kipconsumer.streams import Output, Pipeline, split_config

MEMBER = Path(__file__).resolve().parent / "chaos" / "eos_member.py"
BASE = {"group.id": "g", "bootstrap.servers": "127.0.0.1:1", "processing.guarantee": "exactly_once_v2"}


def _out(record: ConsumerRecord) -> list[Output]:
    return [(record.key, b"out-" + (record.value or b""))]


def _produce(bootstrap: str, topic: str, n: int, partitions: int, start: int = 0) -> None:
    produce_ids(bootstrap, topic, range(start, start + n), partitions)


def _exactly_once(log: dict[int, PartitionLog], n: int) -> tuple[int, int]:
    """(lost, duplicated) of outputs out-0..out-<n-1> among the committed records."""
    counts = collections.Counter(v for pl in log.values() for _, _, v in pl.committed)
    expected = {b"out-%d" % i for i in range(n)}
    assert set(counts) <= expected
    return len(expected - set(counts)), sum(c - 1 for c in counts.values() if c > 1)


def _assert_read_committed_agrees(bootstrap: str, topic: str, log: dict[int, PartitionLog]) -> None:
    """A read_committed kipconsumer returns exactly the committed records the markers name."""
    want = {p: [(o, v) for o, _, v in pl.committed] for p, pl in log.items()}
    got: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in log}
    with KafkaConsumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                        "enable.auto.commit": False, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, p) for p in log])
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < sum(map(len, want.values())) and time.monotonic() < deadline:
            for r in c.poll(0.3):
                got[r.partition].append((r.offset, r.value))
        for r in c.poll(1.0):  # nothing more may come
            got[r.partition].append((r.offset, r.value))
    assert got == want


def _conf(kafka: RealKafka, group: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": kafka.bootstrap, "group.id": group,
            "processing.guarantee": "exactly_once_v2",
            "session.timeout.ms": 3000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 4000, **extra}


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    with KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}) as c:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    return {tp.partition: None if om is None else om.offset for tp, om in got.items()}


# -- config (no broker) ------------------------------------------------------------------------------
def test_exactly_once_config() -> None:
    cfg = split_config(BASE)
    assert cfg.processing_guarantee == "exactly_once_v2"
    assert cfg.commit_interval_ms == 100  # Kafka Streams' default with exactly-once
    assert cfg.consumer["isolation.level"] == "read_committed"
    assert str(cfg.producer["transactional.id"]).startswith("g-")
    assert split_config({**BASE, "transactional.id": "app-1"}).producer["transactional.id"] == "app-1"
    assert split_config({**BASE, "commit.interval.ms": 250}).commit_interval_ms == 250
    plain = split_config({k: v for k, v in BASE.items() if k != "processing.guarantee"})
    assert plain.processing_guarantee == "at_least_once" and plain.commit_interval_ms == 1000
    assert "transactional.id" not in plain.producer
    kip848 = split_config({**BASE, "group.protocol": "consumer"})
    assert "partition.assignment.strategy" not in kip848.consumer


@pytest.mark.parametrize("extra,match", [
    ({"processing.guarantee": "exactly_once"}, r"processing.guarantee.*at_least_once\|exactly_once_v2"),
    ({"isolation.level": "read_uncommitted"},
     r"isolation.level='read_uncommitted' is not allowed .*read_committed"),
    ({"enable.idempotence": False}, r"enable.idempotence=False is not allowed.*true"),
    ({"commit.interval.ms": -1}, r"commit.interval.ms"),
    ({"processing.guarantees": "x"}, r"did you mean 'processing.guarantee'"),
])
def test_exactly_once_config_errors(extra: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        split_config({**BASE, **extra})


# -- real Kafka ------------------------------------------------------------------------------------------
@pytest.mark.kafka
def test_outputs_and_offsets_commit_together(kafka: RealKafka) -> None:
    source, sink = kafka.create_topic(3), kafka.create_topic(3)
    n, group = 3000, f"eos-{uuid.uuid4().hex[:8]}"
    _produce(kafka.bootstrap, source, n, 3)
    with Pipeline(_conf(kafka, group), source, _out, sink) as pipeline:
        pipeline.run(until=lambda: _done(pipeline, source, n), timeout=60)
        m = pipeline.metrics()
    assert m["transactions_committed"] >= 1 and m["transactions_aborted"] == 0
    log = read_committed_log(kafka.bootstrap, sink, 3)
    assert _exactly_once(log, n) == (0, 0)
    assert all(pl.commit_markers >= 1 and pl.open == 0 for pl in log.values())
    _assert_read_committed_agrees(kafka.bootstrap, sink, log)
    assert _committed(kafka.bootstrap, group, source, 3) == {0: 1000, 1: 1000, 2: 1000}


@pytest.mark.kafka
@pytest.mark.parametrize("same_id", [True, False], ids=["successor-same-txid", "successor-other-txid"])
def test_killed_member_open_transaction_never_counts(kafka: RealKafka, same_id: bool) -> None:
    """A member SIGKILLed with an open transaction (records written, not committed): a successor with
    the same transactional.id aborts it at once; with another id Kafka aborts it when its
    transaction.timeout.ms (10 s) runs out (the first member sent no offsets, so the successor need
    not wait for it). Either way its records are aborted, never committed, and
    every input is in the output once. (Tansu 0.6 never expired it: docs/broker.md.)"""
    source, sink = kafka.create_topic(2), kafka.create_topic(2)
    n, group = 2000, f"eos-{uuid.uuid4().hex[:8]}"
    _produce(kafka.bootstrap, source, n, 2)
    path = os.pathsep.join([str(MEMBER.parents[2]), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    args = [sys.executable, str(MEMBER), "--bootstrap", kafka.bootstrap, "--source", source, "--sink", sink,
            "--group", group]
    # no commit before the kill: the longest interval allowed, the transaction timeout (10 s)
    first = subprocess.Popen([*args, "--txid", f"{group}-a", "--commit-interval-ms", "10000"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while sum(pl.high_watermark for pl in read_committed_log(kafka.bootstrap, sink, 2).values()) < n:
            assert time.monotonic() < deadline, "the first member wrote no output in 60 s"
            time.sleep(0.2)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    before = read_committed_log(kafka.bootstrap, sink, 2)
    assert sum(pl.open for pl in before.values()) == n and _exactly_once(before, n) == (n, 0)
    second = subprocess.run([*args, "--txid", f"{group}-{'a' if same_id else 'b'}", "--exit-after-idle", "3"],
                            env=env, capture_output=True, timeout=120)
    assert second.returncode == 0, second.stderr[-2000:]
    log = read_committed_log(kafka.bootstrap, sink, 2)
    deadline = time.monotonic() + 40  # an orphan of another transactional.id: Kafka expires it
    while sum(pl.open for pl in log.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        log = read_committed_log(kafka.bootstrap, sink, 2)
    assert _exactly_once(log, n) == (0, 0)
    assert sum(pl.aborted for pl in log.values()) == n
    assert sum(pl.open for pl in log.values()) == 0
    _assert_read_committed_agrees(kafka.bootstrap, sink, log)
    assert _committed(kafka.bootstrap, group, source, 2) == {0: 1000, 1: 1000}


@pytest.mark.kafka
def test_loop_held_past_half_the_poll_interval_aborts_and_rewinds(kafka: RealKafka) -> None:
    """process() blocks once for longer than half of max.poll.interval.ms (4 s): the transaction of that
    interval is aborted instead of committed and its records are processed again."""
    source, sink = kafka.create_topic(2), kafka.create_topic(2)
    n, group = 400, f"eos-{uuid.uuid4().hex[:8]}"
    _produce(kafka.bootstrap, source, n, 2)
    held = threading.Event()

    def slow_once(record: ConsumerRecord) -> list[Output]:
        if record.offset == 150 and not held.is_set():
            held.set()
            time.sleep(2.5)
        return _out(record)

    conf = _conf(kafka, group, **{"consumer.max.poll.records": 50})
    with Pipeline(conf, source, slow_once, sink) as pipeline:
        pipeline.run(until=lambda: held.is_set() and pipeline.metrics()["transactions_committed"] >= 1
                     and _done(pipeline, source, n), timeout=60)
        m = pipeline.metrics()
    assert m["transactions_aborted"] >= 1 and m["rewinds"] >= 1, m
    log = read_committed_log(kafka.bootstrap, sink, 2)
    assert _exactly_once(log, n) == (0, 0)
    assert sum(pl.aborted for pl in log.values()) + sum(pl.open for pl in log.values()) >= 1


def _done(pipeline: Pipeline, source: str, n: int) -> bool:
    parts = pipeline.metrics()["partitions"]
    return sum(p["committed"] for tp, p in parts.items() if tp.topic == source) >= n


@pytest.mark.parametrize("kind", [pytest.param("tansu", marks=pytest.mark.interop),
                                  pytest.param("kafka", marks=pytest.mark.kafka)])
def test_frozen_broker_times_out_the_transaction_which_is_retried(kind: str,
                                                                   request: pytest.FixtureRequest) -> None:
    """The broker freezes (SIGSTOP) for 8 s (13 s on Kafka: past broker.session.timeout.ms), longer than
    the request and delivery timeouts and than the 3 s bound of a loop pass's calls, while a transaction
    is open: the commit times out, its producer is replaced or the transaction is aborted (KIP-572:
    within task.timeout.ms), run() does not fail, the loop never misses max.poll.interval.ms, and every
    input ends up in the output once. In one CI run librdkafka 2.16's send_offsets_to_transaction()
    blocked here for 8+ minutes after the broker resumed; the call is now bounded
    (TransactionBlockedError: the pipeline replaces its producer).

    On Kafka (one node): after the freeze the node can answer Metadata with no broker (fenced by its
    controller), and the Pipeline's librdkafka 2.16 consumer then lost every broker and never rejoined
    (docs/broker.md, "A fenced single broker can wedge librdkafka 2.16's consumer"; 1 run of 4 on
    2026-11-28, the freeze starting while records flow). The consumer's broker watchdog
    (kipconsumer._rebootstrap) adds the bootstrap servers again: it is processing within 30 s."""
    tansu: Tansu | RealKafka = request.getfixturevalue(kind)
    freeze_s = 13.0 if kind == "kafka" else 8.0
    source, sink = tansu.create_topic(2), tansu.create_topic(2)
    n, group = 2000, f"eos-{uuid.uuid4().hex[:8]}"
    _produce(tansu.bootstrap, source, n // 2, 2)
    conf = _conf(tansu, group, **{"producer.request.timeout.ms": 1000,
                                  "producer.transaction.timeout.ms": 3000, "task.timeout.ms": 60_000,
                                  "session.timeout.ms": 6_000, "heartbeat.interval.ms": 1000,
                                  "max.poll.interval.ms": 6_000})
    with Pipeline(conf, source, _out, sink) as pipeline:
        pipeline.run(until=lambda: _done(pipeline, source, n // 2), timeout=60)
        producer = threading.Thread(target=_produce, args=(tansu.bootstrap, source, n // 2, 2, n // 2))
        producer.start()
        # freeze while the second half flows in: a transaction is open (its outputs sent, not committed)
        pipeline.run(until=lambda: pipeline.metrics()["records_processed"] > n // 2 + 20, timeout=30)
        tansu.freeze()
        try:
            pipeline.run(timeout=freeze_s)
        finally:
            tansu.thaw()
        thawed = time.monotonic()
        producer.join(60)
        pipeline.run(until=lambda: _done(pipeline, source, n), timeout=90)
        recovered_s = time.monotonic() - thawed
        m = pipeline.metrics()
        expiries = pipeline.consumer.metrics()["poll_interval_expiries"]
    log = read_committed_log(tansu.bootstrap, sink, 2)
    assert _exactly_once(log, n) == (0, 0), m
    assert m["executor"]["timeouts"] + m["transactions_aborted"] >= 1, m
    # KIP-572's 50% rule: the calls of one loop pass share half of max.poll.interval.ms counted from
    # the last poll, so however many time out while the broker is frozen, the loop polls in time
    assert expiries == 0, m
    if kind == "kafka":  # consuming, processing and committing again within 30 s of the node's return
        assert recovered_s < 30, (recovered_s, m)


@pytest.mark.kafka
def test_a_transaction_call_blocked_in_librdkafka_replaces_the_producer(kafka: RealKafka) -> None:
    """A commit's librdkafka call that does not return (as send_offsets_to_transaction() after a broker
    freeze, docs/reliability.md; here its result is held 8 s on the helper thread) raises
    TransactionBlockedError after the commit's bound: the pipeline aborts the transaction by replacing
    the producer (the new one, same transactional.id, fences the old one and aborts its transaction),
    goes on at once, and every input is in the output once."""
    source, sink = kafka.create_topic(2), kafka.create_topic(2)
    n, group = 2000, f"eos-{uuid.uuid4().hex[:8]}"
    _produce(kafka.bootstrap, source, n, 2)
    armed = threading.Event()

    def process(record: ConsumerRecord) -> list[Output]:
        if record.offset == 300 and not armed.is_set():
            armed.set()
            _set_txn_test_hold_ms(8000)  # the calls started in the next 0.5 s are held
            threading.Timer(0.5, _set_txn_test_hold_ms, (0,)).start()
        return _out(record)

    conf = _conf(kafka, group, **{"max.poll.interval.ms": 4000, "task.timeout.ms": 30_000})
    t0 = time.monotonic()
    try:
        with Pipeline(conf, source, process, sink) as pipeline:
            pipeline.run(until=lambda: _done(pipeline, source, n), timeout=60)
            m = pipeline.metrics()
    finally:
        _set_txn_test_hold_ms(0)
    assert armed.is_set()
    assert m["producer_replacements"] >= 1 and m["transactions_aborted"] >= 1, m
    assert time.monotonic() - t0 < 45  # the held call (8 s) was not waited for again
    log = read_committed_log(kafka.bootstrap, sink, 2)
    assert _exactly_once(log, n) == (0, 0), m
    assert sum(pl.aborted for pl in log.values()) >= 1  # the blocked transaction's outputs: aborted
    assert _committed(kafka.bootstrap, group, source, 2) == {0: 1000, 1: 1000}


@pytest.mark.kafka
def test_a_transaction_that_outlives_transaction_timeout_is_redone_not_fatal(kafka: RealKafka) -> None:
    """One process() call slower than transaction.timeout.ms (4.5 s against 3 s; well within half of
    max.poll.interval.ms): Kafka's coordinator aborts the open transaction and bumps the producer's
    epoch, which librdkafka reports as a fenced producer (run() raised ProducerFencedError). The
    transaction had outlived transaction.timeout.ms, so the abort is the broker's, not another
    instance's: every task rewinds, the producer is replaced, and every input is in the output once."""
    source, sink = kafka.create_topic(2), kafka.create_topic(2)
    n, group = 1000, f"eos-{uuid.uuid4().hex[:8]}"
    _produce(kafka.bootstrap, source, n, 2)
    slowed = threading.Event()

    def process(record: ConsumerRecord) -> list[Output]:
        if record.offset == 100 and not slowed.is_set():
            slowed.set()
            time.sleep(4.5)
        return _out(record)

    conf = _conf(kafka, group, **{"producer.transaction.timeout.ms": 3000,
                                  "producer.request.timeout.ms": 1000, "session.timeout.ms": 6000,
                                  "max.poll.interval.ms": 20_000, "task.timeout.ms": 60_000})
    with Pipeline(conf, source, process, sink) as pipeline:
        pipeline.run(until=lambda: _done(pipeline, source, n), timeout=60)
        m = pipeline.metrics()
    assert slowed.is_set()
    assert m["transactions_timed_out"] >= 1 and m["producer_replacements"] >= 1, m
    log = read_committed_log(kafka.bootstrap, sink, 2)
    assert _exactly_once(log, n) == (0, 0), m
    assert _committed(kafka.bootstrap, group, source, 2) == {0: n // 2, 1: n // 2}


@pytest.mark.kafka
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_commit_whose_outcome_is_unknown_replaces_the_producer_and_resumes_from_the_committed_offsets(
        kafka: RealKafka, monkeypatch: pytest.MonkeyPatch, protocol: str) -> None:
    """The only node (transaction coordinator, group coordinator and leaders) is frozen for 5 s right as
    the third commit_transaction() starts: the commit gives no result within the loop's budget
    (TransactionOutcomeUnknownError). The pipeline neither retries that commit nor takes it as failed:
    the producer that made it gets no further call, a new producer (same transactional.id) ends the
    transaction at the coordinator, every partition resumes from the group's committed offset, and every
    input is in the read_committed output exactly once. Classic and KIP-848 groups."""
    source, sink = kafka.create_topic(2), kafka.create_topic(2)
    n, group = 2000, f"eos-{uuid.uuid4().hex[:8]}"
    _produce(kafka.bootstrap, source, n, 2)
    original = KafkaProducer.commit_transaction
    commits: list[KafkaProducer] = []
    frozen: list[KafkaProducer] = []
    after: list[KafkaProducer] = []  # producers whose commit_transaction() was called after the frozen one
    # longer than the commit's bound (half of max.poll.interval.ms, 3 s, + librdkafka's 1 s grace),
    # shorter than broker.session.timeout.ms (9 s: the controller would fence the node)
    thaw = threading.Timer(5.0, kafka.thaw)

    def commit(self: KafkaProducer, timeout: float | None = None) -> None:
        commits.append(self)
        if frozen:
            after.append(self)
        elif len(commits) == 3:
            frozen.append(self)
            kafka.freeze()
            thaw.start()
        original(self, timeout)

    monkeypatch.setattr(KafkaProducer, "commit_transaction", commit)
    extra: dict[str, Any] = {"max.poll.interval.ms": 6000, "task.timeout.ms": 60_000}
    if protocol == "consumer":  # the broker's group.consumer.session.timeout.ms applies
        extra.update({"group.protocol": "consumer", "session.timeout.ms": None,
                      "heartbeat.interval.ms": None})
    else:
        extra.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    conf = {k: v for k, v in _conf(kafka, group, **extra).items() if v is not None}

    def paced(record: ConsumerRecord) -> list[Output]:
        time.sleep(0.001)  # ~2 s of processing: many commit intervals
        return _out(record)

    try:
        with Pipeline(conf, source, paced, sink) as pipeline:
            pipeline.run(until=lambda: _done(pipeline, source, n), timeout=90)
            m = pipeline.metrics()
    finally:
        thaw.cancel()
        kafka.thaw()
    assert frozen, f"the commit to freeze was never reached ({len(commits)} commits)"
    assert m["transactions_outcome_unknown"] >= 1 and m["producer_replacements"] >= 1, m
    assert frozen[0] not in after  # no more work on the epoch whose commit gave no result
    log = read_committed_log(kafka.bootstrap, sink, 2)
    assert _exactly_once(log, n) == (0, 0), m
    assert _committed(kafka.bootstrap, group, source, 2) == {0: n // 2, 1: n // 2}


def test_commit_interval_must_not_exceed_transaction_timeout() -> None:
    """Kafka Streams' rule: a commit interval above transaction.timeout.ms lets every transaction time
    out at the broker."""
    base = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "processing.guarantee": "exactly_once_v2"}
    with pytest.raises(ConfigError, match=r"commit.interval.ms=40001 must not exceed "
                                          r"transaction.timeout.ms=40000"):
        split_config({**base, "commit.interval.ms": 40_001, "producer.transaction.timeout.ms": 40_000})
    with pytest.raises(ConfigError, match=r"commit.interval.ms=90000 must not exceed "
                                          r"transaction.timeout.ms=60000"):  # the default
        split_config({**base, "commit.interval.ms": 90_000})
    split_config({**base, "commit.interval.ms": 40_000, "producer.transaction.timeout.ms": 40_000})
    split_config({**base, "commit.interval.ms": 90_000, "processing.guarantee": "at_least_once"})


@pytest.mark.kafka
def test_a_loop_held_while_the_offsets_are_sent_aborts_instead_of_committing(
        kafka: RealKafka, caplog: pytest.LogCaptureFixture) -> None:
    """The 50% rule is checked again between send_offsets_to_transaction() and commit_transaction(): a
    member held there (here 2.2 s right after the offsets went out, past half of
    max.poll.interval.ms=4 s, as a stopped process would be; a slow call cannot get there, its timeout
    is what the loop pass has left of that half) may have been dropped, and a broker without KIP-447's
    stable-offset fetch (Tansu 0.6) would let its commit put older offsets over its successor's. It
    aborts and rewinds."""
    source, sink = kafka.create_topic(2), kafka.create_topic(2)
    n, group = 2000, f"eos-{uuid.uuid4().hex[:8]}"
    _produce(kafka.bootstrap, source, n, 2)
    armed = threading.Event()
    holder: dict[str, Pipeline] = {}

    def process(record: ConsumerRecord) -> list[Output]:
        if record.offset == 300 and not armed.is_set():
            armed.set()
            producer = holder["pipeline"].producer
            real = producer.send_offsets_to_transaction

            def held_after_sending(*args: Any, **kwargs: Any) -> None:
                real(*args, **kwargs)
                del producer.send_offsets_to_transaction  # once
                time.sleep(2.2)

            producer.send_offsets_to_transaction = held_after_sending  # type: ignore[method-assign]
        return _out(record)

    with caplog.at_level("WARNING", logger="kipconsumer.streams"), \
            Pipeline(_conf(kafka, group), source, process, sink) as pipeline:
        holder["pipeline"] = pipeline
        pipeline.run(until=lambda: _done(pipeline, source, n), timeout=60)
        m = pipeline.metrics()
    assert armed.is_set()
    assert any("not committed: the poll loop was held" in r.getMessage() for r in caplog.records), m
    assert m["transactions_aborted"] >= 1 and m["producer_replacements"] == 0, m
    log = read_committed_log(kafka.bootstrap, sink, 2)
    assert _exactly_once(log, n) == (0, 0), m
    assert sum(pl.aborted for pl in log.values()) >= 1
    assert _committed(kafka.bootstrap, group, source, 2) == {0: 1000, 1: 1000}


@pytest.mark.kafka
def test_a_joining_member_takes_partitions_over_mid_stream(kafka: RealKafka) -> None:
    """A second pipeline joins while the first processes a paced stream: the partitions it takes are
    revoked from the first, whose open transaction is committed first; every input is in the output
    once, and the group's offsets reach the end."""
    source, sink = kafka.create_topic(4), kafka.create_topic(4)
    n, group = 4000, f"eos-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    errors: list[BaseException] = []
    assignments: list[int] = []
    commits: list[int] = []

    def member() -> None:
        try:
            with Pipeline(_conf(kafka, group), source, _out, sink) as p:
                p.run(until=stop.is_set, timeout=120)
                assignments.append(len(p.consumer.assignment()))
            commits.append(p.metrics()["transactions_committed"])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def paced() -> None:
        with KafkaProducer({"bootstrap.servers": kafka.bootstrap}) as p:
            for i in range(n):
                p.send(source, value=b"%d" % i, partition=i % 4)
                if i % 100 == 99:
                    time.sleep(0.08)
            p.flush(30)

    first = threading.Thread(target=member)
    first.start()
    feed = threading.Thread(target=paced)
    feed.start()
    time.sleep(1.5)
    second = threading.Thread(target=member)
    second.start()
    feed.join(60)
    deadline = time.monotonic() + 60
    while _committed(kafka.bootstrap, group, source, 4) != {p: n // 4 for p in range(4)}:
        assert time.monotonic() < deadline and not errors, errors
        time.sleep(0.5)
    stop.set()
    first.join(30)
    second.join(30)
    assert not errors, errors
    assert len(assignments) == 2 and 0 not in assignments, assignments  # the second one took some over
    assert len(commits) == 2 and min(commits) >= 1, commits
    log = read_committed_log(kafka.bootstrap, sink, 4)
    assert _exactly_once(log, n) == (0, 0)
