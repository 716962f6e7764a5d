"""The site policy: is this node open for upgrades now, and if not, why and until when.

One answer for everyone who asks (the `UpgradeHeld` publisher, the drainer's `?when=open` gate, the
auto-upgrader, `GET /v1/hold`), so they can never disagree. The node is *held* while a hold is active
(an operator's, or the auto-upgrader's after a failed replacement) or while it is outside every
maintenance window; the hold lives in the agent's SQLite file and is committed before it is answered,
so it survives `kill -9` and needs no cloud at all.

Changes are pushed, not polled: `run()` sleeps until the next instant the answer can change (a window
opening or closing, a hold's `until`) computed by the pure functions of `windows.py`, then tells the
listeners. The clock is injectable so tests can stand a minute before a window instead of waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from edgeagent import log
from edgeagent.agent.policy import windows as win
from edgeagent.agent.policy.hold_table import HoldTable, StoredHold
from edgeagent.agent.policy.times import MAX_HOLD, rfc3339
from edgeagent.agent.state.store import StateStore
from edgeagent.agent.text import text_problem
from edgeagent.aio import wait_event
from edgeagent.contract import AUTO_UPGRADE_FAILED, HELD_BY_OPERATOR, OPEN, OUTSIDE_MAINTENANCE_WINDOW

JSON = dict[str, Any]
_log = log.get("edgeagent.policy")

HOLD_KINDS = (HELD_BY_OPERATOR, AUTO_UPGRADE_FAILED)

MAX_REASON_LENGTH = 1024
# Re-evaluate at least this often even with nothing due, so a stepped wall clock (NTP) is noticed.
MAX_SLEEP = 300.0

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class InvalidHold(ValueError):
    """A hold that cannot be set (until in the past, reason too long, unknown kind); one clear line."""


@dataclass(frozen=True)
class Hold:
    kind: str
    reason: str
    until: datetime | None
    since: datetime

    def active(self, now: datetime) -> bool:
        return self.until is None or now < self.until

    def to_json(self) -> JSON:
        return {"kind": self.kind, "reason": self.reason,
                "until": rfc3339(self.until) if self.until is not None else None, "since": rfc3339(self.since)}

    @classmethod
    def from_stored(cls, stored: StoredHold) -> Hold:
        until = datetime.fromtimestamp(stored.until, UTC) if stored.until is not None else None
        return cls(stored.kind, stored.reason, until, datetime.fromtimestamp(stored.since, UTC))


@dataclass(frozen=True)
class PolicyStatus:
    """The policy's answer at `now`. `reason` is the `UpgradeHeld` reason (Open when not held)."""

    now: datetime
    held: bool
    reason: str
    message: str
    hold: Hold | None
    window_open: bool
    # When the node is open next: `now` when open, None when only a release can open it.
    next_opening: datetime | None
    # The next instant this answer can change by itself (a window edge, a hold's until); None: never.
    next_change: datetime | None
    windows: tuple[str, ...]
    timezone: str

    @property
    def open(self) -> bool:
        return not self.held

    @property
    def key(self) -> tuple[bool, str, str]:
        """What listeners and the condition care about; equal keys mean nothing to publish."""
        return self.held, self.reason, self.message

    def to_json(self) -> JSON:
        return {
            "held": self.held,
            "open": self.open,
            "reason": self.reason,
            "message": self.message,
            "hold": self.hold.to_json() if self.hold is not None else None,
            "windows": list(self.windows),
            "timezone": self.timezone,
            "windowOpen": self.window_open,
            "nextOpening": rfc3339(self.next_opening) if self.next_opening is not None else None,
            "now": rfc3339(self.now),
        }


def zone_name(tz: tzinfo) -> str:
    return str(getattr(tz, "key", None) or tz.tzname(None) or tz)


class SitePolicy:
    """Maintenance windows plus the persisted hold; see the module docstring."""

    def __init__(self, state: StateStore, windows: Sequence[win.Window] = (), tz: tzinfo | None = None, *,
                 clock: Clock | None = None) -> None:
        self._holds = HoldTable(state)
        self.windows = tuple(windows)
        self.tz: tzinfo = tz if tz is not None else win.local_zone()
        self.clock: Clock = clock or utc_now
        self._hold: Hold | None = None
        self._listeners: list[Callable[[PolicyStatus], None]] = []
        self._wake = asyncio.Event()
        self._opened = asyncio.Event()
        self._last_key: tuple[bool, str, str] | None = None
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ reading

    async def load(self) -> None:
        """Read the persisted hold (call once at start, before anything asks)."""
        stored = await self._holds.load()
        self._hold = Hold.from_stored(stored) if stored is not None else None
        if self._hold is not None:
            _log.info("hold_loaded", kind=self._hold.kind, reason=self._hold.reason,
                      until=rfc3339(self._hold.until) if self._hold.until else None)
        self._evaluate()

    def now(self) -> datetime:
        return self.clock().astimezone(UTC)

    def is_open(self, now: datetime | None = None) -> bool:
        return not self.status(now).held

    def status(self, now: datetime | None = None) -> PolicyStatus:
        now = self.now() if now is None else now.astimezone(UTC)
        hold = self._hold if self._hold is not None and self._hold.active(now) else None
        window_open = win.is_open(self.windows, now, self.tz)
        edges: list[datetime] = []
        if self.windows:
            edge = (win.next_closing if window_open else win.next_opening)(self.windows, now, self.tz)
            if edge is not None and edge > now:
                edges.append(edge)
        if hold is not None:
            if hold.until is not None:
                edges.append(hold.until)
                next_open = win.next_opening(self.windows, hold.until, self.tz)
            else:
                next_open = None
            message = hold.reason or ("held by an operator" if hold.kind == HELD_BY_OPERATOR else hold.kind)
            if hold.until is not None:
                message += f" (until {self._local(hold.until)})"
            reason, held = hold.kind, True
        elif not window_open:
            next_open = win.next_opening(self.windows, now, self.tz)
            when = self._local(next_open) if next_open is not None else "never"
            reason, held = OUTSIDE_MAINTENANCE_WINDOW, True
            message = f"outside the maintenance windows ({win.describe(self.windows)}); next opens {when}"
        else:
            next_open = now
            reason, held = OPEN, False
            message = ("no hold; inside a maintenance window" if self.windows
                       else "no hold and no maintenance window: always open")
        return PolicyStatus(now=now, held=held, reason=reason, message=message, hold=hold, window_open=window_open,
                            next_opening=next_open, next_change=min(edges) if edges else None,
                            windows=tuple(w.text for w in self.windows), timezone=zone_name(self.tz))

    def _local(self, t: datetime) -> str:
        return t.astimezone(self.tz).isoformat(timespec="minutes")

    # ------------------------------------------------------------------ changing

    async def hold(self, reason: str = "", until: datetime | None = None, *,
                   kind: str = HELD_BY_OPERATOR) -> PolicyStatus:
        """Hold the node (replacing any hold); durable when this returns. StateUnavailable if not stored."""
        if kind not in HOLD_KINDS:
            raise InvalidHold(f"unknown hold kind {kind!r}: expected one of {', '.join(HOLD_KINDS)}")
        problem = text_problem("reason", reason)
        if problem is not None:
            raise InvalidHold(problem)
        if len(reason) > MAX_REASON_LENGTH:
            raise InvalidHold(f"reason is {len(reason)} characters long; at most {MAX_REASON_LENGTH} are allowed")
        now = self.now()
        if until is not None:
            if until.tzinfo is None:
                raise InvalidHold("until must carry a time zone (RFC 3339, e.g. 2026-11-22T18:00:00Z)")
            until = until.astimezone(UTC)
            if until <= now:
                raise InvalidHold(f"until {rfc3339(until)} is not in the future (now {rfc3339(now)})")
            if until - now > MAX_HOLD:
                raise InvalidHold(f"until {rfc3339(until)} is more than {MAX_HOLD.days} days ahead; a hold meant to "
                                  "last gives no until and is released by hand")
        async with self._lock:
            held = Hold(kind, reason, until, now)
            await self._holds.save(StoredHold(kind, reason, until.timestamp() if until else None,
                                                   now.timestamp()))
            self._hold = held
        _log.info("hold_set", kind=kind, reason=reason, until=rfc3339(until) if until else None)
        return self._evaluate()

    async def release(self) -> PolicyStatus:
        """Remove any hold (operator's or AutoUpgradeFailed); durable when this returns."""
        async with self._lock:
            await self._holds.clear()
            previous, self._hold = self._hold, None
        if previous is not None:
            _log.info("hold_released", kind=previous.kind, reason=previous.reason)
        return self._evaluate()

    # ------------------------------------------------------------------ waiting and listening

    def add_listener(self, fn: Callable[[PolicyStatus], None]) -> None:
        """`fn(status)` is called on every change of held/reason/message (never twice for the same)."""
        self._listeners.append(fn)

    def poke(self) -> None:
        """Re-evaluate now (a test moved the clock; the wall clock was stepped)."""
        self._evaluate()
        self._wake.set()

    async def wait_open(self) -> None:
        """Return once the node is open; cancellable. Needs `run()` for openings that come with time."""
        while True:
            if self._evaluate().open:
                return
            self._opened.clear()
            await self._opened.wait()

    async def run(self) -> None:
        """Tell listeners when the answer changes by itself: sleep until the next edge, not a poll."""
        while True:
            status = self._evaluate()
            self._wake.clear()
            delay = MAX_SLEEP
            if status.next_change is not None:
                # A hair late rather than early, so the edge has passed when we look again.
                delay = min(MAX_SLEEP, max(0.005, (status.next_change - self.now()).total_seconds() + 0.005))
            await wait_event(self._wake, delay)

    def _evaluate(self) -> PolicyStatus:
        status = self.status()
        if status.open:
            self._opened.set()
        else:
            self._opened.clear()
        if status.key != self._last_key:
            first = self._last_key is None
            self._last_key = status.key
            if not first:
                _log.info("site_policy_changed", held=status.held, reason=status.reason, message=status.message)
            for fn in list(self._listeners):
                try:
                    fn(status)
                except Exception:
                    _log.exception("site_policy_listener_failed")
        return status


__all__ = [
    "Hold",
    "InvalidHold",
    "PolicyStatus",
    "SitePolicy",
]
