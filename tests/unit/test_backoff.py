"""The one backoff formula every retry loop uses (edgeagent/backoff.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edgeagent import backoff

attempts = st.integers(min_value=1, max_value=10_000)
initials = st.floats(min_value=0.001, max_value=100.0)
caps = st.floats(min_value=0.001, max_value=10_000.0)


@given(attempts, initials, caps)
def test_the_delay_grows_never_shrinks_and_stops_at_the_cap(attempt: int, initial: float, cap: float) -> None:
    delay = backoff.exponential(attempt, initial=initial, cap=cap)
    assert 0 < delay <= cap
    assert backoff.exponential(attempt + 1, initial=initial, cap=cap) >= delay


@given(initials, caps)
def test_the_first_retry_waits_initial_and_each_failure_doubles_it(initial: float, cap: float) -> None:
    assert backoff.exponential(1, initial=initial, cap=cap) == min(initial, cap)
    for attempt in range(1, 20):
        delay = backoff.exponential(attempt, initial=initial, cap=cap)
        following = backoff.exponential(attempt + 1, initial=initial, cap=cap)
        assert following == min(cap, 2 * delay) or delay == cap


@given(st.integers(max_value=0), initials, caps)
def test_nothing_failed_yet_means_no_wait(attempt: int, initial: float, cap: float) -> None:
    assert backoff.exponential(attempt, initial=initial, cap=cap) == 0.0
    assert backoff.exponential(3, initial=0.0, cap=cap) == 0.0


@given(st.floats(min_value=0.0, max_value=1e6), st.floats(min_value=0.0, max_value=0.999999),
       st.tuples(st.floats(min_value=0.0, max_value=2.0), st.floats(min_value=0.0, max_value=2.0)))
def test_jitter_stays_within_its_bounds(delay: float, draw: float, bounds: tuple[float, float]) -> None:
    low, high = sorted(bounds)
    value = backoff.jittered(delay, low=low, high=high, draw=lambda: draw)
    assert delay * low - 1e-9 <= value <= delay * high + 1e-9
