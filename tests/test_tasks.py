"""TaskExecutor (KIP-572): skip a timed-out task, keep the others running, fail on its deadline.

Deadline arithmetic is checked with a fake clock (exact); one test uses real time for the
no-busy-wait property (CPU time stays small while every task keeps failing).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

from kipconsumer.errors import ConfigError, KafkaTimeoutError, TaskTimeoutError
from kipconsumer.tasks import TaskExecutor


class FakeClock:
    """A manual monotonic clock; ``sleep`` advances it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def executor(clock: FakeClock, **conf: object) -> TaskExecutor:
    return TaskExecutor({k.replace("_", "."): v for k, v in conf.items()}, clock=clock, sleep=clock.sleep)


class Script:
    """A step that follows a script: 'p' progress, 'n' no progress, 't' TimeoutError, 'k' KafkaTimeoutError,
    'x' ValueError; the last entry repeats."""

    def __init__(self, script: str, name: str = "") -> None:
        self.script = script
        self.calls = 0
        self.name = name
        self.raised: list[BaseException] = []

    def __call__(self) -> bool:
        c = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        exc: BaseException
        if c == "p":
            return True
        if c == "n":
            return False
        if c == "t":
            exc = TimeoutError(f"{self.name} call {self.calls} timed out")
        elif c == "k":
            exc = KafkaTimeoutError(f"send to sink-0 (call {self.calls}) timed out", code="_MSG_TIMED_OUT")
        else:
            exc = ValueError(f"{self.name} bad record")
        self.raised.append(exc)
        raise exc


def test_config_defaults_and_validation(caplog: pytest.LogCaptureFixture) -> None:
    ex = TaskExecutor({})
    assert ex.settings.task_timeout_ms == 300_000
    assert ex.settings.retry_backoff_ms == 100
    assert TaskExecutor().settings.task_timeout_ms == 300_000
    with pytest.raises(ConfigError, match="task.timeout.ms"):
        TaskExecutor({"task.timeout.ms": -1})
    with pytest.raises(ConfigError, match="task.timeot.ms"):
        TaskExecutor({"task.timeot.ms": 5})
    with caplog.at_level(logging.WARNING):
        ex = TaskExecutor({"retries": 5, "task.timeout.ms": 0})
    assert ex.settings.task_timeout_ms == 0
    assert any("retries" in r.getMessage() and "deprecated" in r.getMessage() for r in caplog.records)


def test_add_remove_and_names() -> None:
    ex = TaskExecutor({})
    ex.add_task("a", lambda: True)
    ex.add_task("b", lambda: False)
    with pytest.raises(ValueError, match="'a' already exists"):
        ex.add_task("a", lambda: True)
    with pytest.raises(TypeError):
        ex.add_task("c", "not callable")  # type: ignore[arg-type]
    assert ex.tasks() == ["a", "b"]
    ex.remove_task("a")
    assert ex.tasks() == ["b"] and "a" not in ex and len(ex) == 1
    with pytest.raises(KeyError):
        ex.remove_task("a")


def test_run_once_runs_all_and_reports_progress() -> None:
    clock = FakeClock()
    ex = executor(clock)
    a, b = Script("n"), Script("np")
    ex.add_task("a", a)
    ex.add_task("b", b)
    assert ex.run_once() is False
    assert ex.run_once() is True
    assert (a.calls, b.calls) == (2, 2)


def test_timeout_skips_task_logs_and_retries_after_backoff(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    ex = executor(clock, task_timeout_ms=10_000, retry_backoff_ms=100)
    slow, ok = Script("tp", "slow"), Script("p", "ok")
    ex.add_task("slow", slow)
    ex.add_task("ok", ok)
    with caplog.at_level(logging.WARNING, logger="kipconsumer.tasks"):
        ex.run_once()
    assert (slow.calls, ok.calls) == (1, 1)  # skipped, the other one ran
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'slow'" in warnings[0] and "slow call 1 timed out" in warnings[0]
    assert "TimeoutError" in warnings[0]
    assert ex.deadline("slow") == pytest.approx(1010.0)
    assert ex.waiting("slow")
    clock.now += 0.05
    ex.run_once()  # before retry.backoff.ms: not retried yet
    assert (slow.calls, ok.calls) == (1, 2)
    clock.now = 1000.0 + 0.1
    assert ex.run_once() is True  # retried at the backoff; it makes progress
    assert slow.calls == 2
    assert ex.deadline("slow") is None  # progress cleared the timer


def test_deadline_raises_task_timeout_with_cause() -> None:
    clock = FakeClock()
    ex = executor(clock, task_timeout_ms=1_000, retry_backoff_ms=100)
    stuck, ok = Script("k", "stuck"), Script("p", "ok")

    def ok_step() -> bool:
        clock.now += 0.01  # the other task's work takes 10 ms
        return ok()

    ex.add_task("stuck", stuck)
    ex.add_task("ok", ok_step)
    start = clock.now
    with pytest.raises(TaskTimeoutError) as info:
        ex.run(timeout=100)
    assert clock.now - start >= 1.0  # not before the deadline (first timeout + task.timeout.ms)
    assert clock.now - start < 1.0 + 0.1 + 0.02  # the first attempt at/after the deadline raises
    assert "'stuck'" in str(info.value) and "task.timeout.ms=1000" in str(info.value)
    assert "send to sink-0" in str(info.value)
    assert info.value.__cause__ is stuck.raised[-1]
    assert isinstance(info.value.__cause__, KafkaTimeoutError)
    assert stuck.calls >= 10 and ok.calls > stuck.calls  # retried every backoff; the other task kept going


def test_progress_resets_timer() -> None:
    clock = FakeClock()
    ex = executor(clock, task_timeout_ms=1_000, retry_backoff_ms=100)
    # 8 timeouts (0.7 s), progress, 8 timeouts: never 1 s without progress -> no error.
    step = Script("tttttttt" + "p" + "tttttttt" + "p")
    ex.add_task("flaky", step)
    ex.run(until=lambda: step.calls >= 18, timeout=100)
    assert ex.deadline("flaky") is None
    # Progress cleared the timer; the next timeout starts a new one.
    step.script, step.calls = "t", 0
    ex.run_once()
    assert ex.deadline("flaky") == pytest.approx(clock.now + 1.0)


def test_zero_task_timeout_raises_on_first_timeout() -> None:
    clock = FakeClock()
    ex = executor(clock, task_timeout_ms=0)
    step = Script("t", "once")
    ex.add_task("once", step)
    with pytest.raises(TaskTimeoutError, match="'once'.*once call 1 timed out") as info:
        ex.run_once()
    assert step.calls == 1 and info.value.__cause__ is step.raised[0]


def test_other_exceptions_propagate_at_once() -> None:
    clock = FakeClock()
    ex = executor(clock)
    bad, after = Script("x", "bad"), Script("p")
    ex.add_task("bad", bad)
    ex.add_task("after", after)
    with pytest.raises(ValueError, match="bad bad record"):
        ex.run_once()
    assert after.calls == 0


def test_remove_task_inside_a_pass() -> None:
    clock = FakeClock()
    ex = executor(clock)
    b = Script("p")

    def remover() -> bool:
        ex.remove_task("b")
        ex.add_task("c", lambda: True)
        return True

    ex.add_task("a", remover)
    ex.add_task("b", b)
    ex.run_once()
    assert b.calls == 0 and ex.tasks() == ["a", "c"]


def test_sleeps_until_earliest_retry_when_all_wait() -> None:
    clock = FakeClock()
    ex = executor(clock, task_timeout_ms=60_000, retry_backoff_ms=100)
    a, b = Script("t"), Script("nt")
    ex.add_task("a", a)
    ex.add_task("b", b)
    ex.run_once()  # a times out at t0 (retry t0+0.1); b makes no progress
    clock.now += 0.03
    ex.run_once()  # b times out at t0+0.03 (retry t0+0.13)
    clock.slept.clear()
    ex.run(until=lambda: a.calls >= 2, timeout=10)
    assert clock.slept == [pytest.approx(0.07)]  # until a's retry time, not a full backoff
    assert all(s <= 0.1 for s in clock.slept)


def test_no_busy_wait_when_every_task_fails() -> None:
    """Real clock: for 2 s every task times out; CPU time must stay far below the wall time."""
    ex = TaskExecutor({"task.timeout.ms": 60_000, "retry.backoff.ms": 100})
    steps = [Script("t", f"t{i}") for i in range(3)]
    for i, s in enumerate(steps):
        ex.add_task(f"t{i}", s)
    logging.getLogger("kipconsumer.tasks").setLevel(logging.ERROR)  # keep the 60 warnings out of the way
    try:
        wall0, cpu0 = time.monotonic(), time.process_time()
        ex.run(timeout=2.0)
        wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    finally:
        logging.getLogger("kipconsumer.tasks").setLevel(logging.NOTSET)
    assert wall >= 2.0
    assert cpu < 0.3 * wall, f"executor spun: {cpu:.2f} s CPU in {wall:.2f} s"
    for s in steps:  # retried about every retry.backoff.ms, not in a tight loop
        assert 5 <= s.calls <= 2.0 / 0.1 + 2
    assert ex.metrics()["sleeps"] >= 10


def test_run_until_and_timeout_return() -> None:
    clock = FakeClock()
    ex = executor(clock)
    counter = Script("p")
    ex.add_task("c", counter)
    stop: Callable[[], bool] = lambda: counter.calls >= 5  # noqa: E731
    assert ex.run(until=stop) == 5
    empty = executor(clock)
    t0 = clock.now
    empty.run(timeout=1.0)  # no tasks: sleeps retry.backoff.ms at a time, returns at the timeout
    assert clock.now - t0 == pytest.approx(1.0)


def test_run_timeout_is_checked_like_every_timeout_argument() -> None:
    """NaN, negative or non-number timeouts raise ValueError naming it (kipconsumer/_timeouts.py);
    NaN used to make run() loop forever (every comparison with it is false)."""
    ex = TaskExecutor({"task.timeout.ms": 1000})
    for bad in (-1.0, "1", float("nan")):
        with pytest.raises(ValueError, match="timeout"):
            ex.run(timeout=bad)  # type: ignore[arg-type]
    assert ex.run(timeout=0.0) >= 0
