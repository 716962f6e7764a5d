"""A wall clock tests can move: real time plus an offset, so timers computed from it run in real seconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    def __init__(self, at: datetime) -> None:
        self.offset: timedelta = at - datetime.now(UTC)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def set(self, at: datetime) -> None:
        self.offset = at - datetime.now(UTC)

    def to_real(self, at: datetime) -> datetime:
        """The real instant at which this clock shows `at` (with the current offset)."""
        return at - self.offset
