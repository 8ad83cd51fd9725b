"""Time has one set of rules (issue #39 item 3, "Structure III"); static checks that keep it so.

- No native method takes a negative timeout sentinel (``-1.0`` meant ``default.api.timeout.ms`` in the
  consumer's close(), no bound in the producer's flush()/close() and ``max.block.ms`` in its txn()):
  the facade resolves ``None`` and hands over checked seconds, ``math.inf`` for no bound.
- One wait slice: ``KC_WAIT_SLICE_US`` (csrc/clock.h) and its twin ``kipconsumer._timeouts.WAIT_SLICE_S``;
  no other slice constant in the package or the C core.
- One rounding rule (up), in csrc/clock.h and kipconsumer/_timeouts.py only: no other ``ceil(`` and no
  truncating ``// 1000`` of a time left to a deadline.
- The dead 200 ms wait cap of kc_consumer_poll() and poll()'s ``polls -= 1`` fix-up stay gone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "kipconsumer"
CSRC = ROOT / "csrc"
NATIVE = sorted([*PKG.glob("*.pyx"), *PKG.glob("*.pxi"), *PKG.glob("*.pxd"), *PKG.glob("_*.pyi")])
PYTHON = sorted(PKG.glob("*.py"))
C = sorted([*CSRC.glob("*.c"), *CSRC.glob("*.h")])
CLOCK_H = CSRC / "clock.h"
TIMEOUTS_PY = PKG / "_timeouts.py"
CONFIG_PY = PKG / "config.py"  # its ceil() converts config values between units, not a wait


def _code_lines(paths: list[Path]) -> list[tuple[Path, int, str]]:
    """(file, line number, the line without its ``#`` comment) of every line of ``paths``."""
    out = []
    for path in paths:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line if path.suffix in (".c", ".h") else line.split("#", 1)[0]
            out.append((path, n, code))
    return out


def _hits(paths: list[Path], pattern: str, exempt: tuple[Path, ...] = ()) -> list[str]:
    rx = re.compile(pattern)
    return [f"{p.relative_to(ROOT)}:{n}: {code.strip()}" for p, n, code in _code_lines(paths)
            if p not in exempt and rx.search(code)]


def test_no_native_method_takes_a_negative_timeout_sentinel() -> None:
    defaults = _hits(NATIVE, r"\b(?:double|float|int)?\s*\w*(?:timeout|block)\w*\s*(?::\s*\w+\s*)?=\s*-1\b")
    compares = _hits(NATIVE, r"\b\w*timeout\w*\s*(?:<\s*0|>=\s*0)\b")
    assert not defaults + compares, "a timeout sentinel came back:\n" + "\n".join(defaults + compares)


def test_one_wait_slice_constant() -> None:
    py_native = _hits(NATIVE + PYTHON, r"^\s*_?\w*SLICE\w*\s*(?::\s*\w+\s*)?=", exempt=(TIMEOUTS_PY,))
    c_defs = _hits(C, r"#\s*define\s+\w*SLICE\w*", exempt=(CLOCK_H,))
    c_literals = _hits(C, r"\b(?:now|now_us|kc_now_us\(\))\s*\+\s*\d{4,}\b")
    found = py_native + c_defs + c_literals
    assert not found, "a second wait slice:\n" + "\n".join(found)


def test_the_slice_twins_agree() -> None:
    from kipconsumer import _timeouts

    m = re.search(r"#define KC_WAIT_SLICE_US (\d+)", CLOCK_H.read_text())
    assert m is not None
    assert int(m.group(1)) == round(_timeouts.WAIT_SLICE_S * 1_000_000)


def test_one_rounding_rule() -> None:
    ceils = _hits(NATIVE + PYTHON + C, r"\bceil\(", exempt=(CLOCK_H, TIMEOUTS_PY, CONFIG_PY))
    truncations = _hits(NATIVE + C, r"\(\s*\w*deadline\w*\s*-\s*[\w().]+\s*\)\s*//?\s*1000\b")
    truncations += _hits(NATIVE, r"<int\w*>\(.*(?:timeout|seconds)\w*\b.*\*\s*(?:1000|1e6)")
    found = ceils + truncations
    assert not found, "a second rounding of a timeout:\n" + "\n".join(found)


@pytest.mark.parametrize("pattern", [r"KC_MAX_WAIT_MS", r"polls\s*-=\s*1"])
def test_dead_wait_cap_and_poll_count_fix_up_stay_gone(pattern: str) -> None:
    found = _hits(NATIVE + C, pattern)
    assert not found, "\n".join(found)
