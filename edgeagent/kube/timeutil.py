"""Kubernetes timestamps as epoch seconds (and back), shared by the controller, the agent and the sim, so that
planning can compare them with an injected clock."""

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
