"""Helper of tests/test_fork.py: creates a client, uses it, forks, and checks both sides.

``python tests/fork_child.py KIND EXIT BOOTSTRAP TOPIC`` with KIND one of producer, consumer,
consumer-prefetch, async-producer, async-consumer, async-consumer-prefetch, share, async-share (a share
group member: the broker serves share groups from the earliest offset) and EXIT ``exit`` (the child
only calls ``sys.exit(0)``) or ``close`` (the child calls ``close()`` first). Prints ``CHILD-OK`` from
the child when every call it made raised ``IllegalStateError`` naming the parent's pid, ``CHILD-STATUS
<exit code or -signal>`` from the parent once the child ended (``CHILD-HUNG`` after 30 s), then
``PARENT-OK`` when the parent's client still works after the fork.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kipconsumer import AcknowledgeType, KafkaConsumer, KafkaProducer, KafkaShareConsumer, TopicPartition
from kipconsumer.aio import AsyncKafkaConsumer, AsyncKafkaProducer, AsyncKafkaShareConsumer
from kipconsumer.errors import IllegalStateError

KIND, EXIT, BOOTSTRAP, TOPIC = sys.argv[1:5]
PARENT = os.getpid()
TP = TopicPartition(TOPIC, 0)


def consumer_config() -> dict[str, Any]:
    return {"bootstrap.servers": BOOTSTRAP, "auto.offset.reset": "earliest",
            "poll.prefetch.thread": KIND.endswith("-prefetch")}


def share_config() -> dict[str, Any]:
    return {"bootstrap.servers": BOOTSTRAP, "group.id": "fork-share",
            "share.acknowledgement.mode": "explicit"}


def produce_one(value: bytes) -> None:
    with KafkaProducer({"bootstrap.servers": BOOTSTRAP}) as p:
        p.send(TOPIC, value, partition=0).result(10)


def expect_foreign(what: str, call: Callable[[], object]) -> bool:
    try:
        call()
    except IllegalStateError as exc:
        if f"created in process {PARENT}" not in str(exc):
            print(f"CHILD-BAD-MESSAGE {what}: {exc}", flush=True)
            return False
        return True
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        print(f"CHILD-WRONG-ERROR {what}: {type(exc).__name__}: {exc}", flush=True)
        return False
    print(f"CHILD-NO-ERROR {what}", flush=True)
    return False


async def expect_foreign_async(what: str, make: Callable[[], Awaitable[object]]) -> bool:
    async def run() -> None:
        await make()

    try:
        await asyncio.wait_for(run(), 10)
    except IllegalStateError as exc:
        return f"created in process {PARENT}" in str(exc)
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        print(f"CHILD-WRONG-ERROR {what}: {type(exc).__name__}: {exc}", flush=True)
        return False
    print(f"CHILD-NO-ERROR {what}", flush=True)
    return False


def wait_child(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print(f"CHILD-STATUS {os.waitstatus_to_exitcode(status)}", flush=True)
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    print("CHILD-HUNG", flush=True)


def fork() -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    return os.fork()


def sync_main() -> None:
    if KIND == "producer":
        p = KafkaProducer({"bootstrap.servers": BOOTSTRAP})
        p.send(TOPIC, b"before").result(10)
        pid = fork()
        if pid == 0:
            ok = all([expect_foreign("send", lambda: p.send(TOPIC, b"child")),
                      expect_foreign("flush", lambda: p.flush(1)),
                      expect_foreign("partitions_for", lambda: p.partitions_for(TOPIC)),
                      expect_foreign("metrics", p.metrics)])
            if EXIT == "close":
                ok = expect_foreign("close", lambda: p.close(1)) and ok
            print("CHILD-OK" if ok else "CHILD-FAILED", flush=True)
            sys.exit(0)
        wait_child_and_check(pid, lambda: p.send(TOPIC, b"after").result(10), p.close)
    else:
        c = KafkaConsumer(consumer_config())
        c.assign([TP])
        deadline = time.monotonic() + 10
        batch = c.poll(0.2)  # kept alive through the fork: the child frees its copy at exit
        while not batch and time.monotonic() < deadline:
            batch = c.poll(0.2)
        assert batch, "no record before the fork"
        pid = fork()
        if pid == 0:
            ok = all([expect_foreign("poll", lambda: c.poll(0.1)),
                      expect_foreign("assignment", c.assignment),
                      expect_foreign("seek", lambda: c.seek(TP, 0)),
                      expect_foreign("position", lambda: c.position(TP)),
                      expect_foreign("metrics", c.metrics)])
            if EXIT == "close":
                ok = expect_foreign("close", lambda: c.close(1)) and ok
            print("CHILD-OK" if ok else "CHILD-FAILED", flush=True)
            sys.exit(0)

        def parent_uses() -> None:
            c.seek(TP, 0)
            deadline = time.monotonic() + 10
            while not c.poll(0.2):
                assert time.monotonic() < deadline, "the parent's consumer returned nothing after the fork"

        wait_child_and_check(pid, parent_uses, c.close)


def share_main() -> None:
    c = KafkaShareConsumer(share_config())
    c.subscribe([TOPIC])
    deadline = time.monotonic() + 20
    batch = c.poll(0.2)  # kept alive through the fork: the child frees its copy at exit
    while not batch and time.monotonic() < deadline:
        batch = c.poll(0.2)
    assert batch, "no record before the fork"
    record = next(iter(batch))
    pid = fork()
    if pid == 0:
        ok = all([expect_foreign("poll", lambda: c.poll(0.1)),
                  expect_foreign("acknowledge", lambda: c.acknowledge(record, AcknowledgeType.ACCEPT)),
                  expect_foreign("commit_sync", lambda: c.commit_sync(1)),
                  expect_foreign("commit_async", c.commit_async),
                  expect_foreign("subscribe", lambda: c.subscribe([TOPIC])),
                  expect_foreign("metrics", c.metrics)])
        if EXIT == "close":
            ok = expect_foreign("close", lambda: c.close(1)) and ok
        print("CHILD-OK" if ok else "CHILD-FAILED", flush=True)
        sys.exit(0)

    def parent_uses() -> None:
        for r in batch:
            c.acknowledge(r, AcknowledgeType.ACCEPT)
        assert all(e is None for e in c.commit_sync(10).values())
        produce_one(b"after")
        deadline = time.monotonic() + 20
        while True:
            got = c.poll(0.2)
            for r in got:
                c.acknowledge(r, AcknowledgeType.ACCEPT)
            if any(r.value == b"after" for r in got):
                return
            assert time.monotonic() < deadline, "the parent's share consumer returned nothing after the fork"

    wait_child_and_check(pid, parent_uses, c.close)


def async_share_main() -> None:
    c = AsyncKafkaShareConsumer({**share_config(), "share.acknowledgement.mode": "implicit"})

    async def use() -> None:
        await c.subscribe([TOPIC])
        deadline = time.monotonic() + 20
        while not await c.poll(0.2) and time.monotonic() < deadline:
            pass

    async def check() -> bool:
        ok = all([await expect_foreign_async("poll", lambda: c.poll(0.1)),
                  await expect_foreign_async("commit_sync", lambda: c.commit_sync(1)),
                  await expect_foreign_async("commit_async", c.commit_async),
                  expect_foreign("metrics", c.metrics)])
        if EXIT == "close":
            ok = await expect_foreign_async("close", lambda: c.close(1)) and ok
        return ok

    async def finish() -> None:
        produce_one(b"after")
        deadline = time.monotonic() + 20
        while not any(r.value == b"after" for r in await c.poll(0.2)):
            assert time.monotonic() < deadline, "the parent's share consumer returned nothing after the fork"
        await c.close()

    asyncio.run(use())
    pid = fork()
    if pid == 0:
        print("CHILD-OK" if asyncio.run(check()) else "CHILD-FAILED", flush=True)
        sys.exit(0)
    wait_child(pid)
    asyncio.run(finish())
    print("PARENT-OK", flush=True)


def wait_child_and_check(pid: int, use: Callable[[], object], close: Callable[[], object]) -> None:
    wait_child(pid)
    use()
    close()
    print("PARENT-OK", flush=True)


def async_main() -> None:
    """The fork happens between event loops (forking inside a running loop is unsupported by asyncio:
    the child's loop shares its epoll instance with the parent's)."""
    if KIND == "async-producer":
        p = AsyncKafkaProducer({"bootstrap.servers": BOOTSTRAP})

        async def use_producer() -> None:
            await p.send(TOPIC, b"before")

        async def check_producer() -> bool:
            ok = all([expect_foreign("send", lambda: p.send(TOPIC, b"child")),
                      await expect_foreign_async("flush", lambda: p.flush(1)),
                      expect_foreign("metrics", p.metrics)])
            if EXIT == "close":
                ok = await expect_foreign_async("close", lambda: p.close(1)) and ok
            return ok

        async def finish_producer() -> None:
            await p.send(TOPIC, b"after")
            await p.close()

        use, check, finish = use_producer, check_producer, finish_producer
    else:
        c = AsyncKafkaConsumer(consumer_config())

        async def use_consumer() -> None:
            c.assign([TP])
            deadline = time.monotonic() + 10
            while not await c.poll(0.2) and time.monotonic() < deadline:
                pass

        async def check_consumer() -> bool:
            ok = all([await expect_foreign_async("poll", lambda: c.poll(0.1)),
                      expect_foreign("assignment", c.assignment),
                      expect_foreign("seek", lambda: c.seek(TP, 0))])
            if EXIT == "close":
                ok = await expect_foreign_async("close", lambda: c.close(1)) and ok
            return ok

        async def finish_consumer() -> None:
            c.seek(TP, 0)
            deadline = time.monotonic() + 10
            while not await c.poll(0.2):
                assert time.monotonic() < deadline, "the parent's consumer returned nothing after the fork"
            await c.close()

        use, check, finish = use_consumer, check_consumer, finish_consumer
    asyncio.run(use())
    pid = fork()
    if pid == 0:
        print("CHILD-OK" if asyncio.run(check()) else "CHILD-FAILED", flush=True)
        sys.exit(0)
    wait_child(pid)
    asyncio.run(finish())
    print("PARENT-OK", flush=True)


if __name__ == "__main__":
    if KIND == "share":
        share_main()
    elif KIND == "async-share":
        async_share_main()
    elif KIND.startswith("async-"):
        async_main()
    else:
        sync_main()
