"""Offsets of the ``kipkafka`` source as Spark stores them (no pyspark): ``{"topic": {"partition":
offset}}`` JSON, and the per-partition JSON specs of the offset and timestamp options."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from kipconsumer._validate import check_topic_name
from kipconsumer.errors import ConfigError

TP = tuple[str, int]
OffsetJson = dict[str, dict[str, int]]

#: In ``startingOffsets`` / ``endingOffsets`` JSON: the partition's first / next offset.
EARLIEST = -2
LATEST = -1


def offsets_to_json(offsets: Mapping[TP, int]) -> OffsetJson:
    """``{(topic, partition): offset}`` -> Spark's offset JSON object (sorted)."""
    out: OffsetJson = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def offsets_from_json(obj: Mapping[str, Any] | None) -> dict[TP, int]:
    """Spark's offset JSON object -> ``{(topic, partition): offset}``."""
    out: dict[TP, int] = {}
    for t, parts in (obj or {}).items():
        for p, off in parts.items():
            out[(str(t), int(p))] = int(off)
    return out


#: Kafka's partition numbers are Java ints, offsets and timestamps Java longs.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
_PARTITION_KEY = re.compile(r"0|[1-9][0-9]*")


def shown(value: str, limit: int = 80) -> str:
    """``repr(value)``, cut to about ``limit`` characters (option values may be megabytes)."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"


def _load_json(value: str, name: str, example: str) -> Any:
    """``json.loads`` with every failure (syntax, nesting too deep, numbers too long, a key given twice)
    a ``ConfigError`` naming the option."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise ConfigError(f"option {name}: the key {k!r} is given twice")
            out[k] = v
        return out

    try:
        return json.loads(value, object_pairs_hook=no_duplicates)
    except ConfigError:
        raise
    except (ValueError, RecursionError):
        raise ConfigError(f"option {name} must be JSON like {example}, got {shown(value)}") from None


def _topic(topic: str, name: str) -> str:
    return check_topic_name(topic, f"option {name}", error=ConfigError)


def _partition_number(p: object, name: str, topic: str) -> int:
    """A JSON partition number: an integer (not a bool, float or string) in 0..INT32_MAX."""
    if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= INT32_MAX:
        raise ConfigError(f"option {name}: partition {p!r} of topic {topic!r} must be an integer in "
                          f"0..{INT32_MAX}")
    return p


def _partition_key(p: str, name: str, topic: str) -> int:
    """A partition as a JSON object key: its decimal digits, without sign, leading zeros or spaces (so
    that two keys never name one partition), in 0..INT32_MAX."""
    if _PARTITION_KEY.fullmatch(p) is None or int(p) > INT32_MAX:
        raise ConfigError(f"option {name}: partition {p!r} of topic {topic!r} must be a partition number in "
                          f"0..{INT32_MAX} written as plain decimal digits (no sign, leading zero or space)")
    return int(p)


def parse_assign_spec(value: str) -> tuple[TP, ...]:
    """``assign``: ``{"topic": [0, 1]}``, topics by Kafka's naming rule, partitions JSON integers in
    0..INT32_MAX; sorted, each partition once."""
    example = '{"topic": [0, 1]}'
    obj = _load_json(value, "assign", example)
    if not isinstance(obj, dict):
        raise ConfigError(f"option assign must be a JSON object like {example}, got {shown(value)}")
    out: set[TP] = set()
    for topic, parts in obj.items():
        _topic(topic, "assign")
        if not isinstance(parts, list):
            raise ConfigError(f"option assign: topic {topic!r} must map to a list of partitions like "
                              f"{example}, got {parts!r}")
        out.update((topic, _partition_number(p, "assign", topic)) for p in parts)
    return tuple(sorted(out))


def _per_partition_json(value: str, name: str, example: str, minimum: int) -> dict[TP, int]:
    obj = _load_json(value, name, example)
    if not isinstance(obj, dict):
        raise ConfigError(f"option {name}: expected a JSON object like {example}, got {shown(value)}")
    out: dict[TP, int] = {}
    for topic, parts in obj.items():
        _topic(topic, name)
        if not isinstance(parts, dict):
            raise ConfigError(
                f"option {name}: topic {topic!r} must map to {{partition: value}}, got {parts!r}")
        for p, v in parts.items():
            part = _partition_key(p, name, topic)
            if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= INT64_MAX:
                raise ConfigError(
                    f"option {name}: the value of {topic}-{p} must be an int >= {minimum} and "
                    f"<= {INT64_MAX}, got {v!r}")
            out[(topic, part)] = v
    return out


def parse_offsets_spec(value: str | None, default: str, name: str) -> str | dict[TP, int]:
    """``earliest`` / ``latest`` or the per-partition JSON of Spark's Kafka source
    (``{"topic": {"0": 23, "1": -2}}``; -2 earliest, -1 latest)."""
    if value is None:
        return default
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return v.lower()
    if not v.startswith("{"):
        raise ConfigError(f"option {name} must be 'earliest', 'latest' or JSON like "
                          f"{{\"topic\": {{\"0\": 23, \"1\": -2}}}}, got {shown(value)}")
    return _per_partition_json(v, name, '{"topic": {"0": 23, "1": -2}}', EARLIEST)


def parse_timestamps_spec(value: str, name: str) -> dict[TP, int]:
    """The per-partition JSON of ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``:
    ``{"topic": {"0": 1700000000000}}`` (ms since the epoch, >= 0)."""
    return _per_partition_json(value.strip(), name, '{"topic": {"0": 1700000000000}}', 0)
