"""The main job: a real produce -> consume pipeline against the embedded broker.

Starts a 3-broker EmbeddedBroker, fills a 12-partition topic with keyed records, then
consumes it with a group of kipconsumer consumers that join together (one generation;
offsets committed periodically, in on_partitions_revoked and at the end). Prints
records/s and a per-partition summary that proves nothing was lost or duplicated.
Exit status 0 only if every produced record was consumed exactly once.

    python -m kipconsumer.demo [--records N] [--partitions P] [--consumers C]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from kipconsumer import KafkaConsumer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import RebalanceInProgressError
from kipconsumer.testing import KafkaCluster

TOPIC = "events"
GROUP = "demo-group"


def produce(bootstrap: str, records: int, partitions: int, value_size: int) -> tuple[int, float]:
    """Writes `records` records round-robin over the partitions; returns (acked, seconds)."""
    value = b"v" * value_size
    t0 = time.perf_counter()
    producer_cls: Any = None
    try:
        from kipconsumer.producer import KafkaProducer

        producer_cls = KafkaProducer
    except ImportError:  # pragma: no cover - only while the producer is not built
        pass
    if producer_cls is not None:
        with producer_cls({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
            futures = [p.send(TOPIC, value=value, key=b"%d" % i, partition=i % partitions)
                       for i in range(records)]
            p.flush()
            acked = sum(1 for f in futures if f.exception() is None)
    else:  # pragma: no cover - only while the producer is not built
        from confluent_kafka import Producer

        acked_box = [0]

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                acked_box[0] += 1

        cp = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(records):
            cp.produce(TOPIC, value=value, key=b"%d" % i, partition=i % partitions, on_delivery=on_delivery)
            if i % 10000 == 0:
                cp.poll(0)
        cp.flush()
        acked = acked_box[0]
    return acked, time.perf_counter() - t0


class Member(threading.Thread):
    """One group member: polls, records what it consumed, commits on revoke.

    Until the main thread says ``go`` (the group is stable: every member holds
    partitions), newly assigned partitions stay paused, so no record is processed in a
    generation that is about to be replaced.
    """

    def __init__(self, name: str, bootstrap: str, stop: threading.Event, go: threading.Event,
                 close_allowed: threading.Event, max_poll_records: int) -> None:
        super().__init__(name=name, daemon=True)
        self.close_allowed = close_allowed
        self.go = go
        self.final_commit_done = threading.Event()
        self.consumer = KafkaConsumer({
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.poll.records": max_poll_records,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        })
        self.stop_event = stop
        self.seen: list[tuple[int, int]] = []
        self.owned: set[TopicPartition] = set()  # written on the poll thread, read by main
        self.held_back = False
        self.error: BaseException | None = None

    def _try_commit(self) -> bool:
        try:
            self.consumer.commit_sync()
            return True
        except RebalanceInProgressError:
            return False  # the embedded broker refuses commits while the group joins (Kafka accepts them)

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self._try_commit()
        self.owned -= set(partitions)

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self.owned |= set(partitions)
        if not self.go.is_set():
            self.consumer.pause(partitions)
            self.held_back = True

    def run(self) -> None:
        c = self.consumer
        try:
            c.subscribe([TOPIC], listener=self)
            last_commit = time.monotonic()
            seen = self.seen
            while not self.stop_event.is_set():
                if self.held_back and self.go.is_set():
                    c.resume(list(c.assignment()))
                    self.held_back = False
                records = c.poll(0.2)
                for r in records:
                    _ = r.value
                    seen.append((r.partition, r.offset))
                if records and time.monotonic() - last_commit > 0.5:
                    self._try_commit()
                    last_commit = time.monotonic()
            # Final commit before any member leaves; if a rebalance is under way, finish it
            # (nothing more is returned: everything is paused) and retry.
            c.pause(list(c.assignment()))
            deadline = time.monotonic() + 30
            while not self._try_commit():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name}: final commit kept failing")
                c.poll(0.2)
                c.pause(list(c.assignment()))
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.final_commit_done.set()
            self.close_allowed.wait(30)
            c.close()


def wait_for_stable_group(members: list[Member], partitions: int, timeout: float = 60.0) -> None:
    """Returns once every member owns partitions, together all of them, unchanged for 1 s."""
    deadline = time.monotonic() + timeout
    stable_since: float | None = None
    last: list[frozenset[TopicPartition]] = []
    while time.monotonic() < deadline:
        now = [frozenset(m.owned) for m in members]
        complete = all(now) and sum(len(o) for o in now) == partitions
        if complete and now == last:
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since >= 1.0:
                return
        else:
            stable_since = None
        last = now
        time.sleep(0.05)
    raise RuntimeError("the consumer group did not form within 60 s")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kipconsumer.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--max-poll-records", type=int, default=500)
    ap.add_argument("--kafka", action="store_true",
                    help="run on a real Apache Kafka cluster of 3 nodes (kipconsumer.testing.KafkaCluster: "
                         "Java 17 and Maven) instead of the embedded broker")
    args = ap.parse_args(argv)

    # The group's first join waits 1.5 s so that all members land in one generation.
    cluster: EmbeddedBroker | KafkaCluster
    if args.kafka:
        cluster = KafkaCluster(brokers=3, broker_config={"group.initial.rebalance.delay.ms": 1500})
    else:
        cluster = EmbeddedBroker(num_brokers=3, initial_rebalance_delay_ms=1500)
    with cluster as broker:
        broker.create_topic(TOPIC, partitions=args.partitions)
        kind = f"Apache Kafka {broker.version}" if isinstance(broker, KafkaCluster) else "embedded broker"
        print(f"{kind}: {broker.bootstrap_servers}; topic {TOPIC!r} x {args.partitions} partitions")
        acked, secs = produce(broker.bootstrap_servers, args.records, args.partitions, args.value_size)
        rate = acked / secs
        print(f"produced {acked} records of {args.value_size} B in {secs:.2f} s ({rate:,.0f} records/s)")

        stop, go, close_allowed = threading.Event(), threading.Event(), threading.Event()
        members = [
            Member(f"consumer-{i}", broker.bootstrap_servers, stop, go, close_allowed, args.max_poll_records)
            for i in range(args.consumers)
        ]
        for m in members:
            m.start()
        wait_for_stable_group(members, args.partitions)
        go.set()
        t0 = time.perf_counter()
        deadline = t0 + 120
        while time.perf_counter() < deadline:
            total = sum(len(m.seen) for m in members)
            if total >= acked:
                break
            if any(m.error for m in members):
                break
            time.sleep(0.02)
        elapsed = time.perf_counter() - t0
        stop.set()
        for m in members:
            m.final_commit_done.wait(30)
        committed = members[0].consumer.committed(
            [TopicPartition(TOPIC, p) for p in range(args.partitions)], timeout=10)
        close_allowed.set()
        for m in members:
            if m.is_alive():
                m.join(30)

    errors = [m.error for m in members if m.error]
    counts: Counter[tuple[int, int]] = Counter()
    for m in members:
        counts.update(m.seen)
    per_partition: Counter[int] = Counter(p for p, _ in counts)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    expected_per_partition = Counter(i % args.partitions for i in range(acked))
    missing = sum(max(0, expected_per_partition[p] - per_partition[p]) for p in expected_per_partition)
    consumed = sum(counts.values())

    print(f"consumed {consumed} records in {elapsed:.2f} s with {args.consumers} consumers "
          f"({consumed / elapsed:,.0f} records/s, max.poll.records={args.max_poll_records})")
    for m in members:
        met = m.consumer.metrics() if not m.consumer.closed else {}
        parts = Counter(p for p, _ in m.seen)
        print(f"  {m.name}: {len(m.seen)} records from partitions {sorted(parts)}"
              + (f", rebalances {met.get('rebalances')}" if met else ""))
    print("partition  produced  consumed  unique")
    for p in sorted(expected_per_partition):
        uniq = per_partition[p]
        total_p = sum(n for (pp, _), n in counts.items() if pp == p)
        print(f"{p:9d} {expected_per_partition[p]:9d} {total_p:9d} {uniq:7d}")
    committed_total = sum(o.offset for o in committed.values() if o is not None)
    print(f"committed offsets cover {committed_total} records")
    ok = (not errors and duplicates == 0 and missing == 0 and acked == args.records
          and committed_total == acked)
    print(f"summary: produced={acked} consumed={consumed} unique={len(counts)} duplicates={duplicates} "
          f"missing={missing} -> {'OK: every record exactly once' if ok else 'FAILED'}")
    for e in errors:
        print(f"consumer error: {e!r}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
