"""KafkaConsumer: the typed Python facade over the native consumer core.

The contract (see docs/consumer.md and API.md):

- ``poll()`` returns at most ``max.poll.records`` records, shared fairly over the
  partitions with buffered data (``poll.fairness``), each partition in offset order.
- Commits and ``position()`` use the records *returned* by ``poll()``, never what was
  only fetched.
- Rebalance listeners run inside ``poll()`` on the caller's thread; a revoked
  partition's buffered records are dropped before ``on_partitions_revoked`` returns.
- KIP-62: librdkafka's threads heartbeat whatever Python does; if ``poll()`` is not
  called within ``max.poll.interval.ms`` the member leaves the group, a commit raises
  ``CommitFailedError`` and the next ``poll()`` rejoins.
- Threads (as in Java): one thread at a time. A call from a second thread while a call is in
  progress raises ``ConcurrentAccessError``; ``wakeup()``, ``close()`` and ``metrics()`` may be
  called from any thread at any moment. Callbacks run on the calling thread and may call the
  consumer again (see docs/reliability.md, "Threads and callbacks").
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kipconsumer import _fork
from kipconsumer._consumer import NativeConsumer
from kipconsumer._owned import OwnerThread, owned
from kipconsumer._rebootstrap import BrokerWatchdog
from kipconsumer._records import ConsumerRecord, ConsumerRecords
from kipconsumer._timeouts import timeout_seconds
from kipconsumer._validate import check_topic_name
from kipconsumer.config import ConsumerSettings, consumer_settings
from kipconsumer.errors import IllegalStateError, UnsupportedVersionError
from kipconsumer.structs import ConsumerGroupMetadata, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

# librdkafka's logical offsets
OFFSET_BEGINNING = -2
OFFSET_END = -1

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], "Exception | None"], None]


class RebalanceListener(Protocol):
    """Any object with these methods can be a listener (``on_partitions_lost`` optional)."""

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None: ...


_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


def _as_tp(obj: object, arg: str) -> TopicPartition:
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str) and isinstance(obj[1], int):
        topic, partition = obj
        if isinstance(partition, bool) or not 0 <= partition <= _INT32_MAX:
            raise ValueError(f"{arg}: partition must be an int in 0..{_INT32_MAX}, got {partition!r}")
        check_topic_name(topic, arg)
        return obj if isinstance(obj, TopicPartition) else TopicPartition(topic, partition)
    raise TypeError(f"{arg} must be a TopicPartition, got {type(obj).__name__}: {obj!r}")


def _tp_list(objs: Iterable[object], arg: str) -> list[TopicPartition]:
    if isinstance(objs, (str, bytes, TopicPartition)) or not isinstance(objs, Iterable):
        raise TypeError(f"{arg} must be a list of TopicPartition, got {type(objs).__name__}: {objs!r}")
    return [_as_tp(o, arg) for o in objs]


def _unique_tp_list(objs: Iterable[object], arg: str) -> list[TopicPartition]:
    tps = _tp_list(objs, arg)
    if len(set(tps)) != len(tps):
        seen: set[TopicPartition] = set()
        dup = next(tp for tp in tps if tp in seen or seen.add(tp))  # type: ignore[func-returns-value]
        raise ValueError(f"{arg}: {dup} is given more than once; name each partition once")
    return tps


def _as_offsets(offsets: Mapping[Any, Any]) -> dict[TopicPartition, OffsetAndMetadata]:
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must be a dict of TopicPartition -> OffsetAndMetadata, got {offsets!r}")
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, om in offsets.items():
        tp = _as_tp(tp, "offsets key")
        if isinstance(om, int) and not isinstance(om, bool):
            om = OffsetAndMetadata(om)
        if (not isinstance(om, OffsetAndMetadata) or not isinstance(om.offset, int)
                or isinstance(om.offset, bool) or not 0 <= om.offset <= _INT64_MAX
                or not isinstance(om.metadata, str)):
            raise ValueError(
                f"offsets[{tp}] must be an OffsetAndMetadata or int in 0..{_INT64_MAX} (the next offset to "
                f"consume; metadata a str), "
                f"got {om!r}"
            )
        out[tp] = om
    return out


log = logging.getLogger("kipconsumer.consumer")
_owned = owned  # runs a method as the consumer's one owner thread (kipconsumer._owned)


class KafkaConsumer:
    """A Kafka consumer with KIP-41 bounded, fair polls and KIP-62 liveness.

    ``config`` uses Kafka's Java names (``bootstrap.servers``, ``group.id``,
    ``max.poll.records``, ``poll.fairness``, ``max.poll.interval.ms``,
    ``session.timeout.ms``, ...); librdkafka property names pass through. Bad keys or
    values raise ``ConfigError``.

    One thread at a time: a call made while another thread's call is in progress raises
    ``ConcurrentAccessError`` at once (the first call goes on). ``wakeup()``, ``close()`` and
    ``metrics()`` may be called from any thread at any moment. Rebalance listeners and
    ``commit_async()`` callbacks run on the calling thread, inside ``poll()`` (or ``close()``,
    ``unsubscribe()``), and may call any method but ``poll()``, ``subscribe()``, ``unsubscribe()``,
    ``assign()`` and ``close()``, which raise ``IllegalStateError`` there.

    Not inherited through ``os.fork()``: in a child process every call (``close()`` included) raises
    ``IllegalStateError`` naming the process that created it, and the child leaves it alone
    (docs/producer.md).
    """

    def __init__(self, config: Mapping[str, object]) -> None:
        self._settings: ConsumerSettings = consumer_settings(config)
        s = self._settings
        self._native = NativeConsumer(s)
        native = self._native
        # librdkafka 2.16 can lose every broker for good after a 0-broker Metadata answer (a fenced
        # single node): poll() adds the bootstrap servers again then (kipconsumer._rebootstrap)
        self._watchdog = BrokerWatchdog(s.rdkafka.get("bootstrap.servers", ""), native.controller_id,
                                        native.add_brokers,
                                        lambda: bool(native.subscription()) and not native.assignment())
        self._auto_offset_reset = s.rdkafka.get("auto.offset.reset", "latest")
        # The thread contract (kipconsumer._owned, shared by every client): the owner thread holds the
        # native buffer for its call (the prefetch thread waits), and a close() of another thread may
        # leave the close to the owner's call (it runs when that call returns)
        self._thread = OwnerThread(
            "KafkaConsumer", "{method}() cannot be called: another thread is closing this consumer.",
            hold=native.hold, unhold=native.release, close=native.close)
        self._handed_since = 0  # _native.polls before the last poll() that returned records (_result_lost)
        self._protocol_checked = False  # group.protocol=consumer: the broker was seen to serve it
        _fork.register(self)

    def _mark_foreign(self, pid: int) -> None:
        """In a child made by ``fork()``: every later call raises ``IllegalStateError``; the inherited
        librdkafka handle (and the prefetch thread's state) is leaked, never closed here
        (kipconsumer._fork)."""
        native = self._native
        self._native = _fork.ForeignHandle("KafkaConsumer", pid)  # type: ignore[assignment]
        _fork.leak(native)
        self._thread.reset(refuse=functools.partial(_fork.foreign_error, "KafkaConsumer", pid))

    # -- helpers -------------------------------------------------------------------
    @property
    def settings(self) -> ConsumerSettings:
        """The validated configuration in effect."""
        return self._settings

    def _api_timeout(self, timeout: float | None) -> float:
        return timeout_seconds(timeout, self._settings.default_api_timeout_ms)

    # -- group membership ----------------------------------------------------------
    @_owned
    def subscribe(self, topics: Iterable[str], listener: RebalanceListener | None = None) -> None:
        """Joins the group (``group.id`` required) and consumes ``topics``."""
        if isinstance(topics, str):
            topics = [topics]
        names = list(topics)
        if not names or not all(isinstance(t, str) and t for t in names):
            raise ValueError(f"topics must be a non-empty list of topic names, got {names!r}")
        for t in names:
            check_topic_name(t, "topics", pattern_ok=True)
        names = list(dict.fromkeys(names))  # a repeated name is one subscription (librdkafka refuses)
        if not self._settings.group_id:
            raise IllegalStateError("subscribe() requires group.id in the consumer config")
        if listener is not None and not (
            hasattr(listener, "on_partitions_revoked") and hasattr(listener, "on_partitions_assigned")
        ):
            raise TypeError("listener must have on_partitions_revoked() and on_partitions_assigned()")
        self._check_broker_serves_protocol()
        self._native.subscribe(names, listener)

    def _check_broker_serves_protocol(self) -> None:
        """``group.protocol=consumer`` on a PLAINTEXT listener, once: UnsupportedVersionError if the
        broker has no ConsumerGroupHeartbeat API (librdkafka would retry silently and every poll()
        return nothing; kipconsumer._api_versions)."""
        rd = self._settings.rdkafka
        if (self._protocol_checked or str(rd.get("group.protocol", "classic")).lower() != "consumer"
                or str(rd.get("security.protocol", "plaintext")).lower() != "plaintext"):
            return
        from kipconsumer._api_versions import (
            CONSUMER_GROUP_HEARTBEAT,
            CONSUMER_GROUP_HEARTBEAT_MIN,
            api_version_ranges,
        )

        ranges = api_version_ranges(str(rd.get("bootstrap.servers", "")))
        self._protocol_checked = ranges is not None
        newest = -1 if ranges is None else ranges.get(CONSUMER_GROUP_HEARTBEAT, (0, -1))[1]
        if ranges is not None and newest < CONSUMER_GROUP_HEARTBEAT_MIN:
            raise UnsupportedVersionError(
                f"group.protocol=consumer: the broker at {rd.get('bootstrap.servers')} does not serve the "
                f"consumer group protocol (KIP-848) as librdkafka speaks it (ConsumerGroupHeartbeat v1+): it "
                f"needs Apache Kafka >= 4.0; Kafka 3.7-3.9 has only a preview (v0) or none. Use "
                f"group.protocol=classic with this broker.", code="UNSUPPORTED_VERSION")

    @_owned
    def subscription(self) -> set[str]:
        """Topics passed to the last ``subscribe()``."""
        result: set[str] = self._native.subscription()
        return result

    @_owned
    def unsubscribe(self) -> None:
        """Leaves the subscription; the listener's ``on_partitions_revoked`` runs inside."""
        self._native.unsubscribe()

    @_owned
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manually assigns partitions (no group management); replaces any assignment."""
        self._native.assign(_unique_tp_list(partitions, "partitions"))

    @_owned
    def assignment(self) -> set[TopicPartition]:
        """Partitions currently assigned to this consumer."""
        result: set[TopicPartition] = self._native.assignment()
        return result

    # -- polling ---------------------------------------------------------------------
    @_owned
    def poll(self, timeout: float | None = 1.0) -> ConsumerRecords:
        """Returns at most ``max.poll.records`` records, waiting up to ``timeout`` seconds
        for some. Runs rebalance listeners and async-commit callbacks. Raises
        ``WakeupError`` if ``wakeup()`` was called."""
        since = self._native.polls
        try:
            records: ConsumerRecords = self._native.poll(self._api_timeout(timeout))
            if not records and self._watchdog._bootstrap:
                self._watchdog.check()
        except BaseException:
            # e.g. a signal's KeyboardInterrupt right after the native call: the records it returned
            # never reached the caller; the next poll() returns them again
            self._give_back(since)
            raise
        self._handed_since = since
        return records

    def _result_lost(self, method: str, result: object) -> None:
        """``owned``'s hook: a signal's exception raised as ``poll()`` was leaving; its records never
        reached the caller: the next ``poll()`` returns them again (as for an exception inside it)."""
        if method == "poll" and result:
            self._give_back(self._handed_since)

    def _give_back(self, since: int) -> None:
        """The records of a ``poll()`` that started after ``since`` (a ``_native.polls`` value) did not
        reach the application: their partitions are sought back so that the next ``poll()`` returns
        them again. Runs while an exception propagates: a failure here is logged, never raised over it."""
        try:
            self._native.unreturn(since)
        except Exception:  # noqa: BLE001 - the exception on its way out is the one to report
            log.warning("the records of an interrupted poll() could not be given back; the next poll() "
                        "continues after them", exc_info=True)

    def wakeup(self) -> None:
        """Makes a blocked ``poll()``, or the next one, raise ``WakeupError``. Thread-safe."""
        self._native.wakeup()

    # -- for kipconsumer.aio: the native handle's loop hooks, behind the thread contract --
    def _wake_fd(self) -> int:
        """The descriptor that turns readable when ``poll()`` has work (records, callbacks, errors);
        -1 once closed. Any thread (a read of a number); in a fork child ``IllegalStateError``."""
        fd: int = self._native.wake_fd
        return fd

    @_owned
    def _positions(self) -> dict[TopicPartition, int]:
        """The next offset to hand out, per assigned partition (what ``commit_sync()`` commits)."""
        positions: dict[TopicPartition, int] = self._native.positions()
        return positions

    @_owned
    def _serve_commits(self) -> None:
        """Runs the callbacks of completed ``commit_async()`` calls, on this thread, without polling."""
        self._native.serve_commits()

    # -- offsets -----------------------------------------------------------------------
    def _default_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(off) for tp, off in self._native.positions().items()}

    @_owned
    def commit_sync(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commits ``offsets`` (default: positions of the records returned so far) and
        waits. Raises ``CommitFailedError`` if the member left the group,
        ``KafkaTimeoutError`` past ``timeout``."""
        offs = self._default_offsets() if offsets is None else _as_offsets(offsets)
        result: dict[TopicPartition, OffsetAndMetadata] = self._native.commit_sync(
            offs, self._api_timeout(timeout)
        )
        return result

    @_owned
    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        callback: CommitCallback | None = None,
    ) -> None:
        """Starts a commit; ``callback(offsets, exception_or_None)`` runs in a later
        ``poll()`` (or ``close()``) on the polling thread."""
        offs = self._default_offsets() if offsets is None else _as_offsets(offsets)
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable(offsets, exception)")
        self._native.commit_async(offs, callback)

    @_owned
    def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        result: dict[TopicPartition, OffsetAndMetadata | None] = self._native.committed(
            _tp_list(partitions, "partitions"), self._api_timeout(timeout)
        )
        return result

    @_owned
    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """Offset of the next record ``poll()`` will return for ``partition``."""
        tp = _as_tp(partition, "partition")
        pos = self._native.position_or_none(tp, self._api_timeout(timeout))
        if pos is not None:
            return int(pos)
        first = self._native.buffered_first_offset(tp)
        if first is not None:
            return int(first)
        fetched = self._native.librdkafka_position(tp)
        if fetched is not None:
            return int(fetched)
        committed = self.committed([tp], timeout).get(tp) if self._settings.group_id else None
        if committed is not None:
            return committed.offset
        low, high = self._native.watermarks(tp.topic, tp.partition, self._api_timeout(timeout))
        return int(low if self._auto_offset_reset in ("earliest", "smallest", "beginning") else high)

    @_owned
    def current_lag(self, partition: TopicPartition) -> int | None:
        """Java's ``currentLag``: how many records ``partition`` has past this consumer's position
        (the end offset as the last fetch response reported it, the high watermark or with
        ``isolation.level=read_committed`` the last stable offset, minus :meth:`position`). Never
        sends a request and never blocks: ``None`` while the position or the end offset is not known
        yet (before the partition's first fetch response). Raises ``IllegalStateError`` if the
        partition is not assigned."""
        lag: int | None = self._native.current_lag(_as_tp(partition, "partition"))
        return lag

    @_owned
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """The next ``poll()`` returns ``partition``'s records from ``offset``; buffered
        records of that partition are dropped. Valid right after ``assign()``."""
        tp = _as_tp(partition, "partition")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= _INT64_MAX:
            raise ValueError(f"offset must be an int in 0..{_INT64_MAX}, got {offset!r}")
        self._native.seek(tp, offset, self._api_timeout(None))

    @_owned
    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Seeks each partition (default: all assigned) to its first available offset.
        ``IllegalStateError`` after ``close()`` (also with the default: it never does nothing silently)."""
        timeout = self._api_timeout(None)
        for tp in self._targets(partitions):
            low, _ = self._native.watermarks(tp.topic, tp.partition, timeout)
            self._native.seek(tp, int(low), timeout)

    @_owned
    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Seeks each partition (default: all assigned) to its end (next produced record).
        ``IllegalStateError`` after ``close()`` (also with the default: it never does nothing silently)."""
        timeout = self._api_timeout(None)
        for tp in self._targets(partitions):
            _, high = self._native.watermarks(tp.topic, tp.partition, timeout)
            self._native.seek(tp, int(high), timeout)

    def _targets(self, partitions: Iterable[TopicPartition] | None) -> list[TopicPartition]:
        if self._native.closed:  # else "all assigned" of a closed consumer is none: a silent no-op
            raise IllegalStateError("This consumer has already been closed.")
        return sorted(self.assignment()) if partitions is None else _tp_list(partitions, "partitions")

    @_owned
    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        """Partition ids of ``topic``, sorted, from the broker's metadata; ``[]`` when the broker does
        not know the topic (as the Java client's ``partitionsFor``; nothing is created). Waits at most
        ``timeout`` seconds (``None``: ``default.api.timeout.ms``), then raises ``KafkaTimeoutError``;
        an invalid name raises ``InvalidTopicError``, a refused credential or permission its typed
        security error."""
        name = check_topic_name(topic, "topic")
        ids: list[int] = self._native.partitions_for(name, self._api_timeout(timeout))
        return ids

    @_owned
    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """First available offset of each partition (queried from the broker)."""
        t = self._api_timeout(timeout)
        return {tp: int(self._native.watermarks(tp.topic, tp.partition, t)[0])
                for tp in _tp_list(partitions, "partitions")}

    @_owned
    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """High watermark (offset of the next record to be written) of each partition."""
        t = self._api_timeout(timeout)
        return {tp: int(self._native.watermarks(tp.topic, tp.partition, t)[1])
                for tp in _tp_list(partitions, "partitions")}

    @_owned
    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the earliest offset whose record timestamp is at or after the given
        timestamp (ms since the epoch), with that record's timestamp; None where the partition has
        no such record (as the Java client's ``offsetsForTimes``). One ListOffsets request per
        leader, answered within ``timeout`` seconds (``KafkaTimeoutError`` otherwise); a partition
        the broker refuses (unknown topic or partition) raises ``KafkaError`` with its code."""
        if not isinstance(timestamps, Mapping):
            raise TypeError(f"timestamps must be a dict of TopicPartition -> timestamp in ms, "
                            f"got {type(timestamps).__name__}")
        queries: list[tuple[TopicPartition, int]] = []
        for key, ts in timestamps.items():
            tp = _as_tp(key, "timestamps")
            if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts <= _INT64_MAX:
                raise ValueError(f"timestamps[{tp}] must be an int in 0..{_INT64_MAX} (ms since the epoch), "
                                 f"got {ts!r}")
            queries.append((tp, ts))
        answers = self._native.offsets_for_times(queries, self._api_timeout(timeout))
        return {tp: None if a is None else OffsetAndTimestamp(int(a[0]), int(a[1]))
                for tp, a in answers.items()}

    # -- flow control ----------------------------------------------------------------
    @_owned
    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stops returning (and fetching) records of ``partitions``; buffered ones are kept. ``partitions``
        must be an iterable of TopicPartition (``TypeError`` naming the argument otherwise, e.g. None)."""
        self._native.pause(_tp_list(partitions, "partitions"))

    @_owned
    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Undoes ``pause()``."""
        self._native.resume(_tp_list(partitions, "partitions"))

    @_owned
    def paused(self) -> set[TopicPartition]:
        """Partitions currently paused."""
        result: set[TopicPartition] = self._native.paused()
        return result

    # -- introspection / lifecycle -----------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """Counters and gauges: assigned_partitions, buffered_records, buffered_bytes,
        time_since_last_poll_ms, last_heartbeat_ms_ago, rebalances, records_returned, polls,
        ``poll_time_ms`` (time spent inside ``poll()``, summed), ``rebalance_time_ms`` (time spent serving
        rebalance events, the listener included, summed), ``commit_failures`` (commits refused, sync or
        async), poll_interval_expiries, heartbeats, ..., and ``partition_lag``: ``{TopicPartition: int |
        None}`` over the assigned partitions, :meth:`current_lag` of each (None also while records
        never returned are buffered without a returned position: metrics() may run on any thread and
        does not read the buffer; and once ``close()`` began, or when the owner thread changed the
        assignment during the call: it then asks librdkafka nothing about the partitions). Thread-safe."""
        result: dict[str, Any] = self._native.metrics()
        return result

    @_owned
    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group metadata, for ``KafkaProducer.send_offsets_to_transaction()``: take
        it right before sending offsets, so it carries the current generation (KIP-447)."""
        serialized: bytes = self._native.group_metadata()
        return ConsumerGroupMetadata(self._settings.group_id or "", serialized)

    @_owned
    def member_id(self) -> str | None:
        """The group member id the coordinator gave this consumer, if joined."""
        result: str | None = self._native.member_id()
        return result

    def close(self, timeout: float | None = None) -> None:
        """Commits returned positions if auto-commit is on, revokes the assignment (the listener's
        ``on_partitions_revoked`` runs inside, and may commit), leaves the group at once (so the
        others rebalance without waiting for the session timeout) and frees everything.
        Idempotent.

        Returns within ``timeout`` seconds (default ``default.api.timeout.ms``), plus the time a
        listener running inside takes for work of its own: a ``commit_sync()`` it makes waits at most
        what is left of ``timeout`` (then raises ``KafkaTimeoutError``; the commit is still sent and
        librdkafka's close waits for it in the background). If librdkafka has not finished by then
        (a commit or the LeaveGroup waiting for an unreachable coordinator), the consumer is closed
        all the same: a WARNING is logged on ``kipconsumer.consumer``, librdkafka finishes on a
        background thread (without listeners), and the group may wait up to ``session.timeout.ms``
        for this member.
        Callbacks of ``commit_async()`` calls still pending then get a ``KafkaTimeoutError``.

        Any thread may call it at any moment. While another thread is in a call, ``close()`` makes a
        ``poll()`` there return an empty batch at once, waits for that call to return and then closes,
        all within ``timeout``; if that call has not returned by then, ``close()`` logs a WARNING and
        returns, and the consumer closes (with this timeout) when that call returns. Calls made after
        ``close()`` began raise ``IllegalStateError``. From a rebalance listener or a ``commit_async()``
        callback it raises ``IllegalStateError`` (inside ``close()``'s own, it does nothing); from a
        signal handler running inside a call of this thread, it closes once that call returns (a
        ``poll()`` returns an empty batch at once).
        A signal's exception (``KeyboardInterrupt``) ends the wait like the timeout does: the consumer
        is closed, librdkafka finishes in the background, and the exception propagates."""
        seconds = timeout_seconds(timeout, self._settings.default_api_timeout_ms)
        thread = self._thread
        native = self._native
        if thread.is_owner() and native.in_callback:  # from a callback inside a call: the native rules
            native.close(seconds)  # raises (does nothing inside close()'s own callbacks)
            return
        if thread.is_owner() and thread.method == "close":
            return
        # one C call (kipconsumer._owned): nothing it takes can be left held by a signal's exception. On
        # this thread outside a callback (a signal handler running inside a call) it closes once that
        # call returns, and a poll() returns at once
        left_to = thread.close(seconds, native.request_close)
        if left_to is not None:
            owner, method = left_to
            log.warning("close() from thread %d: thread %d's %s() did not return within %.3f s; the "
                        "consumer is closed when it returns", threading.get_ident(), owner, method, seconds)

    @property
    def closed(self) -> bool:
        """True once closed (also for an object whose constructor failed)."""
        native = getattr(self, "_native", None)
        return True if native is None else bool(native.closed)

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        settings = getattr(self, "_settings", None)
        if settings is None or getattr(self, "_native", None) is None:
            return "KafkaConsumer(<constructor failed>)"
        return f"KafkaConsumer(group_id={settings.group_id!r}, closed={self.closed})"


__all__ = [
    "KafkaConsumer",
    "ConsumerRecord",
    "ConsumerRecords",
    "OFFSET_BEGINNING",
    "OFFSET_END",
]
