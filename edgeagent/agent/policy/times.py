"""Times an operator types and reads for a hold: `--for 2h`, `--until 2026-11-22T18:00:00Z`, and how an
instant is shown. Pure and standard library only, so the `hold` command parses its flags without loading the
policy's state database.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# The longest timed hold (`--for`, `--until`): a typo such as 100000d must not hold a node until 2300; a hold
# meant to last has no end and is released by hand.
MAX_HOLD = timedelta(days=366)


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `2h`, `1d`, or combinations (`1h30m`): for `edgeagent hold --for`."""
    match = re.fullmatch(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(f"duration {text!r}: expected e.g. 90s, 30m, 2h, 1d or 1h30m")
    d, h, m, s = (int(g) if g else 0 for g in match.groups())
    value = timedelta(days=d, hours=h, minutes=m, seconds=s)
    if value <= timedelta(0):
        raise ValueError(f"duration {text!r} must be more than zero")
    return value


def parse_time(text: str) -> datetime:
    """An RFC 3339 instant (`Z` or an offset required): `until` of a hold."""
    try:
        value = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise ValueError(f"time {text!r} is not RFC 3339 (e.g. 2026-11-22T18:00:00Z)") from None
    if value.tzinfo is None:
        raise ValueError(f"time {text!r} has no time zone: add Z or an offset such as +01:00")
    return value
