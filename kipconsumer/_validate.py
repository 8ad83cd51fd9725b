"""The checks every public entry point shares: Kafka topic names and "did you mean" suggestions.

Configuration keys and values are checked in :mod:`kipconsumer.config` and timeouts in
:mod:`kipconsumer._timeouts`; both, and every module that names a topic, use these."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from kipconsumer.errors import InvalidTopicError, KafkaError

__all__ = ["TOPIC_RULE", "is_topic_name", "check_topic_name", "suggest", "suggest_any"]

TOPIC_RULE = "1..249 characters of [A-Za-z0-9._-], not '.' or '..'"
_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def is_topic_name(name: object) -> bool:
    """True if `name` is a str that follows Kafka's topic name rule (TOPIC_RULE)."""
    return isinstance(name, str) and _TOPIC_RE.fullmatch(name) is not None and name not in (".", "..")


def check_topic_name(topic: object, arg: str, *, pattern_ok: bool = False,
                     error: type[KafkaError] = InvalidTopicError) -> str:
    """Returns `topic` if it is a valid topic name, else raises `error` naming `arg` and the rule.
    With `pattern_ok`, a name starting with '^' is a librdkafka subscription regex (any text without
    NUL that Python's re accepts)."""
    if pattern_ok and isinstance(topic, str) and topic.startswith("^") and len(topic) > 1 \
            and "\0" not in topic:
        try:
            re.compile(topic)
        except re.error as exc:
            raise error(
                f"{arg}: {topic!r} starts with '^', so it is a regular expression, and it is not a valid "
                f"one ({exc}); escape regex characters, or name the topic without '^'") from None
        return topic
    if not is_topic_name(topic):
        raise error(f"{arg}: invalid topic name {topic!r}: {TOPIC_RULE}")
    assert isinstance(topic, str)
    return topic


def suggest(name: str, candidates: Iterable[str]) -> str:
    """": did you mean 'x'?" for the closest of `candidates` to `name` (case-insensitive), or ""."""
    match = difflib.get_close_matches(name.lower(), sorted(set(candidates)), n=1, cutoff=0.6)
    return f": did you mean {match[0]!r}?" if match else ""


def suggest_any(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """" (did you mean a, b?)" with up to `n` close `candidates` to `name`, or ""."""
    close = difflib.get_close_matches(name, list(candidates), n=n)
    return f" (did you mean {', '.join(close)}?)" if close else ""
