"""Offsets of the ``kipkafka`` source as Spark stores them (no pyspark): ``{"topic": {"partition":
offset}}`` JSON, and the per-partition JSON specs of the offset and timestamp options."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

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


def _per_partition_json(value: str, name: str, example: str, minimum: int) -> dict[TP, int]:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError:
        raise ConfigError(f"option {name} must be JSON like {example}, got {value!r}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"option {name}: expected a JSON object like {example}, got {value!r}")
    out: dict[TP, int] = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise ConfigError(
                f"option {name}: topic {topic!r} must map to {{partition: value}}, got {parts!r}")
        for p, v in parts.items():
            try:
                part = int(p)
            except ValueError:
                raise ConfigError(
                    f"option {name}: partition {p!r} of topic {topic!r} is not an int") from None
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise ConfigError(
                    f"option {name}: the value of {topic}-{p} must be an int >= {minimum}, got {v!r}")
            out[(str(topic), part)] = v
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
                          f"{{\"topic\": {{\"0\": 23, \"1\": -2}}}}, got {value!r}")
    return _per_partition_json(v, name, '{"topic": {"0": 23, "1": -2}}', EARLIEST)


def parse_timestamps_spec(value: str, name: str) -> dict[TP, int]:
    """The per-partition JSON of ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``:
    ``{"topic": {"0": 1700000000000}}`` (ms since the epoch, >= 0)."""
    return _per_partition_json(value.strip(), name, '{"topic": {"0": 1700000000000}}', 0)
