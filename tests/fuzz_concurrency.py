"""Concurrency fuzzer: threads issue random API calls against the embedded broker, with SIGINTs and
callbacks that re-enter their client. Run by tests/test_fuzz.py (and under ASan by
tests/test_sanitizer.py) in a subprocess, so a crash or a hang fails the test instead of pytest.

    python tests/fuzz_concurrency.py SECONDS SEED [consumer|producer|all]

Any Python exception a call raises is an allowed outcome (the contract says which; the tests of
each rule check the exact type); what is checked here is what must never happen: a crash
(the process dies), a hang (a call that does not return within its bound: the parent's timeout),
a producer future that never resolves, or one resolved twice. Prints one JSON line:
operations run, outcomes by type, futures checked.
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from typing import Any

import kipconsumer
from kipconsumer import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kipconsumer.broker import EmbeddedBroker

TOPIC = "fuzz"
PARTS = 4


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.ops = 0

    def count(self, what: str) -> None:
        with self.lock:
            self.ops += 1
            self.outcomes[what] += 1


# SIGINT raises KeyboardInterrupt in the main thread only while it runs kipconsumer's own code inside
# call() (the calls are what is tested; a KeyboardInterrupt in the fuzzer's own bookkeeping would only
# end the run). Not in the standard library's code that kipconsumer calls: an exception raised between
# a `self.acquire()` and its `try:` there (logging's Handler.handle, threading's Condition) strands the
# lock for every thread, a hazard of any raising signal handler in CPython, not of kipconsumer (it
# hung a run: the other threads' close() warnings waited for logging's handler lock for ever).
_MAIN = threading.main_thread()
_main_in_call = [False]
_KIPCONSUMER_DIR = os.path.dirname(os.path.abspath(kipconsumer.__file__)) + os.sep


def _on_sigint(signum: int, frame: Any) -> None:
    if (_main_in_call[0] and frame is not None
            and os.path.abspath(frame.f_code.co_filename).startswith(_KIPCONSUMER_DIR)):
        raise KeyboardInterrupt


def call(stats: Stats, name: str, fn: Any, *args: Any, **kw: Any) -> Any:
    on_main = threading.current_thread() is _MAIN
    outcome, result = "ok", None
    try:
        if on_main:
            _main_in_call[0] = True
        result = fn(*args, **kw)
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    except Exception as e:  # every typed error is an allowed outcome here
        outcome = type(e).__name__
    finally:
        if on_main:
            _main_in_call[0] = False
    stats.count(f"{name}:{outcome}")
    return result


class ConsumerSlot:
    """One consumer shared by several threads; replaced after it is closed."""

    def __init__(self, bootstrap: str, rng: random.Random) -> None:
        self.bootstrap = bootstrap
        self.rng = rng
        self.lock = threading.Lock()
        self.consumer = self._new()

    def _new(self) -> KafkaConsumer:
        c = KafkaConsumer({"bootstrap.servers": self.bootstrap, "group.id": "fuzz", "max.poll.records": 50,
                           "auto.offset.reset": "earliest", "enable.auto.commit": self.rng.random() < 0.5,
                           "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        if self.rng.random() < 0.5:
            c.subscribe([TOPIC], Listener(self))
        else:
            c.assign([TopicPartition(TOPIC, p) for p in range(PARTS)])
        return c

    def get(self) -> KafkaConsumer:
        with self.lock:
            if self.consumer.closed:
                self.consumer = self._new()
            return self.consumer


class Listener:
    def __init__(self, slot: ConsumerSlot) -> None:
        self.slot = slot
        self.stats: Stats | None = None

    def _reenter(self, where: str) -> None:
        c = self.slot.consumer
        stats = self.stats or Stats()
        op = self.slot.rng.choice(["commit_sync", "poll", "position", "close", "assignment", "seek"])
        if op == "commit_sync":
            call(stats, f"{where}.commit_sync", c.commit_sync, timeout=1.0)
        elif op == "poll":
            call(stats, f"{where}.poll", c.poll, 0)
        elif op == "position":
            call(stats, f"{where}.position", c.position, TopicPartition(TOPIC, 0), 1.0)
        elif op == "close":
            call(stats, f"{where}.close", c.close, 1.0)
        elif op == "seek":
            call(stats, f"{where}.seek", c.seek, TopicPartition(TOPIC, 0), 0)
        else:
            call(stats, f"{where}.assignment", c.assignment)

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self._reenter("on_assigned")

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self._reenter("on_revoked")


def consumer_worker(slot: ConsumerSlot, stats: Stats, rng: random.Random, stop: threading.Event) -> None:
    tp = TopicPartition(TOPIC, rng.randrange(PARTS))
    while not stop.is_set():
        c = slot.get()
        op = rng.choice(["poll", "poll", "poll", "poll_inf", "commit_async", "commit_sync", "close",
                         "wakeup", "seek", "pause", "resume", "committed", "position", "metrics",
                         "seek_to_beginning", "assign", "subscribe", "unsubscribe"])
        if op == "poll":
            call(stats, "poll", c.poll, rng.choice([0, 0.01, 0.1, 0.3]))
        elif op == "poll_inf":
            threading.Timer(0.2, c.wakeup).start()
            call(stats, "poll_inf", c.poll, float("inf"))
        elif op == "commit_async":
            def cb(offsets: Any, exc: Any, c: KafkaConsumer = c) -> None:
                what = rng.choice(["close", "poll", "commit_sync", "nothing"])
                if what == "close":
                    call(stats, "commit_cb.close", c.close, 0.5)
                elif what == "poll":
                    call(stats, "commit_cb.poll", c.poll, 0)
                elif what == "commit_sync":
                    call(stats, "commit_cb.commit_sync", c.commit_sync, None, 0.5)
            call(stats, "commit_async", c.commit_async, None, cb)
        elif op == "commit_sync":
            call(stats, "commit_sync", c.commit_sync, {tp: OffsetAndMetadata(rng.randrange(50))}, 1.0)
        elif op == "close":
            call(stats, "close", c.close, rng.choice([0, 0.2, 1.0]))
        elif op == "wakeup":
            call(stats, "wakeup", c.wakeup)
        elif op == "seek":
            call(stats, "seek", c.seek, tp, rng.randrange(100))
        elif op == "pause":
            call(stats, "pause", c.pause, [tp])
        elif op == "resume":
            call(stats, "resume", c.resume, [tp])
        elif op == "committed":
            call(stats, "committed", c.committed, [tp], 0.5)
        elif op == "position":
            call(stats, "position", c.position, tp, 0.5)
        elif op == "metrics":
            call(stats, "metrics", c.metrics)
        elif op == "seek_to_beginning":
            call(stats, "seek_to_beginning", c.seek_to_beginning, [tp])
        elif op == "assign":
            call(stats, "assign", c.assign, [TopicPartition(TOPIC, p) for p in range(PARTS)])
        elif op == "subscribe":
            listener = Listener(slot)
            listener.stats = stats
            call(stats, "subscribe", c.subscribe, [TOPIC], listener)
        else:
            call(stats, "unsubscribe", c.unsubscribe)


class ProducerSlot:
    def __init__(self, bootstrap: str, rng: random.Random) -> None:
        self.bootstrap = bootstrap
        self.rng = rng
        self.lock = threading.Lock()
        self.futures: list[Any] = []
        self.resolved: Counter[int] = Counter()
        self.producer = self._new()

    def _new(self) -> KafkaProducer:
        slot = self

        def serializer(value: Any) -> Any:
            if slot.rng.random() < 0.01:
                what = slot.rng.choice(["close", "flush", "send"])
                p = slot.producer
                try:
                    if what == "close":
                        p.close(0.2)
                    elif what == "flush":
                        p.flush(0.2)
                    else:
                        slot.track(p.send(TOPIC, value=b"nested"))
                except Exception:
                    pass
            return value

        return KafkaProducer({"bootstrap.servers": self.bootstrap, "linger.ms": self.rng.choice([0, 5]),
                              "max.block.ms": 1000, "delivery.timeout.ms": 5000, "request.timeout.ms": 2000},
                             value_serializer=serializer)

    def track(self, fut: Any) -> None:
        if fut is None:
            return
        with self.lock:
            self.futures.append(fut)
        key = id(fut)
        fut.add_done_callback(lambda f, key=key: self._resolved(key))

    def _resolved(self, key: int) -> None:
        with self.lock:
            self.resolved[key] += 1

    def get(self) -> KafkaProducer:
        with self.lock:
            if self.producer.closed:
                self.producer = self._new()
            return self.producer


def producer_worker(slot: ProducerSlot, stats: Stats, rng: random.Random, stop: threading.Event) -> None:
    while not stop.is_set():
        p = slot.get()
        op = rng.choice(["send"] * 6 + ["send_cb", "flush", "close", "metrics"])
        if op == "send":
            slot.track(call(stats, "send", p.send, TOPIC, value=b"v", partition=rng.randrange(PARTS)))
        elif op == "send_cb":
            def cb(md: Any, exc: Any, p: KafkaProducer = p) -> None:
                what = rng.choice(["send", "flush", "close", "nothing"])
                if what == "send":
                    slot.track(call(stats, "delivery_cb.send", p.send, TOPIC, value=b"cb"))
                elif what == "flush":
                    call(stats, "delivery_cb.flush", p.flush, 0.1)
                elif what == "close":
                    call(stats, "delivery_cb.close", p.close, 0.1)
            slot.track(call(stats, "send_cb", p.send, TOPIC, value=b"v", callback=cb))
        elif op == "flush":
            call(stats, "flush", p.flush, rng.choice([0, 0.1, 1.0]))
        elif op == "close":
            call(stats, "close", p.close, rng.choice([0, 0.1, 1.0]))
        else:
            call(stats, "producer.metrics", p.metrics)


def main(seconds: float, seed: int, clients: str = "all") -> int:
    rng = random.Random(seed)
    stats = Stats()
    stop = threading.Event()
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic(TOPIC, PARTS)
        cslot = ConsumerSlot(broker.bootstrap_servers, random.Random(rng.random()))
        pslot = ProducerSlot(broker.bootstrap_servers, random.Random(rng.random()))
        threads = [threading.Thread(target=worker, daemon=True,
                                    args=(slot, stats, random.Random(rng.random()), stop))
                   for worker, slot in ([(consumer_worker, cslot)] * 3 if clients != "producer" else [])
                   + ([(producer_worker, pslot)] * 3 if clients != "consumer" else [])]
        for t in threads:
            t.start()
        # the main thread polls too, and takes the SIGINTs
        signal.signal(signal.SIGINT, _on_sigint)
        deadline = time.monotonic() + seconds
        sigint = threading.Thread(target=_sigints, args=(random.Random(rng.random()), stop), daemon=True)
        sigint.start()
        while time.monotonic() < deadline:
            if clients != "producer":
                call(stats, "main.poll", cslot.get().poll, rng.choice([0.05, 0.5, 2.0]))
            if clients != "consumer":
                call(stats, "main.flush", pslot.get().flush, rng.choice([0.05, 0.5]))
            time.sleep(0.001)  # calls refused at once must not turn this thread into a busy loop
        stop.set()
        for t in threads:
            t.join(30)
        hung = [t.name for t in threads if t.is_alive()]
        if hung:
            faulthandler.dump_traceback(all_threads=True)
        try:
            cslot.get().close(5)
            final = pslot.get()
            final.close(10)
        except Exception as e:
            stats.count(f"final_close:{type(e).__name__}")
        # every future of every producer resolved, once
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not all(f.done() for f in pslot.futures):
            time.sleep(0.1)
        unresolved = sum(1 for f in pslot.futures if not f.done())
        twice = sum(1 for v in pslot.resolved.values() if v > 1)
    print(json.dumps({"ops": stats.ops, "futures": len(pslot.futures), "unresolved": unresolved,
                      "resolved_twice": twice, "hung_threads": hung,
                      "outcomes": dict(stats.outcomes.most_common())}), flush=True)
    return 1 if unresolved or twice or hung else 0


def _sigints(rng: random.Random, stop: threading.Event) -> None:
    while not stop.wait(rng.uniform(0.05, 0.5)):
        os.kill(os.getpid(), signal.SIGINT)


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "all"))
