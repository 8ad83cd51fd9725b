"""An embedded Kafka broker for tests and demos: librdkafka's mock cluster, in-process.

``EmbeddedBroker`` starts ``num_brokers`` Kafka brokers that listen on real TCP ports of 127.0.0.1,
so any Kafka client (kipconsumer, confluent-kafka, aiokafka, kcat, ...) in this or another process can
use them, and it exposes librdkafka's fault injection: response delays, brokers going down, errors
returned for the next requests of a given type, coordinator and leader moves.

Limits (it is a mock, not Kafka):

* each partition keeps at most about 5 MiB or 100 000 messages; older messages are dropped (the log
  start offset moves on), so consumers that fall further behind than that lose data;
* nothing is persisted: stopping the broker (or the process) loses every topic, record and offset;
* it runs inside the process that created it (its own threads, not the GIL): a crash of that process
  stops it; ``python -m kipconsumer.broker`` runs one as a separate process;
* the first JoinGroup of a new group is answered without delay (Kafka waits
  ``group.initial.rebalance.delay.ms``, 3 s); pass ``initial_rebalance_delay_ms`` to change it;
* producers that send to an unknown topic make the mock auto-create it with 4 partitions; create
  topics with :meth:`EmbeddedBroker.create_topic` before the clients use them.

Standalone process::

    python -m kipconsumer.broker --brokers 3 --topic events:6 --topic other:2

prints ``BOOTSTRAP=<servers>`` as its first line on stdout and runs until SIGTERM or SIGINT (exit 0).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType, TracebackType

from kipconsumer import _fork, _mock
from kipconsumer._validate import check_topic_name, is_topic_name, suggest_any
from kipconsumer.errors import ConfigError, IllegalStateError, KafkaError

__all__ = ["EmbeddedBroker", "API_KEYS", "MAX_BROKERS", "MAX_PARTITIONS", "error_codes"]

#: Kafka protocol request names and their ApiKey numbers (Apache Kafka's ``ApiKeys``).
API_KEYS: dict[str, int] = {
    "Produce": 0,
    "Fetch": 1,
    "ListOffsets": 2,
    "Metadata": 3,
    "LeaderAndIsr": 4,
    "StopReplica": 5,
    "UpdateMetadata": 6,
    "ControlledShutdown": 7,
    "OffsetCommit": 8,
    "OffsetFetch": 9,
    "FindCoordinator": 10,
    "JoinGroup": 11,
    "Heartbeat": 12,
    "LeaveGroup": 13,
    "SyncGroup": 14,
    "DescribeGroups": 15,
    "ListGroups": 16,
    "SaslHandshake": 17,
    "ApiVersions": 18,
    "CreateTopics": 19,
    "DeleteTopics": 20,
    "DeleteRecords": 21,
    "InitProducerId": 22,
    "OffsetForLeaderEpoch": 23,
    "AddPartitionsToTxn": 24,
    "AddOffsetsToTxn": 25,
    "EndTxn": 26,
    "WriteTxnMarkers": 27,
    "TxnOffsetCommit": 28,
    "DescribeAcls": 29,
    "CreateAcls": 30,
    "DeleteAcls": 31,
    "DescribeConfigs": 32,
    "AlterConfigs": 33,
    "AlterReplicaLogDirs": 34,
    "DescribeLogDirs": 35,
    "SaslAuthenticate": 36,
    "CreatePartitions": 37,
    "CreateDelegationToken": 38,
    "RenewDelegationToken": 39,
    "ExpireDelegationToken": 40,
    "DescribeDelegationToken": 41,
    "DeleteGroups": 42,
    "ElectLeaders": 43,
    "IncrementalAlterConfigs": 44,
    "AlterPartitionReassignments": 45,
    "ListPartitionReassignments": 46,
    "OffsetDelete": 47,
    "DescribeClientQuotas": 48,
    "AlterClientQuotas": 49,
    "DescribeUserScramCredentials": 50,
    "AlterUserScramCredentials": 51,
    "Vote": 52,
    "BeginQuorumEpoch": 53,
    "EndQuorumEpoch": 54,
    "DescribeQuorum": 55,
    "AlterPartition": 56,
    "UpdateFeatures": 57,
    "Envelope": 58,
    "FetchSnapshot": 59,
    "DescribeCluster": 60,
    "DescribeProducers": 61,
    "BrokerRegistration": 62,
    "BrokerHeartbeat": 63,
    "UnregisterBroker": 64,
    "DescribeTransactions": 65,
    "ListTransactions": 66,
    "AllocateProducerIds": 67,
    "ConsumerGroupHeartbeat": 68,
    "ConsumerGroupDescribe": 69,
    "ControllerRegistration": 70,
    "GetTelemetrySubscriptions": 71,
    "PushTelemetry": 72,
    "AssignReplicasToDirs": 73,
    "ListClientMetricsResources": 74,
    "DescribeTopicPartitions": 75,
    "ShareGroupHeartbeat": 76,
    "ShareGroupDescribe": 77,
    "ShareFetch": 78,
    "ShareAcknowledge": 79,
    "AddRaftVoter": 80,
    "RemoveRaftVoter": 81,
    "UpdateRaftVoter": 82,
    "InitializeShareGroupState": 83,
    "ReadShareGroupState": 84,
    "WriteShareGroupState": 85,
    "DeleteShareGroupState": 86,
    "ReadShareGroupStateSummary": 87,
    "StreamsGroupHeartbeat": 88,
    "StreamsGroupDescribe": 89,
    "DescribeShareGroupOffsets": 90,
    "AlterShareGroupOffsets": 91,
    "DeleteShareGroupOffsets": 92,
}
# Older or librdkafka spellings that also name a request.
_API_ALIASES: dict[str, int] = {
    "ApiVersion": 18,
    "AlterIsr": 56,
    "GroupCoordinator": 10,
    "ListConfigResources": 74,
}
_API_BY_LOWER: dict[str, int] = {k.lower(): v for k, v in {**API_KEYS, **_API_ALIASES}.items()}

# Apache Kafka names of error codes that librdkafka spells differently.
_ERROR_ALIASES: dict[str, int] = {
    "UNKNOWN_SERVER_ERROR": -1,
    "CORRUPT_MESSAGE": 2,
    "UNKNOWN_TOPIC_OR_PARTITION": 3,
    "INVALID_FETCH_SIZE": 4,
    "NOT_LEADER_OR_FOLLOWER": 6,
    "MESSAGE_TOO_LARGE": 10,
    "STALE_CONTROLLER_EPOCH": 11,
    "GROUP_LOAD_IN_PROGRESS": 14,
    "GROUP_COORDINATOR_NOT_AVAILABLE": 15,
    "NOT_COORDINATOR_FOR_GROUP": 16,
    "INVALID_TOPIC_EXCEPTION": 17,
    "INVALID_PRODUCER_ID_MAPPING": 49,
}

_MAX_INT16 = 32767
_MAX_INT32 = 2**31 - 1

#: Most brokers one EmbeddedBroker runs. Each takes a listening socket (a file descriptor) and
#: librdkafka's mock aborts the process when it runs out of descriptors while creating them.
MAX_BROKERS: int = _mock.MAX_BROKERS
#: Most partitions of one topic: the mock allocates every partition up front (2**31 - 1 of them
#: aborted the process on a failed allocation).
MAX_PARTITIONS: int = _mock.MAX_PARTITIONS
# File descriptors kept free beyond one per broker (the mock's own pipes, the clients' sockets).
_FD_RESERVE = 64

_error_codes: dict[str, int] | None = None


def error_codes() -> dict[str, int]:
    """Error names accepted by :meth:`EmbeddedBroker.push_request_errors`, with their codes.

    Every broker error librdkafka knows (its ``RD_KAFKA_RESP_ERR_*`` names without the prefix; the
    numbers are the Kafka protocol error codes), Apache Kafka's spelling where it differs (for example
    ``NOT_LEADER_OR_FOLLOWER`` = ``NOT_LEADER_FOR_PARTITION`` = 6), ``NO_ERROR`` (0: let one request
    through) and ``_TRANSPORT`` (the mock closes the connection when the request arrives).
    """
    global _error_codes
    if _error_codes is None:
        table: dict[str, int] = {}
        for code, name, _desc in _mock.error_table():
            if code >= -1 or name == "_TRANSPORT":
                table[name] = code
        for alias, code in _ERROR_ALIASES.items():
            if alias not in table and code in table.values():
                table[alias] = code
        _error_codes = table
    return dict(_error_codes)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_num_brokers(num_brokers: object) -> int:
    if isinstance(num_brokers, int) and not isinstance(num_brokers, bool) and 1 <= num_brokers <= MAX_BROKERS:
        return num_brokers
    raise ConfigError(f"num_brokers: must be an int in 1..{MAX_BROKERS}, got {num_brokers!r}")


def _check_delay_ms(value: object, argname: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT32:
        return value
    raise ConfigError(f"{argname}: must be an int in 0..{_MAX_INT32} (milliseconds), got {value!r}")


def _free_fds() -> int | None:
    """File descriptors this process may still open (None if unknown)."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return None
        return soft - len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError, ValueError):
        return None


def _resolve_api(api: str | int, argname: str = "api") -> int:
    if _is_int(api):
        assert isinstance(api, int)
        if not 0 <= api <= _MAX_INT16:
            raise ConfigError(f"{argname}: ApiKey must be in 0..{_MAX_INT16}, got {api}")
        return api
    if isinstance(api, str):
        key = _API_BY_LOWER.get(api.strip().lower())
        if key is not None:
            return key
        hint = suggest_any(api, API_KEYS)
        raise ConfigError(
            f"{argname}: unknown Kafka request name {api!r}{hint}; allowed: {', '.join(API_KEYS)} "
            "or an int ApiKey"
        )
    raise ConfigError(f"{argname}: expected a Kafka request name (str) or ApiKey (int), got {api!r}")


def _resolve_error(err: str | int, argname: str) -> int:
    codes = error_codes()
    if _is_int(err):
        assert isinstance(err, int)
        if err in codes.values() or 0 <= err <= _MAX_INT16:
            return err
        raise ConfigError(
            f"{argname}: error code {err} is not a Kafka protocol error code (0..{_MAX_INT16}, "
            "-1 UNKNOWN) nor -195 _TRANSPORT"
        )
    if isinstance(err, str):
        name = err.strip().upper()
        if name.startswith("RD_KAFKA_RESP_ERR_"):
            name = name[len("RD_KAFKA_RESP_ERR_") :]
        if name in codes:
            return codes[name]
        hint = suggest_any(name, codes)
        raise ConfigError(
            f"{argname}: unknown Kafka error name {err!r}{hint}; allowed: {', '.join(sorted(codes))} "
            "or an int error code"
        )
    raise ConfigError(f"{argname}: expected a Kafka error name (str) or code (int), got {err!r}")


class EmbeddedBroker:
    """A Kafka cluster of ``num_brokers`` brokers inside this process (librdkafka's mock cluster).

    Broker ids are ``1..num_brokers``. The cluster starts on :meth:`start`, on entering the ``with``
    block, or on first use (``bootstrap_servers``, ``create_topic``, ...); :meth:`stop` (idempotent,
    also on leaving the ``with`` block) shuts every listener down and frees every record. A stopped
    broker cannot be restarted: any later call raises :class:`~kipconsumer.errors.IllegalStateError`.

    Bad arguments raise :class:`~kipconsumer.errors.ConfigError` naming the argument; failures reported
    by the mock raise :class:`~kipconsumer.errors.KafkaError` with librdkafka's error name in ``code``.

    Limits: each partition keeps about 5 MiB or 100 000 messages at most and drops the oldest; nothing
    is persisted; it lives and dies with this process; the first group join is not delayed (Kafka:
    3 s) unless ``initial_rebalance_delay_ms`` says so. The methods are thread-safe.

    Not inherited through ``os.fork()``: the brokers are served by threads of the process that started
    them. In a child, :meth:`stop`, ``close()``, leaving the ``with`` block and the child's exit return
    at once and leave the parent's brokers running; the properties (``bootstrap_servers``, ``topics``,
    ...) read what the child inherited (clients in the child can connect to the parent's brokers);
    every other call raises ``IllegalStateError`` naming the process that started them.
    """

    def __init__(self, num_brokers: int = 3, *, initial_rebalance_delay_ms: int = 0) -> None:
        _check_num_brokers(num_brokers)
        _check_delay_ms(initial_rebalance_delay_ms, "initial_rebalance_delay_ms")
        self._num_brokers = num_brokers
        self._initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._lock = threading.RLock()
        self._cluster: _mock.MockCluster | None = None
        self._owner: int | None = None  # the process that started the brokers (their threads run there)
        self._stopped = False
        self._bootstrap = ""
        self._topics: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> EmbeddedBroker:
        """Start the brokers (no-op if running) and return ``self``.

        Raises IllegalStateError after :meth:`stop`; KafkaError if the listeners cannot be created."""
        with self._owned_lock():
            if self._stopped:
                raise IllegalStateError("EmbeddedBroker is stopped; create a new one")
            if self._cluster is None:
                free = _free_fds()
                if free is not None and self._num_brokers + _FD_RESERVE > free:
                    raise ConfigError(
                        f"num_brokers: {self._num_brokers} brokers need {self._num_brokers + _FD_RESERVE} "
                        f"free file descriptors, this process has {free} left (raise `ulimit -n` or "
                        "use fewer brokers)"
                    )
                cluster = _mock.MockCluster(self._num_brokers, self._initial_rebalance_delay_ms)
                self._bootstrap = cluster.bootstraps()
                self._cluster = cluster
                self._owner = os.getpid()
            return self

    def stop(self) -> None:
        """Stop every broker and free the cluster. Idempotent; clients connected to it see the
        connections close. In a child made by ``fork()``: returns at once, the parent's brokers keep
        running (only the process that started them stops them)."""
        if self._foreign_owner() is not None:
            return  # before the lock: a thread of the parent may have held it at the fork
        with self._lock:
            cluster, self._cluster = self._cluster, None
            self._stopped = True
            if cluster is not None:
                cluster.destroy()

    close = stop

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else ("running" if self._cluster is not None else "new")
        owner = self._foreign_owner()
        if owner is not None:
            state += f" in process {owner}"
        return f"<EmbeddedBroker num_brokers={self._num_brokers} {state} {self._bootstrap!r}>"

    def _foreign_owner(self) -> int | None:
        """The process that started the brokers, if it is not this one (this is a child made by
        ``fork()``), else None."""
        owner = self._owner
        return owner if owner is not None and owner != os.getpid() else None

    def _owned_lock(self) -> threading.RLock:
        """The lock, once it is known that this process runs the brokers: in a child made by ``fork()``
        raises IllegalStateError naming the process that does (the lock itself may have been held by one
        of its threads at the fork, for ever in the child)."""
        owner = self._foreign_owner()
        if owner is not None:
            raise _fork.foreign_error("EmbeddedBroker", owner)
        return self._lock

    @property
    def running(self) -> bool:
        """True between start and stop."""
        return self._cluster is not None

    @property
    def num_brokers(self) -> int:
        """Number of brokers; their ids are ``1..num_brokers``."""
        return self._num_brokers

    @property
    def broker_ids(self) -> list[int]:
        """The broker ids, ``[1, ..., num_brokers]``."""
        return list(range(1, self._num_brokers + 1))

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:port,127.0.0.1:port,..."``, one entry per broker in broker-id order (in a child
        made by ``fork()``: the parent's brokers, served while the parent runs them)."""
        if self._foreign_owner() is not None:
            return self._bootstrap
        with self._lock:
            self._running()
            return self._bootstrap

    def _running(self) -> _mock.MockCluster:
        if self._cluster is None:
            if self._stopped:
                raise IllegalStateError("EmbeddedBroker is stopped")
            self.start()
        assert self._cluster is not None
        return self._cluster

    def _check_broker(self, broker_id: int, argname: str = "broker_id") -> int:
        if not _is_int(broker_id) or not 1 <= broker_id <= self._num_brokers:
            raise ConfigError(f"{argname}: must be a broker id in 1..{self._num_brokers}, got {broker_id!r}")
        return broker_id

    # -- topics ----------------------------------------------------------------------------------
    def create_topic(
        self, name: str, partitions: int = 1, replication_factor: int = 1, *, exist_ok: bool = False
    ) -> None:
        """Create topic ``name`` with ``partitions`` partitions.

        With replication factor 1, partition ``p`` is led by broker ``p % num_brokers + 1``.
        ``replication_factor`` must be in ``1..num_brokers``. Raises KafkaError with code
        ``TOPIC_ALREADY_EXISTS`` if the topic exists, unless ``exist_ok``.
        """
        check_topic_name(name, "name", error=ConfigError)
        if not _is_int(partitions) or not 1 <= partitions <= MAX_PARTITIONS:
            raise ConfigError(f"partitions: must be an int in 1..{MAX_PARTITIONS}, got {partitions!r}")
        if not _is_int(replication_factor) or not 1 <= replication_factor <= self._num_brokers:
            raise ConfigError(
                f"replication_factor: must be an int in 1..{self._num_brokers} (num_brokers), "
                f"got {replication_factor!r}"
            )
        with self._owned_lock():
            cluster = self._running()
            try:
                cluster.topic_create(name, partitions, replication_factor)
            except KafkaError as e:
                if exist_ok and e.code == "TOPIC_ALREADY_EXISTS":
                    return
                raise
            self._topics[name] = partitions

    def configure_share_groups(
        self,
        *,
        auto_offset_reset: str | None = None,
        record_lock_duration_ms: int | None = None,
        delivery_count_limit: int | None = None,
        session_timeout_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
    ) -> None:
        """Share group (KIP-932) settings of this broker, for every share group (librdkafka's mock has
        no per-group configs): ``auto_offset_reset`` ``"earliest"|"latest"`` (Kafka's group config
        ``share.auto.offset.reset``), the record lock, the delivery count limit, the session timeout and
        heartbeat interval. ``None`` leaves a setting as it is. Raises ``ShareGroupsUnsupportedError``
        when the loaded librdkafka has no share groups."""
        from kipconsumer.share import _native_module

        if auto_offset_reset not in (None, "earliest", "latest"):
            raise ConfigError(f"auto_offset_reset: expected 'earliest' or 'latest', "
                              f"got {auto_offset_reset!r}")
        values = {"record_lock_duration_ms": record_lock_duration_ms,
                  "delivery_count_limit": delivery_count_limit,
                  "session_timeout_ms": session_timeout_ms,
                  "heartbeat_interval_ms": heartbeat_interval_ms}
        for name, value in values.items():
            if value is not None and (not _is_int(value) or not 1 <= value <= 2**31 - 1):
                raise ConfigError(f"{name}: expected an int >= 1, got {value!r}")
        native = _native_module()
        with self._owned_lock():
            native.mock_share_config(
                self._running(),
                -1 if auto_offset_reset is None else int(auto_offset_reset == "earliest"),
                record_lock_duration_ms or -1, delivery_count_limit or -1, session_timeout_ms or -1,
                heartbeat_interval_ms or -1)

    @property
    def topics(self) -> dict[str, int]:
        """Topics created with :meth:`create_topic`: name -> partition count."""
        if self._foreign_owner() is not None:
            return dict(self._topics)
        with self._lock:
            return dict(self._topics)

    def set_leader(self, topic: str, partition: int, broker_id: int | None) -> None:
        """Make ``broker_id`` the leader of ``topic[partition]`` (``None``: no leader at all).

        ``topic`` must have been created with :meth:`create_topic`."""
        if not isinstance(topic, str):
            raise ConfigError(f"topic: expected str, got {topic!r}")
        if not _is_int(partition) or partition < 0:
            raise ConfigError(f"partition: must be an int >= 0, got {partition!r}")
        bid = -1 if broker_id is None else self._check_broker(broker_id)
        with self._owned_lock():
            cluster = self._running()
            if topic not in self._topics:
                raise ConfigError(f"topic: {topic!r} was not created with create_topic()")
            if partition >= self._topics[topic]:
                raise ConfigError(
                    f"partition: {topic!r} has partitions 0..{self._topics[topic] - 1}, got {partition}"
                )
            cluster.partition_set_leader(topic, partition, bid)

    def set_topic_error(self, topic: str, error: str | int) -> None:
        """Make Metadata responses report ``error`` (name or code) for ``topic``; ``"NO_ERROR"`` clears.

        The mock creates the topic (4 partitions) if it does not exist."""
        code = _resolve_error(error, "error")
        check_topic_name(topic, "topic", error=ConfigError)
        with self._owned_lock():
            self._running().topic_set_error(topic, code)

    # -- brokers ---------------------------------------------------------------------------------
    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of ``broker_id`` by ``rtt_ms`` milliseconds (0 removes the delay).

        Responses of one connection stay in order, so a delayed response also holds back the ones
        behind it."""
        self._check_broker(broker_id)
        _check_delay_ms(rtt_ms, "rtt_ms")
        with self._owned_lock():
            self._running().broker_set_rtt(broker_id, rtt_ms)

    def set_down(self, broker_id: int) -> None:
        """Take ``broker_id`` down: its connections are closed and new ones refused (its port stays
        reserved). Metadata still names it as leader of its partitions, so those partitions are
        unreachable until :meth:`set_up` or :meth:`set_leader`. Idempotent."""
        self._check_broker(broker_id)
        with self._owned_lock():
            self._running().broker_set_down(broker_id)

    def set_up(self, broker_id: int) -> None:
        """Bring ``broker_id`` back up on the same port. Idempotent."""
        self._check_broker(broker_id)
        with self._owned_lock():
            self._running().broker_set_up(broker_id)

    # -- request errors --------------------------------------------------------------------------
    def push_request_errors(self, api: str | int, *errors: str | int) -> None:
        """Fail the next ``len(errors)`` requests of type ``api`` (to any broker) with ``errors``.

        ``api`` is a Kafka request name (``"Heartbeat"``, ``"JoinGroup"``, ``"Produce"``, ... see
        :data:`API_KEYS`; case-insensitive) or an int ApiKey. Each error is a Kafka error name
        (``"REBALANCE_IN_PROGRESS"``, ``"NOT_COORDINATOR"``, ... see :func:`error_codes`) or int code;
        ``"NO_ERROR"`` lets one request through, ``"_TRANSPORT"`` closes the connection. Errors are
        consumed in order, one per request, and add to those already queued for ``api``.
        """
        key = _resolve_api(api)
        if not errors:
            raise ConfigError("errors: give at least one error name or code")
        codes = [_resolve_error(e, f"errors[{i}]") for i, e in enumerate(errors)]
        with self._owned_lock():
            self._running().push_request_errors(key, codes)

    def clear_request_errors(self, api: str | int) -> None:
        """Drop the errors still queued for ``api`` by :meth:`push_request_errors`."""
        key = _resolve_api(api)
        with self._owned_lock():
            self._running().clear_request_errors(key)

    def set_coordinator(self, group_id: str, broker_id: int, *, key_type: str = "group") -> None:
        """Make ``broker_id`` the coordinator of consumer group ``group_id`` (``key_type="transaction"``:
        of that transactional id). Clients find out through FindCoordinator, typically after a
        NOT_COORDINATOR error."""
        if not isinstance(group_id, str) or not group_id or "\x00" in group_id:
            raise ConfigError(f"group_id: expected a non-empty str without NUL characters, got {group_id!r}")
        if key_type not in ("group", "transaction"):
            raise ConfigError(f"key_type: must be 'group' or 'transaction', got {key_type!r}")
        self._check_broker(broker_id)
        with self._owned_lock():
            self._running().coordinator_set(key_type, group_id, broker_id)


# -- standalone process ----------------------------------------------------------------------------
def _topic_spec(spec: str) -> tuple[str, int, int]:
    parts = spec.split(":")
    if not 1 <= len(parts) <= 3 or not parts[0]:
        raise argparse.ArgumentTypeError(
            f"bad topic spec {spec!r}: expected NAME[:PARTITIONS[:REPLICATION_FACTOR]], e.g. events:6"
        )
    name = parts[0]
    if not is_topic_name(name):
        raise argparse.ArgumentTypeError(
            f"bad topic name {name!r} in {spec!r}: use 1..249 characters of [A-Za-z0-9._-]"
        )
    nums = []
    for label, text in zip(("PARTITIONS", "REPLICATION_FACTOR"), parts[1:], strict=False):
        try:
            n = int(text)
        except ValueError:
            n = 0
        high = MAX_PARTITIONS if label == "PARTITIONS" else MAX_BROKERS
        if not 1 <= n <= high:
            raise argparse.ArgumentTypeError(
                f"bad {label} {text!r} in {spec!r}: expected an int in 1..{high}"
            )
        nums.append(n)
    partitions = nums[0] if nums else 1
    replication = nums[1] if len(nums) > 1 else 1
    return name, partitions, replication


def add_topic_argument(parser: argparse.ArgumentParser) -> None:
    """The repeatable ``--topic NAME[:PARTITIONS[:RF]]`` option of the cluster command lines."""
    parser.add_argument(
        "--topic",
        type=_topic_spec,
        action="append",
        default=[],
        metavar="NAME[:PARTITIONS[:RF]]",
        help="create a topic (repeatable), e.g. --topic events:6",
    )


def check_topic_specs(
    parser: argparse.ArgumentParser, topics: list[tuple[str, int, int]], brokers: int
) -> None:
    """Refuses (``parser.error``) a ``--topic`` whose replication factor exceeds ``--brokers``, or a
    topic given twice."""
    for name, _partitions, rf in topics:
        if rf > brokers:
            parser.error(f"--topic {name}: replication factor {rf} exceeds --brokers {brokers}")
    names = [t[0] for t in topics]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        parser.error(f"--topic: given more than once: {', '.join(dups)}")


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (the handlers replace the current ones)."""
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return stop


def main(argv: Sequence[str] | None = None) -> int:
    """Run an EmbeddedBroker until SIGTERM/SIGINT; first stdout line: ``BOOTSTRAP=<servers>``."""
    parser = argparse.ArgumentParser(
        prog="python -m kipconsumer.broker",
        description="Run librdkafka's mock Kafka cluster on 127.0.0.1 until SIGTERM/SIGINT. "
        "Prints BOOTSTRAP=<servers> as the first line on stdout. In-memory only: each partition "
        "keeps about 5 MiB or 100k messages.",
    )
    parser.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers (default 3)")
    add_topic_argument(parser)
    parser.add_argument(
        "--initial-rebalance-delay-ms",
        type=int,
        default=0,
        metavar="MS",
        help="delay of a new group's first join (default 0; Kafka's default is 3000)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.brokers <= MAX_BROKERS:
        parser.error(f"--brokers: must be in 1..{MAX_BROKERS}, got {args.brokers}")
    if not 0 <= args.initial_rebalance_delay_ms <= _MAX_INT32:
        parser.error(
            f"--initial-rebalance-delay-ms: must be in 0..{_MAX_INT32}, got {args.initial_rebalance_delay_ms}"
        )
    check_topic_specs(parser, args.topic, args.brokers)
    stop = stop_on_signals()

    broker = EmbeddedBroker(args.brokers, initial_rebalance_delay_ms=args.initial_rebalance_delay_ms)
    try:
        broker.start()
    except ConfigError as e:  # e.g. more brokers than free file descriptors
        parser.error(f"--brokers: {e}")
    with broker:
        for name, partitions, rf in args.topic:
            broker.create_topic(name, partitions, rf)
        sys.stdout.write(f"BOOTSTRAP={broker.bootstrap_servers}\n")
        sys.stdout.flush()
        for name, partitions, rf in args.topic:
            print(f"topic {name}: {partitions} partition(s), replication factor {rf}", file=sys.stderr)
        sys.stderr.flush()
        while not stop.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
