"""Refused logins and groups, from librdkafka's report to the calls that raise them: one implementation
for every client that has an error_cb (the consumer, the share consumer).

``report`` keeps what error_cb saw (authentication and TLS failures; at most 16 wait) until the
owner's next call takes it (``take``) and raises its typed error; the typed error raised is kept
(``hold``): an ``AuthenticationError`` is raised again at once by every call for ``AUTH_HOLD_S``
(``raise_held``), as librdkafka reports a refusal only when it reconnects; a
``GroupAuthorizationError`` explains a commit that then fails waiting for the coordinator
(``group_refused``). error_cb runs on the thread serving librdkafka's queue, which is the owner's
thread in a call (poll(), a commit), so no lock is needed.
"""

from __future__ import annotations

import time

from kipconsumer.errors import AuthenticationError, GroupAuthorizationError

# How long an AuthenticationError is raised again at once: librdkafka retries a refused connection at
# least every reconnect.backoff.max.ms (10 s by default) and reports each refusal, renewing it.
AUTH_HOLD_S = 10.0

# How many reports wait to be raised; later ones are dropped (the first explains the refusal).
MAX_REPORTS = 16


class SecurityHold:
    """See the module docstring. ``reports`` is truthy while a report waits (a cheap check for the
    poll loop)."""

    __slots__ = ("reports", "auth_failure", "auth_failure_at", "group_refused")

    def __init__(self) -> None:
        self.reports: list[tuple[object, str]] = []  # (error code as the client gives it, reason)
        self.auth_failure: AuthenticationError | None = None  # the latest AuthenticationError raised
        self.auth_failure_at = 0.0  # its time.monotonic()
        self.group_refused: GroupAuthorizationError | None = None  # the last GroupAuthorizationError

    def report(self, code: object, reason: str) -> None:
        """error_cb's security error (``code``: the client's error code); at most MAX_REPORTS wait."""
        if len(self.reports) < MAX_REPORTS:
            self.reports.append((code, reason))

    def take(self, discard_rest: bool = False) -> tuple[object, str] | None:
        """The oldest report not raised yet (None: none); ``discard_rest``: the others are dropped."""
        if not self.reports:
            return None
        first = self.reports.pop(0)
        if discard_rest:
            self.reports.clear()
        return first

    def hold(self, exc: BaseException) -> None:
        """Keeps the typed security error just raised (see the module docstring)."""
        if isinstance(exc, AuthenticationError):
            self.auth_failure = exc
            self.auth_failure_at = time.monotonic()
        elif isinstance(exc, GroupAuthorizationError):
            self.group_refused = exc

    def held_auth(self) -> AuthenticationError | None:
        """The AuthenticationError to raise again (within AUTH_HOLD_S of it), or None."""
        held = self.auth_failure
        if held is not None and time.monotonic() - self.auth_failure_at < AUTH_HOLD_S:
            return held
        return None

    def raise_held(self, what: str | None) -> None:
        """Raises the held AuthenticationError again (``held_auth``), prefixed with ``what`` (the call,
        when not poll()), as a new exception of the same code."""
        held = self.held_auth()
        if held is not None:
            msg = str(held)
            raise AuthenticationError(f"{what}: {msg}" if what else msg, code=held.code)
