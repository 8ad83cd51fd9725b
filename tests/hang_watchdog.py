"""A pytest plugin (tests/conftest.py loads it) with two diagnostics for CI, where only part of a run's
output is kept and a hang costs the whole time limit:

- a failed test's report is printed the moment it fails (pytest prints it only at the end, which a
  later hang never reaches);
- the watchdog, a separate process (``python tests/hang_watchdog.py PID FILE LIMIT``): when one test has
  run ``LIMIT`` seconds, it prints that test's id and every thread's native stack (gdb, where
  present: a thread blocked in C with the GIL held shows no Python frame, not even to faulthandler),
  then sends ``SIGABRT`` (faulthandler prints the Python stacks) so the run ends now, not at CI's limit.

The pytest process writes the test it starts to ``FILE`` (``mark_test_start``), in a temporary
directory of its own. ``KIP_HANG_LIMIT_S``
sets the limit (default 900 s: no test of the suite is near it; 0 turns the watchdog off).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

DEFAULT_LIMIT_S = 900.0
_POLL_S = 5.0
_MAX_STACK_LINES = 500


def limit_seconds() -> float:
    """The per-test limit from ``KIP_HANG_LIMIT_S`` (seconds; 0 or less: no watchdog)."""
    raw = os.environ.get("KIP_HANG_LIMIT_S", "")
    try:
        return float(raw) if raw else DEFAULT_LIMIT_S
    except ValueError:
        raise SystemExit(f"KIP_HANG_LIMIT_S must be a number of seconds, got {raw!r}") from None


def start(state_file: Path, limit_s: float) -> subprocess.Popen[bytes]:
    """Starts the watchdog for this process; it exits when this process does."""
    state_file.write_text("")
    return subprocess.Popen([sys.executable, __file__, str(os.getpid()), str(state_file), str(limit_s)],
                            stdin=subprocess.DEVNULL, start_new_session=True)


def mark_test_start(state_file: Path, nodeid: str) -> None:
    """Records that ``nodeid`` starts now (one line: monotonic start, the test's id)."""
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(f"{time.monotonic()} {nodeid}\n")
    tmp.replace(state_file)


def _native_stacks(pid: int) -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(no gdb on this machine: no native stacks)\n"
    try:
        # the main thread in full first, then the others' tops: a long run has hundreds of threads
        r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
                            "-ex", "set print frame-arguments none", "-ex", "thread 1", "-ex", "bt 40",
                            "-ex", "thread apply all bt 8"],
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "(gdb did not finish within 120 s)\n"
    lines = [ln[:200] for ln in r.stdout.splitlines() if ln.startswith(("Thread ", "#", "["))]
    if len(lines) > _MAX_STACK_LINES:
        lines = lines[:_MAX_STACK_LINES] + [f"... {len(lines) - _MAX_STACK_LINES} more lines"]
    return "\n".join(lines) + "\n" + (r.stderr[-2000:] if r.returncode else "")


def watch(pid: int, state_file: Path, limit_s: float) -> None:
    """Watches ``pid`` until it exits; on a test over ``limit_s``: stacks, then SIGABRT."""
    while os.getppid() == pid:  # the pytest process that started this one is alive
        time.sleep(_POLL_S)
        try:
            started, _, nodeid = state_file.read_text().strip().partition(" ")
            elapsed = time.monotonic() - float(started)
        except (OSError, ValueError):
            continue
        if elapsed < limit_s:
            continue
        out = sys.stderr
        out.write(f"\n[hang watchdog] {nodeid} has run {elapsed:.0f} s (limit {limit_s:.0f} s, "
                  f"KIP_HANG_LIMIT_S); native stacks of pid {pid}:\n")
        out.write(_native_stacks(pid))
        out.write("[hang watchdog] SIGABRT: faulthandler prints the Python stacks\n")
        out.flush()
        try:
            os.kill(pid, signal.SIGABRT)
        except ProcessLookupError:
            pass
        return


def report_failure_now(nodeid: str, when: str, text: str, max_lines: int = 60) -> None:
    """Writes a failed report's last ``max_lines`` lines to the process's real stderr, flushed (a
    later abort loses what sits in stdout's buffer)."""
    out = sys.__stderr__
    if out is None:
        return
    lines = text.splitlines()
    cut = len(lines) - max_lines
    shown = f", last {max_lines} of {len(lines)} lines" if cut > 0 else ""
    head = f"[failed now] {nodeid} ({when}){shown}:"
    out.write("\n" + head + "\n" + "".join(f"    {line}\n" for line in lines[max(cut, 0):]))
    out.flush()


_state: dict[str, object] = {}


def pytest_configure(config: pytest.Config) -> None:
    limit = limit_seconds()
    if limit > 0 and not config.option.collectonly:
        path = Path(tempfile.mkdtemp(prefix="kip-hang-watchdog-")) / "current-test"
        _state["watchdog"] = start(path, limit)
        _state["file"] = path


def pytest_unconfigure(config: pytest.Config) -> None:
    watchdog = _state.pop("watchdog", None)
    if isinstance(watchdog, subprocess.Popen):
        watchdog.terminate()
        watchdog.wait(10)
    path = _state.pop("file", None)
    if isinstance(path, Path):
        shutil.rmtree(path.parent, ignore_errors=True)


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    path = _state.get("file")
    if isinstance(path, Path):
        mark_test_start(path, nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        report_failure_now(report.nodeid, report.when, report.longreprtext)


if __name__ == "__main__":
    watch(int(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]))
