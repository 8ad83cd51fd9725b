"""KIP-572 task executor: skip a task that hits a client timeout, keep the others moving, fail on a deadline.

Contract (see docs/tasks.md):

* A task is a named callable ``step() -> bool``; ``True`` means the step made progress.
* A builtin ``TimeoutError`` raised by a step (``KafkaTimeoutError`` is one) does not stop the
  executor: a WARNING on ``kipconsumer.tasks`` names the task and the call that timed out (the
  exception's text), the task is skipped and retried on a later pass, once ``retry.backoff.ms`` has
  passed. The other tasks keep running meanwhile.
* A task's timer starts at its first timeout: its deadline is that instant plus ``task.timeout.ms``.
  A step that returns ``True`` clears the timer. A timeout at or after the deadline raises
  :class:`~kipconsumer.errors.TaskTimeoutError` naming the task and the timeout, with the last
  ``TimeoutError`` as ``__cause__``. So a task is always retried at least once after its first timeout,
  unless ``task.timeout.ms`` is 0: then its first timeout raises.
* Any other exception from a step propagates at once, out of :meth:`TaskExecutor.run_once`.
* :meth:`TaskExecutor.run` loops over passes; when every task is waiting for its retry time it sleeps
  until the earliest one (never longer than ``retry.backoff.ms``) instead of spinning.
* ``retries`` is accepted, ignored and logged as deprecated (KIP-572).

Not thread-safe: use an executor from one thread (steps may add or remove tasks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from kipconsumer._timeouts import timeout_seconds
from kipconsumer.config import TaskSettings, task_settings
from kipconsumer.errors import TaskTimeoutError

__all__ = ["TaskExecutor", "Step"]

log = logging.getLogger("kipconsumer.tasks")

#: A task's unit of work: returns True when it made progress; may raise TimeoutError.
Step = Callable[[], bool]


class _Task:
    """Per-task state. ``deadline``/``retry_at`` are clock times in seconds (None / 0.0 = unset)."""

    __slots__ = ("name", "step", "deadline", "retry_at", "timeouts", "last_timeout", "removed")

    def __init__(self, name: str, step: Step) -> None:
        self.name = name
        self.step = step
        self.deadline: float | None = None
        self.retry_at = 0.0
        self.timeouts = 0
        self.last_timeout: TimeoutError | None = None
        self.removed = False


class TaskExecutor:
    """Runs named tasks round robin with KIP-572 timeout handling (see the module docstring).

    ``config`` takes ``task.timeout.ms`` (default 300000, >= 0), ``retry.backoff.ms`` (default 100)
    and the deprecated, ignored ``retries``; other keys raise ``ConfigError``. ``clock`` (seconds,
    monotonic) and ``sleep`` can be replaced, e.g. by tests.
    """

    def __init__(self, config: Mapping[str, object] | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self._settings: TaskSettings = task_settings(config or {})
        self._timeout_s = self._settings.task_timeout_ms / 1000.0
        self._backoff_s = self._settings.retry_backoff_ms / 1000.0
        self._clock = clock
        self._sleep = sleep
        self._tasks: dict[str, _Task] = {}
        self._order: tuple[_Task, ...] = ()
        self._passes = 0
        self._timeouts = 0
        self._sleeps = 0

    # -- configuration / introspection -------------------------------------------------------------
    @property
    def settings(self) -> TaskSettings:
        """The validated settings in effect."""
        return self._settings

    def tasks(self) -> list[str]:
        """Names of the tasks, in the order they run."""
        return [t.name for t in self._order]

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __len__(self) -> int:
        return len(self._order)

    def deadline(self, name: str) -> float | None:
        """Clock time at which task ``name`` fails if it keeps timing out; None if its timer is off."""
        return self._tasks[name].deadline

    def waiting(self, name: str) -> bool:
        """True while task ``name`` waits for its retry time after a timeout."""
        return self._tasks[name].retry_at > self._clock()

    def next_retry_in(self) -> float | None:
        """Seconds until the earliest waiting task may run again (0.0 if one may now); None if none waits."""
        waits = [t.retry_at for t in self._order if t.retry_at]
        if not waits:
            return None
        return max(0.0, min(waits) - self._clock())

    def metrics(self) -> dict[str, int]:
        """Counters: ``tasks``, ``passes`` (run_once calls), ``timeouts`` (TimeoutErrors caught),
        ``sleeps`` (backoff sleeps taken by run), ``tasks_with_timer`` (tasks whose timer runs)."""
        return {"tasks": len(self._order), "passes": self._passes, "timeouts": self._timeouts,
                "sleeps": self._sleeps,
                "tasks_with_timer": sum(1 for t in self._order if t.deadline is not None)}

    # -- tasks ---------------------------------------------------------------------------------------
    def add_task(self, name: str, step: Step) -> None:
        """Adds a task, run after the existing ones. Raises ``ValueError`` if ``name`` is taken,
        ``TypeError`` if ``step`` is not callable."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"task name must be a non-empty str, got {name!r}")
        if not callable(step):
            raise TypeError(f"step of task {name!r} must be callable() -> bool, got {step!r}")
        if name in self._tasks:
            raise ValueError(f"a task named {name!r} already exists")
        task = _Task(name, step)
        self._tasks[name] = task
        self._order = (*self._order, task)

    def remove_task(self, name: str) -> None:
        """Removes a task (its timer goes with it); it does not run again, even later in the current
        pass. Raises ``KeyError`` if there is no such task."""
        task = self._tasks.pop(name)
        task.removed = True
        self._order = tuple(t for t in self._order if t is not task)

    # -- running -------------------------------------------------------------------------------------
    def run_once(self) -> bool:
        """Runs one pass: the step of every task not waiting for its retry time, in order.

        Returns True if any step made progress. A step's ``TimeoutError`` skips that task (WARNING
        log, retry after ``retry.backoff.ms``) or, at or past its deadline, raises
        ``TaskTimeoutError`` from it. Other exceptions propagate at once.
        """
        self._passes += 1
        progress = False
        clock = self._clock
        now = clock()
        for task in self._order:
            if task.retry_at:
                if task.retry_at > now or task.removed:
                    continue
                task.retry_at = 0.0
            elif task.removed:
                continue
            try:
                made = task.step()
            except TimeoutError as exc:
                now = clock()
                self._timed_out(task, exc, now)
                continue
            if made:
                progress = True
                if task.deadline is not None:
                    log.info("task %r made progress again: its task.timeout.ms timer is cleared", task.name)
                    task.deadline = None
                    task.last_timeout = None
        return progress

    def _timed_out(self, task: _Task, exc: TimeoutError, now: float) -> None:
        self._timeouts += 1
        task.timeouts += 1
        task.last_timeout = exc
        if task.deadline is None:
            task.deadline = now + self._timeout_s
        if now >= task.deadline:
            ms = self._settings.task_timeout_ms
            raise TaskTimeoutError(
                f"task {task.name!r} made no progress within task.timeout.ms={ms}: "
                f"last timeout: {type(exc).__name__}: {exc}"
            ) from exc
        task.retry_at = now + self._backoff_s if self._backoff_s > 0 else now
        log.warning("task %r skipped after a timeout in %s: %s; retrying in %d ms, failing if no progress "
                    "within %.0f ms (task.timeout.ms)", task.name, type(exc).__name__, exc,
                    self._settings.retry_backoff_ms, (task.deadline - now) * 1000.0)

    def run(self, until: Callable[[], bool] | None = None, timeout: float | None = None) -> int:
        """Runs passes until ``until()`` returns True (checked before each pass) or ``timeout`` seconds
        have passed (None: no limit); returns the number of passes run.

        Raises ``TaskTimeoutError`` when a task times out at or past its deadline, and whatever else a
        step raises. When no task may run (all wait for their retry time), sleeps until the earliest
        retry time, at most ``retry.backoff.ms``; with no tasks at all it sleeps ``retry.backoff.ms``.
        """
        clock = self._clock
        end = None if timeout is None else clock() + timeout_seconds(timeout, 0)
        passes = 0
        while True:
            if until is not None and until():
                return passes
            now = clock()
            if end is not None and now >= end:
                return passes
            wait = self._idle_wait(now)
            if wait > 0:
                if end is not None:
                    wait = min(wait, end - now)
                self._sleeps += 1
                self._sleep(wait)
                continue
            self.run_once()
            passes += 1

    def _idle_wait(self, now: float) -> float:
        """Seconds to sleep before the next pass: 0 if some task may run now."""
        earliest = None
        for task in self._order:
            ra = task.retry_at
            if ra <= now:
                return 0.0
            if earliest is None or ra < earliest:
                earliest = ra
        if earliest is None:
            return self._backoff_s
        return min(earliest - now, self._backoff_s)
