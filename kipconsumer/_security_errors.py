"""The one place where librdkafka's security error codes become kipconsumer's typed errors.

:func:`security_error` is called by every path that turns a librdkafka error into an exception
(consumer poll and commits, producer send, delivery reports, transactions). It returns ``None`` for
codes that are not about security, so callers fall through to their own mapping.

librdkafka reports SASL and TLS failures as error events (``_AUTHENTICATION``, ``_SSL``) and
retries the connection for ever; a connection closed by the peer while the TLS or SASL handshake
is still going (a downgraded or hostile endpoint) comes as ``_TRANSPORT`` with the handshake named
in the text. Authorization failures are Kafka's error codes 29, 30, 31 and 53.
"""

from __future__ import annotations

from kipconsumer._native import is_handshake_failure_text
from kipconsumer.errors import (
    AuthenticationError,
    ClusterAuthorizationError,
    GroupAuthorizationError,
    KafkaError,
    TopicAuthorizationError,
    TransactionalIdAuthorizationError,
)

__all__ = ["AUTHENTICATION_CODES", "AUTHORIZATION_CODES", "is_authentication_failure", "is_security_error",
           "security_error"]

AUTHENTICATION_CODES = frozenset(
    ("_AUTHENTICATION", "_SSL", "SASL_AUTHENTICATION_FAILED", "UNSUPPORTED_SASL_MECHANISM",
     "ILLEGAL_SASL_STATE")
)
AUTHORIZATION_CODES = frozenset(
    ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
     "CLUSTER_AUTHORIZATION_FAILED")
)
def is_authentication_failure(code: str, detail: str) -> bool:
    """Whether librdkafka's error ``code`` (its name) with text ``detail`` is an authentication or
    TLS handshake failure."""
    if code in AUTHENTICATION_CODES:
        return True
    return code == "_TRANSPORT" and is_handshake_failure_text(detail)


def is_security_error(code: str, detail: str) -> bool:
    """Whether :func:`security_error` gives a typed error for ``code`` and ``detail``."""
    return code in AUTHORIZATION_CODES or is_authentication_failure(code, detail)


def security_error(
    code: str, detail: str, *, what: str = "", topics: tuple[str, ...] = (), group_id: str | None = None
) -> KafkaError | None:
    """The typed error for librdkafka's error ``code`` (its name, e.g. ``"TOPIC_AUTHORIZATION_FAILED"``)
    with text ``detail``, or None if the code is not about security. ``what`` prefixes the message
    (the failed operation); ``topics`` and ``group_id`` name what was refused."""
    prefix = f"{what}: " if what else ""
    if is_authentication_failure(code, detail):
        return AuthenticationError(
            f"{prefix}authentication failed: {code}: {detail}. Check the credentials, the SASL "
            "mechanism, security.protocol and the CA / certificate settings (ssl.ca.location, "
            "ssl.endpoint.identification.algorithm); librdkafka would retry this for ever",
            code=code,
        )
    if code == "TOPIC_AUTHORIZATION_FAILED":
        names = ", ".join(sorted(set(topics))) or "(not named)"
        return TopicAuthorizationError(
            f"{prefix}not authorized to access topics: [{names}] ({detail})", code=code, topics=topics
        )
    if code == "GROUP_AUTHORIZATION_FAILED":
        return GroupAuthorizationError(
            f"{prefix}not authorized to access group: {group_id} ({detail})", code=code, group_id=group_id
        )
    if code == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED":
        return TransactionalIdAuthorizationError(
            f"{prefix}transactional id authorization failed ({detail}); the producer can only be closed",
            code=code,
        )
    if code == "CLUSTER_AUTHORIZATION_FAILED":
        return ClusterAuthorizationError(
            f"{prefix}cluster authorization failed ({detail}). An idempotent producer (the default) needs "
            "WRITE on at least one topic or IDEMPOTENT_WRITE on the cluster (Kafka < 2.8: IDEMPOTENT_WRITE); "
            "the producer can only be closed",
            code=code,
        )
    return None
