"""The one place timeout arguments of public methods are checked.

Contract (API.md: method timeouts are seconds, ``None`` is the configured default):

- ``None`` means the default the caller passes (milliseconds, from the client's config);
- a finite number >= 0 is a wait in seconds; values above :data:`MAX_FINITE_S` are clamped
  to it (so no conversion to milliseconds can overflow a C ``int``);
- ``math.inf`` waits without bound: the result is ``math.inf``. Such a wait still ends on
  ``wakeup()``, ``close()`` or a signal (the native waits go in slices);
- NaN, a negative number, a bool or a non-number raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

import math

# The largest wait in milliseconds that fits librdkafka's int timeouts (about 24.8 days).
MAX_FINITE_MS = 2**31 - 2
MAX_FINITE_S = MAX_FINITE_MS / 1000.0


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
