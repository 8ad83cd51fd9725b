"""Reads a topic as a read_committed consumer must see it, from the transaction markers in its log.

Tansu 0.6 writes the COMMIT/ABORT control batches of every transaction into the partition's log but
sends no aborted-transaction list in fetch responses, so librdkafka (and every client that relies on
that list) returns aborted records even with ``isolation.level=read_committed``. This reader fetches
the raw record batches (aiokafka's protocol classes, read_uncommitted) and applies the rule itself:
a transactional record is visible once its producer's COMMIT marker follows it on the partition,
never if an ABORT marker does, and not yet while neither does (open transaction). Records of
non-transactional batches are visible at once. Not a test module.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

_ABORT, _COMMIT = 0, 1


@dataclass
class PartitionLog:
    """One partition: ``committed`` records (offset, key, value) in offset order, and counts."""

    committed: list[tuple[int, bytes | None, bytes | None]] = field(default_factory=list)
    aborted: int = 0
    open: int = 0
    commit_markers: int = 0
    abort_markers: int = 0
    high_watermark: int = 0


def read_committed_log(bootstrap: str, topic: str, partitions: int,
                       timeout: float = 60.0) -> dict[int, PartitionLog]:
    """Every partition of ``topic`` from offset 0 to its high watermark, resolved by the markers."""
    return asyncio.run(asyncio.wait_for(_read(bootstrap, topic, partitions), timeout))


async def _read(bootstrap: str, topic: str, partitions: int) -> dict[int, PartitionLog]:
    from aiokafka.client import AIOKafkaClient
    from aiokafka.structs import TopicPartition

    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        await client.force_metadata_update()
        out = {}
        for p in range(partitions):
            node = client.cluster.leader_for_partition(TopicPartition(topic, p))
            out[p] = await _read_partition(client, node, topic, p)
        return out
    finally:
        await client.close()


async def _read_partition(client: object, node: int, topic: str, partition: int) -> PartitionLog:
    from aiokafka.protocol.fetch import FetchRequest
    from aiokafka.record.memory_records import MemoryRecords

    log = PartitionLog()
    pending: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
    offset = 0
    while True:
        req = FetchRequest(100, 1, 8_000_000, 0, [(topic, [(partition, offset, 8_000_000)])])
        resp = await client.send(node, req)  # type: ignore[attr-defined]
        part = resp.topics[0][1][0]
        error, high, data = part[1], part[2], part[-1]
        if error:
            raise RuntimeError(f"fetch {topic}-{partition} at {offset}: error code {error}")
        log.high_watermark = high
        records = MemoryRecords(data) if data else None
        moved = False
        while records is not None:
            batch = records.next_batch()
            if batch is None:
                break
            for rec in batch:
                if rec.offset < offset:
                    continue
                offset = rec.offset + 1
                moved = True
                if batch.is_control_batch:
                    kind = struct.unpack(">hh", rec.key[:4])[1]
                    done = pending.pop(batch.producer_id, [])
                    if kind == _COMMIT:
                        log.committed.extend(done)
                        log.commit_markers += 1
                    else:
                        log.aborted += len(done)
                        log.abort_markers += 1
                elif batch.is_transactional:
                    pending.setdefault(batch.producer_id, []).append((rec.offset, rec.key, rec.value))
                else:
                    log.committed.append((rec.offset, rec.key, rec.value))
        if offset >= high or not moved:
            if offset >= high:
                break
            await asyncio.sleep(0.05)
    log.open = sum(len(v) for v in pending.values())
    log.committed.sort(key=lambda r: r[0])
    return log
