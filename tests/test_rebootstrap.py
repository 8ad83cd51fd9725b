"""The consumer's broker watchdog (kipconsumer._rebootstrap): after librdkafka 2.16 lost every broker (a
0-broker Metadata answer, as from a fenced single Kafka node) it adds the bootstrap servers again; a healthy
client is never touched. The end-to-end case (a single Kafka node frozen past its fencing) is
``tests/test_streams_eos.py::test_frozen_broker_times_out_the_transaction_which_is_retried[kafka]``
(opt-in: it reproduces the wedge in about 1 run of 4)."""

from __future__ import annotations

import time

from kipconsumer import KafkaConsumer
from kipconsumer._rebootstrap import BrokerWatchdog
from kipconsumer.broker import EmbeddedBroker


class _Fake:
    def __init__(self) -> None:
        self.now = 100.0
        self.controller = -1
        self.stuck = True
        self.added: list[str] = []

    def watchdog(self) -> BrokerWatchdog:
        return BrokerWatchdog("h:1,h:2", lambda: self.controller, self._add, lambda: self.stuck,
                              grace_s=5.0, every_s=10.0, clock=lambda: self.now)

    def _add(self, brokers: str) -> int:
        self.added.append(brokers)
        return 2


def _run(fake: _Fake, w: BrokerWatchdog, seconds: float) -> None:
    end = fake.now + seconds
    while fake.now < end:
        w.check()
        fake.now += 0.25


def test_no_broker_known_while_waiting_for_partitions_adds_the_bootstrap_servers_again() -> None:
    fake = _Fake()
    w = fake.watchdog()
    _run(fake, w, 4.5)
    assert fake.added == []  # within the grace period
    _run(fake, w, 1.5)
    assert fake.added == ["h:1,h:2"]  # after 5 s in a row
    _run(fake, w, 9.0)
    assert len(fake.added) == 1  # at most every 10 s
    _run(fake, w, 2.0)
    assert len(fake.added) == 2 and w.readds == 2


def test_a_known_controller_or_held_partitions_leave_the_client_alone() -> None:
    fake = _Fake()
    fake.controller = 1
    w = fake.watchdog()
    _run(fake, w, 60)
    fake.controller, fake.stuck = -1, False  # no controller known, but partitions are held
    _run(fake, w, 60)
    assert fake.added == []
    fake.stuck = True
    _run(fake, w, 4.0)
    fake.controller = 1  # the condition ended before the grace period: it starts again
    _run(fake, w, 2.0)
    fake.controller = -1
    _run(fake, w, 4.0)
    assert fake.added == []


def test_the_native_hooks_on_a_healthy_consumer() -> None:
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("wd", 1)
        with KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "wd",
                            "auto.offset.reset": "earliest"}) as c:
            c.subscribe(["wd"])
            deadline = time.monotonic() + 30
            while not c.assignment() and time.monotonic() < deadline:
                c.poll(0.2)
            native = c._native
            assert native.controller_id() != -1  # a controller is known (the mock answers 0)
            assert c._watchdog.readds == 0
            assert native.add_brokers(broker.bootstrap_servers) >= 1
            c.poll(0.5)  # the added bootstrap broker does no harm
            assert c.assignment()
