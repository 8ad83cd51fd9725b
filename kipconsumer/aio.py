"""asyncio clients driven by the event loop itself: no thread per call, no executor for polling.

:class:`AsyncKafkaConsumer` registers the native consumer's eventfd with the running loop
(``loop.add_reader``). ``await poll()`` drains the fetch buffer without waiting
(``KafkaConsumer.poll(0)``: the same KIP-41 cap and fairness) and, when nothing is buffered,
awaits that fd: librdkafka signals it when records, rebalance or error events or commit
results arrive, ``wakeup()`` signals it too. Heartbeats come from librdkafka's native threads,
so a loop blocked by user code keeps its membership for ``max.poll.interval.ms`` (KIP-62,
counted between the application's ``poll()`` calls as in the sync client).

:class:`AsyncKafkaProducer` enqueues without blocking the loop and completes each record's
asyncio future from delivery reports, handed to the loop in batches (one
``call_soon_threadsafe`` per batch of reports, not one per record). A ``send()`` that must wait
for topic metadata (once per topic, on a worker thread) or buffer space (on the loop) waits
without blocking the loop, bounded by ``max.block.ms``, and records keep their order.

Rebalance listeners run on the loop's thread, inside ``poll()``. A listener method may be a
coroutine function: it is run to completion inside the rebalance, so it may await this
module's ``commit()``, ``flush()`` and ``send()`` (they complete synchronously there), but
awaiting anything that needs the loop to run (``asyncio.sleep``, I/O) raises
``IllegalStateError``: the rebalance cannot complete until the listener returns.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import math
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from types import TracebackType
from typing import Any

from kipconsumer import _fork
from kipconsumer._records import ConsumerRecord, ConsumerRecords
from kipconsumer._timeouts import timeout_seconds
from kipconsumer.consumer import KafkaConsumer, RebalanceListener
from kipconsumer.errors import IllegalStateError, KafkaTimeoutError
from kipconsumer.producer import KafkaProducer
from kipconsumer.structs import OffsetAndMetadata, RecordMetadata, TopicPartition

__all__ = ["AsyncKafkaConsumer", "AsyncKafkaProducer", "AsyncKafkaShareConsumer"]

# Longest a waiting coroutine sleeps before it looks again without a wake-up: state that no
# fd signals (a heartbeat ending the rebalance barrier, a delivery-timeout expiry) is seen
# within this.
_RECHECK_S = 0.1
# poll() lets the loop run other tasks at least this often, even when records are always ready.
_YIELD_EVERY_S = 0.001

# True while a rebalance listener runs: the clients' coroutines then complete synchronously.
_in_rebalance: contextvars.ContextVar[bool] = contextvars.ContextVar("kipconsumer_in_rebalance",
                                                                    default=False)


def _run_listener_coroutine(awaitable: Awaitable[Any], name: str) -> None:
    """Runs a listener's coroutine to completion without the loop, or raises IllegalStateError (also
    when closing the coroutine raises: that exception is its ``__cause__``, never a replacement)."""
    steps = awaitable.__await__()
    try:
        waited_for = steps.send(None)
    except StopIteration:
        return
    error = IllegalStateError(
        f"async rebalance listener {name}() awaited {waited_for!r}, which needs the event loop to run; "
        f"inside a rebalance a listener may only await kipconsumer's own commit(), flush() and send() "
        f"(they complete synchronously there). Start other work with asyncio.create_task() instead.")
    try:
        steps.close()  # runs the coroutine's except/finally blocks
    except BaseException as exc:  # what they raised must not replace the error above
        raise IllegalStateError(f"{error} Closing the coroutine then raised {type(exc).__name__}: {exc}") \
            from exc
    raise error


class _ListenerOnLoop:
    """Calls the user's listener (sync or async methods) with the clients in synchronous mode."""

    def __init__(self, listener: Any) -> None:
        self._listener = listener
        if hasattr(listener, "on_partitions_lost"):
            self.on_partitions_lost = partial(self._call, "on_partitions_lost")

    def _call(self, name: str, partitions: list[TopicPartition]) -> None:
        method = getattr(self._listener, name, None)
        if method is None:
            return
        token = _in_rebalance.set(True)
        try:
            result = method(partitions)
            if isinstance(result, Awaitable):
                _run_listener_coroutine(result, name)
        finally:
            _in_rebalance.reset(token)

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self._call("on_partitions_revoked", partitions)

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self._call("on_partitions_assigned", partitions)


class _Wakeups:
    """Coroutines waiting for the next event of some kind, each at most its timeout (loop thread only)."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def wake_all(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            _resolve(fut)

    async def wait(self, timeout: float) -> None:
        """Returns at the next wake_all() or after ``timeout`` seconds, whichever comes first."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiters.append(fut)
        handle = loop.call_later(max(0.0, timeout), _resolve, fut)
        try:
            await fut
        finally:
            handle.cancel()
            if fut in self._waiters:
                self._waiters.remove(fut)


class _FdWaiter(_Wakeups):
    """One reader on an eventfd for a loop; wakes every coroutine waiting for activity on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        super().__init__()
        self.loop = loop
        self.fd = fd
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            os.read(self.fd, 8)  # reset the eventfd's counter (non-blocking fd)
        except (BlockingIOError, InterruptedError):
            pass
        self.wake_all()

    def detach(self) -> None:
        if not self.loop.is_closed():
            self.loop.remove_reader(self.fd)
        self.wake_all()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class AsyncKafkaConsumer:
    """A :class:`~kipconsumer.KafkaConsumer` whose waits are awaited on the running event loop.

    Same ``config`` as ``KafkaConsumer``. Use it from one event loop (its thread); ``wakeup()``
    is safe from any thread. Non-waiting methods (``subscribe``, ``assign``, ``seek``, ``pause``,
    ``assignment``, ``metrics``, ...) are the sync consumer's. Methods that ask the broker and
    wait for its answer (``committed``, ``position``, ``partitions_for``, ``beginning_offsets``,
    ``end_offsets``) are the sync consumer's too and block the loop for at most their timeout.
    """

    def __init__(self, config: Mapping[str, object]) -> None:
        self._consumer = KafkaConsumer(config)
        self._waiter: _FdWaiter | None = None
        self._batch: ConsumerRecords | list[ConsumerRecord] | None = None  # being handed out by ``async for``
        self._batch_next = 0
        self._last_yield = 0.0  # loop.time() when poll() last let the loop run other tasks
        _fork.register(self)

    def _mark_foreign(self, pid: int) -> None:
        """In a child made by ``fork()``: the reader on the parent's loop is dropped, not removed (the
        epoll instance is shared with the parent); calls raise ``IllegalStateError`` (the sync
        consumer is foreign too)."""
        self._waiter = None
        self._batch = None

    # -- the loop's reader ---------------------------------------------------------------------
    def _fd_waiter(self) -> _FdWaiter:
        loop = asyncio.get_running_loop()
        waiter = self._waiter
        if waiter is None or waiter.loop is not loop or loop.is_closed():
            if waiter is not None:
                waiter.detach()
            fd = self._consumer._wake_fd()
            if fd < 0:
                raise IllegalStateError("This consumer has already been closed.")
            waiter = self._waiter = _FdWaiter(loop, fd)
        return waiter

    @property
    def consumer(self) -> KafkaConsumer:
        """The underlying sync consumer (same object, same state)."""
        return self._consumer

    # -- group membership and assignment (no waiting) -----------------------------------------
    def subscribe(self, topics: Iterable[str], listener: RebalanceListener | Any | None = None) -> None:
        """As ``KafkaConsumer.subscribe``; listener methods may be ``async def`` (see the module)."""
        self._consumer.subscribe(topics, None if listener is None else _ListenerOnLoop(listener))

    def unsubscribe(self) -> None:
        self._batch = None
        self._consumer.unsubscribe()

    def subscription(self) -> set[str]:
        return self._consumer.subscription()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._batch = None
        self._consumer.assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._drop_unhanded(partition)
        self._consumer.seek(partition, offset)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._consumer.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._consumer.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        return self._consumer.paused()

    def committed(self, partitions: Iterable[TopicPartition],
                  timeout: float | None = None) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._consumer.committed(partitions, timeout)

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        return self._consumer.position(partition, timeout)

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        """``KafkaConsumer.partitions_for`` (blocks the loop for the topic's metadata, at most
        ``timeout``)."""
        return self._consumer.partitions_for(topic, timeout)

    def current_lag(self, partition: TopicPartition) -> int | None:
        """``KafkaConsumer.current_lag``: no request, never blocks."""
        return self._consumer.current_lag(partition)

    def metrics(self) -> dict[str, Any]:
        return self._consumer.metrics()

    def member_id(self) -> str | None:
        return self._consumer.member_id()

    def wakeup(self) -> None:
        """Makes a pending ``poll()``, or the next one, raise ``WakeupError``. Any thread."""
        self._consumer.wakeup()

    @property
    def closed(self) -> bool:
        return self._consumer.closed

    # -- polling --------------------------------------------------------------------------------
    async def poll(self, timeout: float | None = 1.0) -> ConsumerRecords:
        """At most ``max.poll.records`` records, awaiting up to ``timeout`` seconds for the first.

        ``timeout`` as in ``KafkaConsumer.poll`` (``math.inf``: until records, ``wakeup()`` or
        cancellation). Cancelling a pending ``poll()`` hands out nothing: records arriving meanwhile
        stay buffered for the next call. Listeners run inside it, on the loop's thread.
        """
        secs = timeout_seconds(timeout, self._consumer.settings.default_api_timeout_ms)
        if self._batch is not None:
            raise IllegalStateError("poll() called while `async for` over this consumer is handing out "
                                    "a batch; use one or the other")
        return await self._poll(secs)

    async def _poll(self, secs: float) -> ConsumerRecords:
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + secs
        waiter = self._fd_waiter()
        if now - self._last_yield >= _YIELD_EVERY_S:
            # Records may be ready on every call: without this, a consumer that keeps up would
            # never let the loop run its other tasks (their lag would grow with the backlog).
            await asyncio.sleep(0)
            self._last_yield = loop.time()
        while True:
            records = self._consumer.poll(0)
            if len(records):
                return records
            left = deadline - loop.time()
            if left <= 0:
                return records
            await waiter.wait(min(left, _RECHECK_S))
            self._last_yield = loop.time()

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record, polling (without a bound) as needed; ``commit()`` with no offsets then
        commits only what was handed out."""
        batch = self._batch
        while batch is None or self._batch_next >= len(batch):
            self._batch = None
            batch = await self._poll(math.inf)
            self._batch, self._batch_next = batch, 0
        record = batch[self._batch_next]
        self._batch_next += 1
        return record

    def _drop_unhanded(self, partition: TopicPartition) -> None:
        """A seek discards the records of ``partition`` that ``async for`` has not handed out."""
        batch = self._batch
        if batch is not None and self._batch_next < len(batch):
            self._batch = [r for r in list(batch)[self._batch_next:]
                           if (r.topic, r.partition) != (partition.topic, partition.partition)]
            self._batch_next = 0

    def _handed_out_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Positions of the records handed out: as the sync consumer's, except that a batch that
        ``async for`` has not finished counts only up to its last record handed out."""
        offsets = {tp: OffsetAndMetadata(off) for tp, off in self._consumer._positions().items()}
        batch = self._batch
        if batch is not None and self._batch_next < len(batch):
            for record in list(batch)[self._batch_next:]:
                tp = TopicPartition(record.topic, record.partition)
                if tp not in offsets or record.offset < offsets[tp].offset:
                    offsets[tp] = OffsetAndMetadata(record.offset)
        return offsets

    # -- commits --------------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     timeout: float | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """``commit_sync``'s semantics without blocking the loop: commits ``offsets`` (default: the
        positions of the records handed out) and returns them once the broker accepted them.
        Raises what ``commit_sync`` raises (``CommitFailedError``, ``RebalanceInProgressError``,
        ``KafkaTimeoutError`` past ``timeout``, default ``default.api.timeout.ms``)."""
        offs = self._handed_out_offsets() if offsets is None else offsets
        if _in_rebalance.get():
            return self._consumer.commit_sync(offs, timeout)
        secs = timeout_seconds(timeout, self._consumer.settings.default_api_timeout_ms)
        loop = asyncio.get_running_loop()
        result: asyncio.Future[dict[TopicPartition, OffsetAndMetadata]] = loop.create_future()

        def done(committed: dict[TopicPartition, OffsetAndMetadata], exc: Exception | None) -> None:
            if result.done():
                return
            if exc is not None:
                result.set_exception(exc)
            else:
                result.set_result(committed)

        waiter = self._fd_waiter()
        self._consumer.commit_async(offs, done)
        deadline = loop.time() + secs
        while not result.done():
            self._consumer._serve_commits()
            if result.done():
                break
            left = deadline - loop.time()
            if left <= 0:
                result.cancel()
                raise KafkaTimeoutError(f"commit() did not complete within {secs:.3f} s")
            await waiter.wait(min(left, _RECHECK_S))
        return result.result()

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: Callable[[dict[TopicPartition, OffsetAndMetadata], Exception | None], Any]
                     | None = None) -> None:
        """Starts a commit; ``callback(offsets, exception)`` runs on the loop in a later ``poll()`` or
        ``commit()``. A coroutine function as callback is scheduled as a task."""
        cb = callback
        if callback is not None and inspect.iscoroutinefunction(callback):
            async_cb = callback

            def cb(offs: dict[TopicPartition, OffsetAndMetadata], exc: Exception | None) -> None:
                asyncio.get_running_loop().create_task(async_cb(offs, exc))

        self._consumer.commit_async(self._handed_out_offsets() if offsets is None else offsets, cb)

    # -- closing --------------------------------------------------------------------------------
    async def close(self, timeout: float | None = None) -> None:
        """Commits (with auto-commit), leaves the group and frees the consumer, as
        ``KafkaConsumer.close``; listeners run on the loop. The leave is a single round trip, so
        this runs synchronously on the loop, bounded by ``timeout``."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.detach()
        self._batch = None
        self._consumer.close(timeout)

    async def __aenter__(self) -> AsyncKafkaConsumer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __del__(self) -> None:
        if not getattr(self, "_consumer", None) or self._consumer.closed:
            return
        warnings.warn(f"unclosed {self!r}: call `await consumer.close()`", ResourceWarning, stacklevel=1)

    def __repr__(self) -> str:
        inner = getattr(self, "_consumer", None)
        return f"<AsyncKafkaConsumer {inner!r}>"


# A send waiting to be enqueued: topic, value, key, partition, headers, timestamp, its future, deadline.
_Send = tuple[str, Any, Any, Any, Any, Any, "asyncio.Future[RecordMetadata]", float]


class AsyncKafkaProducer:
    """A :class:`~kipconsumer.KafkaProducer` whose sends, flush and close are awaited on the loop.

    Same ``config`` and KIP-19 bounds as ``KafkaProducer``. ``send()`` returns an asyncio future of
    the record's :class:`RecordMetadata` (``md = await p.send(...)``); every future resolves,
    with the delivery error as exception if the record failed. Cancelling an awaiter does not
    unsend its record: its delivery is still reported to the producer's metrics.

    One loop at a time: a loop that calls ``send()``, ``flush()`` or ``close()`` while another loop
    that used the producer is running gets ``IllegalStateError``. A loop may take over from one that
    ended (``asyncio.run()`` after ``asyncio.run()``): it carries on what the old one left (sends
    waiting for metadata or buffer space are enqueued, delivery reports handed over), so ``flush()``
    and ``close()`` never wait for work no loop would do.
    """

    def __init__(self, config: Mapping[str, object], *, key_serializer: Callable[[Any], Any] | None = None,
                 value_serializer: Callable[[Any], Any] | None = None) -> None:
        self._producer = KafkaProducer(config)
        # the same producer, for the calls that must fail as AsyncKafkaProducer's in a forked child
        self._sync = self._producer
        self._max_block_s = self._producer._settings.max_block_ms / 1000.0
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._loop: asyncio.AbstractEventLoop | None = None
        # (future, metadata, exception) from the delivery thread, drained on the loop
        self._reports: collections.deque[tuple[asyncio.Future[RecordMetadata], Any, Any]]
        self._reports = collections.deque()
        self._drain_scheduled = False
        self._deliveries = _Wakeups()  # send()/flush() waiting for deliveries
        self._backlog: collections.deque[_Send] = collections.deque()  # sends waiting to be enqueued
        self._backlog_task: asyncio.Task[None] | None = None
        self._loop_closed_warned = False
        self._foreign_pid: int | None = None  # set in a child made by fork()
        _fork.register(self)

    def _mark_foreign(self, pid: int) -> None:
        """In a child made by ``fork()``: every later call raises ``IllegalStateError`` (the sync producer
        is foreign too); what the parent had queued is its own business."""
        self._sync = _fork.ForeignHandle("AsyncKafkaProducer", pid)  # type: ignore[assignment]
        self._foreign_pid = pid
        self._loop = None
        self._reports = collections.deque()
        self._backlog = collections.deque()
        self._backlog_task = None

    @property
    def producer(self) -> KafkaProducer:
        """The underlying sync producer (same object, same state)."""
        return self._producer

    # -- delivery reports -> futures ------------------------------------------------------------
    def _on_delivery(self, fut: asyncio.Future[RecordMetadata], md: Any, exc: Any) -> None:
        """Runs on the producer's delivery thread: queue the report, wake the loop once per batch."""
        self._reports.append((fut, md, exc))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            loop = self._loop
            try:
                if loop is not None:
                    loop.call_soon_threadsafe(self._drain_reports)
            except RuntimeError:  # the loop was closed with this producer still open
                self._drain_scheduled = False
                if not self._loop_closed_warned:
                    self._loop_closed_warned = True
                    warnings.warn("AsyncKafkaProducer: its event loop was closed before the producer; its "
                                  "delivery reports wait for the next loop that uses the producer (close "
                                  "the producer before the loop)", RuntimeWarning, stacklevel=1)

    def _drain_reports(self) -> None:
        self._drain_scheduled = False
        reports = self._reports
        while reports:
            fut, md, exc = reports.popleft()
            if fut.done():  # the awaiter was cancelled: nothing to hand over
                continue
            try:
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.set_result(md)
            except RuntimeError:  # a future of a closed loop with done-callbacks: no one can run them
                pass
        self._deliveries.wake_all()

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, which becomes the producer's. The producer belongs to one loop at a time:
        while another loop that used it runs (in another thread), raises ``IllegalStateError``. A loop
        taking over from one that is no longer running carries on what that one left: its delivery
        reports are handed over at once (their futures belong to the old loop), its sends still
        waiting to be enqueued are enqueued by this loop, in order."""
        loop = asyncio.get_running_loop()
        old = self._loop
        if old is loop:
            return loop
        if self._foreign_pid is not None:
            raise _fork.foreign_error("AsyncKafkaProducer", self._foreign_pid)
        if old is not None and not old.is_closed() and old.is_running():
            raise IllegalStateError(
                f"AsyncKafkaProducer is in use by another running event loop ({old!r}); it belongs to one "
                f"loop at a time: use it from that loop (asyncio.run_coroutine_threadsafe) or give each "
                f"loop its own producer")
        self._loop = loop
        self._deliveries = _Wakeups()  # waiters of the old loop are gone with it
        if self._reports:
            self._drain_reports()
        task = self._backlog_task
        if self._backlog and (task is None or task.done() or task.get_loop() is not loop):
            self._backlog_task = loop.create_task(self._send_backlog())
        return loop

    # -- sending ----------------------------------------------------------------------------------
    def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
             headers: Any = None, timestamp: int | None = None) -> asyncio.Future[RecordMetadata]:
        """Enqueues a record and returns the future of its metadata (``await`` it for delivery).

        Arguments as ``KafkaProducer.send``; invalid ones raise at once. If the record cannot be
        enqueued at once (first send to a topic: metadata; buffer full), it waits without blocking
        the loop, at most ``max.block.ms``, and the future fails with ``KafkaTimeoutError`` after
        that; records sent later are enqueued after it (order is kept)."""
        loop = self._bind_loop()
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None and value is not None:
            value = self._value_serializer(value)
        fut: asyncio.Future[RecordMetadata] = loop.create_future()
        if _in_rebalance.get():
            self._sync.send(topic, value, key, partition, headers, timestamp, partial(self._on_delivery, fut))
            return fut
        if not self._backlog:
            try:
                self._sync._send_nowait(topic, value, key, partition, headers, timestamp,
                                        partial(self._on_delivery, fut))
                return fut
            except KafkaTimeoutError:
                pass  # would block: wait for it below, without blocking the loop
        self._backlog.append((topic, value, key, partition, headers, timestamp, fut,
                              loop.time() + self._max_block_s))
        if self._backlog_task is None or self._backlog_task.done():
            self._backlog_task = loop.create_task(self._send_backlog())
        return fut

    async def _send_backlog(self) -> None:
        """Enqueues waiting sends in order, each within its max.block.ms."""
        loop = asyncio.get_running_loop()
        while self._backlog:
            topic, value, key, partition, headers, timestamp, fut, deadline = self._backlog[0]
            while True:
                try:
                    self._sync._send_nowait(topic, value, key, partition, headers, timestamp,
                                            partial(self._on_delivery, fut))
                    break
                except KafkaTimeoutError as e:
                    left = deadline - loop.time()
                    if left <= 0:
                        if not fut.done():
                            try:
                                fut.set_exception(KafkaTimeoutError(
                                    f"send() to topic {topic!r} could not be enqueued within max.block.ms="
                                    f"{self._max_block_s * 1000:.0f} ms: {e}", code=e.code))
                            except RuntimeError:  # a future of a closed loop (see _bind_loop)
                                pass
                        break
                    if e.code == "_QUEUE_FULL":  # deliveries free buffer space
                        await self._deliveries.wait(min(left, 0.02))
                    else:
                        # the topic's first metadata: one blocking lookup on a worker thread (the
                        # producer is thread-safe); send() then finds the topic known
                        lookup = loop.run_in_executor(None, self._sync.partitions_for, topic)
                        try:
                            await asyncio.wait_for(asyncio.shield(lookup), left)
                        except (asyncio.TimeoutError, KafkaTimeoutError):
                            pass  # the next attempt reports the timeout, or succeeds
                        except Exception:  # e.g. AuthenticationError: the next attempt raises it at once
                            pass
                except asyncio.CancelledError:
                    raise  # the loop is shutting down: the record stays first, for the next loop
                except BaseException as e:
                    if not fut.done():
                        try:
                            fut.set_exception(e)
                        except RuntimeError:  # a future of a closed loop (see _bind_loop)
                            pass
                    if not isinstance(e, Exception):
                        raise
                    break
            self._backlog.popleft()

    def partitions_for(self, topic: str) -> list[int]:
        """As ``KafkaProducer.partitions_for`` (may block the loop for the topic's metadata)."""
        return self._producer.partitions_for(topic)

    # -- flush / close ----------------------------------------------------------------------------
    async def flush(self, timeout: float | None = None) -> None:
        """Waits until every record sent before the call is completed, without blocking the loop.
        Raises ``KafkaTimeoutError`` past ``timeout`` (records stay pending)."""
        if _in_rebalance.get():
            self._producer.flush(timeout)
            return
        secs = math.inf if timeout is None else timeout_seconds(timeout, 0)
        loop = self._bind_loop()
        deadline = loop.time() + secs
        while True:
            if self._reports:  # e.g. queued while the old loop closed (its drain never ran)
                self._drain_reports()
            left_records = self._sync._flush_nowait() + len(self._backlog)
            if left_records == 0 and not self._reports:
                return
            left = deadline - loop.time()
            if left <= 0:
                raise KafkaTimeoutError(f"flush() timed out after {secs} s with {left_records} record(s) "
                                        f"still pending")
            await self._deliveries.wait(min(left, _RECHECK_S))

    async def close(self, timeout: float | None = None) -> None:
        """Flushes for at most ``timeout`` (None: ``delivery.timeout.ms`` + 1 s), then closes the
        producer as ``KafkaProducer.close``: what is still pending fails; every future is done.
        ``IllegalStateError`` in a child made by ``fork()`` (the producer is the parent's)."""
        if self._foreign_pid is not None:
            raise _fork.foreign_error("AsyncKafkaProducer", self._foreign_pid)
        if self._producer.closed:
            return
        secs = timeout_seconds(timeout, self._producer._settings.delivery_timeout_ms + 1000)
        loop = self._bind_loop()
        deadline = loop.time() + secs
        try:
            await self.flush(secs)
        except KafkaTimeoutError:
            pass
        for *_, fut, _deadline in self._backlog:
            if not fut.done():
                fut.set_exception(IllegalStateError("the producer was closed before the record was enqueued"))
        self._backlog.clear()
        self._producer.close(max(0.0, deadline - loop.time()))
        self._drain_reports()

    def metrics(self) -> dict[str, Any]:
        return self._producer.metrics()

    @property
    def closed(self) -> bool:
        return self._producer.closed

    async def __aenter__(self) -> AsyncKafkaProducer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __del__(self) -> None:
        producer = getattr(self, "_producer", None)
        if producer is None or producer.closed:
            return
        warnings.warn(f"unclosed {self!r}: call `await producer.close()`", ResourceWarning, stacklevel=1)

    def __repr__(self) -> str:
        return f"<AsyncKafkaProducer {getattr(self, '_producer', None)!r}>"


from kipconsumer._aio_share import AsyncKafkaShareConsumer  # noqa: E402  (KIP-932)
