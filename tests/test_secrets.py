"""Secrets never leak, and TLS/SASL settings reach librdkafka.

``sasl.password``, ``ssl.key.password``, ``sasl.oauthbearer.client.secret`` (and every key
``kipconsumer.config.is_secret`` recognises) must not appear in log records, ``repr()`` of the clients
or their settings, ``metrics()``, or the messages of errors raised for them. SASL/TLS configs pass
through to librdkafka: a consumer with ``security.protocol=SASL_PLAINTEXT`` and credentials constructs
and really tries to authenticate (the embedded broker has no SASL, so authentication fails, loudly but
without the password).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from kipconsumer import KafkaConsumer
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.config import consumer_settings, is_secret, producer_settings, redact
from kipconsumer.errors import AuthenticationError, ConfigError, KafkaError
from kipconsumer.producer import KafkaProducer

SECRET = "Zq9-S3cr3t-vAlue"
SECRET_KEYS = ["sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret"]


@pytest.fixture(scope="module")
def own_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(num_brokers=1) as b:
        b.create_topic("sec", 1)
        yield b


def _sasl(servers: str) -> dict[str, object]:
    return {"bootstrap.servers": servers, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": SECRET}


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_keys_are_recognised_and_redacted(key: str) -> None:
    assert is_secret(key)
    assert redact({key: SECRET, "client.id": "c"}) == {key: "***", "client.id": "c"}


@pytest.mark.parametrize("settings_fn", [consumer_settings, producer_settings])
def test_settings_repr_masks_secrets(settings_fn: object) -> None:
    conf = {"bootstrap.servers": "127.0.0.1:9", **{k: SECRET for k in SECRET_KEYS}}
    s = settings_fn(conf)  # type: ignore[operator]
    assert SECRET not in repr(s) and SECRET not in str(s)
    assert "***" in repr(s)
    assert all(s.rdkafka[k] == SECRET for k in SECRET_KEYS)  # still passed to librdkafka


def test_sasl_consumer_constructs_and_never_shows_the_password(
        own_broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    conf = {**_sasl(own_broker.bootstrap_servers), "group.id": "sec-g", "session.timeout.ms": 6000,
            "sasl.oauthbearer.client.secret": SECRET, "ssl.key.password": SECRET}
    c = KafkaConsumer(conf)
    assert c.settings.rdkafka["security.protocol"].upper() == "SASL_PLAINTEXT"
    assert c.settings.rdkafka["sasl.mechanism"] == "PLAIN"
    assert c.settings.rdkafka["sasl.password"] == SECRET
    c.subscribe(["sec"])
    deadline = time.monotonic() + 2.0
    with pytest.raises(AuthenticationError) as info:  # the mock has no SASL: a typed error, at once
        while time.monotonic() < deadline:
            c.poll(0.2)
    text = [repr(c), str(c.metrics()), repr(c.settings), str(info.value)]
    c.close()
    out, err = capfd.readouterr()
    # librdkafka tried SASL for real (the mock has no SASL), so the config reached it
    assert "SASL" in err or "sasl" in err or any("SASL" in r.getMessage() for r in caplog.records)
    for blob in [*text, out, err, caplog.text, *[r.getMessage() for r in caplog.records]]:
        assert SECRET not in blob


def test_sasl_producer_never_shows_the_password(
        own_broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    p = KafkaProducer({**_sasl(own_broker.bootstrap_servers), "max.block.ms": 1000,
                       "ssl.key.password": SECRET, "sasl.oauthbearer.client.secret": SECRET})
    errors = []
    try:
        p.send("sec", b"v").result(5)
    except KafkaError as e:  # metadata never arrives: authentication fails
        errors.append(str(e))
    text = [repr(p), str(p.metrics())]
    p.close(1)
    out, err = capfd.readouterr()
    assert errors
    for blob in [*text, *errors, out, err, caplog.text]:
        assert SECRET not in blob


@pytest.mark.parametrize("conf", [
    {"security.protocol": "SSL", "ssl.key.location": "/nonexistent/key.pem", "ssl.key.password": SECRET},
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
     "sasl.oauthbearer.client.id": "cid", "sasl.oauthbearer.client.secret": SECRET},
    {"sasl.password": [SECRET]},
    {"sasl.password": {"x": SECRET}},
    {"ssl.key.password": object()},
    {"sasl.mechanism": "NOPE", "sasl.password": SECRET},
    {"sasl.oauthbearer.client.secret": SECRET, "max.poll.records": -1},
], ids=["ssl-key-missing", "oidc-incomplete", "password-list", "password-dict", "password-object",
        "bad-mechanism", "other-bad-key"])
def test_config_errors_do_not_show_secrets(conf: dict[str, object], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    full = {"bootstrap.servers": "127.0.0.1:9", **conf}
    for make in (KafkaConsumer, KafkaProducer):
        try:
            client = make(full)
        except (ConfigError, KafkaError, TypeError, ValueError) as e:
            assert SECRET not in str(e) and SECRET not in repr(e)
            assert SECRET not in "".join(str(a) for a in e.args)
            assert e.__cause__ is None or SECRET not in str(e.__cause__)
        else:
            client.close()
    assert SECRET not in caplog.text


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_unknown_secret_like_key_error_is_masked(key: str) -> None:
    # a misspelt secret key: the error names the key and suggests the right one, without the value
    with pytest.raises(ConfigError) as exc:
        consumer_settings({"bootstrap.servers": "x", key + "x": SECRET})
    assert SECRET not in str(exc.value)
    assert key in str(exc.value)
