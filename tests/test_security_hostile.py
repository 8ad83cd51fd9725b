"""Hostile TLS endpoints on loopback, no Kafka needed (issue #28): a server whose certificate has
expired, one whose certificate names another host, and one that accepts and closes the connection
mid-handshake. Each makes the consumer's ``poll()`` and the producer's ``send()`` raise
``AuthenticationError`` within ``LIMIT_S``, and the client sends nothing in clear: the only bytes a
server receives are a TLS record (never the SASL user or password). Also the mapping of
librdkafka's codes to the typed errors, in one place (``kipconsumer._security_errors``)."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import unique_name

from kipconsumer import KafkaConsumer, KafkaProducer
from kipconsumer._security_errors import security_error
from kipconsumer.errors import (
    AuthenticationError,
    AuthorizationError,
    ClusterAuthorizationError,
    GroupAuthorizationError,
    KafkaError,
    TopicAuthorizationError,
    TransactionalIdAuthorizationError,
)
from kipconsumer.share import KafkaShareConsumer
from kipconsumer.structs import TopicPartition
from kipconsumer.testing._certs import TestCA

LIMIT_S = 10.0
SECRET = "Hx-S3cret-91ab-never-in-clear"


class _LoopbackServer:
    """Accepts connections on 127.0.0.1 and hands each to ``serve(conn)`` on a thread; records the
    first bytes each connection sent (``received``)."""

    def __init__(self, serve: Callable[[socket.socket], bytes]) -> None:
        self._serve = serve
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2.0)
                try:
                    self.received.append(self._serve(conn))
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


def _tls_serving(cert: Path, key: Path) -> Callable[[socket.socket], bytes]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))

    def serve(conn: socket.socket) -> bytes:
        first = conn.recv(5, socket.MSG_PEEK)
        try:
            with ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass  # the client refused our certificate, as it must
        return first

    return serve


def _read_and_close(conn: socket.socket) -> bytes:
    return conn.recv(4096)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("hostile-ca"))


@pytest.fixture(params=["expired certificate", "certificate for another host", "closed mid-handshake"])
def hostile(request: pytest.FixtureRequest, ca: TestCA) -> Iterator[_LoopbackServer]:
    if request.param == "expired certificate":
        pair = ca.issue(unique_name("expired"), expired=True)
        server = _LoopbackServer(_tls_serving(pair.cert, pair.key))
    elif request.param == "certificate for another host":
        pair = ca.issue(unique_name("elsewhere"), hosts=("kafka.example.com",))
        server = _LoopbackServer(_tls_serving(pair.cert, pair.key))
    else:
        server = _LoopbackServer(_read_and_close)
    yield server
    server.close()


def _conf(ca: TestCA, port: int) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN", "sasl.username": "mallory-user", "sasl.password": SECRET,
            "ssl.ca.location": str(ca.ca_location)}


def _assert_nothing_in_clear(server: _LoopbackServer) -> None:
    assert server.received, "the client never connected"
    for first in server.received:
        assert first[:1] == b"\x16", f"not a TLS handshake record: {first[:16]!r}"
        assert SECRET.encode() not in first and b"mallory-user" not in first


def test_consumer_poll_raises_authentication_error(ca: TestCA, hostile: _LoopbackServer) -> None:
    c = KafkaConsumer({**_conf(ca, hostile.port), "group.id": unique_name("g")})
    try:
        c.subscribe([unique_name("t")])
        t0 = time.monotonic()
        with pytest.raises(AuthenticationError) as info:
            while time.monotonic() - t0 < LIMIT_S + 5:
                c.poll(0.5)
        elapsed = time.monotonic() - t0
        assert elapsed < LIMIT_S, f"AuthenticationError after {elapsed:.1f} s"
        assert SECRET not in str(info.value)
    finally:
        c.close(timeout=5)
    _assert_nothing_in_clear(hostile)


@pytest.mark.parametrize("kind", ["consumer", "share consumer"])
def test_poll_raises_authentication_error_then_holds_it(
    ca: TestCA, hostile: _LoopbackServer, kind: str
) -> None:
    """Both consumers keep the refusal in the one SecurityHold (kipconsumer._security_hold): the first
    poll() that learns of it raises AuthenticationError, and every call right after raises it again at
    once (librdkafka reports a refusal only when it reconnects)."""
    conf = {**_conf(ca, hostile.port), "group.id": unique_name("g")}
    c: KafkaConsumer | KafkaShareConsumer = (KafkaConsumer(conf) if kind == "consumer"
                                             else KafkaShareConsumer(conf))
    try:
        c.subscribe([unique_name("t")])
        t0 = time.monotonic()
        with pytest.raises(AuthenticationError) as first:
            while time.monotonic() - t0 < LIMIT_S + 5:
                c.poll(0.5)
        assert time.monotonic() - t0 < LIMIT_S, f"AuthenticationError after {time.monotonic() - t0:.1f} s"
        for _ in range(3):
            t1 = time.monotonic()
            with pytest.raises(AuthenticationError) as again:
                c.poll(5.0)
            assert time.monotonic() - t1 < 1.0, "the held AuthenticationError was not raised at once"
            assert again.value.code == first.value.code and str(first.value) in str(again.value)
        # and the other calls that talk to the broker, prefixed with their name
        if isinstance(c, KafkaConsumer):
            with pytest.raises(AuthenticationError, match=r"^committed: "):
                c.committed([TopicPartition(unique_name("t"), 0)], timeout=5.0)
        else:
            with pytest.raises(AuthenticationError, match=r"^commit_sync: "):
                c.commit_sync(timeout=5.0)
        assert SECRET not in str(first.value)
    finally:
        c.close(timeout=5)
    _assert_nothing_in_clear(hostile)


def test_producer_send_raises_authentication_error(ca: TestCA, hostile: _LoopbackServer) -> None:
    p = KafkaProducer(_conf(ca, hostile.port))
    try:
        t0 = time.monotonic()
        with pytest.raises(AuthenticationError):
            p.send(unique_name("t"), value=b"x").result(LIMIT_S + 5)
        assert time.monotonic() - t0 < LIMIT_S
    finally:
        p.close(timeout=5)
    _assert_nothing_in_clear(hostile)


# -- the mapping, in one place -------------------------------------------------------------------
@pytest.mark.parametrize(("code", "detail", "cls"), [
    ("_AUTHENTICATION", "SASL authentication error: Authentication failed", AuthenticationError),
    ("_SSL", "SSL handshake failed: certificate verify failed", AuthenticationError),
    ("_TRANSPORT", "SSL handshake failed: Disconnected: connecting to a PLAINTEXT broker listener?",
     AuthenticationError),
    ("TOPIC_AUTHORIZATION_FAILED", "Broker: Topic authorization failed", TopicAuthorizationError),
    ("GROUP_AUTHORIZATION_FAILED", "Broker: Group authorization failed", GroupAuthorizationError),
    ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "Broker: Transactional Id authorization failed",
     TransactionalIdAuthorizationError),
    ("CLUSTER_AUTHORIZATION_FAILED", "Broker: Cluster authorization failed", ClusterAuthorizationError),
])
def test_security_codes_map_to_typed_errors(code: str, detail: str, cls: type[KafkaError]) -> None:
    err = security_error(code, detail, what="op", topics=("t1",), group_id="g1")
    assert type(err) is cls and err.code == code and str(err).startswith("op: ")
    assert isinstance(err, KafkaError) and not err.retriable
    if isinstance(err, TopicAuthorizationError):
        assert err.topics == {"t1"}
    if isinstance(err, GroupAuthorizationError):
        assert err.group_id == "g1"
    if cls is not AuthenticationError:
        assert isinstance(err, AuthorizationError)


@pytest.mark.parametrize(("code", "detail"), [
    ("_TRANSPORT", "Connection refused"), ("_TIMED_OUT", "timed out"), ("REBALANCE_IN_PROGRESS", "x"),
    # librdkafka's hint on any PLAINTEXT connection dropped within 2 s of its start (a broker killed or
    # restarting): not an authentication failure (it failed the exactly-once chaos's producers)
    ("_TRANSPORT", "127.0.0.1:41773/2: Disconnected: verify that security.protocol is correctly "
                   "configured, broker might require SASL authentication (after 12ms in state UP)"),
])
def test_other_codes_are_not_security_errors(code: str, detail: str) -> None:
    assert security_error(code, detail) is None
