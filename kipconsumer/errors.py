"""Typed errors raised by kipconsumer.

Every error carries a human-readable message that names what went wrong (the config key,
the argument, the partition) and, where librdkafka reported it, the librdkafka error
name in ``code``.

Every error has a ``category`` saying what the application does about it (as KIP-1050 does for the
Java client), decided in one place, :func:`category_of` (docs/producer.md, "Error categories"):

* ``"retriable"``: repeat the same call; the client resumes it.
* ``"abortable"``: the unit of work failed, the client is usable: abort the transaction (a consumer:
  drop the uncommitted work, the next ``poll()`` rejoins), then redo the work.
* ``"application_recoverable"``: this client can go on no more (a fenced producer, a commit whose
  outcome is unknown): close it, create a new one, and resume from the committed offsets.
* ``"invalid_configuration"``: a config, credential or ACL is wrong; retrying as is cannot succeed.
* ``"fatal"``: anything else (a misuse, an unexpected error): stop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

#: the value of ``KafkaError.category``
Category = Literal["retriable", "abortable", "application_recoverable", "invalid_configuration", "fatal"]
CATEGORIES: tuple[Category, ...] = ("retriable", "abortable", "application_recoverable",
                                    "invalid_configuration", "fatal")


def _restore(cls: type[KafkaError], args: tuple[Any, ...]) -> KafkaError:
    """Unpickles a ``KafkaError`` without calling ``__init__`` (whose keyword-only fields the pickled
    ``__dict__`` restores)."""
    err = cls.__new__(cls, *args)
    err.args = args
    return err


class KafkaError(Exception):
    """Base class of every error kipconsumer raises about Kafka operations.

    ``code`` is librdkafka's error name (e.g. ``"_MSG_TIMED_OUT"``) when one applies.
    ``category`` says what to do about it (one of :data:`CATEGORIES`; see the module docstring):
    given explicitly, else decided by :func:`category_of` from the class, ``code`` and ``retriable``.
    ``retriable`` is ``category == "retriable"``: whether repeating the operation may succeed.
    """

    def __init__(self, message: str, *, code: str | None = None, retriable: bool | None = None,
                 category: Category | None = None) -> None:
        super().__init__(message)
        self.code = code
        if category is None:
            category = category_of(code, retriable=retriable, error_class=type(self))
        elif category not in CATEGORIES:
            raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
        if retriable is not None and retriable != (category == "retriable"):
            raise ValueError(f"retriable={retriable} contradicts category={category!r}")
        self.category: Category = category

    @property
    def retriable(self) -> bool:
        """Whether repeating the operation may succeed (``category == "retriable"``)."""
        return self.category == "retriable"

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce calls cls(*args), which misses required keyword-only fields
        # (ProcessingError): pickle, copy and deepcopy keep the class, the args and every attribute.
        return _restore, (type(self), self.args), self.__dict__


class ConfigError(KafkaError, ValueError):
    """A configuration key is unknown or its value is outside the allowed values."""


class InvalidTopicError(KafkaError, ValueError):
    """A topic name outside Kafka's rule: 1..249 characters of [A-Za-z0-9._-], not '.' or '..'.

    A ``KafkaError`` (code ``TOPIC_EXCEPTION``, librdkafka's name of Kafka's
    INVALID_TOPIC_EXCEPTION) and a ``ValueError``.
    """

    def __init__(self, message: str, *, code: str = "TOPIC_EXCEPTION", retriable: bool | None = None) -> None:
        super().__init__(message, code=code, retriable=retriable)


class KafkaTimeoutError(KafkaError, TimeoutError):
    """An operation did not complete within its configured time bound."""

    def __init__(self, message: str, *, code: str | None = None, retriable: bool | None = True) -> None:
        super().__init__(message, code=code, retriable=retriable)


class CommitFailedError(KafkaError):
    """An offset commit cannot be completed, typically because the member left the group."""


class RebalanceInProgressError(CommitFailedError):
    """A commit was refused because the group is rebalancing; retriable after the
    rebalance completes (call poll(); commit in on_partitions_revoked)."""

    def __init__(self, message: str, *, code: str | None = None, retriable: bool | None = True) -> None:
        super().__init__(message, code=code, retriable=retriable)


class InvalidOffsetError(KafkaError):
    """A partition has no valid position to fetch from and ``auto.offset.reset`` is ``none``, so the
    consumer may not choose one (Java's ``InvalidOffsetException``). ``partitions`` names them; a
    ``seek()`` on each gives it a position, after which ``poll()`` goes on."""

    def __init__(self, message: str, *, partitions: Iterable[object] = (), code: str | None = None,
                 retriable: bool | None = None) -> None:
        super().__init__(message, code=code, retriable=retriable)
        self.partitions: frozenset[object] = frozenset(partitions)


class NoOffsetForPartitionError(InvalidOffsetError):
    """``auto.offset.reset=none`` and the group has no committed offset for ``partitions`` (Java's
    ``NoOffsetForPartitionException``), raised by ``poll()``."""


class OffsetOutOfRangeError(InvalidOffsetError):
    """``auto.offset.reset=none`` and the broker refused to fetch from the position (it is past the end
    or before the start of the log; Java's ``OffsetOutOfRangeException``), raised by ``poll()``.
    ``offsets`` maps each partition to the refused position."""

    def __init__(self, message: str, *, offsets: Mapping[object, int] | None = None,
                 code: str | None = None, retriable: bool | None = None) -> None:
        got: dict[object, int] = dict(offsets or {})
        super().__init__(message, partitions=got, code=code, retriable=retriable)
        self.offsets = got


class WakeupError(KafkaError):
    """``wakeup()`` interrupted a blocking call."""


class TaskTimeoutError(KafkaError):
    """A task made no progress within ``task.timeout.ms`` (KIP-572)."""


class IllegalStateError(KafkaError):
    """The client is used in a state that does not allow the call (e.g. after close())."""


class ConcurrentAccessError(IllegalStateError):
    """A client object that allows one thread at a time was called from a second thread while a
    call of the first was in progress (e.g. ``KafkaConsumer.poll()`` from two threads). Raised at
    once in the second thread; the first thread's call is not affected."""


class ProducerFencedError(KafkaError):
    """Fatal: another producer with the same ``transactional.id`` took over (it called
    ``init_transactions()`` later). This producer can only be closed."""


class TransactionAbortableError(KafkaError):
    """The current transaction failed but the producer is usable: call ``abort_transaction()``,
    then start the transaction again."""


class TransactionBlockedError(KafkaTimeoutError):
    """A transactional call of a ``KafkaProducer`` did not return within its timeout: librdkafka is
    blocked inside it (seen with librdkafka 2.16 after a broker freeze, docs/reliability.md). The
    call stays pending on its own thread. Calling the same method again waits for it further and
    gives its result; any other transactional call raises this error while it is pending. To go on
    without it, ``close()`` the producer (its handle is freed once the call returns) and create a
    new one with the same ``transactional.id``: its ``init_transactions()`` fences this one and
    aborts its open transaction."""


class TransactionOutcomeUnknownError(KafkaError):
    """``commit_transaction()`` did not return a result (it timed out, or stayed blocked in librdkafka,
    while the transaction coordinator was unreachable or moving): the transaction may be committed or
    aborted, and without KIP-890 (librdkafka 2.16 has no transactions v2) a late request of this
    producer's epoch could still act on a later transaction. Category ``"application_recoverable"``.

    From then on the producer allows only ``close()``, ``closed``, ``metrics()`` and ``flush()``; every
    other call (``send()`` and the transactional calls) raises this error again. To go on, close it and
    create a new producer with the same ``transactional.id``: its ``init_transactions()`` completes the
    transaction or aborts it (fencing this producer), after which the consumer group's committed offsets
    (``KafkaConsumer.committed()``) say where to resume."""

    def __init__(self, message: str, *, code: str | None = "_TXN_OUTCOME_UNKNOWN",
                 retriable: bool | None = None) -> None:
        super().__init__(message, code=code, retriable=retriable)


class ProcessingError(KafkaError):
    """A ``Pipeline``'s ``process()`` raised, or returned an output that is not a ``(key, value)`` pair of
    bytes, str or None, for the record at ``topic``/``partition``/``offset``. The record is not taken:
    nothing was sent for it and no offset past it is committed (``close()`` commits up to it), so a
    restarted pipeline processes it again. What ``process()`` raised is the ``__cause__``."""

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class SerializationError(KafkaError, TypeError):
    """A key, value or header cannot be encoded to bytes."""


class RecordDeserializationError(SerializationError):
    """A consumer's ``key.deserializer`` / ``value.deserializer`` raised on a record (Java's
    ``RecordDeserializationException``). ``topic``, ``partition``, ``offset`` name the record,
    ``origin`` is ``"key"`` or ``"value"``; the deserializer's exception is ``__cause__``. The record
    stays readable: its raw bytes are in ``to_arrow()``, and reading the field again retries."""

    def __init__(self, message: str, *, topic: str = "", partition: int = -1, offset: int = -1,
                 origin: str = "") -> None:
        super().__init__(message, code="RECORD_DESERIALIZATION")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.origin = origin


class UnsupportedFeatureError(KafkaError):
    """A feature the application asks for is not served by the broker (or by the loaded librdkafka):
    the message names the feature and the versions that serve it. Raised within seconds instead of
    a silent empty poll or a hang. Subclasses: :class:`UnsupportedVersionError` (a protocol the broker
    lacks), :class:`ShareGroupsUnsupportedError`."""


class UnsupportedVersionError(UnsupportedFeatureError):
    """The broker does not serve a protocol the configuration asks for (Java's
    ``UnsupportedVersionException``), e.g. ``group.protocol=consumer`` (KIP-848) on a broker without the
    ConsumerGroupHeartbeat API (Kafka < 4.0). The message names the feature and the broker versions
    that serve it; ``code`` is ``"UNSUPPORTED_VERSION"``. Raised at once instead of librdkafka's silent
    retries (polls that return nothing)."""


class ShareGroupsUnsupportedError(UnsupportedVersionError):
    """Share groups (KIP-932) are not available: the loaded librdkafka is older than 2.15 (no share
    consumer API), or the broker does not serve share groups (Kafka < 4.1, or the cluster's
    ``share.version`` feature is off). ``code`` is librdkafka's error name when the broker refused."""


class AuthenticationError(KafkaError):
    """The client could not authenticate to a broker: SASL refused the credentials or the mechanism,
    the TLS handshake failed, the broker's certificate is not trusted, has expired or names another
    host, or the connection closed during the handshake (Java's ``AuthenticationException``).
    Raised instead of retrying for ever; ``code`` is librdkafka's name (``_AUTHENTICATION``,
    ``_SSL``...). Not retriable with the same configuration."""


class AuthorizationError(KafkaError):
    """Kafka's ACLs refused an operation to the authenticated principal (Java's
    ``AuthorizationException``). Subclasses name what was refused."""


class TopicAuthorizationError(AuthorizationError):
    """Access to topics was refused; ``topics`` names them (Java's ``TopicAuthorizationException``)."""

    def __init__(self, message: str, *, code: str | None = "TOPIC_AUTHORIZATION_FAILED",
                 topics: frozenset[str] | set[str] | list[str] | tuple[str, ...] = (),
                 retriable: bool | None = None) -> None:
        super().__init__(message, code=code, retriable=retriable)
        self.topics: frozenset[str] = frozenset(topics)


class GroupAuthorizationError(AuthorizationError):
    """Access to the consumer group ``group_id`` was refused (Java's ``GroupAuthorizationException``)."""

    def __init__(self, message: str, *, code: str | None = "GROUP_AUTHORIZATION_FAILED",
                 group_id: str | None = None, retriable: bool | None = None) -> None:
        super().__init__(message, code=code, retriable=retriable)
        self.group_id = group_id


class TransactionalIdAuthorizationError(AuthorizationError):
    """The producer may not use its ``transactional.id`` (Java's
    ``TransactionalIdAuthorizationException``). Fatal for the producer."""


class ClusterAuthorizationError(AuthorizationError):
    """A cluster-level operation was refused, e.g. idempotent writes (Java's
    ``ClusterAuthorizationException``)."""


# -- categories (KIP-1050): the one mapping from error class, librdkafka's flags and error names ----------

#: librdkafka error names after which only a new client can go on (the producer's epoch or id is gone)
APPLICATION_RECOVERABLE_CODES = frozenset({
    "_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "UNKNOWN_PRODUCER_ID",
    "INVALID_PRODUCER_ID_MAPPING", "OUT_OF_ORDER_SEQUENCE_NUMBER", "FENCED_INSTANCE_ID",
    "_TXN_OUTCOME_UNKNOWN",
})
#: names of a wrong config, credential, ACL or broker feature: retrying as is cannot succeed
INVALID_CONFIGURATION_CODES = frozenset({
    "_INVALID_ARG", "_NOT_CONFIGURED", "_UNSUPPORTED_FEATURE", "UNSUPPORTED_VERSION", "INVALID_CONFIG",
    "_UNKNOWN_PARTITION", "_MSG_SIZE_TOO_LARGE", "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE",
    "INVALID_TRANSACTION_TIMEOUT", "TOPIC_EXCEPTION", "INVALID_REQUIRED_ACKS",
    "UNSUPPORTED_FOR_MESSAGE_FORMAT", "_AUTHENTICATION", "_SSL", "SASL_AUTHENTICATION_FAILED",
    "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE", "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
})
#: names of a failed unit of work on a usable client: abort the transaction (drop the uncommitted work)
ABORTABLE_CODES = frozenset({
    "TRANSACTION_ABORTABLE", "_TXN_TIMED_OUT", "_TXN_BLOCKED", "_HELD", "ILLEGAL_GENERATION",
    "UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH", "_ASSIGNMENT_LOST", "_PURGE_QUEUE", "_PURGE_INFLIGHT",
})
#: names of a transient condition: the same call may succeed when repeated
RETRIABLE_CODES = frozenset({
    "_TIMED_OUT", "_MSG_TIMED_OUT", "_TIMED_OUT_QUEUE", "REQUEST_TIMED_OUT", "_QUEUE_FULL", "_TRANSPORT",
    "_ALL_BROKERS_DOWN", "_WAIT_COORD", "_RETRY", "NETWORK_EXCEPTION", "NOT_COORDINATOR",
    "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_LEADER_FOR_PARTITION",
    "LEADER_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "REBALANCE_IN_PROGRESS", "STALE_MEMBER_EPOCH", "CONCURRENT_TRANSACTIONS", "UNKNOWN_TOPIC_OR_PART",
    "UNSTABLE_OFFSET_COMMIT", "THROTTLING_QUOTA_EXCEEDED", "KAFKA_STORAGE_ERROR",
})
#: the category of each error class that implies one (a subclass inherits it unless listed itself)
CLASS_CATEGORIES: dict[type[KafkaError], Category] = {
    ConfigError: "invalid_configuration",
    InvalidTopicError: "invalid_configuration",
    KafkaTimeoutError: "retriable",
    RebalanceInProgressError: "retriable",
    CommitFailedError: "abortable",
    # no position under auto.offset.reset=none: polling again cannot succeed until the application seeks
    InvalidOffsetError: "invalid_configuration",
    WakeupError: "retriable",
    TaskTimeoutError: "fatal",
    IllegalStateError: "fatal",
    ProducerFencedError: "application_recoverable",
    TransactionAbortableError: "abortable",
    TransactionOutcomeUnknownError: "application_recoverable",
    ProcessingError: "fatal",
    SerializationError: "fatal",
    UnsupportedFeatureError: "invalid_configuration",
    UnsupportedVersionError: "invalid_configuration",
    ShareGroupsUnsupportedError: "invalid_configuration",
    AuthenticationError: "invalid_configuration",
    AuthorizationError: "invalid_configuration",
}


def category_of(code: str | None, *, fatal: bool = False, abortable: bool = False,
                retriable: bool | None = None, error_class: type[KafkaError] | None = None) -> Category:
    """The category of an error (see the module docstring): librdkafka's error name ``code``, its flags
    (``rd_kafka_error_is_fatal`` / ``_txn_requires_abort`` / ``_is_retriable``, where the call gave
    them) and the kipconsumer class that reports it. In this order: ``retriable=True``; the class's own
    category; a name after which only a new client goes on; librdkafka's fatal flag; a
    configuration name; the abortable flag or name; a retriable name; else ``"fatal"``.
    ``retriable=False`` rules ``"retriable"`` out."""
    if retriable:
        return "retriable"
    candidates: list[Category] = []
    for cls in error_class.__mro__ if error_class is not None else ():
        if cls in CLASS_CATEGORIES:
            candidates.append(CLASS_CATEGORIES[cls])
            break
    if code in APPLICATION_RECOVERABLE_CODES:
        candidates.append("application_recoverable")
    if fatal:
        candidates.append("fatal")
    if code in INVALID_CONFIGURATION_CODES:
        candidates.append("invalid_configuration")
    if abortable or code in ABORTABLE_CODES:
        candidates.append("abortable")
    if code in RETRIABLE_CODES:
        candidates.append("retriable")
    for c in candidates:
        if c != "retriable" or retriable is None:
            return c
    return "fatal"


__all__ = [
    "CATEGORIES",
    "Category",
    "category_of",
    "ShareGroupsUnsupportedError",
    "UnsupportedFeatureError",
    "UnsupportedVersionError",
    "TransactionBlockedError",
    "TransactionOutcomeUnknownError",
    "KafkaError",
    "ConfigError",
    "KafkaTimeoutError",
    "CommitFailedError",
    "RebalanceInProgressError",
    "WakeupError",
    "InvalidOffsetError",
    "NoOffsetForPartitionError",
    "OffsetOutOfRangeError",
    "TaskTimeoutError",
    "IllegalStateError",
    "ConcurrentAccessError",
    "SerializationError",
    "ProcessingError",
    "RecordDeserializationError",
    "ProducerFencedError",
    "TransactionAbortableError",
    "AuthenticationError",
    "AuthorizationError",
    "TopicAuthorizationError",
    "GroupAuthorizationError",
    "TransactionalIdAuthorizationError",
    "ClusterAuthorizationError",
]
