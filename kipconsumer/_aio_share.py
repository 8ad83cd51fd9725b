"""AsyncKafkaShareConsumer: ``KafkaShareConsumer`` for asyncio (exported by ``kipconsumer.aio``).

Every call runs the synchronous consumer's method on one worker thread of the consumer's own (so the
one-thread contract holds and the event loop never blocks); the methods are awaited.

Records reach the application only through a ``poll()`` that returns them. A cancelled ``poll()``
(``asyncio.wait_for`` timed out) loses no record: its worker call goes on, and the records it returns
are handed out by the next ``poll()``. Until then nothing accepts them: a commit, ``acknowledge()``,
``subscribe()`` or ``unsubscribe()`` first gives them back to the synchronous consumer (its next poll
returns them again), and ``close()`` releases them (RELEASE: the group delivers them again). After
``close()`` every call raises ``IllegalStateError``. A ``poll()`` that raised (``WakeupError``,
``IllegalStateError``) does not taint the next one. The acknowledgement commit callback runs on the
event loop of the call that served its outcome (the loop in use, not the one it was registered on).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any

from kipconsumer import _fork
from kipconsumer._records import ConsumerRecord, ConsumerRecords
from kipconsumer._timeouts import timeout_seconds
from kipconsumer.errors import IllegalStateError, KafkaError, WakeupError
from kipconsumer.share import AcknowledgementCommitCallback, AcknowledgeType, KafkaShareConsumer
from kipconsumer.structs import TopicPartition

log = logging.getLogger("kipconsumer.share")


class AsyncKafkaShareConsumer:
    """A share group member for asyncio; the same config and semantics as ``KafkaShareConsumer``."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self._sync = KafkaShareConsumer(config)
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kipconsumer-share")
        self._pending: asyncio.Future[ConsumerRecords] | None = None
        # (polls_started before it, records) of the worker's last poll while no poll() has handed them
        # out; guarded by _handoff (the worker sets and settles it, the loop claims it)
        self._unhanded: tuple[int, ConsumerRecords] | None = None
        self._handoff = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # of the latest call: the callback's loop
        self._closed = False
        self._foreign_pid: int | None = None  # set in a child made by fork()
        _fork.register(self)

    def _mark_foreign(self, pid: int) -> None:
        """In a child made by ``fork()``: every later call raises ``IllegalStateError`` (the sync consumer
        is foreign too). The worker thread did not survive the fork: its executor (whose locks a
        parent's thread may have held) is left alone and replaced, so that nothing waits on it."""
        self._foreign_pid = pid
        self._pending = None
        self._unhanded = None
        self._handoff = threading.Lock()
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kipconsumer-share")

    @property
    def consumer(self) -> KafkaShareConsumer:
        """The synchronous consumer underneath (call it only through this object)."""
        return self._sync

    def _check_usable(self, method: str) -> None:
        if self._foreign_pid is not None:
            raise _fork.foreign_error("AsyncKafkaShareConsumer", self._foreign_pid)
        if self._closed:
            raise IllegalStateError(f"{method}() called on a closed AsyncKafkaShareConsumer")

    async def _call(self, method: str, fn: Any, *args: Any) -> Any:
        """Runs ``fn(*args)`` on the worker after giving back the records of a poll nobody took."""
        self._check_usable(method)
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._pending = None  # a poll still running is settled on the worker before fn

        def settled() -> Any:
            self._settle()
            return fn(*args)

        return await loop.run_in_executor(self._worker, settled)

    def _settle(self) -> int:
        """Worker thread: the records of the last worker poll that no ``poll()`` handed out go back to
        the synchronous consumer (its next poll returns them; nothing accepts them before)."""
        with self._handoff:
            unhanded, self._unhanded = self._unhanded, None
        if unhanded is None:
            return 0
        return self._sync._give_back(unhanded[0])

    def _poll_on_worker(self, timeout: float | None) -> ConsumerRecords:
        self._settle()
        since = self._sync._native.polls_started
        records: ConsumerRecords = self._sync.poll(timeout)
        if records:
            with self._handoff:
                self._unhanded = (since, records)
        return records

    def _claim(self, records: ConsumerRecords) -> bool:
        """Loop: True if ``records`` (a worker poll's) may go to the application, False if a call
        gave them back meanwhile (the next worker poll returns them again)."""
        if not records:
            return True
        with self._handoff:
            if self._unhanded is not None and self._unhanded[1] is records:
                self._unhanded = None
                return True
        return False

    async def subscribe(self, topics: Iterable[str]) -> None:
        """See ``KafkaShareConsumer.subscribe``."""
        await self._call("subscribe", self._sync.subscribe,
                         list(topics) if not isinstance(topics, str) else topics)

    async def unsubscribe(self) -> None:
        """See ``KafkaShareConsumer.unsubscribe``."""
        await self._call("unsubscribe", self._sync.unsubscribe)

    async def poll(self, timeout: float | None = 1.0) -> ConsumerRecords:
        """See ``KafkaShareConsumer.poll``; cancellation-safe (module docstring)."""
        while True:
            self._check_usable("poll")
            loop = asyncio.get_running_loop()
            pending = self._pending
            if pending is not None and pending.get_loop() is not loop:
                pending = None  # started on an event loop that has ended: its records were settled
            if pending is None:
                self._loop = loop
                pending = self._pending = loop.create_task(self._worker_poll(loop, timeout))
            try:
                records: ConsumerRecords = await asyncio.shield(pending)
            except asyncio.CancelledError:
                if pending.done() and self._pending is pending:
                    self._pending = None
                raise
            except WakeupError:
                if self._pending is pending:
                    self._pending = None
                if self._closed:
                    raise IllegalStateError("poll() ended by close()") from None
                raise
            except BaseException:
                if self._pending is pending:
                    self._pending = None
                raise
            if self._pending is pending:
                self._pending = None
            if self._claim(records):
                return records
            # a commit, acknowledge() or close() took them back first: the next worker poll returns them

    async def _worker_poll(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> ConsumerRecords:
        records: ConsumerRecords = await loop.run_in_executor(self._worker, self._poll_on_worker, timeout)
        return records

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            for record in await self.poll(1.0):
                yield record

    async def acknowledge(self, record: ConsumerRecord,
                          type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """See ``KafkaShareConsumer.acknowledge`` (runs on the worker, after a pending poll)."""
        await self._call("acknowledge", self._sync.acknowledge, record, type)

    async def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        """See ``KafkaShareConsumer.commit_sync``."""
        result: dict[TopicPartition, KafkaError | None] = await self._call(
            "commit_sync", self._sync.commit_sync, timeout)
        return result

    commit = commit_sync

    async def commit_async(self, callback: AcknowledgementCommitCallback | None = None) -> None:
        """See ``KafkaShareConsumer.commit_async``. ``callback`` runs on the event loop of the call that
        serves the outcome (the consumer's worker thread serves them in a later call and schedules the
        callback with ``call_soon_threadsafe``), also after the loop it was registered on has ended; an
        exception it raises goes to the loop's exception handler. An outcome served while that loop is
        closing is dropped with a warning on the ``kipconsumer.share`` logger."""
        if callback is not None:
            if not callable(callback):
                raise TypeError("callback must be callable(offsets, exception)")

            def on_loop(offsets: dict[TopicPartition, set[int]], exc: KafkaError | None) -> None:
                loop = self._loop
                try:
                    if loop is None:
                        raise RuntimeError("no event loop")
                    loop.call_soon_threadsafe(callback, offsets, exc)
                except RuntimeError:  # the loop is closed
                    log.warning("AsyncKafkaShareConsumer: acknowledgement commit outcome %s (%s) dropped: "
                                "the event loop of the call that served it is closed", offsets, exc)

            await self._call("commit_async", self._sync.commit_async, on_loop)
        else:
            await self._call("commit_async", self._sync.commit_async)

    def wakeup(self) -> None:
        """Makes a pending or the next ``poll()`` raise ``WakeupError``."""
        self._sync.wakeup()

    def metrics(self) -> dict[str, Any]:
        return self._sync.metrics()

    async def close(self, timeout: float | None = None) -> None:
        """See ``KafkaShareConsumer.close``; a pending ``poll()`` ends first, and the records of a poll
        that no ``poll()`` handed out are released, not accepted. A second call does nothing."""
        if self._foreign_pid is not None:
            raise _fork.foreign_error("AsyncKafkaShareConsumer", self._foreign_pid)
        seconds = timeout_seconds(timeout, self._sync.settings.default_api_timeout_ms)
        loop = asyncio.get_running_loop()
        if self._closed:  # again, or after a close() that raised: the synchronous close does what is left
            await loop.run_in_executor(None, self._sync.close, timeout)
            return
        self._loop = loop
        self._closed = True
        pending, self._pending = self._pending, None
        try:
            if pending is not None and not pending.done():
                self._sync.wakeup()  # the worker's poll returns within a slice
            settle = loop.run_in_executor(self._worker, self._settle)
            done, _ = await asyncio.wait({settle}, timeout=None if seconds == float("inf") else seconds)
            if not done:
                log.warning("AsyncKafkaShareConsumer.close(): the worker's poll did not end in %.1f s; "
                            "closing without it", seconds)
            self._sync._wakeup = False
            await loop.run_in_executor(None, self._sync.close, timeout)
        finally:
            self._worker.shutdown(wait=False)
            if pending is not None and pending.done() and not pending.cancelled():
                pending.exception()  # retrieved: a WakeupError of close()'s own making is no news

    async def __aenter__(self) -> AsyncKafkaShareConsumer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
