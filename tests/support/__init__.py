"""Helpers shared by the test modules (not a test module): filling topics with known records.

Every module that needs records in a topic uses :func:`produce` instead of a copy of its own; the
record shapes (values, keys, headers, timestamps) are given as functions of (partition, index).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kipconsumer import KafkaProducer

#: (partition, index within the partition) -> a field of the record
Field = Callable[[int, int], Any]


def value_v(p: int, i: int) -> bytes:
    """The default value: ``v-<partition>-<index>``."""
    return f"v-{p}-{i}".encode()


def produce(
    servers: str,
    topic: str,
    counts: Mapping[int, int],
    *,
    value: Field = value_v,
    key: Field | None = None,
    headers: Field | None = None,
    timestamp: Field | None = None,
    linger_ms: int = 5,
    interleave: bool = False,
) -> dict[int, int]:
    """Sends ``counts[p]`` records to partition ``p`` of ``topic`` (kipconsumer's producer, acks=all)
    and waits until every one is acknowledged; a failed record raises its error. Record ``i`` of
    partition ``p`` gets ``value(p, i)``, ``key(p, i)``, ``headers(p, i)`` and ``timestamp(p, i)``.
    ``interleave`` sends index by index across the partitions instead of partition by partition.
    Returns the last offset written per partition."""
    if interleave:
        order = [(p, i) for i in range(max(counts.values(), default=0)) for p in counts if i < counts[p]]
    else:
        order = [(p, i) for p, n in counts.items() for i in range(n)]
    with KafkaProducer({"bootstrap.servers": servers, "linger.ms": linger_ms, "acks": "all"}) as producer:
        futures = [
            producer.send(
                topic,
                value=value(p, i),
                key=None if key is None else key(p, i),
                partition=p,
                headers=None if headers is None else headers(p, i),
                timestamp=None if timestamp is None else timestamp(p, i),
            )
            for p, i in order
        ]
        producer.flush(60)
    last: dict[int, int] = {}
    for f in futures:
        md = f.result(0)
        last[md.partition] = max(last.get(md.partition, -1), md.offset)
    return last


def produce_ids(
    servers: str,
    topic: str,
    ids: range,
    partitions: int,
    *,
    value: Callable[[int], Any] = lambda g: b"%d" % g,
    key: Callable[[int], Any] | None = None,
    linger_ms: int = 5,
) -> dict[int, int]:
    """Sends record ``g`` of ``ids`` to partition ``g % partitions`` with ``value(g)`` (and ``key(g)``),
    in order; as :func:`produce` otherwise."""
    by_partition: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for g in ids:
        by_partition[g % partitions].append(g)
    return produce(
        servers,
        topic,
        {p: len(v) for p, v in by_partition.items()},
        value=lambda p, i: value(by_partition[p][i]),
        key=None if key is None else (lambda p, i: key(by_partition[p][i])),
        linger_ms=linger_ms,
        interleave=True,
    )
