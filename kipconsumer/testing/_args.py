"""The checks of KafkaCluster's arguments, in one place: each raises ``ConfigError`` naming the
argument and the values it allows (never showing a password), before anything is started."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from kipconsumer.errors import ConfigError

__all__ = [
    "MAX_BROKERS", "MAX_PARTITIONS", "check_brokers", "check_heap", "check_node_id", "check_partitions",
    "check_plain_users", "check_replication_factor", "check_seconds", "check_version",
]

MAX_BROKERS = 9
MAX_PARTITIONS = 2**31 - 1  # Kafka's partition count is an int32
_HEAP = re.compile(r"[1-9][0-9]*[kKmMgG]?")
# SASL/PLAIN users become JAAS options `user_<name>="<password>"` in server.properties
_PLAIN_USER = re.compile(r"[A-Za-z0-9._@+-]+")
_PLAIN_PASSWORD_FORBIDDEN = re.compile(r'["\\;=\x00-\x1f\x7f]')


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_brokers(brokers: object) -> int:
    if not _is_int(brokers) or not 1 <= brokers <= MAX_BROKERS:  # type: ignore[operator]
        raise ConfigError(f"brokers: expected an int in 1..{MAX_BROKERS}, got {brokers!r}")
    return brokers  # type: ignore[return-value]


def check_version(version: object) -> str | None:
    """None or a str; which releases exist is the distribution's question (KafkaClusterError)."""
    if version is not None and not isinstance(version, str):
        raise ConfigError(
            f"version: expected None or a Kafka release as a str such as '4.2.1', got {version!r}")
    return version


def check_seconds(value: object, argname: str) -> float:
    """A timeout in seconds: a finite int or float > 0."""
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or value <= 0):
        raise ConfigError(f"{argname}: expected a number of seconds > 0 (int or float), got {value!r}")
    return float(value)


def check_heap(heap: object) -> str:
    if not isinstance(heap, str) or not _HEAP.fullmatch(heap):
        raise ConfigError(f"heap: expected a JVM heap size such as '512m' or '1g' (digits, then k, m or g), "
                          f"got {heap!r}")
    return heap


def check_plain_users(users: object) -> dict[str, str]:
    if not isinstance(users, Mapping):
        raise ConfigError(
            f"plain_users: expected a mapping of user name to password, got {type(users).__name__}")
    out: dict[str, str] = {}
    for user, password in users.items():
        if not isinstance(user, str) or not _PLAIN_USER.fullmatch(user):
            raise ConfigError(f"plain_users: user {user!r}: a name is letters, digits and . _ @ + - "
                              "(no spaces, quotes or control characters)")
        if not isinstance(password, str) or not password or _PLAIN_PASSWORD_FORBIDDEN.search(password):
            raise ConfigError(f"plain_users: user {user!r}: a password is a non-empty str without \" \\ ; = "
                              "or control characters (NUL, newline, ...)")
        out[user] = password
    return out


def check_partitions(partitions: object) -> int:
    if not _is_int(partitions) or not 1 <= partitions <= MAX_PARTITIONS:  # type: ignore[operator]
        raise ConfigError(f"partitions: expected an int in 1..{MAX_PARTITIONS}, got {partitions!r}")
    return partitions  # type: ignore[return-value]


def check_replication_factor(rf: object, brokers: int) -> int:
    if not _is_int(rf) or not 1 <= rf <= brokers:  # type: ignore[operator]
        raise ConfigError(f"replication_factor: expected an int in 1..{brokers}, got {rf!r}")
    return rf  # type: ignore[return-value]


def check_node_id(node_id: object, brokers: int) -> int:
    if not _is_int(node_id) or not 1 <= node_id <= brokers:  # type: ignore[operator]
        raise ConfigError(f"node_id: expected one of {list(range(1, brokers + 1))}, got {node_id!r}")
    return node_id  # type: ignore[return-value]
