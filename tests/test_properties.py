"""Property-based tests (hypothesis): bad input always gets a typed error that names the problem.

* configs: random keys and values for the consumer and producer -> a settings object or ``ConfigError``
  naming a key that was given; never another exception, never a crash; clients built from random
  valid-looking configs construct or raise ``ConfigError``;
* producer ``send()``: keys, values, headers, partitions, timestamps, topic names of random types and
  values -> accepted, or ``TypeError`` / ``ValueError`` / ``SerializationError`` / ``KafkaError``
  (``InvalidTopicError`` for topic names) naming the argument;
* consumer: topic names, partitions and offsets for ``seek()``, ``commit_sync()``, ``assign()`` ->
  accepted, or ``ValueError`` / ``TypeError`` / ``IllegalStateError`` naming the problem.

Example counts are bounded so the module runs in well under 30 s.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kipconsumer import KafkaConsumer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.config import CONSUMER_SPECS, PRODUCER_SPECS, consumer_settings, producer_settings
from kipconsumer.errors import ConfigError, IllegalStateError, KafkaError, SerializationError
from kipconsumer.producer import InvalidTopicError, KafkaProducer
from kipconsumer.structs import OffsetAndMetadata

FAST = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)

TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")

PASSTHROUGH_SAMPLE = ["client.id", "socket.timeout.ms", "statistics.interval.ms", "debug",
                      "topic.metadata.refresh.interval.ms", "reconnect.backoff.ms", "socket.keepalive.enable",
                      "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
                      "ssl.key.password", "api.version.request", "broker.address.family"]

weird_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", " ", "-1", "0", "1", "100", "true", "false", "yes", "range", "latest",
                     "earliest", "cooperative-sticky", "9" * 30, "1e3", "0x10", "\x00", "é"]),
    st.binary(max_size=8), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                                 st.integers(), max_size=2),
    st.builds(object),
)


def keys(specs: Mapping[str, object]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(sorted(specs)), st.sampled_from(PASSTHROUGH_SAMPLE),
                     st.text(max_size=30), st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,8}){1,3}", fullmatch=True))


def _check_config_error(e: ConfigError, conf: Mapping[str, object]) -> None:
    msg = str(e)
    assert msg, "ConfigError without a message"
    named = [k for k in conf if isinstance(k, str) and k and k in msg]
    assert named or "config" in msg, f"ConfigError does not name a given key: {msg!r} for {conf!r}"


@FAST
@given(st.dictionaries(keys(CONSUMER_SPECS), weird_values, max_size=4))
def test_consumer_config_is_settings_or_config_error(conf: dict[str, object]) -> None:
    try:
        consumer_settings(conf)
    except ConfigError as e:
        _check_config_error(e, conf)


@FAST
@given(st.dictionaries(keys(PRODUCER_SPECS), weird_values, max_size=4))
def test_producer_config_is_settings_or_config_error(conf: dict[str, object]) -> None:
    try:
        producer_settings(conf)
    except ConfigError as e:
        _check_config_error(e, conf)


@FAST
@given(st.sampled_from(sorted(CONSUMER_SPECS)), weird_values)
def test_single_bad_consumer_value_names_its_key(key: str, value: object) -> None:
    try:
        consumer_settings({key: value})
    except ConfigError as e:
        assert key in str(e) or "config" in str(e), str(e)


@FAST
@given(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2)))
def test_config_that_is_not_a_str_mapping(conf: object) -> None:
    if isinstance(conf, dict) and not conf:
        return
    with pytest.raises(ConfigError, match="config"):
        consumer_settings(conf)  # type: ignore[arg-type]


@SLOW
@given(st.dictionaries(st.sampled_from(["max.poll.records", "session.timeout.ms", "heartbeat.interval.ms",
                                        "max.poll.interval.ms", "fetch.min.bytes", "auto.offset.reset",
                                        "client.id", "partition.assignment.strategy", "poll.fairness"]),
                       weird_values, max_size=3))
def test_consumer_constructs_or_raises_config_error(conf: dict[str, object]) -> None:
    full = {"bootstrap.servers": "127.0.0.1:9", "group.id": "props", **conf}
    try:
        c = KafkaConsumer(full)
    except ConfigError as e:
        _check_config_error(e, full)
        return
    c.close()


# -- producer arguments ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def private_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(num_brokers=1) as b:
        b.create_topic("props", 2)
        yield b


@pytest.fixture(scope="module")
def producer(private_broker: EmbeddedBroker) -> Iterator[KafkaProducer]:
    with KafkaProducer({"bootstrap.servers": private_broker.bootstrap_servers, "max.block.ms": 2000,
                        "linger.ms": 1}) as p:
        p.partitions_for("props")
        yield p


GOOD = (bytes, bytearray, memoryview, str, type(None))
payloads = st.one_of(st.none(), st.binary(max_size=16), st.text(max_size=16),
                     st.binary(max_size=8).map(bytearray), st.binary(max_size=8).map(lambda b: memoryview(b)),
                     st.integers(), st.floats(allow_nan=False), st.booleans(),
                     st.lists(st.integers(), max_size=2),
                     st.builds(object))
header_values = st.one_of(st.none(), st.binary(max_size=8), st.text(max_size=8), st.integers(),
                          st.builds(object))
headers = st.one_of(
    st.none(),
    st.lists(st.tuples(st.one_of(st.text(max_size=8), st.integers(), st.none()), header_values), max_size=3),
    st.dictionaries(st.text(max_size=8), header_values, max_size=3),
    st.lists(st.tuples(st.text(max_size=4)), max_size=2),
    st.text(max_size=4), st.integers(), st.binary(max_size=4),
)


def _header_name_ok(name: object) -> bool:
    """A str without NUL (header names are C strings: a NUL is refused with ValueError)."""
    return isinstance(name, str) and "\x00" not in name


def _headers_ok(h: object) -> bool:
    if h is None:
        return True
    if isinstance(h, dict):
        return all(_header_name_ok(k) and isinstance(v, GOOD) for k, v in h.items())
    if isinstance(h, list):
        return all(isinstance(x, tuple) and len(x) == 2 and _header_name_ok(x[0]) and isinstance(x[1], GOOD)
                   for x in h)
    return False


@FAST
@given(value=payloads, key=payloads, hdrs=headers)
def test_send_argument_types(producer: KafkaProducer, value: object, key: object, hdrs: object) -> None:
    ok = isinstance(value, GOOD) and isinstance(key, GOOD) and _headers_ok(hdrs)
    try:
        fut = producer.send("props", value=value, key=key, headers=hdrs)  # type: ignore[arg-type]
    except SerializationError as e:
        assert isinstance(e, TypeError)
        assert not ok, f"valid arguments refused: {e}"
        bad = [name for name, arg, good in (("value", value, isinstance(value, GOOD)),
                                            ("key", key, isinstance(key, GOOD)),
                                            ("header", hdrs, _headers_ok(hdrs))) if not good]
        assert any(name in str(e) for name in bad), f"{e} does not name one of {bad}"
        return
    except ValueError as e:  # a header name with a NUL character
        assert not ok and "header name" in str(e) and "NUL" in str(e), e
        return
    assert ok, f"accepted bad arguments value={value!r} key={key!r} headers={hdrs!r}"
    assert fut.result(10).topic == "props"


@FAST
@given(partition=st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=2**40), st.text(max_size=3),
                           st.floats(allow_nan=False), st.booleans()),
       timestamp=st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70), st.text(max_size=3),
                           st.floats(allow_nan=False)))
def test_send_partition_and_timestamp(producer: KafkaProducer, partition: object, timestamp: object) -> None:
    try:
        fut = producer.send("props", b"v", partition=partition, timestamp=timestamp)  # type: ignore[arg-type]
    except (TypeError, ValueError, KafkaError) as e:
        assert "partition" in str(e) or "timestamp" in str(e), str(e)
        return
    try:
        fut.result(10)
    except KafkaError as e:  # a delivery error must also be typed and named
        assert "timestamp" in str(e) or "partition" in str(e) or e.code, str(e)


@SLOW
@given(topic=st.one_of(st.text(max_size=12), st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True),
                       st.sampled_from(["", ".", "..", "a" * 250, "a\x00b", "props\x00", "é", "a/b"]),
                       st.integers(), st.none(), st.binary(max_size=4), st.lists(st.text(max_size=2))))
def test_send_topic_types(producer: KafkaProducer, topic: object) -> None:
    if isinstance(topic, str) and TOPIC_RE.fullmatch(topic) and topic not in (".", ".."):
        return  # a valid name: the mock would auto-create it; nothing to check here
    with pytest.raises((TypeError, InvalidTopicError), match="topic") as ei:
        producer.send(topic, b"v")  # type: ignore[arg-type]
    if isinstance(topic, str):
        assert isinstance(ei.value, InvalidTopicError) and isinstance(ei.value, ValueError)
        assert ei.value.code == "TOPIC_EXCEPTION" and "[A-Za-z0-9._-]" in str(ei.value)
        with pytest.raises(InvalidTopicError, match="topic"):
            producer.partitions_for(topic)
    else:
        assert type(ei.value) is TypeError


# -- consumer offsets, partitions, topic names -----------------------------------------------------
@pytest.fixture(scope="module")
def consumer(private_broker: EmbeddedBroker) -> Iterator[KafkaConsumer]:
    with KafkaConsumer({"bootstrap.servers": private_broker.bootstrap_servers, "group.id": "props-g",
                        "enable.auto.commit": False}) as c:
        c.assign([TopicPartition("props", 0)])
        yield c


offsets = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.integers(min_value=-5, max_value=50),
                    st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=3))


@FAST
@given(offset=offsets)
def test_seek_offsets(consumer: KafkaConsumer, offset: object) -> None:
    tp = TopicPartition("props", 0)
    valid = isinstance(offset, int) and not isinstance(offset, bool) and 0 <= offset < 2**63
    try:
        consumer.seek(tp, offset)  # type: ignore[arg-type]
    except ValueError as e:
        assert not valid and "offset" in str(e)
        return
    assert valid
    assert consumer.position(tp) == offset


@SLOW
@given(offset=offsets, metadata=st.one_of(st.text(max_size=5), st.none(), st.integers()))
def test_commit_offsets(consumer: KafkaConsumer, offset: object, metadata: object) -> None:
    tp = TopicPartition("props", 0)
    valid = (isinstance(offset, int) and not isinstance(offset, bool) and 0 <= offset < 2**63
             and isinstance(metadata, str))
    try:
        consumer.commit_sync({tp: OffsetAndMetadata(offset, metadata)}, timeout=10)  # type: ignore[arg-type]
    except ValueError as e:
        assert not valid and "offsets" in str(e)
        return
    except KafkaError as e:  # a broker refusal (e.g. an offset past the end is fine on the mock)
        assert e.code, str(e)
        return
    assert valid


@FAST
@given(topic=st.one_of(st.text(max_size=12), st.sampled_from(["", ".", "..", "a" * 250, "ok", "a\x00b"])),
       partition=st.one_of(st.integers(min_value=-(2**40), max_value=2**40), st.booleans()))
def test_partition_arguments(consumer: KafkaConsumer, topic: str, partition: int) -> None:
    valid = (bool(TOPIC_RE.fullmatch(topic)) and topic not in (".", "..")
             and not isinstance(partition, bool) and 0 <= partition < 2**31)
    tp = TopicPartition(topic, partition)
    for call in (lambda: consumer.seek(tp, 0), lambda: consumer.position(tp, timeout=1),
                 lambda: consumer.pause([tp]), lambda: consumer.commit_sync({tp: 1}, timeout=5)):
        try:
            call()
        except ValueError as e:
            assert not valid, str(e)
            assert "partition" in str(e) or "topic" in str(e), str(e)
        except (IllegalStateError, KafkaError) as e:
            assert valid or isinstance(e, ValueError), f"{type(e).__name__}: {e}"
            if isinstance(e, KafkaError) and not isinstance(e, IllegalStateError):
                assert e.code, str(e)


@SLOW
@given(st.lists(st.one_of(st.text(max_size=10), st.sampled_from(["^re.*", "ok", "a b", "", "x\x00"])),
                max_size=3))
def test_subscribe_topic_names(private_broker: EmbeddedBroker, topics: list[str]) -> None:
    with KafkaConsumer({"bootstrap.servers": private_broker.bootstrap_servers, "group.id": "props-s"}) as c:
        valid = bool(topics) and all(
            (TOPIC_RE.fullmatch(t) and t not in (".", "..")) or (t.startswith("^") and len(t) > 1
                                                                 and "\x00" not in t)
            for t in topics)
        try:
            c.subscribe(topics)
        except (ValueError, KafkaError) as e:
            assert not valid or isinstance(e, KafkaError), str(e)
            assert "topic" in str(e), str(e)
            return
        assert valid, f"subscribe accepted {topics!r}"


# -- producer bugs found by the properties above, fixed in kipconsumer/_producer.pyx ------------------
@pytest.mark.parametrize("ts", [2**63, 2**64, 2**70, -1, -(2**63), -(2**70), float("inf"), float("-inf"),
                                float("nan"), 1e19, -0.5e3])
def test_timestamp_out_of_range_is_value_error(producer: KafkaProducer, ts: float) -> None:
    # was: OverflowError for >= 2**63 (and for inf)
    with pytest.raises(ValueError, match=r"timestamp must be epoch milliseconds in 0\.\.9223372036854775807"):
        producer.send("props", b"v", timestamp=ts)  # type: ignore[arg-type]
    assert producer.send("props", b"v", timestamp=2**63 - 1).result(10).topic == "props"


@pytest.mark.parametrize("hdrs", ["", b"", 0, 0.0, False, "ab", b"ab", 5, ["ab"], [("a", b"1", "x")],
                                  [b"ab"]])
def test_headers_that_are_not_pairs_are_serialization_errors(producer: KafkaProducer, hdrs: object) -> None:
    # was: a falsy headers object ('', b'', 0) was taken as "no headers"; ["ab"] unpacked to ("a", "b")
    with pytest.raises(SerializationError, match="header"):
        producer.send("props", b"v", headers=hdrs)  # type: ignore[arg-type]


@pytest.mark.parametrize("hdrs", [None, [], (), {}])
def test_empty_headers_are_no_headers(producer: KafkaProducer, hdrs: object) -> None:
    assert producer.send("props", b"v", headers=hdrs).result(10).topic == "props"  # type: ignore[arg-type]


def test_header_str_that_is_not_utf8_is_serialization_error(producer: KafkaProducer) -> None:
    with pytest.raises(SerializationError, match="header name"):
        producer.send("props", b"v", headers=[("\ud800", b"x")])
    with pytest.raises(SerializationError, match="header 'h' value"):
        producer.send("props", b"v", headers={"h": "\udfff"})


@pytest.mark.parametrize("partition", [2**31, 2**63, 2**70, -1, -(2**70)])
def test_partition_out_of_any_range_is_typed(producer: KafkaProducer, partition: int) -> None:
    with pytest.raises(KafkaError, match=f"partition {partition} of topic 'props'") as ei:
        producer.send("props", b"v", partition=partition)
    assert ei.value.code == "_UNKNOWN_PARTITION"


@pytest.mark.parametrize("topic", ["props\x00other", "a b", "..", ".", "", "a" * 250, "é", "a/b", "a:b"])
def test_topic_name_rule(producer: KafkaProducer, topic: str) -> None:
    # was: not checked; a NUL byte truncated the name (the record went to topic "props")
    before = producer.metrics()
    with pytest.raises(InvalidTopicError, match="invalid topic name") as ei:
        producer.send(topic, b"v")
    e = ei.value
    assert isinstance(e, KafkaError) and isinstance(e, ValueError) and e.code == "TOPIC_EXCEPTION"
    assert repr(topic) in str(e) and "1..249" in str(e) and "[A-Za-z0-9._-]" in str(e)
    after = producer.metrics()
    assert after["records_sent"] == before["records_sent"]
    assert after["topics_known"] == before["topics_known"]  # never handed to librdkafka


def test_topic_name_rule_limits_are_accepted(producer: KafkaProducer) -> None:
    for topic in ("a" * 249, "a.b_c-D9", "...", "_", "-"):
        assert producer.send(topic, b"v").result(10).topic == topic
