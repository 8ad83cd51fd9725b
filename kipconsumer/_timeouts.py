"""The one place timeout arguments of public methods are checked.

Contract (API.md: method timeouts are seconds, ``None`` is the configured default):

- ``None`` means the default the caller passes (milliseconds, from the client's config);
- a finite number >= 0 is a wait in seconds; values above :data:`MAX_FINITE_S` are clamped
  to it (so no conversion to milliseconds can overflow a C ``int``);
- ``math.inf`` waits without bound: the result is ``math.inf``. Such a wait still ends on
  ``wakeup()``, ``close()`` or a signal (the native waits go in slices);
- NaN, a negative number, a bool or a non-number raises ``ValueError`` naming the argument.

A checked timeout becomes a :class:`Deadline` once, at the facade; every wait is derived from it:
milliseconds handed to librdkafka are rounded up (a short positive wait never becomes 0, which is
non-blocking), and a long wait goes in slices of :data:`WAIT_SLICE_S` with signal, ``wakeup()`` and
``close()`` checks between them. The native twin is ``csrc/clock.h`` (``kc_deadline_us``,
``kc_ms_until_us``, ``KC_WAIT_SLICE_US``); the native methods take the checked seconds (``math.inf``:
unbounded), never a negative sentinel.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

# The largest wait in milliseconds that fits librdkafka's int timeouts (about 24.8 days).
MAX_FINITE_MS = 2**31 - 2
MAX_FINITE_S = MAX_FINITE_MS / 1000.0
#: The one wait slice (csrc/clock.h KC_WAIT_SLICE_US): the bound on how late a signal, ``wakeup()``
#: or ``close()`` is seen by a blocking call.
WAIT_SLICE_S = 0.05


def timeout_seconds(value: object, default_ms: int | float, arg: str = "timeout") -> float:
    """Checked seconds for ``value`` (see the module contract); ``default_ms`` stands for ``None``."""
    if value is None:
        value = default_ms / 1000.0
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{arg} must be a number of seconds >= 0, math.inf or None, got {value!r}")
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{arg} must be a number of seconds >= 0, math.inf or None, got {value!r}")
    if math.isinf(seconds):
        return math.inf
    return min(seconds, MAX_FINITE_S)


class Deadline:
    """The instant a wait ends, on a monotonic clock (``time.monotonic`` unless given), fixed once
    from checked seconds (:func:`timeout_seconds`); ``math.inf`` never ends."""

    __slots__ = ("at", "_clock")

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.at = math.inf if math.isinf(seconds) else clock() + seconds

    def remaining(self) -> float:
        """Seconds left, 0.0 once passed."""
        return max(0.0, self.at - self._clock())

    def expired(self) -> bool:
        return self._clock() >= self.at

    def ms(self) -> int:
        """Milliseconds left for librdkafka: rounded up, 0 once passed, at most :data:`MAX_FINITE_MS`."""
        left = self.at - self._clock()
        if left <= 0:
            return 0
        if left * 1000.0 >= MAX_FINITE_MS:
            return MAX_FINITE_MS
        return math.ceil(left * 1000.0)

    def slice_s(self) -> float:
        """The next wait in seconds: at most :data:`WAIT_SLICE_S`, 0.0 once passed."""
        return min(self.remaining(), WAIT_SLICE_S)

    def slice_ms(self) -> int:
        """The next wait in milliseconds: :meth:`ms` capped at the slice (0 once passed)."""
        return min(self.ms(), round(WAIT_SLICE_S * 1000))
