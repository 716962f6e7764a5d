"""Maintenance windows: parsing `[DAYS] HH:MM-HH:MM` and the time arithmetic over them, with no I/O.

Why pure functions over instants: "is the node open at t" and "when does it open next" must agree
exactly, including across midnight and daylight-saving changes, and that is only checkable (the
hypothesis property test in tests/unit/test_windows.py) when both are computed from one definition:

- A window *occurrence* starts on a local calendar day D named by DAYS, at the start wall time, and ends
  at the end wall time of the same day, or of the next day when the end is not after the start
  (`22:00-02:00`): the after-midnight part belongs to the day the window started on, so
  `Fri 22:00-02:00` is open from Friday 22:00 to Saturday 02:00, and not on Saturday night.
  `24:00` as the end means midnight at the end of the day.
- A wall time is turned into an instant as PEP 495's `fold=0` does: a time repeated when the clocks go
  back means its first occurrence; a time skipped when the clocks go forward is read with the offset in
  force before the change, i.e. shifted later by the size of the gap (02:30 on the day Berlin skips
  02:00-03:00 is 03:30 CEST). So a window never vanishes in a DST gap and keeps its length unless an
  end point falls in the change itself.
- The node is open at instant t when some occurrence has start <= t < end.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_DAY_INDEX = {name.lower(): i for i, name in enumerate(DAY_NAMES)}
_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
# An occurrence lasts at most 24 hours, and every day can start one: a week and two days of
# occurrences always contain the next opening and closing, whatever the DAYS.
_HORIZON_DAYS = 9


class WindowSpecError(ValueError):
    """A maintenance window spec that cannot be parsed; the message names the spec and what is wrong."""


@dataclass(frozen=True)
class Window:
    """One parsed SPEC: the weekdays (0 = Monday) its occurrences start on, start/end in minutes of the day."""

    days: frozenset[int]
    start: int
    end: int
    text: str

    @property
    def crosses_midnight(self) -> bool:
        return self.end <= self.start

    def __str__(self) -> str:
        return self.text


def parse_window(spec: str) -> Window:
    """Parse `[DAYS] HH:MM-HH:MM`; raise WindowSpecError with one clear line otherwise."""
    text = " ".join(spec.split())
    if not text:
        raise WindowSpecError("empty maintenance window: expected [DAYS] HH:MM-HH:MM, e.g. 'Sat,Sun 02:00-05:00'")
    parts = text.split(" ")
    if len(parts) > 2:
        raise WindowSpecError(f"maintenance window {spec!r}: expected [DAYS] HH:MM-HH:MM (one space between "
                              "days and times, no spaces inside either)")
    days_text, range_text = (parts[0], parts[1]) if len(parts) == 2 else ("*", parts[0])
    days = _parse_days(days_text, spec)
    start_text, sep, end_text = range_text.partition("-")
    if not sep:
        raise WindowSpecError(f"maintenance window {spec!r}: times must be HH:MM-HH:MM, got {range_text!r}")
    start = _parse_time(start_text, spec, allow_24=False)
    end = _parse_time(end_text, spec, allow_24=True)
    if start == end:
        raise WindowSpecError(f"maintenance window {spec!r}: start and end are the same time; for a whole day "
                              "write 00:00-24:00")
    if end == 24 * 60:
        end = 0  # midnight at the end of the day: an occurrence crossing into the next day by zero minutes
    return Window(days=days, start=start, end=end, text=text)


def parse_windows(specs: Iterable[str]) -> tuple[Window, ...]:
    return tuple(parse_window(s) for s in specs)


def split_env_windows(value: str) -> list[str]:
    """`EDGEAGENT_MAINTENANCE_WINDOW` holds several specs separated by `;` (empty parts ignored)."""
    return [part.strip() for part in value.split(";") if part.strip()]


def _parse_days(text: str, spec: str) -> frozenset[int]:
    if text == "*":
        return frozenset(range(7))
    days: set[int] = set()
    for item in text.split(","):
        first, sep, last = item.partition("-")
        a = _day(first, spec)
        if not sep:
            days.add(a)
            continue
        b = _day(last, spec)
        # A range wraps over the week's end when it must: Fri-Mon is Fri, Sat, Sun, Mon.
        days.update((a + i) % 7 for i in range((b - a) % 7 + 1))
    return frozenset(days)


def _day(text: str, spec: str) -> int:
    try:
        return _DAY_INDEX[text.lower()]
    except KeyError:
        raise WindowSpecError(f"maintenance window {spec!r}: unknown day {text!r}; days are "
                              f"{', '.join(DAY_NAMES)} or *, as a day, a range (Mon-Fri) or a list (Sat,Sun)") from None


def _parse_time(text: str, spec: str, *, allow_24: bool) -> int:
    match = _TIME.match(text)
    if match is None:
        raise WindowSpecError(f"maintenance window {spec!r}: time {text!r} is not HH:MM")
    hours, minutes = int(match.group(1)), int(match.group(2))
    if allow_24 and hours == 24 and minutes == 0:
        return 24 * 60
    if hours > 23 or minutes > 59:
        raise WindowSpecError(f"maintenance window {spec!r}: time {text!r} is out of range (00:00 to 23:59"
                              f"{', or 24:00 as an end' if allow_24 else ''})")
    return hours * 60 + minutes


# ---------------------------------------------------------------------- time zones


def load_zone(name: str) -> ZoneInfo:
    """An IANA zone by name, or WindowSpecError naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise WindowSpecError(f"unknown time zone {name!r}: expected an IANA name such as Europe/Berlin "
                              f"({exc})") from None


def local_zone() -> tzinfo:
    """The node's own zone with its DST rules (not a fixed offset): TZ, then /etc/localtime, else UTC."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    localtime = Path("/etc/localtime")
    try:
        target = str(localtime.resolve())
        if "zoneinfo/" in target:
            return ZoneInfo(target.split("zoneinfo/", 1)[1])
        with localtime.open("rb") as f:
            return ZoneInfo.from_file(f, key="localtime")
    except (OSError, ZoneInfoNotFoundError, ValueError):
        return UTC


# ---------------------------------------------------------------------- arithmetic


def wall_to_instant(day: date, minute: int, tz: tzinfo) -> datetime:
    """The instant of wall time `minute` on `day` in `tz` (fold=0 rules, see the module docstring), in UTC."""
    extra, minute = divmod(minute, 24 * 60)
    day = day + timedelta(days=extra)
    local = datetime(day.year, day.month, day.day, minute // 60, minute % 60, tzinfo=tz, fold=0)
    return local.astimezone(UTC)


def occurrences(windows: Sequence[Window], tz: tzinfo, first: date, days: int) -> list[tuple[datetime, datetime]]:
    """Every occurrence starting on the local days first .. first+days-1, as (start, end) UTC instants."""
    out: list[tuple[datetime, datetime]] = []
    for offset in range(days):
        day = first + timedelta(days=offset)
        weekday = day.weekday()
        for w in windows:
            if weekday not in w.days:
                continue
            end_minute = w.end + (24 * 60 if w.crosses_midnight else 0)
            start, end = wall_to_instant(day, w.start, tz), wall_to_instant(day, end_minute, tz)
            if end > start:
                out.append((start, end))
    out.sort()
    return out


def _aware(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError("window arithmetic needs an aware datetime")
    return t.astimezone(UTC)


def _around(windows: Sequence[Window], tz: tzinfo, t: datetime) -> list[tuple[datetime, datetime]]:
    # Occurrences that started up to two local days before t may still be running (24-hour windows).
    return occurrences(windows, tz, t.astimezone(tz).date() - timedelta(days=2), _HORIZON_DAYS + 2)


def is_open(windows: Sequence[Window], t: datetime, tz: tzinfo = UTC) -> bool:
    """Open at t: no windows (always open), or t inside an occurrence."""
    if not windows:
        return True
    t = _aware(t)
    return any(start <= t < end for start, end in _around(windows, tz, t))


def next_opening(windows: Sequence[Window], t: datetime, tz: tzinfo = UTC) -> datetime | None:
    """The earliest instant >= t at which the node is open (t itself when open); None if never."""
    t = _aware(t)
    if not windows:
        return t
    best: datetime | None = None
    for start, end in _around(windows, tz, t):
        if start <= t < end:
            return t
        if start > t and (best is None or start < best):
            best = start
    return best


def next_closing(windows: Sequence[Window], t: datetime, tz: tzinfo = UTC) -> datetime | None:
    """The earliest instant >= t at which the node is closed (t itself when closed); None if never (in view).

    Adjacent or overlapping occurrences are one open stretch: `Mon 00:00-24:00` and `Tue 00:00-24:00`
    close on Wednesday at midnight, not on Tuesday.
    """
    t = _aware(t)
    if not windows:
        return None
    spans = _around(windows, tz, t)
    current = t
    moved = True
    while moved:
        moved = False
        for start, end in spans:
            if start <= current < end:
                current = end
                moved = True
    if current == t:
        return t
    if spans and current >= spans[-1][1]:
        return None  # open across the whole horizon: every day, all day
    return current


def describe(windows: Sequence[Window]) -> str:
    return ", ".join(w.text for w in windows) if windows else "none (always open)"


__all__ = [
    "DAY_NAMES",
    "Window",
    "WindowSpecError",
    "describe",
    "is_open",
    "load_zone",
    "local_zone",
    "next_closing",
    "next_opening",
    "occurrences",
    "parse_window",
    "parse_windows",
    "split_env_windows",
    "wall_to_instant",
]
