"""The consumer's thread and callback contract, signals and unbounded waits (docs/reliability.md,
"Threads and callbacks").

Scenarios that could crash the interpreter, or send a signal to it, run in a child process: a crash
is then reported as this test's failure, and a stray KeyboardInterrupt cannot end the test session.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest
from kc_testing import make_consumer
from support import produce as produce_records

from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import ConcurrentAccessError, WakeupError
from kipconsumer.structs import TopicPartition

# Shared by the child processes: an own broker, a topic "t" of 1 partition with 10 records in one
# batch (so the first fetch brings all of them: split batches let a loaded machine's first poll
# return 1 record), and a consumer `c` of group "g" (manual commits) that has `tp` assigned;
# `result(**kw)` prints the outcome.
_PRELUDE = textwrap.dedent("""
    import json, math, os, signal, sys, threading, time
    # a shell that starts a job in the background without job control makes its children ignore
    # SIGINT, and Python then installs no KeyboardInterrupt handler: restore it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from confluent_kafka import Producer
    from kipconsumer import KafkaConsumer, TopicPartition
    from kipconsumer.broker import EmbeddedBroker
    b = EmbeddedBroker(num_brokers=1).start()
    b.create_topic("t", 1, 1)
    p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 500})  # one batch, one fetch
    for i in range(10):
        p.produce("t", value=b"v%d" % i)
    assert p.flush(30) == 0
    conf = {"bootstrap.servers": b.bootstrap_servers, "group.id": "g", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "max.poll.records": 5}
    c = KafkaConsumer(conf)
    tp = TopicPartition("t", 0)
    def result(**kw):
        print("RESULT " + json.dumps(kw), flush=True)
    def sigint_in(seconds):
        main = threading.main_thread().ident
        threading.Timer(seconds, lambda: signal.pthread_kill(main, signal.SIGINT)).start()
""")


def _run(body: str, timeout: float = 90) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode < 0:
        pytest.fail(f"the child process crashed (signal {-proc.returncode}): {proc.stdout[-2000:]}")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:]
    result: dict[str, object] = json.loads(lines[-1][len("RESULT "):])
    return result


def _produce(broker: EmbeddedBroker, topic: str, n: int) -> None:
    produce_records(broker.bootstrap_servers, topic, {0: n}, value=lambda p, i: f"v{i}".encode())


# ------------------------------------------------------------------------------ one thread at a time


def test_a_call_from_a_second_thread_raises_concurrent_access_error(
    broker: EmbeddedBroker, topic_factory: Callable[..., str], unique_name: Callable[[str], str],
) -> None:
    topic = topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    with make_consumer(broker, unique_name("g-threads")) as c:
        c.assign([tp])
        outcome: list[object] = []
        th = threading.Thread(target=lambda: outcome.append(_poll_or_error(c, 10.0)))
        th.start()
        deadline = time.monotonic() + 10
        while c.metrics().get("polls", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        for call in (lambda: c.poll(0), lambda: c.assign([tp]), lambda: c.commit_sync({tp: 0}),
                     lambda: c.committed([tp]), c.assignment, lambda: c.pause([tp])):
            t0 = time.monotonic()
            with pytest.raises(ConcurrentAccessError, match="not safe for multi-threaded access"):
                call()
            assert time.monotonic() - t0 < 1.0
        assert isinstance(c.metrics(), dict)  # metrics() and wakeup() are allowed from any thread
        c.wakeup()
        th.join(10)
        assert not th.is_alive()
        assert outcome and isinstance(outcome[0], WakeupError)
        # the owner thread is done: another thread may use the consumer now
        _produce(broker, topic, 3)
        got: list[int] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(r.offset for r in c.poll(0.2))
        assert got == [0, 1, 2]


def _poll_or_error(c: object, timeout: float) -> object:
    try:
        return c.poll(timeout)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - the outcome is asserted by the test
        return exc


def test_close_from_another_thread_wakes_a_blocked_poll_and_closes() -> None:
    r = _run("""
        c.assign([tp])
        n = 0
        while n < 10:
            n += len(c.poll(1))
        closer = threading.Timer(0.3, c.close, kwargs={"timeout": 10})
        closer.start()
        t0 = time.monotonic()
        got = c.poll(8.0)
        took = time.monotonic() - t0
        closer.join(10)
        try:
            c.poll(0)
            after = "no error"
        except Exception as e:
            after = type(e).__name__
        result(took=took, got=len(got), closed=c.closed, after=after, closer_alive=closer.is_alive())
    """)
    assert r["got"] == 0
    assert r["took"] < 3.0, r                   # woken at once (0.3 s), not after poll's 8 s
    assert r["closed"] is True and r["closer_alive"] is False, r
    assert r["after"] == "IllegalStateError", r


def test_close_from_another_thread_waits_for_a_long_call_then_it_closes() -> None:
    # commit_sync() is not woken: close() waits for it within its own timeout, then leaves the close
    # to that call, which closes the consumer when it returns.
    r = _run("""
        c.assign([tp])
        n = 0
        while n < 10:
            n += len(c.poll(1))
        b.set_rtt(1, 3000)
        timings = {}
        def close_soon():
            time.sleep(0.3)
            t0 = time.monotonic()
            c.close(timeout=0.5)
            timings["close"] = time.monotonic() - t0
            timings["closed_then"] = c.closed
        th = threading.Thread(target=close_soon)
        th.start()
        t0 = time.monotonic()
        c.commit_sync({tp: 7}, timeout=10)
        took = time.monotonic() - t0
        th.join(10)
        b.set_rtt(1, 0)
        check = KafkaConsumer(conf)
        committed = check.committed([tp], timeout=10)[tp]
        check.close()
        result(close=timings["close"], closed_then=timings["closed_then"], commit=took, closed=c.closed,
               committed=committed.offset)
    """)
    assert r["close"] < 1.5, r              # bounded by close()'s timeout
    assert r["closed_then"] is False, r     # not closed under the running commit_sync()
    assert r["closed"] is True, r           # closed once commit_sync() returned
    assert r["committed"] == 7, r


def test_a_signal_in_the_deferred_close_does_not_keep_the_thread_lock() -> None:
    # Issue #38 item 7: close() from another thread gave up waiting for a commit_sync() and left the
    # close to it; a KeyboardInterrupt landed in that thread right after it took the thread contract's
    # lock (_leave, after the deferred close), so the lock was never released and every later close()
    # of another thread waited for it forever (the concurrency fuzzer under ASan: a worker 30 s in
    # close()). The contract is compiled code now (kipconsumer._owned, issue #36): leaving it runs no
    # Python. The last point Python can raise at is commit_sync()'s return into it: a profile function
    # raises KeyboardInterrupt there, once the other thread's close() gave up; the deferred close
    # still runs and lets go (tests/test_owned_signals.py raises one at every other point).
    r = _run("""
        c.assign([tp])
        n = 0
        while n < 10:
            n += len(c.poll(1))
        b.set_rtt(1, 1500)

        fired = []
        def inject(frame, event, arg):
            if (event == "return" and not fired and gave_up.is_set() and frame.f_code.co_name == "commit_sync"
                    and frame.f_code.co_filename.endswith("consumer.py")):
                fired.append(f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}")
                raise KeyboardInterrupt

        gave_up = threading.Event()
        def close_soon():
            time.sleep(0.3)
            c.close(timeout=0.2)  # gives up: commit_sync() is still running, and leaves the close to it
            gave_up.set()
        th = threading.Thread(target=close_soon)
        th.start()
        sys.setprofile(inject)
        try:
            c.commit_sync({tp: 7}, timeout=10)
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        finally:
            sys.setprofile(None)
        th.join(10)
        b.set_rtt(1, 0)
        # a close() of another thread returns within its timeout
        took = {}
        def close_again():
            t0 = time.monotonic()
            c.close(timeout=0.5)
            took["close"] = time.monotonic() - t0
        th2 = threading.Thread(target=close_again, daemon=True)
        th2.start()
        th2.join(10)
        result(gave_up=gave_up.is_set(), fired=fired, interrupted=interrupted, hung=th2.is_alive(),
               close=took.get("close"), closed=c.closed)
        os._exit(0)  # a thread stuck on the lock would keep the interpreter from exiting
    """)
    assert r["gave_up"] is True, r
    assert r["fired"] == ["consumer.py:commit_sync"], r
    assert r["interrupted"] is True, r
    assert r["hung"] is False, r            # before the fix: blocked on the lock the signal left held
    assert r["close"] < 1.5, r
    assert r["closed"] is True, r


def test_a_signal_while_poll_logs_loses_no_record_and_close_returns() -> None:
    # Issue #38 item 7: poll() took records out of the fetch buffer, then ran Python code (handing
    # librdkafka's log lines to logging) before it owned them; a KeyboardInterrupt raised there lost
    # them and left their messages undestroyed, so a later close() waited in rd_kafka_destroy() for
    # them forever (the fuzzer's main thread takes SIGINTs in poll(); a worker's close() then hung).
    # A profile function raises KeyboardInterrupt at the first log line handed over while poll()
    # holds records that the application has not got.
    r = _run("""
        c.close()
        c = KafkaConsumer(dict(conf, **{"debug": "fetch", "max.poll.records": 2}))  # many log lines
        c.assign([tp])
        got, fired = [], []
        def inject(frame, event, arg):
            if (event == "call" and not fired and frame.f_code.co_name == "emit"
                    and frame.f_code.co_filename.endswith("_rdklog.py")
                    and c._native.metrics()["records_returned"] > len(got)):
                fired.append(1)
                raise KeyboardInterrupt
        end = time.monotonic() + 30
        while time.monotonic() < end and len(got) < 10:
            sys.setprofile(inject)
            try:
                got += [r.offset for r in c.poll(0.5)]
            except KeyboardInterrupt:
                pass
            finally:
                sys.setprofile(None)
        returned = c.metrics()["records_returned"]
        took = {}
        def close_elsewhere():
            t0 = time.monotonic()
            c.close(timeout=1.0)
            took["close"] = time.monotonic() - t0
        th = threading.Thread(target=close_elsewhere, daemon=True)
        th.start()
        th.join(15)
        result(got=got, returned=returned, fired=len(fired), hung=th.is_alive(), close=took.get("close"))
        os._exit(0)  # a thread stuck in rd_kafka_destroy() would keep the interpreter from exiting
    """)
    assert r["got"] == list(range(10)), r    # before the fix: the interrupted poll's records were lost
    assert r["returned"] == 10, r
    assert r["hung"] is False, r             # before the fix: close() waited for the lost messages
    assert r["close"] < 3, r


def test_metrics_while_another_thread_closes_does_not_crash() -> None:
    # metrics() (any thread) built its per-partition lags from the core with Python code (the
    # TopicPartition keys) between the reads; a close() on another thread that ran then freed the
    # core, and the next read crashed (SEGV in the concurrency fuzzer under ASan). The other thread's
    # close() is run exactly there: a profile function starts it at metrics()' first TopicPartition.
    r = _run("""
        c.assign([tp])
        n = 0
        while n < 10:
            n += len(c.poll(1))
        closed = []
        def inject(frame, event, arg):
            if (event == "call" and not closed
                    and frame.f_globals.get("__name__") == "namedtuple_TopicPartition"):
                th = threading.Thread(target=c.close, args=(2.0,))
                th.start()
                th.join(10)
                closed.append(c.closed)
        sys.setprofile(inject)
        try:
            m = c.metrics()
        finally:
            sys.setprofile(None)
        result(closed=closed, lag=list(m.get("partition_lag", {}).values()))
    """)
    assert r["closed"] == [True], r     # the close ran inside metrics()
    assert r["lag"] in ([None], [0]), r  # read before the close, or unknown once closed


# ------------------------------------------------------------------------------ callbacks re-entering


def test_close_in_a_commit_callback_raises_illegal_state_and_does_not_crash() -> None:
    r = _run("""
        c.assign([tp])
        n = 0
        while n < 10:
            n += len(c.poll(1))
        seen = []
        def cb(offsets, exc):
            try:
                c.close()
                seen.append("closed")
            except Exception as e:
                seen.append(type(e).__name__ + ": " + str(e))
        c.commit_async(callback=cb)
        t0 = time.monotonic()
        while not seen and time.monotonic() - t0 < 20:
            c.poll(0.1)
        usable = len(c.committed([tp], timeout=10)) == 1
        c.close()
        result(seen=seen, usable=usable, closed=c.closed)
    """)
    assert len(r["seen"]) == 1 and r["seen"][0].startswith("IllegalStateError"), r  # type: ignore[index]
    assert "commit_async() callback" in r["seen"][0], r  # type: ignore[index]
    assert r["usable"] is True and r["closed"] is True, r


def test_a_rebalance_listener_may_call_any_method_or_gets_a_typed_error() -> None:
    r = _run("""
        outcomes = {}
        calls = {
            "poll": lambda: c.poll(0),
            "subscribe": lambda: c.subscribe(["t"]),
            "unsubscribe": c.unsubscribe,
            "assign": lambda: c.assign([tp]),
            "close": c.close,
            "assignment": c.assignment,
            "subscription": c.subscription,
            "committed": lambda: c.committed([tp], timeout=10),
            "commit_sync": lambda: c.commit_sync({tp: 0}, timeout=10),
            "commit_async": lambda: c.commit_async({tp: 0}),
            "position": lambda: c.position(tp),
            "seek": lambda: c.seek(tp, 2),
            "pause": lambda: c.pause([tp]),
            "resume": lambda: c.resume([tp]),
            "paused": c.paused,
            "end_offsets": lambda: c.end_offsets([tp], timeout=10),
            "member_id": c.member_id,
            "metrics": c.metrics,
        }
        class Listener:
            def on_partitions_assigned(self, parts):
                for name, call in calls.items():
                    try:
                        call()
                        outcomes[name] = "ok"
                    except Exception as e:
                        outcomes[name] = type(e).__name__
            def on_partitions_revoked(self, parts):
                pass
        c.subscribe(["t"], listener=Listener())
        got = []
        t0 = time.monotonic()
        while len(got) < 8 and time.monotonic() - t0 < 30:
            got.extend(r.offset for r in c.poll(0.2))
        c.close()
        result(outcomes=outcomes, got=got)
    """)
    outcomes = r["outcomes"]
    assert isinstance(outcomes, dict)
    for name in ("poll", "subscribe", "unsubscribe", "assign", "close"):
        assert outcomes[name] == "IllegalStateError", (name, r)
    for name in ("assignment", "subscription", "committed", "commit_sync", "commit_async", "position",
                 "seek", "pause", "resume", "paused", "end_offsets", "member_id", "metrics"):
        assert outcomes[name] == "ok", (name, r)
    assert r["got"] == list(range(2, 10)), r  # the seek(2) made in the listener took effect


# ------------------------------------------------------------------------------ signals


def test_sigint_interrupts_a_blocked_poll_and_keeps_buffered_records() -> None:
    r = _run("""
        c.assign([tp])
        first = []
        t0 = time.monotonic()
        while not first and time.monotonic() - t0 < 20:
            first = [r.offset for r in c.poll(1)]
        t0 = time.monotonic()
        while c.metrics()["buffered_records"] < 5 and time.monotonic() - t0 < 20:
            time.sleep(0.05)
        c.pause([tp])            # the 5 buffered records stay buffered; poll() blocks
        sigint_in(0.3)
        t0 = time.monotonic()
        try:
            c.poll(8.0)
            interrupted = None
        except KeyboardInterrupt:
            interrupted = time.monotonic() - t0
        c.resume([tp])
        rest = []
        t0 = time.monotonic()
        while len(rest) < 5 and time.monotonic() - t0 < 20:
            rest.extend(r.offset for r in c.poll(1))
        c.close()
        result(first=first, interrupted=interrupted, rest=rest)
    """)
    assert r["first"] == [0, 1, 2, 3, 4], r
    assert r["interrupted"] is not None and r["interrupted"] < 1.3, r  # 0.3 s + < 1 s, not 8 s
    assert r["rest"] == [5, 6, 7, 8, 9], r


def test_sigint_is_not_lost_in_librdkafkas_error_callback() -> None:
    # A consumer whose broker refuses connections: librdkafka's error_cb runs (with the GIL) inside
    # poll() many times a second, and Python runs a pending signal handler inside it. Its
    # KeyboardInterrupt must reach the caller (it was swallowed there: about 1 poll in 5 ran to its end).
    r = _run("""
        d = KafkaConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g2",
                           "reconnect.backoff.ms": 1, "reconnect.backoff.max.ms": 2})
        d.subscribe(["t"])
        times = []
        for _ in range(8):
            sigint_in(0.3)
            t0 = time.monotonic()
            try:
                d.poll(5.0)
                times.append(None)
            except KeyboardInterrupt:
                times.append(time.monotonic() - t0)
        d.close(1)
        c.close()
        result(times=times)
    """)
    times = r["times"]
    assert isinstance(times, list) and None not in times and max(times) < 1.3, r


def test_sigint_interrupts_commit_sync_and_close() -> None:
    r = _run("""
        c.assign([tp])
        n = 0
        while n < 10:
            n += len(c.poll(1))
        b.set_rtt(1, 5000)        # every answer takes 5 s
        sigint_in(0.3)
        t0 = time.monotonic()
        try:
            c.commit_sync({tp: 10}, timeout=8)
            commit = None
        except KeyboardInterrupt:
            commit = time.monotonic() - t0
        time.sleep(0.5)
        sigint_in(0.3)
        t0 = time.monotonic()
        try:
            c.close(timeout=8)
            close = None
        except KeyboardInterrupt:
            close = time.monotonic() - t0
        result(commit=commit, close=close, closed=c.closed)
        b.set_rtt(1, 0)
    """)
    assert r["commit"] is not None and r["commit"] < 1.3, r
    assert r["close"] is not None and r["close"] < 1.3, r
    assert r["closed"] is True, r


# ------------------------------------------------------------------------------ unbounded waits


def test_poll_inf_waits_until_wakeup_or_records(
    broker: EmbeddedBroker, topic_factory: Callable[..., str], unique_name: Callable[[str], str],
) -> None:
    topic = topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    with make_consumer(broker, unique_name("g-inf")) as c:
        c.assign([tp])
        c.poll(0.2)
        threading.Timer(0.5, c.wakeup).start()
        t0 = time.monotonic()
        with pytest.raises(WakeupError):
            c.poll(math.inf)
        assert time.monotonic() - t0 >= 0.4
        threading.Timer(0.5, _produce, (broker, topic, 2)).start()
        guard = threading.Timer(30, c.wakeup)  # a failure, not a hang, if no record comes
        guard.start()
        t0 = time.monotonic()
        try:
            got = c.poll(math.inf)
        finally:
            guard.cancel()
        assert len(got) >= 1 and time.monotonic() - t0 >= 0.4
        # huge timeouts are clamped, never an overflow
        assert c.committed([tp], timeout=3e6) == {tp: None}
        assert c.commit_sync({tp: 1}, timeout=1e9)[tp].offset == 1
        assert c.end_offsets([tp], timeout=math.inf) == {tp: 2}


def test_sigint_interrupts_committed() -> None:
    r = _run("""
        c.assign([tp])
        c.commit_sync({tp: 4}, timeout=10)
        b.set_rtt(1, 5000)        # every answer takes 5 s
        sigint_in(0.3)
        t0 = time.monotonic()
        try:
            c.committed([tp], timeout=8)
            interrupted = None
        except KeyboardInterrupt:
            interrupted = time.monotonic() - t0
        b.set_rtt(1, 0)
        again = c.committed([tp, tp], timeout=10)
        c.close()
        result(interrupted=interrupted, again=[[k.partition, v.offset] for k, v in again.items()])
    """)
    assert r["interrupted"] is not None and r["interrupted"] < 1.3, r
    assert r["again"] == [[0, 4]], r


def test_close_from_a_signal_handler_during_poll() -> None:
    # Python runs signal handlers between poll()'s waits: a handler that closes the consumer (the
    # usual SIGTERM shutdown) makes that poll() return at once, and the consumer closes after it.
    r = _run("""
        c.assign([tp])
        n = 0
        while n < 10:
            n += len(c.poll(1))
        signal.signal(signal.SIGTERM, lambda *_: c.close(timeout=10))
        main = threading.main_thread().ident
        threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGTERM)).start()
        t0 = time.monotonic()
        got = c.poll(8.0)
        took = time.monotonic() - t0
        try:
            c.poll(0)
            after = "no error"
        except Exception as e:
            after = type(e).__name__
        result(took=took, got=len(got), closed=c.closed, after=after)
    """)
    assert r["got"] == 0 and r["took"] < 3.0, r
    assert r["closed"] is True and r["after"] == "IllegalStateError", r


def test_sigint_interrupts_offsets_for_times() -> None:
    r = _run("""
        b.set_rtt(1, 5000)        # every answer takes 5 s
        sigint_in(0.3)
        t0 = time.monotonic()
        try:
            c.offsets_for_times({tp: 1}, timeout=math.inf)
            interrupted = None
        except KeyboardInterrupt:
            interrupted = time.monotonic() - t0
        b.set_rtt(1, 0)
        c.close()
        result(interrupted=interrupted)
    """)
    assert r["interrupted"] is not None and r["interrupted"] < 1.3, r
