"""Issue 31 regression: the broker dies (SIGKILL) around ``send_offsets_to_transaction()``.

The embedded broker runs in its own process (``python -m kipconsumer.broker``) so that it can be
killed for real. The call (or, if it completed before the kill, the commit after it) must end with a
typed ``KafkaError`` within its timeout plus librdkafka's second, never hang, and ``close()`` must
return within a few seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from kipconsumer import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kipconsumer.errors import KafkaError

CALL_TIMEOUT = 4.0
BOUND = CALL_TIMEOUT + 1.0 + 5.0  # the call's timeout, librdkafka's own second, generous slack


@pytest.fixture
def killable_broker() -> Iterator[tuple[subprocess.Popen[str], str]]:
    args = [sys.executable, "-m", "kipconsumer.broker", "--brokers", "1", "--topic", "src:1"]
    proc = subprocess.Popen(args,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("BOOTSTRAP="), line
        yield proc, line.split("=", 1)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.mark.parametrize("when", ["before", "during"])
def test_broker_killed_around_send_offsets_gives_a_typed_error_in_bounded_time(
        killable_broker: tuple[subprocess.Popen[str], str], when: str) -> None:
    proc, servers = killable_broker
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False})
    producer = KafkaProducer({"bootstrap.servers": servers, "transactional.id": f"{group}-t",
                              "delivery.timeout.ms": 6000, "request.timeout.ms": 2000})
    try:
        consumer.assign([TopicPartition("src", 0)])
        metadata = consumer.group_metadata()
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.send("src", b"in the transaction").result(15)

        def kill() -> None:
            os.kill(proc.pid, signal.SIGKILL)

        if when == "before":
            kill()
            proc.wait(10)
        else:
            threading.Timer(0.0, kill).start()
        t0 = time.monotonic()
        failure: KafkaError | None = None
        try:
            producer.send_offsets_to_transaction({TopicPartition("src", 0): OffsetAndMetadata(1)}, metadata,
                                                 timeout=CALL_TIMEOUT)
        except KafkaError as exc:
            failure = exc
        assert time.monotonic() - t0 < BOUND
        if failure is None:  # completed before the kill: the commit cannot
            proc.wait(10)
            t1 = time.monotonic()
            with pytest.raises(KafkaError) as info:
                producer.commit_transaction(timeout=CALL_TIMEOUT)
            assert time.monotonic() - t1 < BOUND
            failure = info.value
        assert isinstance(failure, KafkaError) and failure.code, repr(failure)
    finally:
        t2 = time.monotonic()
        producer.close(2)
        consumer.close(2)
        assert time.monotonic() - t2 < 15
