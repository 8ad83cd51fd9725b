"""The one deadline type and rounding rule of kipconsumer._timeouts, on a fake clock (issue #39 item 3)."""

from __future__ import annotations

import math

import pytest

from kipconsumer._timeouts import MAX_FINITE_MS, WAIT_SLICE_S, Deadline, timeout_seconds


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_deadline_is_fixed_once_and_counts_down() -> None:
    clock = FakeClock()
    d = Deadline(2.0, clock)
    assert d.at == 1002.0
    assert d.remaining() == 2.0 and not d.expired()
    clock.now += 1.5
    assert d.remaining() == pytest.approx(0.5)
    clock.now += 0.5
    assert d.remaining() == 0.0 and d.expired()
    clock.now += 10
    assert d.remaining() == 0.0 and d.ms() == 0 and d.slice_ms() == 0 and d.slice_s() == 0.0


def test_milliseconds_round_up_so_a_short_wait_never_becomes_non_blocking() -> None:
    clock = FakeClock()
    assert Deadline(0.0001, clock).ms() == 1
    assert Deadline(0.0001, clock).slice_ms() == 1
    assert Deadline(0.0015, clock).ms() == 2
    assert Deadline(0.002, clock).ms() == 2
    assert Deadline(0.0, clock).ms() == 0


def test_the_wait_goes_in_slices() -> None:
    clock = FakeClock()
    d = Deadline(0.12, clock)
    assert d.slice_s() == WAIT_SLICE_S and d.slice_ms() == 50
    clock.now += 0.1
    assert d.slice_s() == pytest.approx(0.02) and d.slice_ms() == 20


def test_an_unbounded_deadline_never_expires_and_clamps_for_librdkafka() -> None:
    clock = FakeClock()
    d = Deadline(math.inf, clock)
    clock.now += 1e9
    assert not d.expired() and d.remaining() == math.inf
    assert d.ms() == MAX_FINITE_MS and d.slice_s() == WAIT_SLICE_S and d.slice_ms() == 50


def test_a_long_finite_wait_clamps_below_c_int() -> None:
    assert Deadline(timeout_seconds(1e12, 0), FakeClock()).ms() == MAX_FINITE_MS


@pytest.mark.parametrize("bad", [-1.0, -1, math.nan, True, "1", object()])
def test_timeout_seconds_refuses_sentinels_and_non_numbers_naming_the_argument(bad: object) -> None:
    with pytest.raises(ValueError, match="deadline_arg must be a number of seconds"):
        timeout_seconds(bad, 1000, "deadline_arg")


def test_none_is_the_callers_default() -> None:
    assert timeout_seconds(None, 1500) == 1.5
    assert timeout_seconds(math.inf, 1500) == math.inf
