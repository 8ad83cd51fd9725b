"""KIP-572's 50% rule for the blocking calls of a Pipeline's poll loop.

Contract
--------
* :meth:`CallBudget.poll_started` marks the start of each poll; every blocking call of the loop pass
  that follows shares what is left of half of ``max.poll.interval.ms`` since then, so together they
  cannot hold the loop long enough to push the member out of its group.
* :meth:`CallBudget.call_budget_s` is the timeout of the next call, :meth:`CallBudget.bounded` retries a
  call's timeouts within the budget, :meth:`CallBudget.held` says whether the loop has already been held
  past it (the group may have moved its partitions on).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from kipconsumer.errors import KafkaTimeoutError

__all__ = ["CallBudget"]

log = logging.getLogger("kipconsumer.streams")

T = TypeVar("T")

# a transactional call returns up to 1 s after its timeout (it waits in slices, kipconsumer._producer)
_CALL_OVERRUN_S = 1.0
_MIN_CALL_S = 0.1


class CallBudget:
    """The call budget of one pipeline's loop (see the module docstring). ``half_mpi_s`` is half of
    ``max.poll.interval.ms``, ``group_call_s`` the longest single group call (``default.api.timeout.ms``,
    at most ``half_mpi_s``), ``backoff_s`` the pause between retries (``retry.backoff.ms``)."""

    __slots__ = ("max_poll_interval_ms", "half_mpi_s", "group_call_s", "backoff_s", "last_poll")

    def __init__(self, *, max_poll_interval_ms: int, default_api_timeout_ms: int,
                 retry_backoff_ms: int) -> None:
        self.max_poll_interval_ms = max_poll_interval_ms
        self.half_mpi_s = max_poll_interval_ms / 2000.0
        self.group_call_s = min(default_api_timeout_ms / 1000.0, self.half_mpi_s)
        self.backoff_s = retry_backoff_ms / 1000.0
        self.last_poll = time.monotonic()  # written by poll_started() only

    def poll_started(self) -> None:
        """The loop starts a poll (from its start: a process stopped inside ``poll()`` was held as long
        as one stopped in ``process()``, and its heartbeats stopped with it)."""
        self.last_poll = time.monotonic()

    def call_budget_s(self) -> float:
        """Timeout for the next blocking call of the loop pass: what is left of half of
        ``max.poll.interval.ms`` since the start of the last poll (less the second a transactional
        call may overrun its timeout by), at most ``default.api.timeout.ms``, at least 0.1 s (a call
        that cannot finish in time times out and is retried after the next poll). Every call of one
        loop pass shares this budget, so together they cannot hold the loop past it."""
        left = self.half_mpi_s - (time.monotonic() - self.last_poll) - _CALL_OVERRUN_S
        return max(_MIN_CALL_S, min(self.group_call_s, left))

    def bounded(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, retrying timeouts after ``retry.backoff.ms`` while another attempt fits in half of
        ``max.poll.interval.ms`` counted from the start of the last poll (the budget every call of the
        loop pass shares); then raises ``KafkaTimeoutError`` (the last timeout as its cause)."""
        longest = 0.0
        while True:
            t0 = time.monotonic()
            try:
                return call()
            except TimeoutError as exc:
                now = time.monotonic()
                longest = max(longest, now - t0)
                elapsed = now - self.last_poll
                # Another attempt only if it can finish in the budget, if it takes as long as the
                # longest one so far (each is bounded by call_budget_s()).
                if elapsed + self.backoff_s + longest > self.half_mpi_s:
                    raise KafkaTimeoutError(
                        f"{what} timed out; gave up {elapsed * 1000:.0f} ms after the last poll to stay "
                        f"within half of max.poll.interval.ms={self.max_poll_interval_ms}: {exc}"
                    ) from exc
                log.info("%s timed out (%s); retrying in %.0f ms", what, exc, self.backoff_s * 1000)
                time.sleep(self.backoff_s)

    def held(self) -> str | None:
        """Why the loop may have been dropped from the group (held longer than half of
        ``max.poll.interval.ms`` since the start of the last poll), or None."""
        held = time.monotonic() - self.last_poll
        if held > self.half_mpi_s:
            return (f"the poll loop was held {held:.1f} s, more than half of "
                    f"max.poll.interval.ms={self.max_poll_interval_ms}")
        return None
