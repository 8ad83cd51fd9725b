"""Share group member churn on real Kafka: members come and go (some leave holding unacknowledged
records, as a crashed worker would) while the group drains a topic. No record may be lost and none
may be acknowledged successfully twice.

CI size: 1500 records, members living 0.5-2 s. Longer: KIP_SHARE_CHURN_RECORDS=20000
KIP_SHARE_CHURN_DEADLINE=600 (seconds).
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from share_support import consumer, produce, share_group, unique_name

from kipconsumer import AcknowledgeType
from kipconsumer.testing import KafkaCluster

pytestmark = pytest.mark.kafka

RECORDS = int(os.environ.get("KIP_SHARE_CHURN_RECORDS", "1500"))
DEADLINE_S = float(os.environ.get("KIP_SHARE_CHURN_DEADLINE", "90"))
MEMBERS = 3


def test_no_record_lost_or_acknowledged_twice_under_churn(kafka_cluster: KafkaCluster) -> None:
    topic = unique_name("share-churn")
    kafka_cluster.create_topic(topic, 2)
    produced = produce(kafka_cluster, topic, 2, RECORDS)
    group = share_group(kafka_cluster)
    lock = threading.Lock()
    accepted: set[tuple[int, int]] = set()
    twice: list[tuple[int, int]] = []
    crashes = [0]
    stop = threading.Event()
    errors: list[BaseException] = []

    def member(seed: int) -> None:
        rnd = random.Random(seed)
        life_end = time.monotonic() + rnd.uniform(0.5, 2.0)
        c = consumer(kafka_cluster, group, "explicit", max_poll_records=20)
        try:
            c.subscribe([topic])
            while time.monotonic() < life_end and not stop.is_set():
                batch = list(c.poll(0.3))
                if not batch:
                    continue
                if rnd.random() < 0.15:  # "crash": leave holding the batch unacknowledged
                    crashes[0] += 1
                    return
                for r in batch:
                    c.acknowledge(r, AcknowledgeType.ACCEPT)
                failed = {tp.partition for tp, err in c.commit_sync(10).items() if err is not None}
                with lock:
                    for r in batch:
                        key = (r.partition, r.offset)
                        if r.partition not in failed:
                            if key in accepted:
                                twice.append(key)
                            accepted.add(key)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            c.close(10)

    seeds = iter(range(10**6))
    threads: list[threading.Thread] = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        with lock:
            if len(accepted) >= len(produced):
                break
        threads = [t for t in threads if t.is_alive()]
        while len(threads) < MEMBERS:
            t = threading.Thread(target=member, args=(next(seeds),), daemon=True)
            t.start()
            threads.append(t)
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, errors[:3]
    assert twice == [], f"acknowledged twice: {twice[:10]}"
    assert accepted == produced, f"lost: {sorted(produced - accepted)[:10]} ({len(produced - accepted)})"
    started = next(seeds)
    print(f"churn: {started} members, {crashes[0]} left holding a batch, {len(accepted)} records")
    assert started > MEMBERS and crashes[0] > 0, (started, crashes[0])
