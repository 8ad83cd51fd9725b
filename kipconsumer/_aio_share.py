"""AsyncKafkaShareConsumer: ``KafkaShareConsumer`` for asyncio (exported by ``kipconsumer.aio``).

Every call runs the synchronous consumer's method on one worker thread of the consumer's own (so the
one-thread contract holds and the event loop never blocks); the methods are awaited.
Cancelling a pending ``poll()`` loses no record: the records its worker call returned are kept and
handed out by the next ``poll()`` (and, in implicit mode, accepted only after that).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any

from kipconsumer._records import ConsumerRecord, ConsumerRecords
from kipconsumer.errors import KafkaError
from kipconsumer.share import AcknowledgeType, KafkaShareConsumer
from kipconsumer.structs import TopicPartition


class AsyncKafkaShareConsumer:
    """A share group member for asyncio; the same config and semantics as ``KafkaShareConsumer``."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self._sync = KafkaShareConsumer(config)
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kipconsumer-share")
        self._pending: asyncio.Future[ConsumerRecords] | None = None

    @property
    def consumer(self) -> KafkaShareConsumer:
        """The synchronous consumer underneath (call it only through this object)."""
        return self._sync

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    async def subscribe(self, topics: Iterable[str]) -> None:
        """See ``KafkaShareConsumer.subscribe``."""
        await self._call(self._sync.subscribe, list(topics) if not isinstance(topics, str) else topics)

    async def poll(self, timeout: float | None = 1.0) -> ConsumerRecords:
        """See ``KafkaShareConsumer.poll``; cancellation-safe (module docstring)."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._call(self._sync.poll, timeout))
        pending = self._pending
        records: ConsumerRecords = await asyncio.shield(pending)
        self._pending = None
        return records

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            for record in await self.poll(1.0):
                yield record

    async def acknowledge(self, record: ConsumerRecord,
                          type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """See ``KafkaShareConsumer.acknowledge`` (runs on the worker, after a pending poll)."""
        await self._call(self._sync.acknowledge, record, type)

    async def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        """See ``KafkaShareConsumer.commit_sync``."""
        result: dict[TopicPartition, KafkaError | None] = await self._call(self._sync.commit_sync, timeout)
        return result

    commit = commit_sync

    async def commit_async(self) -> None:
        """See ``KafkaShareConsumer.commit_async``."""
        await self._call(self._sync.commit_async)

    def wakeup(self) -> None:
        """Makes a pending or the next ``poll()`` raise ``WakeupError``."""
        self._sync.wakeup()

    def metrics(self) -> dict[str, Any]:
        return self._sync.metrics()

    async def close(self, timeout: float | None = None) -> None:
        """See ``KafkaShareConsumer.close``; a pending ``poll()`` returns first."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._sync.close, timeout)
        finally:
            self._worker.shutdown(wait=False)

    async def __aenter__(self) -> AsyncKafkaShareConsumer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
