"""The typed exception for a librdkafka error of the share consumer (KIP-932), by error name.

One job: map librdkafka's error name (``rd_kafka_err2name``) to kipconsumer's error classes, as
``KafkaShareConsumer`` raises them. Authorization failures become the ``AuthorizationError``
subclasses of ``kipconsumer.errors`` when that module has them, else ``KafkaError`` with the code.
"""

from __future__ import annotations

from kipconsumer import errors

#: librdkafka error names meaning the broker does not serve share groups
UNSUPPORTED = frozenset({"UNSUPPORTED_VERSION", "_UNSUPPORTED_FEATURE", "UNSUPPORTED_FOR_MESSAGE_FORMAT"})
_AUTHORIZATION = {
    "TOPIC_AUTHORIZATION_FAILED": "TopicAuthorizationError",
    "GROUP_AUTHORIZATION_FAILED": "GroupAuthorizationError",
}


def share_error(name: str, message: str, *, fatal: bool = False,
                retriable: bool = False) -> errors.KafkaError:
    """The exception to raise for librdkafka's error ``name`` (e.g. ``"_STATE"``) with ``message``."""
    if name in UNSUPPORTED:
        return errors.ShareGroupsUnsupportedError(
            f"{message}: the broker does not serve share groups (KIP-932 needs Kafka >= 4.1 with the "
            f"share.version feature enabled)", code=name)
    if name in ("_TIMED_OUT", "REQUEST_TIMED_OUT"):
        return errors.KafkaTimeoutError(message, code=name)
    if name in ("_STATE", "_CONFLICT"):
        return errors.IllegalStateError(message, code=name)
    cls = getattr(errors, _AUTHORIZATION.get(name, ""), None)
    if isinstance(cls, type) and issubclass(cls, errors.KafkaError):
        try:
            err: errors.KafkaError = cls(message, code=name)
            return err
        except TypeError:  # another constructor signature: fall back to the base class
            pass
    if fatal:
        message = f"{message} (fatal: close this consumer)"
    return errors.KafkaError(message, code=name,
                             category=errors.category_of(name, fatal=fatal, retriable=retriable or None))
