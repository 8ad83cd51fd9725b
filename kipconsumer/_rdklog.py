"""librdkafka's log lines as Python logging records, on the logger ``kipconsumer.librdkafka``.

librdkafka's threads never call Python: its log callback (csrc/log_ring.c) keeps the lines in a
bounded ring, and the client's own calls (``poll()``, ``flush()``, ``close()``, ...) hand them to
this module on the caller's thread. Levels map from syslog: 0-2 CRITICAL, 3 ERROR, 4 WARNING,
5-6 INFO, 7 DEBUG. Each record carries ``rdkafka_name`` (the handle, e.g. ``rdkafka#consumer-1``),
``rdkafka_facility`` (e.g. ``FAIL``), ``syslog_level`` and ``rdkafka_time`` (when librdkafka logged
the line, as ``time.time()``: the record's own ``created`` is when it was handed over).
"""

from __future__ import annotations

import logging

logger = logging.getLogger("kipconsumer.librdkafka")

_LEVELS = (logging.CRITICAL, logging.CRITICAL, logging.CRITICAL, logging.ERROR, logging.WARNING,
           logging.INFO, logging.INFO, logging.DEBUG)


def python_level(syslog_level: int) -> int:
    """The ``logging`` level of a syslog level (0-7; out-of-range values are clamped)."""
    return _LEVELS[min(max(syslog_level, 0), 7)]


def emit(syslog_level: int, name: str, facility: str, message: str, logged_at: float | None = None) -> None:
    level = python_level(syslog_level)
    if logger.isEnabledFor(level):
        logger.log(level, "%s [%s] %s", facility, name, message,
                   extra={"rdkafka_name": name, "rdkafka_facility": facility, "syslog_level": syslog_level,
                          "rdkafka_time": logged_at})


def emit_dropped(count: int) -> None:
    logger.warning("%d librdkafka log line(s) dropped: more were logged than fit in the buffer "
                   "between two calls of the clients", count)
