"""The arithmetic of an Event's lease in the sim: when a kept Event's TTL started, and what is left of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as hs

from edgeagent.sim.event_ttl import last_written, remaining


def test_the_newest_time_an_event_names_is_its_last_write() -> None:
    event = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:05:00Z",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "series": {"count": 4, "lastObservedTime": "2026-01-01T00:10:00.500000Z"},
    }
    assert last_written(event) == 1767226200.5  # the series' last observation, ten minutes in
    del event["series"]
    assert last_written(event) == 1767225900.0  # lastTimestamp


def test_an_event_naming_no_time_has_no_last_write_and_odd_values_are_ignored() -> None:
    assert last_written({"metadata": {"name": "e"}}) is None
    assert last_written({"metadata": {}, "lastTimestamp": "soon", "series": "odd"}) is None
    assert last_written({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
                         "lastTimestamp": "soon"}) == 1767225600.0


_TIMES = hs.floats(min_value=0, max_value=4e9, allow_nan=False)


@given(ttl=hs.floats(min_value=0.001, max_value=1e6), written=_TIMES, now=_TIMES)
def test_what_is_left_is_between_nothing_and_the_whole_ttl(ttl: float, written: float, now: float) -> None:
    left = remaining(ttl, written, now)
    assert 0.0 <= left <= ttl
    if now <= written:  # a clock behind the writer's: the lease has just started
        assert left == ttl
    elif now - written >= ttl:
        assert left == 0.0
    else:
        assert abs(left - (ttl - (now - written))) < 1e-6


@given(ttl=hs.floats(min_value=0.001, max_value=1e6), written=_TIMES, now=_TIMES, later=hs.floats(0, 1e6))
def test_what_is_left_never_grows_as_time_passes(ttl: float, written: float, now: float, later: float) -> None:
    assert remaining(ttl, written, now + later) <= remaining(ttl, written, now)
    assert remaining(ttl, None, now) == ttl
