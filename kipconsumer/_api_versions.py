"""Which Kafka APIs a broker serves: one ApiVersions v0 request over a plain TCP connection.

One job: let ``KafkaShareConsumer.subscribe()`` tell at once that a broker does not serve share groups,
and ``KafkaConsumer.subscribe()`` with ``group.protocol=consumer`` that it does not serve KIP-848.
librdkafka 2.16 only logs that at debug level ("ShareGroupHeartbeatRequest not supported by broker",
facility COORD) and retries for ever, so polls would return nothing, silently. Used for PLAINTEXT
listeners only (TLS/SASL would need the client's own handshake); any failure to ask gives ``None``
(unknown), never an error.
"""

from __future__ import annotations

import socket
import struct

#: Kafka's API key of ShareGroupHeartbeat (KIP-932)
SHARE_GROUP_HEARTBEAT = 76
#: Kafka's API key of ConsumerGroupHeartbeat (KIP-848, ``group.protocol=consumer``)
CONSUMER_GROUP_HEARTBEAT = 68
#: The lowest ConsumerGroupHeartbeat version librdkafka 2.16 speaks: Kafka 3.7-3.9 serve only v0
#: (their preview), which librdkafka treats as "not supported by broker" and retries silently.
CONSUMER_GROUP_HEARTBEAT_MIN = 1
_API_VERSIONS = 18


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def api_keys(bootstrap_servers: str, timeout: float = 2.0) -> set[int] | None:
    """The API keys the first reachable broker of ``bootstrap_servers`` serves, or ``None`` if none
    answered an ApiVersions v0 request within ``timeout`` seconds each."""
    ranges = api_version_ranges(bootstrap_servers, timeout)
    return None if ranges is None else set(ranges)


def api_version_ranges(bootstrap_servers: str, timeout: float = 2.0) -> dict[int, tuple[int, int]] | None:
    """``{api_key: (min_version, max_version)}`` of the first reachable broker of ``bootstrap_servers``,
    or ``None`` if none answered an ApiVersions v0 request within ``timeout`` seconds each."""
    for server in bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit():
            continue
        try:
            with socket.create_connection((host, int(port)), timeout=timeout) as sock:
                sock.settimeout(timeout)
                # request header v1: api_key, api_version, correlation_id, client_id (null); empty body
                body = struct.pack(">hhih", _API_VERSIONS, 0, 1, -1)
                sock.sendall(struct.pack(">i", len(body)) + body)
                size = struct.unpack(">i", _read_exact(sock, 4))[0]
                data = _read_exact(sock, size)
            _corr, error, count = struct.unpack_from(">ihi", data, 0)
            if error != 0 or count < 0:
                continue
            entries = (struct.unpack_from(">hhh", data, 10 + 6 * i) for i in range(count))
            return {key: (low, high) for key, low, high in entries}
        except (OSError, struct.error, ValueError):
            continue
    return None
