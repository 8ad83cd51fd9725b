"""The thread contract (kipconsumer._owner, kipconsumer._owned) under signals, for both consumers
(docs/reliability.md, "Threads and callbacks"; issue #36).

A signal handler's exception (``KeyboardInterrupt``) may be raised wherever Python runs a handler:
when a function starts, after a call returns, on a loop's back edge (and, from CPython 3.14, right
after ``with lock:``'s ``__enter__`` returns). Each test raises one at the k-th profile event (call,
return, c_return) of kipconsumer's code in a consumer call or ``close()``, or of a call it makes into
other code (its start or its return), for every k until the call has no more such events, and checks
that nothing of the contract is left behind: no owner, and a ``close()`` of another thread returns
within its timeout and closes the consumer. Before the contract moved to compiled code, a
KeyboardInterrupt raised when ``OwnerThread.enter()`` returned left the owner recorded for good
(every later ``close()`` of another thread gave up and the consumer was never closed), and one raised
in ``close()`` after it took the owner (KafkaConsumer) or marked the consumer closing
(KafkaShareConsumer) left it unclosed. The standard library's own ``with lock:`` blocks (threading's,
logging's) are not raised into: on 3.14 a signal there strands CPython's lock, not kipconsumer's.

Each scenario runs in a child process: a stray KeyboardInterrupt cannot end the test session, and a
thread stuck on something the interrupt left held cannot keep pytest from exiting.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Shared by the child processes: an embedded broker with topic "t" (1 partition, 10 records); make()
# builds a fresh consumer of KIND ready for calls; `probe(c)` is a call of it, `is_closed(c)` says
# whether its native handle is closed; `sweep(run, where)` runs `run(injector)` with a KeyboardInterrupt
# raised at the k-th event `where` admits, k = 0, 1, ... until one run has no k-th event.
_PRELUDE = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from kipconsumer import KafkaConsumer, KafkaShareConsumer, TopicPartition
    from kipconsumer.broker import EmbeddedBroker
    from kipconsumer.errors import IllegalStateError
    KIND = sys.argv[1]
    b = EmbeddedBroker(num_brokers=1).start()
    b.configure_share_groups(auto_offset_reset="earliest", record_lock_duration_ms=1000,
                             heartbeat_interval_ms=500)
    b.create_topic("t", 1, 1)
    tp = TopicPartition("t", 0)

    def make():
        conf = {"bootstrap.servers": b.bootstrap_servers, "group.id": "g"}
        if KIND == "consumer":
            c = KafkaConsumer(dict(conf, **{"enable.auto.commit": False}))
            c.assign([tp])
        else:
            c = KafkaShareConsumer(conf)
            c.subscribe(["t"])
        return c

    def probe(c):
        return c.position(tp) if KIND == "consumer" else c.poll(0)

    def is_closed(c):
        if KIND == "consumer":
            return c.closed
        try:
            c._native.commit_async()  # the native handle refuses every call once closed
            return False
        except IllegalStateError:
            return True

    class Injector:
        def __init__(self, k, where):
            self.k, self.where, self.seen, self.fired = k, where, 0, None
        def __call__(self, frame, event, arg):
            if self.fired is not None or event not in ("call", "return", "c_return"):
                return
            if not self.where(frame, event):
                return
            if self.seen == self.k:
                name = getattr(arg, "__name__", "") if event.startswith("c_") else frame.f_code.co_name
                self.fired = f"{event}:{frame.f_code.co_name}:{name}"
                raise KeyboardInterrupt
            self.seen += 1

    def ours(frame):
        return frame is not None and "/kipconsumer/" in frame.f_code.co_filename

    def at(frame, event, depths):
        # an event of kipconsumer's code, or a call into / return from another function made by it (the
        # standard library's own `with lock:` blocks are CPython's: not raised into), `depths` below
        # the frame that runs interrupted()
        if not (ours(frame) or (event in ("call", "return") and ours(frame.f_back))):
            return False
        return depth_below(frame, interrupted.__code__) in depths

    def depth_below(frame, top):
        # how many frames `frame` is below the frame running `top` (0: that frame), None if not below
        n = 0
        while frame is not None:
            if frame.f_code is top:
                return n
            frame, n = frame.f_back, n + 1
        return None

    def interrupted(fn, injector):
        sys.setprofile(injector)
        try:
            fn()
        except KeyboardInterrupt:
            pass
        finally:
            sys.setprofile(None)

    def close_elsewhere(c, timeout=1.0):
        # close() of another thread: (returned, seconds it took)
        took = {}
        def run():
            t0 = time.monotonic()
            try:
                c.close(timeout=timeout)
            except Exception as e:
                took["error"] = repr(e)
            took["s"] = time.monotonic() - t0
        th = threading.Thread(target=run, daemon=True)
        th.start()
        th.join(timeout + 10)
        return not th.is_alive(), took.get("s"), took.get("error")

    def result(**kw):
        print("RESULT " + json.dumps(kw), flush=True)
""")


def _run(kind: str, body: str, timeout: float = 120) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(body), kind],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode < 0:
        pytest.fail(f"the child process crashed (signal {-proc.returncode}): {proc.stdout[-2000:]}")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (proc.stdout[-3000:], proc.stderr[-3000:])
    result: dict[str, object] = json.loads(lines[-1][len("RESULT "):])
    return result


@pytest.mark.parametrize("kind", ["consumer", "share"])
def test_a_signal_anywhere_in_a_call_leaves_no_owner(kind: str) -> None:
    # KafkaConsumer.position() / KafkaShareConsumer.poll(0): a KeyboardInterrupt at each event of the
    # call (enter, the method, leave); after each, no thread owns the consumer.
    r = _run(kind, """
        c = make()
        probe(c)

        def attempt(injector):
            interrupted(lambda: probe(c), injector)

        fired, stranded, k = [], [], 0
        while k < 2000:
            inj = Injector(k, lambda frame, event: at(frame, event, range(1, 1000)))
            attempt(inj)
            if inj.fired is None:
                break
            fired.append(inj.fired)
            if c._thread.owner is not None or c._thread.depth:
                stranded.append(inj.fired)
            k += 1
        returned, took, error = close_elsewhere(c)
        result(events=len(fired), stranded=stranded[:10], returned=returned, close=took, error=error,
               owner=c._thread.owner, closed=is_closed(c))
        os._exit(0)
    """)
    assert r["events"] >= 3, r       # the sweep reached into the call
    assert r["stranded"] == [], r    # before the fix (3.11): "return:enter:enter" left the owner set
    assert r["returned"] is True, r
    assert r["error"] is None, r
    assert r["close"] < 1.5, r
    assert r["owner"] is None, r
    assert r["closed"] is True, r


@pytest.mark.parametrize("kind", ["consumer", "share"])
def test_a_signal_anywhere_in_close_leaves_the_consumer_closable(kind: str) -> None:
    # close() on the main thread with a KeyboardInterrupt at each event of close() and of the functions
    # it calls (two levels down: deeper ones are library code, e.g. threading's); then no owner, and a
    # close() of another thread returns within its timeout with the consumer closed.
    r = _run(kind, """
        def attempt(c, injector):
            interrupted(lambda: c.close(timeout=5), injector)

        fired, bad, k = [], [], 0
        while k < 300:
            c = make()
            inj = Injector(k, lambda frame, event: at(frame, event, (2, 3, 4)))
            attempt(c, inj)
            if inj.fired is None:
                c.close()
                break
            fired.append(inj.fired)
            returned, took, error = close_elsewhere(c)
            if not returned or error or took >= 1.5 or c._thread.owner is not None or not is_closed(c):
                bad.append([inj.fired, returned, took, error, c._thread.owner is not None, is_closed(c)])
            k += 1
        result(events=len(fired), bad=bad[:10])
        os._exit(0)
    """, timeout=300)
    assert r["events"] >= 3, r  # the sweep reached into close()
    # before the fix (3.11): KafkaConsumer "return:own:own" left the owner set; KafkaShareConsumer
    # "call:__init__:__init__" (of the close thread) left it marked closing and never closed
    assert r["bad"] == [], r


@pytest.mark.slow  # a consumer and a slow call per event: ~35 s (KafkaConsumer), ~15 s (share)
@pytest.mark.parametrize("kind", ["consumer", "share"])
def test_a_signal_in_a_close_waiting_for_another_threads_call(kind: str) -> None:
    # The main thread is in a call that waits (KafkaConsumer: commit_sync() against a slow broker, which
    # close() does not wake: it leaves the close to that call; KafkaShareConsumer: poll(2)); another thread's
    # close() waits for it and gets a KeyboardInterrupt at each event of its close() and of the
    # functions it calls.
    # Once the call returns: no owner, and a third close() returns within its timeout, consumer closed.
    r = _run(kind, """
        def attempt(c, injector, gave_up):
            interrupted(lambda: c.close(timeout=0.2), injector)
            gave_up.set()

        fired, bad, k = [], [], 0
        while k < 300:
            c = make()
            b.set_rtt(1, 500)
            inj = Injector(k, lambda frame, event: at(frame, event, (2, 3)))
            gave_up = threading.Event()
            def closing():
                time.sleep(0.1)
                attempt(c, inj, gave_up)
            th = threading.Thread(target=closing, daemon=True)
            th.start()
            try:
                c.commit_sync({tp: 1}, timeout=5) if KIND == "consumer" else c.poll(1)
            except Exception:
                pass  # refused (closing) or timed out: not what is checked here
            th.join(10)
            b.set_rtt(1, 0)
            if inj.fired is None:
                c.close()
                break
            fired.append(inj.fired)
            returned, took, error = close_elsewhere(c)
            if not returned or error or took >= 1.5 or c._thread.owner is not None or not is_closed(c):
                bad.append([inj.fired, returned, took, error, c._thread.owner is not None, is_closed(c)])
            k += 1
        result(events=len(fired), bad=bad[:10])
        os._exit(0)
    """, timeout=300)
    assert r["events"] >= 3, r
    assert r["bad"] == [], r
