"""kipconsumer's config defaults against the Java client's (asked of kafka-clients itself, through our
Java peer): every difference must be one that ``config.JAVA_DEFAULT_DIFFERENCES`` lists, with the Java
value it names and a reason, and docs/configuration.md must show it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import java_peer
import pytest

from kipconsumer.config import (
    _ASSIGNORS,
    CONSUMER_SPECS,
    JAVA_DEFAULT_DIFFERENCES,
    PRODUCER_SPECS,
    consumer_settings,
    producer_settings,
)

pytestmark = pytest.mark.kafka  # needs Java and the Kafka jars, as the kafka_cluster fixture does

DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def _norm(key: str, value: Any) -> Any:
    """One spelling for both clients' values: lower-case enums, assignor lists as librdkafka names."""
    if key == "partition.assignment.strategy":
        items = value if isinstance(value, list) else str(value).split(",")
        return ",".join(_ASSIGNORS.get(str(i).strip().lower(), str(i)) for i in items)
    if isinstance(value, str):
        return value.lower()
    return value


@pytest.fixture(scope="module")
def java() -> dict[str, dict[str, Any]]:
    return java_peer.java_defaults()


def test_java_peer_reports_the_java_clients_defaults(java: dict[str, dict[str, Any]]) -> None:
    # well-known Java 4.x defaults: the peer reads kafka-clients' ConfigDef, not a copy of ours
    assert java["producer"]["acks"] == "all" and java["producer"]["linger.ms"] == 5
    assert java["producer"]["batch.size"] == 16384 and java["producer"]["partitioner.class"] is None
    assert java["consumer"]["auto.offset.reset"] == "latest"
    assert java["consumer"]["group.protocol"] == "classic"


@pytest.mark.parametrize(("client", "specs"), [("consumer", CONSUMER_SPECS), ("producer", PRODUCER_SPECS)])
def test_every_default_that_differs_from_java_is_listed_with_its_reason(
    client: str, specs: dict[str, Any], java: dict[str, dict[str, Any]]
) -> None:
    differ = {}
    for key, spec in specs.items():
        # client.id: Java's "" means a generated id, librdkafka's default is 'rdkafka' (docs)
        if key not in java[client] or key == "client.id":
            continue
        ours, theirs = _norm(key, spec.default), _norm(key, java[client][key])
        if ours != theirs:
            differ[key] = theirs
    listed = {k: _norm(k, v[0]) for (c, k), v in JAVA_DEFAULT_DIFFERENCES.items() if c == client}
    assert differ == listed
    assert all(reason for (c, _), (_, reason) in JAVA_DEFAULT_DIFFERENCES.items() if c == client)


def test_the_defaults_that_decide_semantics_equal_javas(java: dict[str, dict[str, Any]]) -> None:
    """What librdkafka actually receives (not only the table's default) for the semantic defaults."""
    p = producer_settings({"bootstrap.servers": "x:1"}).rdkafka
    assert (p["acks"], p["enable.idempotence"], p["linger.ms"]) == ("all", "true", "5")
    assert java["producer"]["acks"] == "all" and java["producer"]["enable.idempotence"] is True
    assert "compression.type" not in p and java["producer"]["compression.type"] == "none"  # librdkafka: none
    assert p["partitioner"] == "murmur2_random"  # keyed: Java's murmur2 (tests/test_java_interop.py)
    c = consumer_settings({"bootstrap.servers": "x:1"}).rdkafka
    for key in ("auto.offset.reset", "isolation.level", "enable.auto.commit", "auto.commit.interval.ms",
                "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms"):
        assert c[key] == str(java["consumer"][key]).lower(), key
    # librdkafka's default protocol is classic too
    assert "group.protocol" not in c and java["consumer"]["group.protocol"] == "classic"


def test_docs_show_every_difference() -> None:
    text = DOCS.read_text()
    section = text[text.index("## Defaults compared with the Java client"):]
    for client, key in JAVA_DEFAULT_DIFFERENCES:
        assert f"| {client} | `{key}` |" in section, (client, key)
