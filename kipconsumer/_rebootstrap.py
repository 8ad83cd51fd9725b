"""A consumer's way back after librdkafka 2.16 lost every broker (docs/broker.md, "A fenced single broker
can wedge librdkafka 2.16's consumer").

Contract
--------
:class:`BrokerWatchdog` is checked from the consumer's ``poll()`` (at most once a second). When
librdkafka knows no controller (its last Metadata answer listed no broker, as a single Kafka node fenced
by its controller answers) while the consumer is subscribed and holds no partition, for ``grace_s``
seconds in a row, it adds the bootstrap servers again (``rd_kafka_brokers_add()``: librdkafka skips a
broker that is being decommissioned, so a fresh one connects and asks for metadata), then at most every
``every_s`` seconds while the condition lasts. It never acts while the consumer holds partitions or a
controller is known, so a healthy client is untouched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["BrokerWatchdog"]

log = logging.getLogger("kipconsumer.consumer")


class BrokerWatchdog:
    """See the module docstring. ``controller_id()`` and ``add_brokers(list)`` are the native handle's;
    ``stuck()`` says whether the client is waiting for brokers (subscribed, no partition)."""

    __slots__ = ("_bootstrap", "_controller_id", "_add_brokers", "_stuck", "_clock", "grace_s", "every_s",
                 "_since", "_next_check", "_next_add", "readds")

    def __init__(self, bootstrap: str, controller_id: Callable[[], int], add_brokers: Callable[[str], int],
                 stuck: Callable[[], bool], *, grace_s: float = 5.0, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._bootstrap = bootstrap
        self._controller_id = controller_id
        self._add_brokers = add_brokers
        self._stuck = stuck
        self._clock = clock
        self.grace_s = grace_s
        self.every_s = every_s
        self._since: float | None = None  # when the condition was first seen (None: not now)
        self._next_check = 0.0
        self._next_add = 0.0
        self.readds = 0  # times the bootstrap servers were added again

    def check(self) -> bool:
        """Called from poll(); True when it added the bootstrap servers again now."""
        now = self._clock()
        if now < self._next_check:
            return False
        self._next_check = now + 1.0
        if self._controller_id() != -1 or not self._stuck():
            self._since = None
            return False
        if self._since is None:
            self._since = now
        if now - self._since < self.grace_s or now < self._next_add:
            return False
        self._next_add = now + self.every_s
        self.readds += 1
        log.warning("no broker known for %.0f s (the last Metadata answer listed none, as from a fenced "
                    "single broker) and no partition held: adding the bootstrap servers again (%s)",
                    now - self._since, self._bootstrap)
        self._add_brokers(self._bootstrap)
        return True
