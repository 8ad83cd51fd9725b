"""librdkafka's own log lines reach Python logging (logger ``kipconsumer.librdkafka``), never stderr;
``statistics.interval.ms`` reaches ``stats_cb`` and ``metrics()["statistics"]``."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable

import pytest

from kipconsumer import KafkaConsumer, KafkaProducer
from kipconsumer._rdklog import python_level
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import ConfigError, KafkaTimeoutError


def _dead_bootstrap() -> str:
    """host:port where nothing listens (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _fail_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "kipconsumer.librdkafka"
            and getattr(r, "rdkafka_facility", None) == "FAIL" and "Connection refused" in r.getMessage()]


def test_syslog_levels_map_to_logging_levels() -> None:
    assert [python_level(i) for i in range(8)] == [
        logging.CRITICAL, logging.CRITICAL, logging.CRITICAL, logging.ERROR, logging.WARNING,
        logging.INFO, logging.INFO, logging.DEBUG]
    assert python_level(-1) == logging.CRITICAL and python_level(9) == logging.DEBUG


def test_consumer_broker_down_is_a_logging_record_not_stderr(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG, logger="kipconsumer.librdkafka")
    c = KafkaConsumer({"bootstrap.servers": _dead_bootstrap(), "group.id": "g-logging"})
    try:
        c.subscribe(["t"])
        deadline = time.monotonic() + 10
        while not _fail_records(caplog) and time.monotonic() < deadline:
            c.poll(0.2)
    finally:
        c.close(timeout=1)
    recs = _fail_records(caplog)
    assert recs, [r.getMessage() for r in caplog.records][:5]
    assert recs[0].levelno == logging.ERROR and recs[0].syslog_level == 3  # type: ignore[attr-defined]
    assert recs[0].rdkafka_name.startswith("rdkafka#consumer")  # type: ignore[attr-defined]
    err = capfd.readouterr().err
    assert "|FAIL|" not in err and "Connection refused" not in err, err[:500]


def test_records_carry_the_time_librdkafka_logged_them(caplog: pytest.LogCaptureFixture) -> None:
    """Lines are handed to Python only when the application calls the client: ``rdkafka_time`` says
    when librdkafka logged each one (for reading a stalled member's log), ``created`` when it was handed
    over."""
    caplog.set_level(logging.DEBUG, logger="kipconsumer.librdkafka")
    before = time.time()
    c = KafkaConsumer({"bootstrap.servers": _dead_bootstrap(), "group.id": "g-logging-time"})
    try:
        # a failed connect logged while the consumer is created or subscribes is handed over by
        # that call: only the lines logged after it returned must wait for the next call
        c.subscribe(["t"])
        quiet_from = time.time()
        time.sleep(1.0)  # librdkafka fails to connect meanwhile (every ~50 ms); nothing is handed over
        called_at = time.time()
        c.poll(0.1)
    finally:
        c.close(timeout=1)
    recs = _fail_records(caplog)
    assert recs, [r.getMessage() for r in caplog.records][:5]
    assert all(before <= r.rdkafka_time <= r.created for r in recs)  # type: ignore[attr-defined]
    waited = [r for r in recs if quiet_from <= r.rdkafka_time < called_at - 0.5]  # type: ignore[attr-defined]
    assert waited, [(r.rdkafka_time - before, r.created - before) for r in recs]  # type: ignore[attr-defined]
    assert all(r.created >= called_at for r in waited), [(r.rdkafka_time, r.created) for r in waited]  # type: ignore[attr-defined]


def test_producer_broker_down_is_a_logging_record_not_stderr(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG, logger="kipconsumer.librdkafka")
    p = KafkaProducer({"bootstrap.servers": _dead_bootstrap(), "max.block.ms": 1000})
    try:
        with pytest.raises(KafkaTimeoutError):  # no metadata from a dead broker
            p.send("t", value=b"x")
        deadline = time.monotonic() + 10
        while not _fail_records(caplog) and time.monotonic() < deadline:
            p.flush(0.2)
    finally:
        p.close(0)
    recs = _fail_records(caplog)
    assert recs and recs[0].levelno == logging.ERROR
    assert recs[0].rdkafka_name.startswith("rdkafka#producer")  # type: ignore[attr-defined]
    err = capfd.readouterr().err
    assert "|FAIL|" not in err and "Connection refused" not in err, err[:500]


def test_stats_cb_gets_parseable_json_on_the_poll_thread_and_metrics_summarise_it(
    broker: EmbeddedBroker, topic_factory: Callable[..., str],
) -> None:
    import json
    import threading

    topic = topic_factory(2)
    got: list[tuple[str, int]] = []
    c = KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g-stats",
                       "statistics.interval.ms": 100,
                       "stats_cb": lambda doc: got.append((doc, threading.get_ident()))})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            c.poll(0.1)
        assert len(got) >= 2
        doc = json.loads(got[-1][0])
        assert doc["type"] == "consumer" and doc["name"].startswith("rdkafka#consumer")
        assert {tid for _, tid in got} == {threading.get_ident()}
        stats = c.metrics()["statistics"]
        assert stats is not None and stats["brokers_up"] >= 1 and stats["ts_ms"] > 0
    finally:
        c.close()


def test_stats_cb_must_be_callable() -> None:
    with pytest.raises(ConfigError, match="stats_cb"):
        KafkaConsumer({"bootstrap.servers": "127.0.0.1:1", "stats_cb": "print"})


def test_stats_cb_exception_is_raised_from_poll(broker: EmbeddedBroker) -> None:
    def boom(doc: str) -> None:
        raise RuntimeError("from stats_cb")

    c = KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "statistics.interval.ms": 50,
                       "stats_cb": boom})
    try:
        with pytest.raises(RuntimeError, match="from stats_cb"):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                c.poll(0.1)
    finally:
        c.close()


def test_producer_stats_cb_runs_on_the_calling_thread_and_metrics_sum_up(broker: EmbeddedBroker) -> None:
    got: list[tuple[str, int]] = []
    p = KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "statistics.interval.ms": 100,
                       "stats_cb": lambda doc: got.append((doc, threading.get_ident()))})
    try:
        broker.create_topic("stats-p", 1)
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            p.send("stats-p", value=b"x")
            p.flush(10)
            time.sleep(0.05)
        assert got, "no statistics reached stats_cb"
        doc, thread = got[-1]
        assert thread == threading.get_ident()
        assert json.loads(doc)["type"] == "producer"
        stats = p.metrics()["statistics"]
        assert stats is not None and stats["brokers_up"] >= 1 and stats["txmsgs"] >= 0
    finally:
        p.close(2)


def test_producer_stats_cb_exception_is_logged_not_raised(broker: EmbeddedBroker,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    def bad(doc: str) -> None:
        raise RuntimeError("stats consumer broke")

    p = KafkaProducer({"bootstrap.servers": broker.bootstrap_servers, "statistics.interval.ms": 100,
                       "stats_cb": bad})
    try:
        time.sleep(0.5)
        with caplog.at_level(logging.ERROR, logger="kipconsumer.producer"):
            p.metrics()
        assert "stats_cb raised" in caplog.text
    finally:
        p.close(2)
