"""OAUTHBEARER token providers written in Python (``oauth_cb``, as in confluent-kafka).

``oauth_cb(oauthbearer_config: str)`` returns ``(token, expiry)`` with ``expiry`` the token's end in
seconds since the epoch, optionally followed by the principal name and a dict of SASL extensions.
librdkafka calls it on its background thread when the client starts and again before the token
expires (at 80 % of its lifetime). If it raises or returns something else, librdkafka is told the
refresh failed and the client raises :class:`~kipconsumer.errors.AuthenticationError`.

The native clients register their provider here under their librdkafka handle's address
(:func:`register`, :func:`unregister`); the C callback asks :func:`token_for` for the token.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from kipconsumer.errors import ConfigError

__all__ = ["check_provider", "failure_text", "register", "token_for", "unregister"]

# One dict operation at a time, atomic without a lock: a lock taken here (on a consumer's close)
# could be left held by a signal's exception raised right after it was taken (CPython 3.14)
_providers: dict[int, Callable[[str], Any]] = {}


def check_provider(cb: object) -> Callable[[str], Any] | None:
    """``oauth_cb`` as configured: None, or a callable (else ConfigError)."""
    if cb is not None and not callable(cb):
        raise ConfigError(f"config 'oauth_cb' must be a callable taking sasl.oauthbearer.config (str) and "
                          f"returning (token, expiry_epoch_seconds[, principal[, extensions]]); got "
                          f"{type(cb).__name__}")
    return cb


def register(handle: int, cb: Callable[[str], Any]) -> None:
    _providers[handle] = cb


def unregister(handle: int) -> None:
    _providers.pop(handle, None)


def token_for(handle: int, config: str) -> tuple[bytes, int, bytes, list[bytes]] | None:
    """The provider's token for the handle: (token, expiry in ms since the epoch, principal,
    extensions as alternating keys and values), or None if no provider is registered. Raises what
    the provider raised, or ValueError for a result of the wrong shape."""
    cb = _providers.get(handle)
    if cb is None:
        return None
    result = cb(config)
    if not isinstance(result, tuple) or not 2 <= len(result) <= 4:
        raise ValueError("oauth_cb must return (token, expiry[, principal[, extensions]])")
    token, expiry = str(result[0]), float(result[1])
    principal = str(result[2]) if len(result) > 2 and result[2] else _subject(token)
    extensions = dict(result[3]) if len(result) > 3 and result[3] else {}
    flat = [str(x).encode() for kv in extensions.items() for x in kv]
    return token.encode(), int(expiry * 1000), principal.encode(), flat


def failure_text(exc: BaseException) -> bytes:
    """What librdkafka is told (and the AuthenticationError says) when the provider failed: the
    exception's type and message, cut at 200 characters."""
    return f"oauth_cb failed: {type(exc).__name__}: {exc}"[:200].encode(errors="replace")


def _subject(token: str) -> str:
    """The ``sub`` claim of a JWT (the principal librdkafka needs), or ``"unknown"``."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return str(claims.get("sub") or "unknown")
    except (IndexError, ValueError, AttributeError):
        return "unknown"
