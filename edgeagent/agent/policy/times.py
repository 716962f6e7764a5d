"""Times an operator types and reads for a hold: `--until 2026-11-22T18:00:00Z`, and how an instant is
shown (`--for 2h` goes through edgeagent.durations, the one duration parser). Pure and standard library
only, so the `hold` command parses its flags without loading the policy's state database.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# The longest timed hold (`--for`, `--until`): a typo such as 100000d must not hold a node until 2300; a hold
# meant to last has no end and is released by hand.
MAX_HOLD = timedelta(days=366)


def parse_time(text: str) -> datetime:
    """An RFC 3339 instant (`Z` or an offset required): `until` of a hold."""
    try:
        value = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise ValueError(f"time {text!r} is not RFC 3339 (e.g. 2026-11-22T18:00:00Z)") from None
    if value.tzinfo is None:
        raise ValueError(f"time {text!r} has no time zone: add Z or an offset such as +01:00")
    return value
