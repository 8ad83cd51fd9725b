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

from kipconsumer import _fork
from kipconsumer._records import ConsumerRecord, ConsumerRecords
from kipconsumer.errors import KafkaError
from kipconsumer.share import AcknowledgementCommitCallback, AcknowledgeType, KafkaShareConsumer
from kipconsumer.structs import TopicPartition


class AsyncKafkaShareConsumer:
    """A share group member for asyncio; the same config and semantics as ``KafkaShareConsumer``."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self._sync = KafkaShareConsumer(config)
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kipconsumer-share")
        self._pending: asyncio.Future[ConsumerRecords] | None = None
        self._foreign_pid: int | None = None  # set in a child made by fork()
        _fork.register(self)

    def _mark_foreign(self, pid: int) -> None:
        """In a child made by ``fork()``: every later call raises ``IllegalStateError`` (the sync consumer
        is foreign too). The worker thread did not survive the fork: its executor (whose locks a
        parent's thread may have held) is left alone and replaced, so that nothing waits on it."""
        self._foreign_pid = pid
        self._pending = None
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kipconsumer-share")

    @property
    def consumer(self) -> KafkaShareConsumer:
        """The synchronous consumer underneath (call it only through this object)."""
        return self._sync

    async def _call(self, fn: Any, *args: Any) -> Any:
        if self._foreign_pid is not None:
            raise _fork.foreign_error("AsyncKafkaShareConsumer", self._foreign_pid)
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

    async def commit_async(self, callback: AcknowledgementCommitCallback | None = None) -> None:
        """See ``KafkaShareConsumer.commit_async``. ``callback`` runs on the event loop (scheduled with
        ``call_soon_threadsafe`` from the consumer's worker thread, which serves the outcomes in a later
        call); an exception it raises goes to the loop's exception handler."""
        if callback is not None:
            if not callable(callback):
                raise TypeError("callback must be callable(offsets, exception)")
            loop = asyncio.get_running_loop()

            def on_loop(offsets: dict[TopicPartition, set[int]], exc: KafkaError | None) -> None:
                loop.call_soon_threadsafe(callback, offsets, exc)

            await self._call(self._sync.commit_async, on_loop)
        else:
            await self._call(self._sync.commit_async)

    def wakeup(self) -> None:
        """Makes a pending or the next ``poll()`` raise ``WakeupError``."""
        self._sync.wakeup()

    def metrics(self) -> dict[str, Any]:
        return self._sync.metrics()

    async def close(self, timeout: float | None = None) -> None:
        """See ``KafkaShareConsumer.close``; a pending ``poll()`` returns first."""
        if self._foreign_pid is not None:
            raise _fork.foreign_error("AsyncKafkaShareConsumer", self._foreign_pid)
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._sync.close, timeout)
        finally:
            self._worker.shutdown(wait=False)

    async def __aenter__(self) -> AsyncKafkaShareConsumer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
