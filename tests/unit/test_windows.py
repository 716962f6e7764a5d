"""Maintenance window arithmetic: parsing, midnight, DST, and the property that is_open and next_opening agree."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from edgeagent.agent.policy.windows import (
    DAY_NAMES,
    Window,
    WindowSpecError,
    is_open,
    next_closing,
    next_opening,
    parse_window,
    parse_windows,
    split_env_windows,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
EPS = timedelta(microseconds=1)


def berlin(y: int, mo: int, d: int, h: int, mi: int = 0, fold: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=BERLIN, fold=fold).astimezone(UTC)


@pytest.mark.parametrize(("spec", "days", "start", "end"), [
    ("02:00-04:00", set(range(7)), 120, 240),
    ("* 02:00-04:00", set(range(7)), 120, 240),
    ("Sat 2:00-4:30", {5}, 120, 270),
    ("mon-fri 22:00-02:00", {0, 1, 2, 3, 4}, 1320, 120),
    ("Fri-Mon 01:00-02:00", {4, 5, 6, 0}, 60, 120),
    ("Sat,Sun 00:00-24:00", {5, 6}, 0, 0),
    ("Mon-Wed,Fri,Sun 10:00-11:00", {0, 1, 2, 4, 6}, 600, 660),
    ("  Sat   03:00-04:00 ", {5}, 180, 240),
])
def test_parse(spec: str, days: set[int], start: int, end: int) -> None:
    w = parse_window(spec)
    assert (set(w.days), w.start, w.end) == (days, start, end)


@pytest.mark.parametrize(("spec", "error"), [
    ("", "empty maintenance window"),
    ("Sat", "times must be HH:MM-HH:MM"),
    ("Sat 02:00", "times must be HH:MM-HH:MM"),
    ("Sta 02:00-03:00", "unknown day 'Sta'"),
    ("Sat 25:00-26:00", "out of range"),
    ("Sat 02:60-03:00", "out of range"),
    ("Sat 24:00-02:00", "out of range"),
    ("Sat 2-3", "is not HH:MM"),
    ("Sat 02:00-02:00", "same time"),
    ("Sat Sun 02:00-03:00", "one space"),
    ("Mon- 02:00-03:00", "unknown day ''"),
])
def test_bad_specs_say_what_is_wrong(spec: str, error: str) -> None:
    with pytest.raises(WindowSpecError, match=error) as info:
        parse_window(spec)
    assert "\n" not in str(info.value)


def test_env_value_holds_several_specs() -> None:
    assert split_env_windows("Sat 02:00-04:00; Sun 03:00-05:00;;") == ["Sat 02:00-04:00", "Sun 03:00-05:00"]


def test_the_after_midnight_part_belongs_to_the_day_the_window_starts() -> None:
    ws = parse_windows(["Fri 22:00-02:00"])
    assert is_open(ws, berlin(2026, 11, 20, 23), BERLIN)  # Friday night
    assert is_open(ws, berlin(2026, 11, 21, 1, 59), BERLIN)  # Saturday early morning: Friday's window
    assert not is_open(ws, berlin(2026, 11, 21, 2), BERLIN)
    assert not is_open(ws, berlin(2026, 11, 21, 23), BERLIN)  # Saturday night: not a Friday
    assert not is_open(ws, berlin(2026, 11, 20, 1), BERLIN)  # Friday early morning: Thursday's would be
    assert next_opening(ws, berlin(2026, 11, 21, 2), BERLIN) == berlin(2026, 11, 27, 22)
    assert next_closing(ws, berlin(2026, 11, 20, 23), BERLIN) == berlin(2026, 11, 21, 2)


def test_adjacent_windows_are_one_stretch_and_all_day_every_day_never_closes() -> None:
    ws = parse_windows(["Mon 00:00-24:00", "Tue 00:00-24:00"])
    assert next_closing(ws, berlin(2026, 11, 23, 12), BERLIN) == berlin(2026, 11, 25, 0)
    assert next_closing(parse_windows(["00:00-24:00"]), berlin(2026, 11, 23, 12), BERLIN) is None
    assert next_closing((), berlin(2026, 11, 23, 12), BERLIN) is None
    assert next_opening((), berlin(2026, 11, 23, 12), BERLIN) == berlin(2026, 11, 23, 12)


def test_spring_forward_gap_shifts_the_window_later_keeping_its_length() -> None:
    # 2026-03-29: Berlin skips 02:00-03:00. A 02:15-02:45 window becomes 03:15-03:45 CEST.
    ws = parse_windows(["Sun 02:15-02:45"])
    start = next_opening(ws, berlin(2026, 3, 29, 0), BERLIN)
    assert start == datetime(2026, 3, 29, 1, 15, tzinfo=UTC)  # 03:15 CEST
    assert start is not None
    assert next_closing(ws, start, BERLIN) == datetime(2026, 3, 29, 1, 45, tzinfo=UTC)


def test_fall_back_repeated_hour_uses_its_first_occurrence() -> None:
    # 2026-10-25: Berlin repeats 02:00-03:00. 01:30-02:30 ends at the first 02:30 (CEST).
    ws = parse_windows(["Sun 01:30-02:30"])
    assert is_open(ws, berlin(2026, 10, 25, 2, 29, fold=0), BERLIN)
    assert not is_open(ws, berlin(2026, 10, 25, 2, 10, fold=1), BERLIN)
    # 02:00-03:00 spans both passes through the repeated hour: two hours long.
    ws = parse_windows(["Sun 02:00-03:00"])
    assert next_closing(ws, berlin(2026, 10, 25, 2, 0), BERLIN) == berlin(2026, 10, 25, 2, 0) + timedelta(hours=2)


def test_new_york_windows_follow_its_own_dst_dates() -> None:
    # 2026-03-08: New York skips 02:00-03:00; a daily 01:00-04:00 window lasts two hours that night.
    ws = parse_windows(["01:00-04:00"])
    start = datetime(2026, 3, 8, 1, 0, tzinfo=NEW_YORK).astimezone(UTC)
    assert next_closing(ws, start, NEW_YORK) == start + timedelta(hours=2)


# ---------------------------------------------------------------------- property


DAY_ITEMS = hs.one_of(
    hs.sampled_from(DAY_NAMES),
    hs.tuples(hs.sampled_from(DAY_NAMES), hs.sampled_from(DAY_NAMES)).map(lambda ab: f"{ab[0]}-{ab[1]}"),
)


@hs.composite
def window_specs(draw: hs.DrawFn) -> str:
    days = draw(hs.one_of(hs.just("*"), hs.lists(DAY_ITEMS, min_size=1, max_size=3).map(",".join)))
    start = draw(hs.integers(0, 24 * 60 - 1))
    # Short and long windows, crossing midnight or not, and times near the DST changes (01:00-03:59).
    end = draw(hs.one_of(hs.integers(0, 24 * 60), hs.integers(60, 240)).filter(lambda e: e != start))
    return f"{days} {start // 60:02d}:{start % 60:02d}-{end // 60:02d}:{end % 60:02d}"


# Around the 2026 DST changes of Berlin and New York, and an ordinary week; down to the second.
TIMES = hs.one_of(
    hs.datetimes(datetime(2026, 3, 5), datetime(2026, 4, 2)),
    hs.datetimes(datetime(2026, 10, 22), datetime(2026, 11, 5)),
    hs.datetimes(datetime(2026, 6, 1), datetime(2026, 6, 9)),
).map(lambda t: t.replace(tzinfo=UTC))


def between(a: datetime, b: datetime, f: float) -> datetime:
    """An instant in [a, b) at fraction f, rounded down to whole microseconds (never b itself)."""
    span = (b - a) // EPS
    return a + EPS * min(int(span * f), span - 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=hs.lists(window_specs(), min_size=1, max_size=3), t=TIMES,
       zone=hs.sampled_from([BERLIN, NEW_YORK, ZoneInfo("UTC")]),
       probes=hs.lists(hs.floats(0, 1, exclude_max=True), min_size=1, max_size=8))
def test_is_open_and_next_opening_agree(specs: list[str], t: datetime, zone: ZoneInfo, probes: list[float]) -> None:
    windows: tuple[Window, ...] = parse_windows(specs)
    opening = next_opening(windows, t, zone)
    assert opening is not None  # every spec names at least one day: there is always a next opening
    if is_open(windows, t, zone):
        assert opening == t
        closing = next_closing(windows, t, zone)
        if closing is not None:
            assert closing > t and not is_open(windows, closing, zone) and is_open(windows, closing - EPS, zone)
            for f in probes:  # open all the way from t to the closing
                assert is_open(windows, between(t, closing, f), zone)
        return
    assert opening > t
    assert is_open(windows, opening, zone)
    assert not is_open(windows, opening - EPS, zone)
    assert next_closing(windows, t, zone) == t
    for f in probes:  # closed all the way from t to the opening
        assert not is_open(windows, between(t, opening, f), zone)
    # Asking again from any closed instant before the opening gives the same opening.
    assert next_opening(windows, between(t, opening, probes[0]), zone) == opening
