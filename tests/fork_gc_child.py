"""Helper of tests/test_fork.py: what a forked child's garbage collector finds, and an EmbeddedBroker
inherited by a child.

``python tests/fork_gc_child.py gc KIND...`` starts an EmbeddedBroker in this process; for each KIND
it makes garbage of that kind that only the cycle collector can free (objects in reference cycles,
with the automatic collector off so that the parent keeps them), forks, and the child runs
``gc.collect()`` under ``signal.alarm`` then leaves with ``os._exit(0)``. It prints ``KIND <kind>
STATUS <exit code or -signal> COLLECTED <objects the child's collector freed>`` (``STATUS hung``
after 30 s), then ``PARENT-OK`` once the parent's broker still serves a producer and a consumer.

``python tests/fork_gc_child.py broker HOW`` forks while this process runs an EmbeddedBroker (in a
``with`` block); the child leaves as HOW says (``with``: ``sys.exit(0)`` inside the block, so
``__exit__`` runs in the child; ``exit``: ``sys.exit(0)`` of a broker kept in a global, left to the
interpreter's exit; ``stop``: ``stop()`` and ``close()`` then ``sys.exit(0)``; ``call``: the broker's
calls must raise ``IllegalStateError`` naming this process while its properties still read, and a
producer made in the child sends to the parent's broker through them) and prints ``CHILD-OK``; the
parent prints ``CHILD-STATUS <code>`` (``CHILD-HUNG`` after 30 s) and ``PARENT-OK`` once its broker
still works.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from kipconsumer import KafkaConsumer, KafkaProducer, KafkaShareConsumer, TopicPartition
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import IllegalStateError
from kipconsumer.streams import Pipeline

PARENT = os.getpid()
BS = ""  # the parent's broker
BROKER: EmbeddedBroker | None = None


def produce(topic: str, n: int) -> None:
    with KafkaProducer({"bootstrap.servers": BS}) as p:
        for i in range(n):
            p.send(topic, b"v%d" % i, partition=0)
        p.flush(10)


def cycle(*objs: object) -> None:
    """Leaves ``objs`` reachable only from a reference cycle (freed by the cycle collector only)."""
    box: list[Any] = list(objs)
    box.append(box)


def polled(consumer: Any, want: int = 1) -> list[Any]:
    batches: list[Any] = []
    deadline = time.monotonic() + 20
    while sum(len(b) for b in batches) < want:
        assert time.monotonic() < deadline, "nothing polled"
        batches.append(consumer.poll(0.2))
    return batches


def consumer(topic: str) -> KafkaConsumer:
    c = KafkaConsumer({"bootstrap.servers": BS, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0)])
    return c


def share_consumer(topic: str) -> KafkaShareConsumer:
    c = KafkaShareConsumer({"bootstrap.servers": BS, "group.id": f"g-{topic}",
                            "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


# -- the garbage of each kind (made in the parent, freed by the child's collector) -----------------
def records_of_closed_consumer(topic: str) -> None:
    """Batches whose consumer was closed: they alone keep its librdkafka handle."""
    c = consumer(topic)
    batches = polled(c)
    c.close()
    cycle(batches)


def records_in_traceback(topic: str) -> None:
    """An error whose traceback holds a frame that holds a batch of a closed consumer."""
    c = consumer(topic)

    def fail(batch: Any) -> None:
        raise ValueError(f"bad record in {batch!r}")

    try:
        fail(polled(c)[-1])
    except ValueError as exc:
        error = exc
    c.close()
    cycle(error)


def unclosed_consumer(topic: str) -> None:
    c = consumer(topic)
    cycle(c, polled(c))


def unclosed_producer(topic: str) -> None:
    p = KafkaProducer({"bootstrap.servers": BS, "linger.ms": 1000})
    p.send(topic, b"done").result(10)
    cycle(p, p.send(topic, b"pending"))


def futures_of_closed_producer(topic: str) -> None:
    p = KafkaProducer({"bootstrap.servers": BS})
    futures = [p.send(topic, b"x") for _ in range(3)]
    p.close(10)
    cycle(futures)


def share_records_of_closed_consumer(topic: str) -> None:
    c = share_consumer(topic)
    batches = polled(c)
    c.close()
    cycle(batches)


def unclosed_share_consumer(topic: str) -> None:
    c = share_consumer(topic)
    cycle(c, polled(c))


def failed_pipelines(topic: str) -> None:
    """shared/repro/fork_gc.py: at-least-once Pipelines stopped by a malformed process() output,
    their errors kept in the frame that caught them (a cycle), then a live producer."""
    def process(r: Any) -> list[tuple[Any, ...]]:
        if r.offset != 5:
            return [(None, r.value)]
        return [(None, b"a", b"b")] if r.topic.endswith("2") else [(None, b"first"), (None, 123)]

    errors: list[BaseException] = []
    for n in (1, 2):
        src = f"{topic}-src{n}"
        assert BROKER is not None
        BROKER.create_topic(src, 1)
        BROKER.create_topic(f"{topic}-dst{n}", 1)
        produce(src, 10)
        config = {"bootstrap.servers": BS, "group.id": f"{src}-g", "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 500, "commit.interval.ms": 60000}
        pipeline = Pipeline(config, [src], process, f"{topic}-dst{n}")
        try:
            pipeline.run(timeout=10)
        except Exception as exc:  # noqa: BLE001 - the malformed output's error is what the child finds
            errors.append(exc)
        pipeline.close(5)
    assert len(errors) == 2, errors
    p = KafkaProducer({"bootstrap.servers": BS})
    p.send(topic, b"x").result(10)
    cycle(errors, p)


def embedded_broker(topic: str) -> None:
    """Another running EmbeddedBroker, dropped."""
    b = EmbeddedBroker(num_brokers=1).start()
    b.create_topic("t", 1)
    cycle(b)


KINDS: dict[str, Callable[[str], None]] = {
    "records-of-closed-consumer": records_of_closed_consumer,
    "records-in-traceback": records_in_traceback,
    "unclosed-consumer": unclosed_consumer,
    "unclosed-producer": unclosed_producer,
    "futures-of-closed-producer": futures_of_closed_producer,
    "share-records-of-closed-consumer": share_records_of_closed_consumer,
    "unclosed-share-consumer": unclosed_share_consumer,
    "failed-pipelines": failed_pipelines,
    "embedded-broker": embedded_broker,
}


def wait_child(pid: int) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return str(os.waitstatus_to_exitcode(status))
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


def fork() -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    return os.fork()


def child_collects() -> None:
    signal.alarm(20)
    gc.enable()
    collected = gc.collect()
    with open(os.environ["FORK_GC_OUT"], "a") as out:
        out.write(f"{collected}\n")
    os._exit(0)


def check_parent_broker(topic: str) -> None:
    produce(topic, 1)
    c = consumer(topic)
    polled(c)
    c.close()


def gc_main(kinds: list[str]) -> None:
    global BS, BROKER
    with EmbeddedBroker(num_brokers=1) as b:
        b.configure_share_groups(auto_offset_reset="earliest", heartbeat_interval_ms=500)
        BS, BROKER = b.bootstrap_servers, b
        for i, kind in enumerate(kinds):
            topic = f"k{i}"
            b.create_topic(topic, 1)
            produce(topic, 3)
            gc.collect()
            gc.disable()  # the parent keeps this kind's cycles until the child collected them
            KINDS[kind](topic)
            out = f"/tmp/fork-gc-{PARENT}-{i}"
            os.environ["FORK_GC_OUT"] = out
            pid = fork()
            if pid == 0:
                child_collects()
            status = wait_child(pid)
            gc.enable()
            gc.collect()
            collected = open(out).read().strip() if os.path.exists(out) else "none"
            if os.path.exists(out):
                os.unlink(out)
            print(f"KIND {kind} STATUS {status} COLLECTED {collected}", flush=True)
        b.create_topic("after", 1)
        check_parent_broker("after")
    print("PARENT-OK", flush=True)


# -- an EmbeddedBroker inherited by a child ---------------------------------------------------------
KEPT: list[EmbeddedBroker] = []


def expect_foreign(what: str, call: Callable[[], object]) -> bool:
    try:
        call()
    except IllegalStateError as exc:
        if f"created in process {PARENT}" in str(exc):
            return True
        print(f"CHILD-BAD-MESSAGE {what}: {exc}", flush=True)
        return False
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        print(f"CHILD-WRONG-ERROR {what}: {type(exc).__name__}: {exc}", flush=True)
        return False
    print(f"CHILD-NO-ERROR {what}", flush=True)
    return False


def child_uses(b: EmbeddedBroker) -> bool:
    ok = all([expect_foreign("create_topic", lambda: b.create_topic("child", 1)),
              expect_foreign("set_down", lambda: b.set_down(1)),
              expect_foreign("push_request_errors", lambda: b.push_request_errors("Produce", "_TRANSPORT")),
              expect_foreign("start", b.start),
              expect_foreign("with", lambda: b.__enter__())])
    ok = ok and b.bootstrap_servers == BS and b.topics == {"t": 1} and str(PARENT) in repr(b)
    with KafkaProducer({"bootstrap.servers": b.bootstrap_servers}) as p:  # a client of the child's own
        p.send("t", b"from-child", partition=0).result(10)
    return ok


def broker_main(how: str) -> None:
    global BS
    b = EmbeddedBroker(num_brokers=1).start()
    KEPT.append(b)  # "exit": the child leaves it to its interpreter's exit
    b.create_topic("t", 1)
    BS = b.bootstrap_servers
    produce("t", 1)
    with b if how == "with" else contextlib.nullcontext(b):
        pid = fork()
        if pid == 0:
            signal.alarm(20)
            ok = True
            if how == "stop":
                b.stop()
                b.close()
            elif how == "call":
                ok = child_uses(b)
            print("CHILD-OK" if ok else "CHILD-FAILED", flush=True)
            sys.exit(0)  # "with": leaves the block, so __exit__ runs in the child
        print(f"CHILD-STATUS {wait_child(pid)}", flush=True)
        c = consumer("t")
        values = [r.value for batch in polled(c, 2 if how == "call" else 1) for r in batch]
        c.close()
        produce("t", 1)
        assert values[0] == b"v0" and (how != "call" or b"from-child" in values), values
    b.stop()
    print("PARENT-OK", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "gc":
        gc_main(sys.argv[2:])
    else:
        broker_main(sys.argv[2])
