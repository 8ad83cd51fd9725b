"""Helpers of the share group tests (KIP-932): on real Kafka a share group with test-friendly group
configs, producing numbered records, polling until a count; on the embedded broker a topic of jobs."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Callable, Iterator

from kipconsumer import KafkaProducer, KafkaShareConsumer
from kipconsumer._records import ConsumerRecord
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.testing import KafkaCluster

_counter = itertools.count()


@contextlib.contextmanager
def embedded_jobs() -> Iterator[EmbeddedBroker]:
    """An embedded broker serving share groups (earliest, 1 s record locks), with topic ``jobs`` of 2
    partitions holding 20 records ``b"0"``..``b"19"`` (record i on partition i % 2)."""
    with EmbeddedBroker(num_brokers=1) as b:
        b.configure_share_groups(auto_offset_reset="earliest", record_lock_duration_ms=1000,
                                 heartbeat_interval_ms=500)
        b.create_topic("jobs", 2)
        with KafkaProducer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0}) as p:
            for i in range(20):
                p.send("jobs", value=b"%d" % i, partition=i % 2).result(10)
        yield b


def unique_name(prefix: str) -> str:
    """A topic or group name no other test or process uses."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


#: the share group's record lock in these tests (the broker's lower bound is 1000 in KafkaCluster)
LOCK_MS = 2000


def share_group(cluster: KafkaCluster, lock_ms: int = LOCK_MS, session_ms: int = 6000) -> str:
    """A fresh share group reading from the earliest offset, with a short record lock and session."""
    group = unique_name("sg")
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest",
                                     "share.record.lock.duration.ms": lock_ms,
                                     "share.session.timeout.ms": session_ms,
                                     "share.heartbeat.interval.ms": 1000})
    return group


def produce(cluster: KafkaCluster, topic: str, partitions: int, count: int) -> set[tuple[int, int]]:
    """``count`` records spread round robin over the partitions, each in a batch of its own (a share
    fetch acquires whole batches: one big batch would go to one member); returns their
    (partition, offset)."""
    out: set[tuple[int, int]] = set()
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0}) as p:
        for i in range(count):
            md = p.send(topic, value=b"v%d" % i, partition=i % partitions).result(30)
            out.add((md.partition, md.offset))
    return out


def consumer(cluster: KafkaCluster, group: str, mode: str = "implicit", max_poll_records: int = 500,
             **extra: object) -> KafkaShareConsumer:
    conf: dict[str, object] = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                               "max.poll.records": max_poll_records, "share.acknowledgement.mode": mode}
    conf.update(extra)
    return KafkaShareConsumer(conf)


def poll_until(c: KafkaShareConsumer, done: Callable[[list[ConsumerRecord]], bool], timeout: float = 30.0,
               on_batch: Callable[[list[ConsumerRecord]], None] | None = None) -> list[ConsumerRecord]:
    """Polls until ``done(all records so far)`` or ``timeout``; ``on_batch`` runs on each non-empty
    batch (explicit mode: acknowledge there)."""
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while not done(got) and time.monotonic() < deadline:
        batch = list(c.poll(0.5))
        if batch:
            got.extend(batch)
            if on_batch is not None:
                on_batch(batch)
    return got
