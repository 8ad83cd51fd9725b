"""Table-driven tests of kipconsumer.config: defaults, mappings, validation, cross-checks, secrets.

The librdkafka acceptance tests hand the produced ``rdkafka`` dicts to the real librdkafka
(``rd_kafka_conf_set`` + ``rd_kafka_new`` through ctypes), so a mapping librdkafka would refuse
fails here rather than in the clients.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Mapping

import pytest

from kipconsumer import _loader, config
from kipconsumer._native import librdkafka_property_names
from kipconsumer.config import (
    CONSUMER_SPECS,
    PIPELINE_SPECS,
    PRODUCER_SPECS,
    TASK_SPECS,
    ConsumerSettings,
    ProducerSettings,
    TaskSettings,
    consumer_settings,
    is_secret,
    librdkafka_names,
    producer_settings,
    redact,
    task_settings,
)
from kipconsumer.errors import ConfigError

BOOT = {"bootstrap.servers": "127.0.0.1:9092"}
SECRET = "hunter2-s3cr3t"


def cons(conf: Mapping[str, object]) -> ConsumerSettings:
    return consumer_settings({**BOOT, **conf})


def prod(conf: Mapping[str, object]) -> ProducerSettings:
    return producer_settings({**BOOT, **conf})


# ------------------------------------------------------------------------------------------------
# librdkafka through ctypes (tests only)
# ------------------------------------------------------------------------------------------------

_lib = ctypes.CDLL(_loader.librdkafka_path())
_lib.rd_kafka_conf_new.restype = ctypes.c_void_p
_lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                   ctypes.c_size_t]
_lib.rd_kafka_conf_destroy.argtypes = [ctypes.c_void_p]
_lib.rd_kafka_new.restype = ctypes.c_void_p
_lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
_lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
RD_KAFKA_PRODUCER, RD_KAFKA_CONSUMER = 0, 1


def librdkafka_accepts(kind: int, rdkafka: Mapping[str, str]) -> str:
    """"ok", or librdkafka's error for the first property it refuses / for rd_kafka_new."""
    conf = _lib.rd_kafka_conf_new()
    err = ctypes.create_string_buffer(512)
    for name, value in {**rdkafka, "log_level": "0"}.items():
        if _lib.rd_kafka_conf_set(conf, name.encode(), value.encode(), err, 512) != 0:
            _lib.rd_kafka_conf_destroy(conf)
            return f"{name}={value}: {err.value.decode()}"
    rk = _lib.rd_kafka_new(kind, conf, err, 512)
    if not rk:
        _lib.rd_kafka_conf_destroy(conf)
        return err.value.decode()
    _lib.rd_kafka_destroy(rk)
    return "ok"


# ------------------------------------------------------------------------------------------------
# Defaults
# ------------------------------------------------------------------------------------------------


def test_consumer_defaults() -> None:
    s = cons({})
    assert (s.group_id, s.max_poll_records, s.poll_fairness, s.max_poll_interval_ms) == (
        None, 500, "proportional", 300_000)
    assert (s.session_timeout_ms, s.heartbeat_interval_ms, s.enable_auto_commit) == (45_000, 3_000, True)
    assert (s.auto_commit_interval_ms, s.default_api_timeout_ms) == (5_000, 60_000)
    assert s.rdkafka == {
        "bootstrap.servers": "127.0.0.1:9092",
        "session.timeout.ms": "45000",
        "heartbeat.interval.ms": "3000",
        "max.poll.interval.ms": "300000",
        "enable.auto.commit": "true",
        "auto.commit.interval.ms": "5000",
        "auto.offset.reset": "latest",
        "fetch.max.bytes": "52428800",
        "max.partition.fetch.bytes": "1048576",
        "isolation.level": "read_uncommitted",
        "partition.assignment.strategy": "range",
        "queued.max.messages.kbytes": "8192",
        "queued.min.messages": "100000",
        "fetch.queue.backoff.ms": "10",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "false",
    }


def test_producer_defaults() -> None:
    s = prod({})
    assert (s.max_block_ms, s.request_timeout_ms, s.delivery_timeout_ms, s.linger_ms, s.buffer_memory) == (
        60_000, 30_000, 120_000, 5, 33_554_432)
    assert s.rdkafka == {
        "bootstrap.servers": "127.0.0.1:9092",
        "acks": "all",
        "linger.ms": "5",
        "queue.buffering.max.kbytes": "32768",
        "message.timeout.ms": "120000",
        "request.timeout.ms": "30000",
        "enable.idempotence": "true",
        "max.in.flight": "5",
        "partitioner": "murmur2_random",
        "delivery.report.only.error": "false",
    }


def test_producer_partitioner_defaults_to_javas_and_the_old_one_is_one_setting_away() -> None:
    """Keyed records go where the Java client puts them (murmur2) unless partitioner is set."""
    assert prod({}).rdkafka["partitioner"] == "murmur2_random"
    assert prod({"partitioner": "consistent_random"}).rdkafka["partitioner"] == "consistent_random"
    assert prod({"partitioner": "Murmur2"}).rdkafka["partitioner"] == "murmur2"
    with pytest.raises(ConfigError, match=r"partitioner='crc32' is not allowed: allowed murmur2_random\|"):
        prod({"partitioner": "crc32"})


def test_task_defaults() -> None:
    assert task_settings({}) == TaskSettings(task_timeout_ms=300_000, retry_backoff_ms=100)
    assert task_settings({"task.timeout.ms": "0", "retry.backoff.ms": 5}) == TaskSettings(0, 5)


def test_settings_are_frozen() -> None:
    s = cons({})
    with pytest.raises(AttributeError):
        s.max_poll_records = 1  # type: ignore[misc]


def test_none_means_default() -> None:
    s = cons({"max.poll.records": None, "group.id": None, "debug": None, "linger.ms": None})
    assert s.max_poll_records == 500 and s.group_id is None
    assert "group.id" not in s.rdkafka and "debug" not in s.rdkafka


# ------------------------------------------------------------------------------------------------
# Mappings Java name -> librdkafka (name, value)
# ------------------------------------------------------------------------------------------------

CONSUMER_MAPPINGS = [
    ("group.id", "g1", "group.id", "g1"),
    ("group.instance.id", "i1", "group.instance.id", "i1"),
    ("client.id", "me", "client.id", "me"),
    ("session.timeout.ms", 60000, "session.timeout.ms", "60000"),
    ("heartbeat.interval.ms", "1000", "heartbeat.interval.ms", "1000"),
    ("max.poll.interval.ms", 600000, "max.poll.interval.ms", "600000"),
    ("enable.auto.commit", False, "enable.auto.commit", "false"),
    ("enable.auto.commit", "TRUE", "enable.auto.commit", "true"),
    ("auto.commit.enable", "false", "enable.auto.commit", "false"),
    ("auto.commit.interval.ms", 100, "auto.commit.interval.ms", "100"),
    ("auto.offset.reset", "earliest", "auto.offset.reset", "earliest"),
    ("auto.offset.reset", "Latest", "auto.offset.reset", "latest"),
    ("auto.offset.reset", "none", "auto.offset.reset", "error"),
    ("fetch.min.bytes", 1024, "fetch.min.bytes", "1024"),
    ("fetch.max.bytes", 10_000_000, "fetch.max.bytes", "10000000"),
    ("fetch.max.wait.ms", 100, "fetch.wait.max.ms", "100"),
    ("fetch.wait.max.ms", 100, "fetch.wait.max.ms", "100"),
    ("max.partition.fetch.bytes", 65536, "max.partition.fetch.bytes", "65536"),
    ("fetch.message.max.bytes", 65536, "max.partition.fetch.bytes", "65536"),
    ("isolation.level", "READ_COMMITTED", "isolation.level", "read_committed"),
    ("isolation.level", "read_uncommitted", "isolation.level", "read_uncommitted"),
    ("partition.assignment.strategy", "roundrobin", "partition.assignment.strategy", "roundrobin"),
    ("partition.assignment.strategy", "range, roundrobin", "partition.assignment.strategy",
     "range,roundrobin"),
    ("partition.assignment.strategy", ["range", "roundrobin"], "partition.assignment.strategy",
     "range,roundrobin"),
    ("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RangeAssignor",
     "partition.assignment.strategy", "range"),
    ("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RoundRobinAssignor,range",
     "partition.assignment.strategy", "roundrobin,range"),
    ("partition.assignment.strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
     "partition.assignment.strategy", "cooperative-sticky"),
    ("partition.assignment.strategy", "cooperative-sticky", "partition.assignment.strategy",
     "cooperative-sticky"),
    ("request.timeout.ms", 20000, "socket.timeout.ms", "20000"),
    ("retry.backoff.ms", 250, "retry.backoff.ms", "250"),
    ("reconnect.backoff.ms", 10, "reconnect.backoff.ms", "10"),
    ("reconnect.backoff.max.ms", 5000, "reconnect.backoff.max.ms", "5000"),
    ("metadata.max.age.ms", 30000, "metadata.max.age.ms", "30000"),
    ("check.crcs", True, "check.crcs", "true"),
    ("security.protocol", "SASL_SSL", "security.protocol", "sasl_ssl"),
    ("security.protocol", "plaintext", "security.protocol", "plaintext"),
    ("queued.max.messages.kbytes", 1024, "queued.max.messages.kbytes", "1024"),
    ("queued.min.messages", 5, "queued.min.messages", "5"),
    ("bootstrap.servers", "a:1, b:2", "bootstrap.servers", "a:1,b:2"),
    ("bootstrap.servers", ["a:1", "b:2"], "bootstrap.servers", "a:1,b:2"),
]


@pytest.mark.parametrize(("key", "value", "rd_name", "rd_value"), CONSUMER_MAPPINGS)
def test_consumer_mapping(key: str, value: object, rd_name: str, rd_value: str) -> None:
    assert cons({key: value}).rdkafka[rd_name] == rd_value


def test_metadata_broker_list_is_bootstrap_servers() -> None:
    s = consumer_settings({"metadata.broker.list": "h:1"})
    assert s.rdkafka["bootstrap.servers"] == "h:1" and "metadata.broker.list" not in s.rdkafka


PRODUCER_MAPPINGS = [
    ("acks", "all", "acks", "all"),
    ("acks", "-1", "acks", "all"),
    ("acks", -1, "acks", "all"),
    ("acks", "ALL", "acks", "all"),
    ("acks", 1, "acks", "1"),
    ("acks", "0", "acks", "0"),
    ("request.required.acks", "1", "acks", "1"),
    ("linger.ms", 0, "linger.ms", "0"),
    ("queue.buffering.max.ms", 20, "linger.ms", "20"),
    ("batch.size", 16384, "batch.size", "16384"),
    ("buffer.memory", 1024, "queue.buffering.max.kbytes", "1"),
    ("buffer.memory", 1025, "queue.buffering.max.kbytes", "2"),
    ("buffer.memory", 1, "queue.buffering.max.kbytes", "1"),
    ("buffer.memory", "67108864", "queue.buffering.max.kbytes", "65536"),
    ("queue.buffering.max.kbytes", 100, "queue.buffering.max.kbytes", "100"),
    ("delivery.timeout.ms", 40000, "message.timeout.ms", "40000"),
    ("message.timeout.ms", 40000, "message.timeout.ms", "40000"),
    ("request.timeout.ms", 10000, "request.timeout.ms", "10000"),
    ("retries", 3, "retries", "3"),
    ("message.send.max.retries", 3, "retries", "3"),
    ("enable.idempotence", "false", "enable.idempotence", "false"),
    ("compression.type", "ZSTD", "compression.type", "zstd"),
    ("compression.type", "lz4", "compression.type", "lz4"),
    ("compression.codec", "gzip", "compression.type", "gzip"),
    ("max.in.flight.requests.per.connection", 3, "max.in.flight", "3"),
    ("max.in.flight", 2, "max.in.flight", "2"),
    ("max.request.size", 2_000_000, "message.max.bytes", "2000000"),
    ("message.max.bytes", 2_000_000, "message.max.bytes", "2000000"),
    ("transactional.id", "tx-1", "transactional.id", "tx-1"),
    ("transaction.timeout.ms", 200000, "transaction.timeout.ms", "200000"),
    ("client.id", "p", "client.id", "p"),
    ("security.protocol", "SSL", "security.protocol", "ssl"),
]


@pytest.mark.parametrize(("key", "value", "rd_name", "rd_value"), PRODUCER_MAPPINGS)
def test_producer_mapping(key: str, value: object, rd_name: str, rd_value: str) -> None:
    assert prod({key: value}).rdkafka[rd_name] == rd_value


def test_producer_fields_follow_config() -> None:
    s = prod({"max.block.ms": "0", "request.timeout.ms": 10, "delivery.timeout.ms": 19, "linger.ms": 9,
              "buffer.memory": 4096.0})
    assert (s.max_block_ms, s.request_timeout_ms, s.delivery_timeout_ms, s.linger_ms, s.buffer_memory) == (
        0, 10, 19, 9, 4096)


def test_consumer_fields_follow_config() -> None:
    s = cons({"group.id": "g", "max.poll.records": "7", "poll.fairness": "GREEDY",
              "enable.auto.commit": "False", "auto.commit.interval.ms": 1, "default.api.timeout.ms": 0,
              "session.timeout.ms": 10000, "heartbeat.interval.ms": 100, "max.poll.interval.ms": 20000})
    assert s == ConsumerSettings("g", 7, "greedy", 20000, 10000, 100, False, 1, 0, s.rdkafka,
                                 read_committed=False, cooperative=False, fetch_buffer_max_records=100_000,
                                 fetch_buffer_max_bytes=8_192 * 1024)
    assert "max.poll.records" not in s.rdkafka and "poll.fairness" not in s.rdkafka
    assert "default.api.timeout.ms" not in s.rdkafka


@pytest.mark.parametrize(("conf", "expected"), [
    ({}, (False, False, 100_000, 8_192 * 1024)),
    ({"isolation.level": "read_committed", "partition.assignment.strategy": "cooperative-sticky",
      "queued.max.messages.kbytes": 10, "max.poll.records": 30_000}, (True, True, 120_000, 10 * 1024)),
    ({"group.protocol": "consumer", "queued.min.messages": 7}, (False, True, 7, 8_192 * 1024)),
])
def test_consumer_derived_settings_have_one_source(conf: dict[str, object],
                                                  expected: tuple[bool, bool, int, int]) -> None:
    """The native consumer reads these and nothing else (no fallback of its own): read_committed,
    the incremental protocol, and the fetch buffer's bounds (librdkafka's prefetch bounds)."""
    s = cons({"group.id": "g", **conf})
    assert (s.read_committed, s.cooperative, s.fetch_buffer_max_records, s.fetch_buffer_max_bytes) == expected


@pytest.mark.parametrize(("max_poll_records", "queued_min"),
                         [(1, "100000"), (25000, "100000"), (25001, "100004"), (1_000_000, "4000000")])
def test_queued_min_messages_follows_max_poll_records(max_poll_records: int, queued_min: str) -> None:
    assert cons({"max.poll.records": max_poll_records}).rdkafka["queued.min.messages"] == queued_min


@pytest.mark.parametrize(("conf", "thread"), [
    ({}, True),
    ({"poll.stall.fetch.pause.ms": 100}, True),
    ({"poll.prefetch.thread": False}, False),
])
def test_the_prefetch_thread_is_on_by_default(conf: dict[str, object], thread: bool) -> None:
    """With or without the stall pause: a stall releases what the thread moved too."""
    assert cons(conf).poll_prefetch_thread is thread


@pytest.mark.parametrize(("conf", "pause_ms"), [
    ({}, 5000),                                      # max.poll.interval.ms 300000: 300000 / 20 >= 5000
    ({"max.poll.interval.ms": 100_000}, 5000),
    ({"max.poll.interval.ms": 99_999}, 0),           # / 20 < 5000: off unless given
    ({"max.poll.interval.ms": 99_999, "poll.stall.fetch.pause.ms": 4999}, 4999),
    ({"poll.stall.fetch.pause.ms": 0}, 0),
    ({"poll.stall.fetch.pause.ms": 15_000}, 15_000),
])
def test_the_stall_pause_is_on_by_default_where_the_poll_interval_allows(conf: dict[str, object],
                                                                         pause_ms: int) -> None:
    """Default 5000 ms, but never past max.poll.interval.ms / 20 (the release counts as a poll for
    librdkafka's own max.poll.interval.ms): off by default below 100 s."""
    assert cons(conf).poll_stall_fetch_pause_ms == pause_ms


def test_user_prefetch_bounds_win() -> None:
    rd = cons({"queued.min.messages": 3, "queued.max.messages.kbytes": 65536}).rdkafka
    assert (rd["queued.min.messages"], rd["queued.max.messages.kbytes"]) == ("3", "65536")


def test_same_setting_twice_with_same_value_is_fine() -> None:
    assert cons({"fetch.max.wait.ms": 7, "fetch.wait.max.ms": "7"}).rdkafka["fetch.wait.max.ms"] == "7"


@pytest.mark.parametrize(("conf", "names"), [
    ({"fetch.max.wait.ms": 7, "fetch.wait.max.ms": 8}, ("fetch.max.wait.ms", "fetch.wait.max.ms")),
    ({"enable.auto.commit": True, "auto.commit.enable": False}, ("enable.auto.commit", "auto.commit.enable")),
    ({"bootstrap.servers": "a:1", "metadata.broker.list": "b:1"},
     ("bootstrap.servers", "metadata.broker.list")),
])
def test_conflicting_spellings_of_one_setting(conf: dict[str, object], names: tuple[str, str]) -> None:
    with pytest.raises(ConfigError) as exc:
        consumer_settings({**BOOT, **conf})
    assert all(n in str(exc.value) for n in names)


def test_conflicting_producer_alias() -> None:
    with pytest.raises(ConfigError, match="linger.ms"):
        prod({"linger.ms": 5, "queue.buffering.max.ms": 6})


# ------------------------------------------------------------------------------------------------
# Pass-through of librdkafka names
# ------------------------------------------------------------------------------------------------

PASSTHROUGH = [
    ("debug", "cgrp,fetch", "cgrp,fetch"),
    ("statistics.interval.ms", 1000, "1000"),
    ("socket.keepalive.enable", True, "true"),
    ("topic.metadata.refresh.interval.ms", "60000", "60000"),
    ("sasl.mechanisms", "PLAIN", "PLAIN"),
    ("sasl.username", "alice", "alice"),
    ("ssl.ca.location", "/etc/ca.pem", "/etc/ca.pem"),
    ("queue.buffering.max.messages", 1000, "1000"),
    ("compression.level", 3, "3"),
    ("partitioner", "murmur2_random", "murmur2_random"),
    ("client.rack", "r1", "r1"),
    ("api.version.request", False, "false"),
    ("enable.auto.offset.store", "FALSE", "false"),  # equal to the managed value: accepted
]


@pytest.mark.parametrize(("key", "value", "rd_value"), PASSTHROUGH)
def test_consumer_passes_librdkafka_names_through(key: str, value: object, rd_value: str) -> None:
    assert cons({key: value}).rdkafka[key] == rd_value


@pytest.mark.parametrize("key", ["queuing.strategy", "sticky.partitioning.linger.ms", "debug",
                                 "enable.gapless.guarantee"])
def test_producer_passes_librdkafka_names_through(key: str) -> None:
    value = {"queuing.strategy": "fifo", "sticky.partitioning.linger.ms": 10, "debug": "msg",
             "enable.gapless.guarantee": False}[key]
    assert key in prod({key: value}).rdkafka


def test_every_dumped_librdkafka_name_is_accepted() -> None:
    pointer_like = {n for n in librdkafka_property_names() if n.endswith("_cb")}
    assert librdkafka_property_names() - pointer_like <= librdkafka_names()


def test_passthrough_rejects_non_scalar_values() -> None:
    with pytest.raises(ConfigError, match=r"debug=\['all'\].*str, int, float or bool"):
        cons({"debug": ["all"]})


@pytest.mark.parametrize(("key", "value", "message"), [
    ("debug", "", "debug='' is refused by librdkafka: "),
    ("debug", "everything", "debug='everything' is refused by librdkafka: "),
    ("statistics.interval.ms", "soon", "statistics.interval.ms='soon' is refused by librdkafka: "),
    ("socket.keepalive.enable", "maybe", "socket.keepalive.enable='maybe' is refused by librdkafka: "),
    ("queued.min.messages", 0, "queued.min.messages=0 is out of range: allowed 1..10000000"),
    ("partitioner", "nope", "partitioner='nope' is refused by librdkafka: "),
])
def test_passthrough_values_are_prechecked_by_librdkafka(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        cons({key: value})
    assert message in str(exc.value)


def test_refused_secret_passthrough_hides_librdkafka_detail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "_librdkafka_check", lambda: lambda name, value: f"bad value {value}")
    with pytest.raises(ConfigError) as exc:
        cons({"sasl.password": SECRET})
    assert str(exc.value) == "sasl.password=*** is refused by librdkafka"


def test_reconnect_backoff_bounds_ordered() -> None:
    with pytest.raises(ConfigError, match="reconnect.backoff.max.ms=50 must be >= reconnect.backoff.ms=100"):
        cons({"reconnect.backoff.max.ms": 50})
    with pytest.raises(ConfigError, match="max.ms=10000 must be >= reconnect.backoff.ms=20000"):
        prod({"reconnect.backoff.ms": 20000})


@pytest.mark.parametrize("key", ["rebalance_cb", "error_cb", "opaque", "dr_msg_cb"])
def test_pointer_properties_are_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}' is a librdkafka callback"):
        cons({key: "x"})


@pytest.mark.parametrize(("conf", "key"), [
    ({"enable.auto.offset.store": True}, "enable.auto.offset.store"),
    ({"enable.partition.eof": "true"}, "enable.partition.eof"),
])
def test_managed_consumer_properties(conf: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=f"manages '{key}'"):
        cons(conf)


def test_managed_producer_property() -> None:
    with pytest.raises(ConfigError, match="delivery.report.only.error"):
        prod({"delivery.report.only.error": True})


# ------------------------------------------------------------------------------------------------
# Bad values: the message names the key, the value and the allowed values
# ------------------------------------------------------------------------------------------------

CONSUMER_BAD = [
    ("max.poll.records", 0, "max.poll.records=0 is out of range: allowed 1..1000000"),
    ("max.poll.records", 1_000_001, "max.poll.records=1000001 is out of range: allowed 1..1000000"),
    ("max.poll.records", "0", "max.poll.records=0 is out of range: allowed 1..1000000"),
    ("max.poll.records", "ten", "max.poll.records='ten' is not an integer: allowed 1..1000000"),
    ("max.poll.records", 1.5, "max.poll.records=1.5 is not an integer: allowed 1..1000000"),
    ("max.poll.records", True, "max.poll.records=True is not an integer: allowed 1..1000000"),
    ("max.poll.records", "1_000", "max.poll.records='1_000' is not an integer"),
    ("max.poll.records", "1e3", "max.poll.records='1e3' is not an integer"),
    ("max.poll.records", [5], "max.poll.records=[5] is not an integer"),
    ("session.timeout.ms", -1, "session.timeout.ms=-1 is out of range: allowed 1..3600000"),
    ("max.poll.interval.ms", 0, "max.poll.interval.ms=0 is out of range: allowed 1..86400000"),
    ("heartbeat.interval.ms", "x", "heartbeat.interval.ms='x' is not an integer: allowed 1..3600000"),
    ("auto.commit.interval.ms", -5, "auto.commit.interval.ms=-5 is out of range: allowed 0..86400000"),
    ("default.api.timeout.ms", -1, "default.api.timeout.ms=-1 is out of range: allowed 0..2147483647"),
    ("fetch.min.bytes", 0, "fetch.min.bytes=0 is out of range: allowed 1..100000000"),
    ("fetch.max.wait.ms", 300_001, "fetch.max.wait.ms=300001 is out of range: allowed 0..300000"),
    ("fetch.wait.max.ms", -1, "fetch.wait.max.ms=-1 is out of range: allowed 0..300000"),
    ("max.partition.fetch.bytes", 0, "max.partition.fetch.bytes=0 is out of range: allowed 1..1000000000"),
    ("request.timeout.ms", 5, "request.timeout.ms=5 is out of range: allowed 10..300000"),
    ("enable.auto.commit", "yes", "enable.auto.commit='yes' is not a boolean: allowed true|false"),
    ("enable.auto.commit", 1, "enable.auto.commit=1 is not a boolean: allowed true|false"),
    ("check.crcs", "0", "check.crcs='0' is not a boolean: allowed true|false"),
    ("auto.offset.reset", "smallest",
     "auto.offset.reset='smallest' is not allowed: allowed earliest|latest|none"),
    ("auto.offset.reset", 1, "auto.offset.reset='1' is not allowed: allowed earliest|latest|none"),
    ("isolation.level", "serializable",
     "isolation.level='serializable' is not allowed: allowed read_committed|read_uncommitted"),
    ("poll.fairness", "random", "poll.fairness='random' is not allowed: allowed proportional|greedy"),
    ("security.protocol", "tls", "allowed plaintext|ssl|sasl_plaintext|sasl_ssl"),
    ("partition.assignment.strategy", "sticky", "unknown assignor 'sticky': allowed range|roundrobin|"),
    ("partition.assignment.strategy", "org.apache.kafka.clients.consumer.StickyAssignor",
     "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"),
    ("partition.assignment.strategy", "range,", "has an empty entry"),
    ("partition.assignment.strategy", "range,cooperative-sticky", "cannot be combined"),
    ("partition.assignment.strategy", 5, "partition.assignment.strategy=5 is not a valid assignor list"),
    ("group.id", "", "group.id='' is empty: allowed a non-empty string"),
    ("group.id", 7, "group.id=7 is not a string: allowed a non-empty string"),
    ("group.instance.id", "  ", "group.instance.id='  ' is empty"),
    ("client.id", b"x", "client.id=b'x' is not a string: allowed a string"),
    ("bootstrap.servers", "", "bootstrap.servers='' has an empty entry"),
    ("bootstrap.servers", ["a:1", 2], "bootstrap.servers=['a:1', 2] is not a valid host:port list"),
    ("group.protocol", "eager", "group.protocol='eager' is not allowed: allowed classic|consumer"),
]


@pytest.mark.parametrize(("key", "value", "message"), CONSUMER_BAD)
def test_consumer_bad_value(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        cons({key: value})
    assert message in str(exc.value)
    assert key in str(exc.value)


PRODUCER_BAD = [
    ("acks", "2", "acks='2' is not allowed: allowed all|-1|0|1"),
    ("acks", "none", "acks='none' is not allowed: allowed all|-1|0|1"),
    ("linger.ms", -1, "linger.ms=-1 is out of range: allowed 0..900000"),
    ("max.block.ms", -1, "max.block.ms=-1 is out of range: allowed 0..2147483647"),
    ("request.timeout.ms", 0, "request.timeout.ms=0 is out of range: allowed 10..300000"),
    # librdkafka's socket.timeout.ms, which it also sets, takes 10..300000: the error names the key given
    ("request.timeout.ms", 9, "request.timeout.ms=9 is out of range: allowed 10..300000"),
    ("request.timeout.ms", 300_001, "request.timeout.ms=300001 is out of range: allowed 10..300000"),
    ("delivery.timeout.ms", -1, "delivery.timeout.ms=-1 is out of range: allowed 0..2147483647"),
    ("buffer.memory", 0, "buffer.memory=0 is out of range: allowed 1..2199023254528"),
    ("queue.buffering.max.kbytes", 0, "queue.buffering.max.kbytes=0 is out of range: allowed 1..2147483647"),
    ("batch.size", 0, "batch.size=0 is out of range: allowed 1..2147483647"),
    ("retries", -1, "retries=-1 is out of range: allowed 0..2147483647"),
    ("enable.idempotence", "maybe", "enable.idempotence='maybe' is not a boolean: allowed true|false"),
    ("compression.type", "brotli",
     "compression.type='brotli' is not allowed: allowed none|gzip|snappy|lz4|zstd"),
    ("max.in.flight.requests.per.connection", 0,
     "max.in.flight.requests.per.connection=0 is out of range: allowed 1..1000000"),
    ("max.request.size", 999, "max.request.size=999 is out of range: allowed 1000..1000000000"),
    ("transactional.id", "", "transactional.id='' is empty"),
    ("transaction.timeout.ms", 999, "transaction.timeout.ms=999 is out of range: allowed 1000..2147483647"),
]


@pytest.mark.parametrize(("key", "value", "message"), PRODUCER_BAD)
def test_producer_bad_value(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        prod({key: value})
    assert message in str(exc.value)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("task.timeout.ms", -1, "task.timeout.ms=-1 is out of range: allowed 0..2147483647"),
    ("retry.backoff.ms", "soon", "retry.backoff.ms='soon' is not an integer"),
    ("retries", -1, "retries=-1 is out of range"),
])
def test_task_bad_value(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        task_settings({key: value})


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        cons({"max.poll.records": 0})


@pytest.mark.parametrize("conf", [{5: 1}, {None: 1}, {("a",): 1}])
def test_non_str_keys(conf: dict[object, object]) -> None:
    with pytest.raises(ConfigError, match="config keys must be str"):
        consumer_settings({**BOOT, **conf})  # type: ignore[dict-item]


@pytest.mark.parametrize("func", [consumer_settings, producer_settings])
@pytest.mark.parametrize("conf", [{}, {"bootstrap.servers": None}, {"group.id": "g"}])
def test_bootstrap_servers_required(func: object, conf: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="'bootstrap.servers' is required"):
        func(conf)  # type: ignore[operator]


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        consumer_settings([("bootstrap.servers", "a:1")])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# Unknown keys
# ------------------------------------------------------------------------------------------------

UNKNOWN = [
    (consumer_settings, "max.poll.record",
     "unknown config 'max.poll.record': did you mean 'max.poll.records'?"),
    (consumer_settings, "max_poll_records", "did you mean 'max.poll.records'?"),
    (consumer_settings, "sesion.timeout.ms", "did you mean 'session.timeout.ms'?"),
    (consumer_settings, "enable.auto.comit", "did you mean 'enable.auto.commit'?"),
    (consumer_settings, "statistics.interval", "did you mean 'statistics.interval.ms'?"),
    (consumer_settings, "fetch.max.wait", "did you mean 'fetch.max.wait.ms'?"),
    (consumer_settings, "poll.fairnes", "did you mean 'poll.fairness'?"),
    (consumer_settings, "zzz", "unknown config 'zzz'"),
    (producer_settings, "linger.msec", "did you mean 'linger.ms'?"),
    (producer_settings, "buffer.memroy", "did you mean 'buffer.memory'?"),
    (producer_settings, "delivery.timout.ms", "did you mean 'delivery.timeout.ms'?"),
    (task_settings, "task.timeout", "unknown config 'task.timeout': did you mean 'task.timeout.ms'?"),
    (consumer_settings, "sasl.jaas.config", "sasl.username and sasl.password"),
    (consumer_settings, "value.deserializer", "config 'value.deserializer' must be a callable"),
    (producer_settings, "value.deserializer", "unknown config 'value.deserializer': a consumer config"),
    (producer_settings, "key.serializer", "pass key_serializer= to KafkaProducer"),
]


@pytest.mark.parametrize(("func", "key", "message"), UNKNOWN)
def test_unknown_key(func: object, key: str, message: str) -> None:
    conf = {} if func is task_settings else dict(BOOT)
    with pytest.raises(ConfigError) as exc:
        func({**conf, key: "1"})  # type: ignore[operator]
    assert message in str(exc.value)


def test_unknown_key_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(ConfigError) as exc:
        cons({"qqqqqqqqqqqq": 1})
    assert str(exc.value) == "unknown config 'qqqqqqqqqqqq'"


def test_unknown_key_with_none_value_still_raises() -> None:
    with pytest.raises(ConfigError, match="max.poll.recordz"):
        cons({"max.poll.recordz": None})


@pytest.mark.parametrize(("func", "key", "owner"), [
    (consumer_settings, "max.block.ms", "producer"),
    (consumer_settings, "buffer.memory", "producer"),
    (consumer_settings, "task.timeout.ms", "task executor"),
    (producer_settings, "poll.fairness", "consumer"),
    (producer_settings, "default.api.timeout.ms", "consumer"),
    (task_settings, "max.poll.records", "consumer"),
])
def test_key_of_another_client(func: object, key: str, owner: str) -> None:
    conf = {} if func is task_settings else dict(BOOT)
    with pytest.raises(ConfigError, match=f"'{key}' is a {owner} config"):
        func({**conf, key: 1})  # type: ignore[operator]


# ------------------------------------------------------------------------------------------------
# Consumer cross-checks
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("heartbeat", "session"), [(3000, 3000), (10000, 6000)])
def test_heartbeat_must_be_below_session(heartbeat: int, session: int) -> None:
    with pytest.raises(ConfigError) as exc:
        cons({"heartbeat.interval.ms": heartbeat, "session.timeout.ms": session})
    assert f"heartbeat.interval.ms={heartbeat}" in str(exc.value)
    assert f"session.timeout.ms={session}" in str(exc.value)


def test_heartbeat_above_default_session() -> None:
    with pytest.raises(ConfigError, match="session.timeout.ms=45000"):
        cons({"heartbeat.interval.ms": 50000})


@pytest.mark.parametrize(("interval", "session", "effective", "warns"), [
    (1000, 45000, 45000, True),
    (44999, 45000, 45000, True),
    (45000, 45000, 45000, False),
    (300000, 10000, 300000, False),
    (None, 600000, 600000, True),
])
def test_kip62_compatibility_rule(caplog: pytest.LogCaptureFixture, interval: int | None, session: int,
                                  effective: int, warns: bool) -> None:
    with caplog.at_level(logging.WARNING, logger="kipconsumer.config"):
        s = cons({"max.poll.interval.ms": interval, "session.timeout.ms": session})
    assert s.max_poll_interval_ms == effective
    assert s.rdkafka["max.poll.interval.ms"] == str(effective)
    warnings = [r for r in caplog.records if r.name == "kipconsumer.config" and r.levelno == logging.WARNING]
    assert bool(warnings) is warns
    if warns:
        assert "max.poll.interval.ms" in warnings[0].getMessage()
        assert "KIP-62" in warnings[0].getMessage()


def test_fetch_max_bytes_below_message_max_bytes() -> None:
    with pytest.raises(ConfigError, match="fetch.max.bytes=1000 must be >= message.max.bytes=1000000"):
        cons({"fetch.max.bytes": 1000})
    assert cons({"fetch.max.bytes": 1000, "message.max.bytes": 1000}).rdkafka["fetch.max.bytes"] == "1000"


def test_kip848_consumer_protocol_leaves_broker_side_settings_out() -> None:
    s = cons({"group.id": "g", "group.protocol": "consumer"})
    for name in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
        assert name not in s.rdkafka
    assert s.rdkafka["group.protocol"] == "consumer"
    assert librdkafka_accepts(RD_KAFKA_CONSUMER, s.rdkafka) == "ok"


@pytest.mark.parametrize("key", ["session.timeout.ms", "heartbeat.interval.ms",
                                 "partition.assignment.strategy"])
def test_kip848_refuses_broker_side_settings(key: str) -> None:
    value = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
             "partition.assignment.strategy": "range"}[key]
    with pytest.raises(ConfigError, match=f"'{key}' is not supported with group.protocol=consumer"):
        cons({"group.protocol": "consumer", key: value})


def test_the_implicit_group_protocol_applies_to_members_that_set_none() -> None:
    """set_implicit_group_protocol() (the pytest plugin's --group-protocol): a consumer with a group.id
    and no group.protocol uses it, as if its config said it; classic is the default; other values are
    refused by name."""
    from kipconsumer.config import set_implicit_group_protocol

    previous = set_implicit_group_protocol("classic")  # this session's (--group-protocol) put aside
    try:
        assert "group.protocol" not in cons({"group.id": "g"}).rdkafka
        assert set_implicit_group_protocol("consumer") == "classic"
        assert cons({"group.id": "g"}).rdkafka["group.protocol"] == "consumer"
        assert cons({"group.id": "g"}).cooperative
        assert cons({"group.id": "g", "group.protocol": "classic"}).rdkafka["group.protocol"] == "classic"
        assert "group.protocol" not in cons({}).rdkafka  # no group: nothing to join
        with pytest.raises(ConfigError, match="'session.timeout.ms' is not supported with group.protocol"):
            cons({"group.id": "g", "session.timeout.ms": 6000})
        with pytest.raises(ConfigError, match=r"'eager' is not one of classic\|consumer"):
            set_implicit_group_protocol("eager")
        set_implicit_group_protocol("classic")
        assert "group.protocol" not in cons({"group.id": "g"}).rdkafka
    finally:
        set_implicit_group_protocol(previous)


def test_kip848_only_settings_are_refused_with_the_classic_protocol() -> None:
    with pytest.raises(ConfigError, match="'group.remote.assignor' applies to group.protocol=consumer"):
        cons({"group.id": "g", "group.remote.assignor": "uniform"})
    s = cons({"group.id": "g", "group.protocol": "consumer", "group.remote.assignor": "uniform"})
    assert s.rdkafka["group.remote.assignor"] == "uniform"


# ------------------------------------------------------------------------------------------------
# Producer cross-checks
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("delivery", "linger", "request_ms"), [(30004, 5, 30000), (0, 0, 10), (100, 50, 51)])
def test_delivery_timeout_cross_check(delivery: int, linger: int, request_ms: int) -> None:
    with pytest.raises(ConfigError) as exc:
        prod({"delivery.timeout.ms": delivery, "linger.ms": linger, "request.timeout.ms": request_ms})
    message = str(exc.value)
    parts = (f"delivery.timeout.ms={delivery}", f"linger.ms={linger}", f"request.timeout.ms={request_ms}")
    for part in parts:
        assert part in message


def test_delivery_timeout_equal_to_sum_is_fine() -> None:
    s = prod({"delivery.timeout.ms": 30005, "linger.ms": 5, "request.timeout.ms": 30000})
    assert s.rdkafka["message.timeout.ms"] == "30005"


def test_delivery_timeout_check_uses_default_linger_and_request() -> None:
    with pytest.raises(ConfigError, match="linger.ms=5"):
        prod({"delivery.timeout.ms": 30004})


IDEMPOTENCE = [
    ({}, "true"),
    ({"acks": 1}, "false"),
    ({"acks": "0"}, "false"),
    ({"retries": 0}, "false"),
    ({"max.in.flight.requests.per.connection": 6}, "false"),
    ({"enable.idempotence": False, "max.in.flight.requests.per.connection": 100}, "false"),
    ({"enable.idempotence": True, "acks": "-1", "max.in.flight": 5, "retries": 1}, "true"),
]


@pytest.mark.parametrize(("conf", "expected"), IDEMPOTENCE)
def test_idempotence(conf: dict[str, object], expected: str) -> None:
    s = prod(conf)
    assert s.rdkafka["enable.idempotence"] == expected
    assert librdkafka_accepts(RD_KAFKA_PRODUCER, s.rdkafka) == "ok"


@pytest.mark.parametrize(("conf", "message"), [
    ({"enable.idempotence": True, "acks": 1}, "acks=1"),
    ({"enable.idempotence": "true", "retries": 0}, "retries=0"),
    ({"enable.idempotence": True, "max.in.flight.requests.per.connection": 6},
     "max.in.flight.requests.per.connection=6"),
    ({"transactional.id": "t", "acks": 0}, "transactional.id"),
    ({"transactional.id": "t", "enable.idempotence": False}, "transactional.id requires enable.idempotence"),
])
def test_unsatisfiable_idempotence(conf: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        prod(conf)


def test_transactional_delivery_timeout_follows_transaction_timeout() -> None:
    s = prod({"transactional.id": "t"})
    assert s.delivery_timeout_ms == 60000 and s.rdkafka["message.timeout.ms"] == "60000"
    assert librdkafka_accepts(RD_KAFKA_PRODUCER, s.rdkafka) == "ok"
    s = prod({"transactional.id": "t", "transaction.timeout.ms": 900000})
    assert s.delivery_timeout_ms == 120000
    with pytest.raises(ConfigError,
                       match="delivery.timeout.ms=120000 must be <= transaction.timeout.ms=60000"):
        prod({"transactional.id": "t", "delivery.timeout.ms": 120000})


# ------------------------------------------------------------------------------------------------
# librdkafka accepts what we produce
# ------------------------------------------------------------------------------------------------

ACCEPTED_CONSUMERS = [
    {},
    {"group.id": "g", "auto.offset.reset": "none", "isolation.level": "read_committed"},
    {"group.id": "g",
     "partition.assignment.strategy": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"},
    {"group.id": "g", "max.poll.interval.ms": 1000, "session.timeout.ms": 6000,
     "heartbeat.interval.ms": 2000},
    {"group.id": "g", "max.poll.records": 1_000_000, "fetch.max.wait.ms": 10, "request.timeout.ms": 10000},
    {"group.id": "g", "max.partition.fetch.bytes": 100_000_000, "fetch.max.bytes": 1_000_000},
    {"group.id": "g", "group.instance.id": "i", "security.protocol": "PLAINTEXT", "check.crcs": True},
    {"group.id": "g", "enable.auto.commit": False, "debug": "cgrp"},
]


@pytest.mark.parametrize("conf", ACCEPTED_CONSUMERS)
def test_librdkafka_accepts_consumer_config(conf: dict[str, object]) -> None:
    assert librdkafka_accepts(RD_KAFKA_CONSUMER, cons(conf).rdkafka) == "ok"


ACCEPTED_PRODUCERS = [
    {},
    {"acks": -1, "compression.type": "ZSTD", "max.request.size": 2_000_000, "batch.size": 16384,
     "buffer.memory": 1000},
    {"linger.ms": 0, "delivery.timeout.ms": 10, "request.timeout.ms": 10},
    {"request.timeout.ms": 300_000, "delivery.timeout.ms": 300_005},
    {"transactional.id": "t", "transaction.timeout.ms": 300000, "delivery.timeout.ms": 200000},
    {"retries": 10, "retry.backoff.ms": 1, "reconnect.backoff.ms": 0, "reconnect.backoff.max.ms": 0,
     "metadata.max.age.ms": 1},
]


@pytest.mark.parametrize("conf", ACCEPTED_PRODUCERS)
def test_librdkafka_accepts_producer_config(conf: dict[str, object]) -> None:
    """What the producer applies (client_rdkafka: rdkafka plus the client-side request timeout)."""
    assert librdkafka_accepts(RD_KAFKA_PRODUCER, prod(conf).client_rdkafka) == "ok"


@pytest.mark.parametrize("key", sorted({k for k, s in {**CONSUMER_SPECS, **PRODUCER_SPECS}.items()
                                        if s.rdkafka is not None}))
def test_every_mapped_name_is_a_librdkafka_name(key: str) -> None:
    spec = CONSUMER_SPECS.get(key) or PRODUCER_SPECS[key]
    assert spec.rdkafka in librdkafka_names()
    assert set(spec.aliases) <= librdkafka_names()


# ------------------------------------------------------------------------------------------------
# Secrets
# ------------------------------------------------------------------------------------------------

SECRET_CASES = [
    (consumer_settings, {"sasl.password": [SECRET]}),
    (consumer_settings, {"ssl.key.password": {SECRET: 1}}),
    (consumer_settings, {"ssl.keystore.password": (SECRET,)}),
    (consumer_settings, {"sasl.oauthbearer.client.secret": [SECRET]}),
    (consumer_settings, {"sasl.oauthbearer.config": [SECRET]}),
    (consumer_settings, {"ssl.key.pem": [SECRET]}),
    (producer_settings, {"sasl.jaas.config": f"PlainLoginModule required password='{SECRET}';"}),
    (producer_settings, {"sasl.passwd": SECRET}),
    (producer_settings, {"ssl_key": SECRET}),
]


@pytest.mark.parametrize(("func", "conf"), SECRET_CASES)
def test_secrets_never_in_messages(func: object, conf: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as exc:
        func({**BOOT, **conf})  # type: ignore[operator]
    assert SECRET not in str(exc.value)
    assert SECRET not in repr(exc.value)


def test_secret_passes_through_to_librdkafka() -> None:
    assert cons({"sasl.password": SECRET}).rdkafka["sasl.password"] == SECRET


@pytest.mark.parametrize(("key", "secret"), [
    ("sasl.password", True), ("SASL.PASSWORD", True), ("ssl.key.password", True),
    ("sasl.oauthbearer.client.secret", True), ("sasl.jaas.config", True), ("ssl.key.pem", True),
    ("ssl_key", True), ("sasl.oauthbearer.config", True), ("ssl.keystore.password", True),
    ("sasl.oauthbearer.assertion.private.key.passphrase", True),
    ("sasl.username", False), ("ssl.key.location", False), ("group.id", False),
])
def test_is_secret(key: str, secret: bool) -> None:
    assert is_secret(key) is secret


def test_redact() -> None:
    conf = {**BOOT, "sasl.password": SECRET, "sasl.oauthbearer.client.secret": SECRET,
            "sasl.jaas.config": SECRET, "sasl.username": "alice", "max.poll.records": 5}
    out = redact(conf)
    assert out == {**BOOT, "sasl.password": "***", "sasl.oauthbearer.client.secret": "***",
                   "sasl.jaas.config": "***", "sasl.username": "alice", "max.poll.records": 5}
    assert conf["sasl.password"] == SECRET  # input untouched


# ------------------------------------------------------------------------------------------------
# Tasks (KIP-572)
# ------------------------------------------------------------------------------------------------


def test_task_retries_deprecated(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kipconsumer.config"):
        s = task_settings({"retries": 5, "task.timeout.ms": 1000})
    assert s == TaskSettings(1000, 100)
    messages = [r.getMessage() for r in caplog.records
                if r.name == "kipconsumer.config" and r.levelno == logging.WARNING]
    assert len(messages) == 1 and "retries" in messages[0] and "deprecated" in messages[0]


def test_task_without_retries_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kipconsumer.config"):
        task_settings({"retries": None})
    assert not caplog.records


def test_task_settings_have_no_passthrough() -> None:
    with pytest.raises(ConfigError, match="unknown config 'debug'"):
        task_settings({"debug": "all"})


def test_tables_are_consistent() -> None:
    for table in (CONSUMER_SPECS, PRODUCER_SPECS, TASK_SPECS, PIPELINE_SPECS):
        for key, spec in table.items():
            assert spec.lo <= spec.hi, key
            if spec.default is not None and spec.kind.name == "INT":
                assert isinstance(spec.default, int) and spec.lo <= spec.default <= spec.hi, key


def test_docs_list_every_key() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text()
    for table in (CONSUMER_SPECS, PRODUCER_SPECS, TASK_SPECS, PIPELINE_SPECS):
        for key in table:
            assert f"| `{key}` |" in docs, key
