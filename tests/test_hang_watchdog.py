"""tests/hang_watchdog.py, the suite's CI diagnostics: a failure is printed when it happens, and a test
over the limit gets its stacks printed and the run aborted (instead of CI's time limit ending it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent

_PROBE = """
import time

def test_fails_first():
    assert 1 == 2, "the reason, printed at once"

def test_hangs():
    time.sleep(120)

def test_never_reached():
    pass
"""


def _run(tmp_path: Path, limit: str, probe: str = _PROBE) -> tuple[subprocess.CompletedProcess[str], float]:
    (tmp_path / "test_probe.py").write_text(probe)
    env = {**os.environ, "KIP_HANG_LIMIT_S": limit, "PYTHONPATH": str(TESTS)}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "hang_watchdog",
                        "test_probe.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    return r, time.monotonic() - t0


def test_a_hung_test_is_named_its_stacks_printed_and_the_run_aborted(tmp_path: Path) -> None:
    r, took = _run(tmp_path, "3")
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stderr[-3000:])
    assert took < 100  # not the probe's 120 s sleep
    err = r.stderr
    # the failure before the hang is printed although the run never reaches pytest's summary
    assert "[failed now] test_probe.py::test_fails_first (call)" in err
    assert "the reason, printed at once" in err
    assert err.index("[failed now]") < err.index("[hang watchdog]")
    assert "[hang watchdog] test_probe.py::test_hangs has run" in err
    if subprocess.run(["which", "gdb"], capture_output=True).returncode == 0:
        assert "time_sleep" in err or "clock_nanosleep" in err, err[-3000:]  # the main thread's native frames
    assert 'line 8 in test_hangs' in err  # faulthandler's Python stack, after the SIGABRT
    assert "test_never_reached" not in r.stdout


def test_a_run_within_the_limit_is_untouched(tmp_path: Path) -> None:
    r, _ = _run(tmp_path, "30", probe="import time\n\ndef test_quick():\n    time.sleep(0.2)\n")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[hang watchdog]" not in r.stderr and "[failed now]" not in r.stderr
    assert "1 passed" in r.stdout


def test_the_limit_is_validated(tmp_path: Path) -> None:
    r, _ = _run(tmp_path, "soon", probe="def test_x():\n    pass\n")
    assert r.returncode != 0
    assert "KIP_HANG_LIMIT_S must be a number of seconds, got 'soon'" in r.stdout + r.stderr
