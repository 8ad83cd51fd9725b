"""Typed errors raised by kipconsumer.

Every error carries a human-readable message that names what went wrong (the config key,
the argument, the partition) and, where librdkafka reported it, the librdkafka error
name in ``code``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def _restore(cls: type[KafkaError], args: tuple[Any, ...]) -> KafkaError:
    """Unpickles a ``KafkaError`` without calling ``__init__`` (whose keyword-only fields the pickled
    ``__dict__`` restores)."""
    err = cls.__new__(cls, *args)
    err.args = args
    return err


class KafkaError(Exception):
    """Base class of every error kipconsumer raises about Kafka operations.

    ``code`` is librdkafka's error name (e.g. ``"_MSG_TIMED_OUT"``) when one applies.
    ``retriable`` says whether repeating the operation may succeed.
    """

    def __init__(self, message: str, *, code: str | None = None, retriable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable

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

    def __init__(self, message: str, *, code: str = "TOPIC_EXCEPTION", retriable: bool = False) -> None:
        super().__init__(message, code=code, retriable=retriable)


class KafkaTimeoutError(KafkaError, TimeoutError):
    """An operation did not complete within its configured time bound."""

    def __init__(self, message: str, *, code: str | None = None, retriable: bool = True) -> None:
        super().__init__(message, code=code, retriable=retriable)


class CommitFailedError(KafkaError):
    """An offset commit cannot be completed, typically because the member left the group."""


class RebalanceInProgressError(CommitFailedError):
    """A commit was refused because the group is rebalancing; retriable after the
    rebalance completes (call poll(); commit in on_partitions_revoked)."""

    def __init__(self, message: str, *, code: str | None = None, retriable: bool = True) -> None:
        super().__init__(message, code=code, retriable=retriable)


class InvalidOffsetError(KafkaError):
    """A partition has no valid position to fetch from and ``auto.offset.reset`` is ``none``, so the
    consumer may not choose one (Java's ``InvalidOffsetException``). ``partitions`` names them; a
    ``seek()`` on each gives it a position, after which ``poll()`` goes on."""

    def __init__(self, message: str, *, partitions: Iterable[object] = (), code: str | None = None,
                 retriable: bool = False) -> None:
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
                 code: str | None = None, retriable: bool = False) -> None:
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


class UnsupportedVersionError(KafkaError):
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
                 retriable: bool = False) -> None:
        super().__init__(message, code=code, retriable=retriable)
        self.topics: frozenset[str] = frozenset(topics)


class GroupAuthorizationError(AuthorizationError):
    """Access to the consumer group ``group_id`` was refused (Java's ``GroupAuthorizationException``)."""

    def __init__(self, message: str, *, code: str | None = "GROUP_AUTHORIZATION_FAILED",
                 group_id: str | None = None, retriable: bool = False) -> None:
        super().__init__(message, code=code, retriable=retriable)
        self.group_id = group_id


class TransactionalIdAuthorizationError(AuthorizationError):
    """The producer may not use its ``transactional.id`` (Java's
    ``TransactionalIdAuthorizationException``). Fatal for the producer."""


class ClusterAuthorizationError(AuthorizationError):
    """A cluster-level operation was refused, e.g. idempotent writes (Java's
    ``ClusterAuthorizationException``)."""


__all__ = [
    "ShareGroupsUnsupportedError",
    "UnsupportedVersionError",
    "TransactionBlockedError",
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
