"""Kubernetes timestamps as epoch seconds (and back), shared by the controller, the agent and the sim, so that
planning can compare them with an injected clock; and ages as kubectl prints them (the sim's Tables and the
`fleet` tables must read alike)."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: object) -> float | None:
    """RFC 3339 (`2024-01-01T00:00:00Z`, with or without fraction) → epoch seconds; None when absent or invalid.

    An unparsable timestamp is treated as unknown rather than fatal: one odd object must not stop a roll.
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def format_time(epoch: float) -> str:
    """Seconds resolution, as the API server writes pod and event timestamps."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(epoch: float) -> str:
    """Microsecond resolution: the `MicroTime` format Leases and new-style Events use."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def human_duration(seconds: float) -> str:
    """A duration as kubectl shows ages: 2-3 significant figures (`45s`, `5m12s`, `3h`, `6d2h`, `3y14d`).

    Up to two seconds in the future still reads `0s` (clocks of client and server may differ a little);
    more than that is `<invalid>`.
    """
    whole = int(seconds)  # truncates toward zero, like Go's int(d.Seconds())
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"
