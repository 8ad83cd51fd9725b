"""KafkaShareConsumer: a member of a share group (KIP-932, "queues for Kafka").

The contract (docs/share-groups.md, API.md "Share groups"):

- ``poll()`` returns at most ``max.poll.records`` records (a ``ConsumerRecords``, ``to_arrow()``
  included), shared fairly over the partitions as ``poll.fairness`` says; each record carries
  ``delivery_count`` (1 on its first delivery).
- ``share.acknowledgement.mode=implicit`` (default): the records one ``poll()`` returned are
  accepted by the next ``poll()``, ``commit_sync()``, ``commit_async()`` or ``close()``; records
  fetched but not yet returned are never accepted, nor are those of a ``poll()`` that raised after
  librdkafka returned them (a signal's ``KeyboardInterrupt``): the next ``poll()`` returns them, and
  ``close()`` / ``unsubscribe()`` release them. ``acknowledge()`` raises ``IllegalStateError``.
- ``explicit``: ``acknowledge(record, type)`` every returned record once (ACCEPT, RELEASE, REJECT)
  before the next ``poll()``, which raises ``IllegalStateError`` otherwise; acknowledging a record
  twice, or one not returned, raises ``IllegalStateError``. Acknowledgements go to the broker with
  the next ``poll()``, ``commit_sync()``, ``commit_async()`` or ``close()``; ``unsubscribe()`` releases
  the records still unacknowledged.
- Threads and signals as ``KafkaConsumer``: one thread at a time (``ConcurrentAccessError`` for a
  second one); ``wakeup()``, ``close()`` and ``metrics()`` from any thread; ``poll()`` waits in
  slices of at most 50 ms, so Ctrl+C, ``wakeup()`` (``WakeupError``) and ``close()`` end it.
- ``ShareGroupsUnsupportedError`` when the loaded librdkafka (< 2.15) or the broker lacks share
  groups.
- ``commit_async(callback)`` / ``set_acknowledgement_commit_callback(callback)`` (Java's
  ``AcknowledgementCommitCallback``): ``callback({TopicPartition: {offsets}}, exception_or_None)`` for
  every acknowledgement commit outcome from then on (sent with a poll, a commit or close), on the
  owner thread in a later ``poll()``, ``commit_sync()``, ``commit_async()`` or ``close()``.
- Not inherited through ``os.fork()``: in a child every call (``close()`` included) raises
  ``IllegalStateError`` naming the process that created the consumer; the child leaves it alone.
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kipconsumer import _fork
from kipconsumer._owned import OwnerThread, owned
from kipconsumer._records import ConsumerRecord, ConsumerRecords
from kipconsumer._timeouts import Deadline, timeout_seconds
from kipconsumer._validate import check_topic_name
from kipconsumer.config import ShareConsumerSettings, share_consumer_settings
from kipconsumer.errors import (
    IllegalStateError,
    KafkaError,
    ShareGroupsUnsupportedError,
    WakeupError,
)
from kipconsumer.structs import ConsumerRecordData, TopicPartition

log = logging.getLogger("kipconsumer.share")

#: callback({TopicPartition: {offset, ...}}, exception_or_None) of acknowledgement commits
AcknowledgementCommitCallback = Callable[[dict[TopicPartition, set[int]], "KafkaError | None"], object]


class AcknowledgeType(enum.IntEnum):
    """How a share consumer acknowledges a record (Java's ``AcknowledgeType``)."""

    #: processed: the record is done (never delivered again)
    ACCEPT = 1
    #: not processed: the record becomes available again, for any member, with a higher delivery count
    RELEASE = 2
    #: unprocessable: the record is archived and never delivered again
    REJECT = 3


def _native_module() -> Any:
    """kipconsumer._share, or ShareGroupsUnsupportedError if the loaded librdkafka lacks the API."""
    from kipconsumer._native import librdkafka_version

    version_str, version = librdkafka_version()
    if version < 0x020F00FF:
        raise ShareGroupsUnsupportedError(
            f"share groups need librdkafka >= 2.15.0 (its share consumer API); the loaded librdkafka is "
            f"{version_str}: upgrade confluent-kafka (pip install 'confluent-kafka>=2.15')")
    try:
        from kipconsumer import _share
    except ImportError as exc:  # a librdkafka build without the share symbols
        raise ShareGroupsUnsupportedError(
            f"the loaded librdkafka {version_str} does not export the share consumer API: {exc}") from exc
    return _share


def _type_name(value: object) -> str:
    return "None" if value is None else f"{type(value).__name__} {value!r:.60}"


def _acknowledge_type(value: object) -> AcknowledgeType:
    """``value`` as an AcknowledgeType: TypeError for a non-integer (1.0, "ACCEPT", None, True),
    ValueError for an integer that is none of the three."""
    if isinstance(value, AcknowledgeType):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"type must be an AcknowledgeType (ACCEPT, RELEASE or REJECT), got {_type_name(value)}")
    try:
        return AcknowledgeType(value)
    except ValueError:
        raise ValueError(f"type must be an AcknowledgeType: ACCEPT (1), RELEASE (2) or REJECT (3), got "
                         f"{value!r}") from None


_owned = owned  # runs a method as the consumer's one owner thread (kipconsumer._owned)

#: what an acknowledgement commit callback may not call (it runs inside one of them; a commit there
#: would accept, in implicit mode, the records the poll() running the callback is about to return)
_NOT_IN_CALLBACK = frozenset({"poll", "subscribe", "unsubscribe", "close", "commit_sync", "commit_async"})


class KafkaShareConsumer:
    """A share group member (KIP-932): records of the subscribed topics are shared among the group's
    members record by record, several members per partition, each record acknowledged on its own.

    ``config`` uses Kafka's names: ``bootstrap.servers``, ``group.id`` (required),
    ``max.poll.records``, ``poll.fairness``, ``share.acknowledgement.mode`` (implicit|explicit),
    ``default.api.timeout.ms``, ...; librdkafka property names pass through. Keys a share group
    keeps on the broker (``auto.offset.reset``, ``session.timeout.ms``, ...) raise ``ConfigError``
    saying where they live. See the module docstring for the contract.
    """

    def __init__(self, config: Mapping[str, object]) -> None:
        self._settings: ShareConsumerSettings = share_consumer_settings(config)
        s = self._settings
        self._explicit = s.acknowledgement_mode == "explicit"
        self._native = _native_module().NativeShareConsumer(s)
        # the thread contract (kipconsumer._owned); its closer: the thread that closes (or closed) it
        self._thread = OwnerThread("KafkaShareConsumer", "{method}() called on a closed KafkaShareConsumer",
                                   admit=self._admit)
        self._wakeup = False
        self._subscription: list[str] = []
        self._broker_checked = False
        # explicit mode: (topic, partition, offset) of the records returned and not yet acknowledged
        self._unacked: dict[tuple[str, int, int], None] = {}
        self._last_poll = time.monotonic()
        self._ack_callback: AcknowledgementCommitCallback | None = None
        self._in_callback = 0
        self._callback_exc: BaseException | None = None  # raised by the next call (see _serve_callbacks)
        self._ack_commits = 0
        self._ack_commit_errors = 0
        self._polls = 0
        self._handed_since = 0  # polls_started before the last poll() that returned (_result_lost)
        # acknowledgement commit outcomes are always collected (metrics(); the callback when set)
        self._native.enable_commit_results()
        _fork.register(self)

    def _mark_foreign(self, pid: int) -> None:
        """In a child made by ``fork()``: every later call raises ``IllegalStateError``; the inherited
        librdkafka handle is leaked, never closed or destroyed here (kipconsumer._fork)."""
        native = self._native
        self._native = _fork.ForeignHandle("KafkaShareConsumer", pid)
        _fork.leak(native)
        self._foreign_pid = pid
        self._thread.reset(refuse=functools.partial(_fork.foreign_error, "KafkaShareConsumer", pid))
        self._in_callback = 0
        self._callback_exc = None

    _foreign_pid: int | None = None

    # -- thread contract -------------------------------------------------------------------
    def _admit(self, method: str) -> None:
        """OwnerThread's hook for a call inside one of this consumer's: none that an acknowledgement
        commit callback may not make."""
        if self._in_callback and method in _NOT_IN_CALLBACK:
            raise IllegalStateError(
                f"{method}() called from an acknowledgement commit callback: the callback runs "
                f"inside {self._thread.method}() of this consumer; call {method}() after it returns")

    @property
    def settings(self) -> ShareConsumerSettings:
        """The validated configuration in effect."""
        return self._settings

    def _api_timeout(self, timeout: float | None) -> float:
        return timeout_seconds(timeout, self._settings.default_api_timeout_ms)

    # -- subscription ----------------------------------------------------------------------
    @_owned
    def subscribe(self, topics: Iterable[str]) -> None:
        """Joins the share group (``group.id``) for ``topics`` (exact names; replaces the last list)."""
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names or not all(isinstance(t, str) and t for t in names):
            raise ValueError(f"topics must be a non-empty list of topic names, got {names!r}")
        for t in names:
            check_topic_name(t, "topics")
        names = list(dict.fromkeys(names))
        self._check_broker_serves_share_groups()
        self._native.subscribe(names)
        self._subscription = names

    def _check_broker_serves_share_groups(self) -> None:
        """Once, on a PLAINTEXT listener: ShareGroupsUnsupportedError if the broker lacks share groups
        (librdkafka would retry silently, kipconsumer._api_versions)."""
        rd = self._settings.rdkafka
        if self._broker_checked or rd.get("security.protocol", "plaintext").lower() != "plaintext":
            return
        from kipconsumer._api_versions import SHARE_GROUP_HEARTBEAT, api_keys

        keys = api_keys(rd.get("bootstrap.servers", ""))
        self._broker_checked = keys is not None
        if keys is not None and SHARE_GROUP_HEARTBEAT not in keys:
            raise ShareGroupsUnsupportedError(
                f"the broker at {rd.get('bootstrap.servers')} does not serve share groups (no "
                f"ShareGroupHeartbeat API): KIP-932 needs Apache Kafka >= 4.1 with the share.version feature "
                f"enabled", code="UNSUPPORTED_VERSION")

    @_owned
    def subscription(self) -> set[str]:
        """Topics passed to the last ``subscribe()``."""
        return set(self._subscription)

    @_owned
    def unsubscribe(self) -> None:
        """Leaves the share group. Implicit mode: accepts the last poll's records first. Explicit
        mode: records returned and not acknowledged are released (RELEASE: the group delivers them
        again), so the consumer stays usable."""
        for key in list(self._unacked):
            self._native.acknowledge(key[0], key[1], key[2], int(AcknowledgeType.RELEASE))
            del self._unacked[key]
        self._native.unsubscribe()
        self._subscription = []

    # -- polling -----------------------------------------------------------------------------
    @_owned
    def poll(self, timeout: float | None = 1.0) -> ConsumerRecords:
        """Returns at most ``max.poll.records`` records, waiting up to ``timeout`` seconds for some
        (an empty ``ConsumerRecords`` when none came). Implicit mode: accepts the previous poll's
        records first. Explicit mode: raises ``IllegalStateError`` while a record of the previous
        polls is unacknowledged. Raises ``WakeupError`` after ``wakeup()``."""
        seconds = self._api_timeout(timeout)
        self._serve_callbacks()
        if self._unacked:
            tp_offset = next(iter(self._unacked))
            raise IllegalStateError(
                f"poll() with {len(self._unacked)} record(s) of the last poll() unacknowledged (e.g. "
                f"{tp_offset[0]}-{tp_offset[1]}@{tp_offset[2]}): with share.acknowledgement.mode=explicit, "
                f"acknowledge() every record before the next poll()")
        deadline = Deadline(seconds)  # waits in slices, checking wakeup(), close() and signals between them
        self._last_poll = time.monotonic()
        since = self._native.polls_started
        try:
            while True:
                if self._wakeup:
                    self._wakeup = False
                    raise WakeupError("poll() interrupted by wakeup()")
                wait_ms = deadline.slice_ms()
                records: ConsumerRecords = self._native.poll(wait_ms)
                if records or wait_ms == 0 or self._thread.closer is not None:
                    break
            if self._explicit:
                for r in records:
                    self._unacked[(r.topic, r.partition, r.offset)] = None
            self._polls += 1
            self._last_poll = time.monotonic()
            # results that came during this poll: a callback's exception must not lose these records
            self._serve_callbacks(keep=True)
            self._handed_since = since
            return records
        except BaseException:
            # e.g. a signal's KeyboardInterrupt right after the native call: the records it returned
            # never reached the caller; the next poll() returns them (nothing accepts them before)
            self._give_back(since)
            raise

    def _result_lost(self, method: str, result: object) -> None:
        """``owned``'s hook: a signal's exception raised as ``poll()`` was leaving; its records never
        reached the caller: the next ``poll()`` returns them (as for an exception inside it)."""
        if method == "poll" and result:
            self._give_back(self._handed_since)

    @_owned
    def _give_back(self, since: int) -> int:
        """Owner thread: the records of a ``poll()`` that started after ``since`` (a
        ``_native.polls_started`` value) did not reach the application; the next ``poll()`` returns
        them again, no commit accepts them before, ``close()`` / ``unsubscribe()`` release them.
        Returns how many were kept."""
        keys = self._native.unreturn(since)
        for key in keys:
            self._unacked.pop(key, None)
        return len(keys)

    def wakeup(self) -> None:
        """Makes a blocked ``poll()``, or the next one, raise ``WakeupError``. Thread-safe."""
        self._wakeup = True

    # -- acknowledgements --------------------------------------------------------------------
    @_owned
    def acknowledge(self, record: ConsumerRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Explicit mode: acknowledges ``record`` (returned by the last ``poll()``) as ``type``; sent with
        the next ``poll()`` / ``commit_sync()`` / ``commit_async()`` / ``close()``."""
        if not self._explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit: in implicit "
                                    "mode the next poll() accepts every record the last one returned")
        if not isinstance(record, (ConsumerRecord, ConsumerRecordData)):
            raise TypeError(f"record must be a ConsumerRecord returned by poll(), got {_type_name(record)}")
        ack = _acknowledge_type(type)
        key = (record.topic, record.partition, record.offset)
        if key not in self._unacked:
            raise IllegalStateError(
                f"record {key[0]}-{key[1]}@{key[2]} cannot be acknowledged: not returned by the last poll() "
                f"of this consumer, or already acknowledged")
        self._native.acknowledge(key[0], key[1], key[2], int(ack))
        del self._unacked[key]

    @_owned
    def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Sends the pending acknowledgements and waits for the broker's answer, at most ``timeout``
        seconds (``None``: ``default.api.timeout.ms``). Returns each partition's outcome (``None``:
        acknowledged; else the error, e.g. a record whose lock had expired)."""
        deadline = Deadline(self._api_timeout(timeout))
        self._serve_callbacks()
        result: dict[TopicPartition, KafkaError | None] = self._native.commit_sync(deadline.ms())
        self._serve_callbacks()
        return result

    @_owned
    def commit_async(self, callback: AcknowledgementCommitCallback | None = None) -> None:
        """Sends the pending acknowledgements without waiting for the broker. ``callback`` (optional)
        becomes the acknowledgement commit callback, as ``set_acknowledgement_commit_callback()``: it
        gets this commit's outcome and every later one, in a later ``poll()``, ``commit_sync()``,
        ``commit_async()`` or ``close()`` of this thread."""
        if callback is not None:
            self.set_acknowledgement_commit_callback(callback)
        self._serve_callbacks()
        self._native.commit_async()

    @_owned
    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        """Java's ``setAcknowledgementCommitCallback``: ``callback(offsets, exception)`` runs for every
        acknowledgement commit outcome from now on (acknowledgements sent with a ``poll()``, by
        ``commit_async()``, ``commit_sync()`` or ``close()``), once per partition and outcome:
        ``offsets`` is ``{TopicPartition: {offset, ...}}``, ``exception`` ``None`` (acknowledged) or the
        ``KafkaError`` (e.g. the record's lock had expired: it is redelivered). It runs on the calling
        thread inside a later ``poll()``, ``commit_sync()``, ``commit_async()`` or ``close()`` (never
        inside librdkafka) and may call ``acknowledge()`` and ``metrics()``; ``poll()``, ``commit_*()``,
        ``subscribe()``, ``unsubscribe()`` and ``close()`` raise ``IllegalStateError`` there (as Java's
        client refuses them: a commit there would accept the records the running ``poll()`` is about to
        return). An exception it raises propagates from the call running it; from the callbacks run at
        the end of a ``poll()`` (which would lose that poll's records) or inside ``close()`` it is
        raised by the next call, or at the end of ``close()``. ``None`` removes the callback."""
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable(offsets, exception)")
        self._ack_callback = callback

    def _serve_callbacks(self, keep: bool = False) -> None:
        """Runs the acknowledgement commit callback for the results librdkafka reported. ``keep``:
        the first exception is kept for the next call instead of raised (else a kept one is raised
        first)."""
        if not keep and self._callback_exc is not None:
            exc, self._callback_exc = self._callback_exc, None
            raise exc
        if self._in_callback:
            return
        for topic, partition, offsets, exc in self._native.take_commit_results():
            self._ack_commits += 1
            if exc is not None:
                self._ack_commit_errors += 1
            cb = self._ack_callback
            if cb is None:
                continue
            self._in_callback += 1
            try:
                cb({TopicPartition(topic, partition): set(offsets)}, exc)
            except BaseException as e:
                if not keep:
                    raise
                if self._callback_exc is None:
                    self._callback_exc = e
            finally:
                self._in_callback -= 1

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Accepts (implicit mode) and sends the pending acknowledgements, then leaves the share group.
        Records fetched but never returned, or returned and not acknowledged (explicit mode), go back
        to the group. Any thread may call it: a ``poll()`` of another thread returns first. Waits at most
        ``timeout`` seconds (``None``: ``default.api.timeout.ms``); librdkafka finishes in the
        background past it. A second call does nothing."""
        if self._foreign_pid is not None:
            raise _fork.foreign_error("KafkaShareConsumer", self._foreign_pid)
        thread = self._thread
        if thread.is_owner() and self._in_callback:
            raise IllegalStateError(
                "close() called from an acknowledgement commit callback: the callback runs inside "
                f"{thread.method}() of this consumer; call close() after it returns")
        seconds = self._api_timeout(timeout)
        deadline = Deadline(seconds)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                self._native.close()
            except BaseException as exc:  # noqa: BLE001 - handed to the closing thread
                errors.append(exc)

        def start() -> threading.Thread:
            helper = threading.Thread(target=run, name="kipconsumer-share-close", daemon=True)
            helper.start()
            return helper

        # one C call (kipconsumer._owned): marks the consumer closing, waits for another thread's call and
        # starts the native close, or undoes the mark (a native close is safe to repeat)
        closer = thread.begin_close(deadline.remaining(), start)
        if closer is None:  # closing or closed
            return
        try:
            while closer.is_alive():
                if deadline.expired():
                    log.warning("KafkaShareConsumer.close(): not done after %.1f s; librdkafka finishes "
                                "in the background", seconds)
                    break
                closer.join(deadline.slice_s())
        finally:
            self._unacked.clear()
        if not closer.is_alive() and self._foreign_pid is None:
            self._serve_callbacks(keep=True)
        if errors:
            raise errors[0]
        if self._callback_exc is not None:
            exc, self._callback_exc = self._callback_exc, None
            raise exc

    def metrics(self) -> dict[str, Any]:
        """Counters and gauges: ``buffered_records``, ``buffered_bytes``, ``partitions_fetched`` (partitions
        records ever came from),
        ``records_returned``, ``polls``, ``batches_fetched``, ``record_errors``, ``acknowledged``
        (records acknowledged by this client, sent or not), ``unacknowledged`` (explicit mode),
        ``acknowledgement_commits`` / ``acknowledgement_commit_errors`` (per-partition outcomes the
        broker reported and the owner thread has taken, in a poll, commit or close),
        ``time_since_last_poll_ms``, ``partition_records_returned`` (``{TopicPartition: int}``: records
        returned per partition), ``statistics`` (the summary of librdkafka's last statistics document
        with ``statistics.interval.ms`` > 0, as ``KafkaConsumer``'s: bytes and requests sent and
        received, brokers up, ...; plus ``partitions``, ``{TopicPartition: {"fetched_records",
        "fetched_bytes"}}``, and ``group``, ``{"state", "join_state", "rebalances",
        "assigned_partitions"}``; None without). Thread-safe."""
        m: dict[str, Any] = dict(self._native.metrics())
        m["unacknowledged"] = len(self._unacked)
        m["time_since_last_poll_ms"] = int((time.monotonic() - self._last_poll) * 1000)
        m["polls"] = self._polls
        m["acknowledgement_commits"] = self._ack_commits
        m["acknowledgement_commit_errors"] = self._ack_commit_errors
        m["partition_records_returned"] = {
            TopicPartition(t, p): n for (t, p), n in self._native.returned_by_partition().items()}
        m["statistics"] = self._statistics()
        return m

    def _statistics(self) -> dict[str, Any] | None:
        """The summary of librdkafka's last statistics document (``statistics.interval.ms`` > 0, served
        by ``poll()``), as ``KafkaConsumer.metrics()["statistics"]``; None before the first one."""
        doc = self._native.statistics()
        if doc is None:
            return None
        from kipconsumer._stats import share_summary

        try:
            return share_summary(doc)
        except (ValueError, TypeError, AttributeError) as exc:
            log.debug("librdkafka statistics not understood: %s", exc)
            return None

    def __enter__(self) -> KafkaShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
