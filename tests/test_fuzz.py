"""The concurrency fuzzer (tests/fuzz_concurrency.py) in a subprocess: threads issuing random consumer and
producer calls, callbacks and serializers re-entering their client, SIGINTs. Must not crash, hang or
leave a producer future unresolved. CI runs it for KIP_FUZZ_SECONDS (default 20) per seed; run it
longer by hand, e.g. KIP_FUZZ_SECONDS=600 KIP_FUZZ_SEEDS=1,2,3. The ASan run is in test_sanitizer.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECONDS = float(os.environ.get("KIP_FUZZ_SECONDS", "20"))
SEEDS = [int(s) for s in os.environ.get("KIP_FUZZ_SEEDS", "1").split(",")]


def run_fuzzer(seconds: float, seed: int, env: dict[str, str] | None = None,
               cwd: Path | None = None, script: Path | None = None) -> tuple[dict[str, object], str]:
    """Runs the fuzzer; returns its JSON summary and its output. Fails on a crash or a hang."""
    script = script or ROOT / "tests" / "fuzz_concurrency.py"
    try:
        proc = subprocess.run([sys.executable, str(script), str(seconds), str(seed)], capture_output=True,
                              text=True, timeout=seconds + 120, env=env, cwd=cwd or ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"fuzzer hung (seed {seed}): {str(e.stdout)[-2000:]} {str(e.stderr)[-4000:]}")
    out = proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"fuzzer failed (seed {seed}, rc {proc.returncode}):\n{out[-6000:]}")
    return json.loads(lines[-1]), out


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_concurrency_fuzzer(seed: int) -> None:
    summary, _ = run_fuzzer(SECONDS, seed)
    print(f"fuzzer seed {seed}: {summary['ops']} operations, {summary['futures']} futures, "
          f"outcomes {summary['outcomes']}")
    assert summary["unresolved"] == 0 and summary["resolved_twice"] == 0 and not summary["hung_threads"]
    assert int(summary["ops"]) > 100  # type: ignore[call-overload]
