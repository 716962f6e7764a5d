"""Durations as operators type and read them: `90s`, `30m`, `2h`, `1d`, `1h30m`. One parser and one formatter.

`edgeagent hold --for`, a RolloutPlan's `spec.bake` and every "bake left" a view prints
go through here, so a duration accepted in one place is accepted in every other (`1d` is a hold and a
bake alike) and a time left reads the same in `rollout status`, `fleet -o wide` and the dashboard (whose
script holds a port of `format_duration`, checked against this one by the browser test).
Pure and standard library only: the command line parses flags with it before loading anything else.
"""

from __future__ import annotations

import math
import re

# Largest first: the order a duration is written in and the order it is printed in.
UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
_FORM = re.compile("".join(rf"(?:(\d+){unit})?" for unit, _ in UNITS))
# What a duration is, for error messages and --help: a user who typed `-5m` or `5x` learns the form here.
DURATION_FORM = "a whole number with a unit d, h, m or s, or several from largest to smallest (90s, 30m, 2h, " \
                "1d, 1h30m)"


class DurationError(ValueError):
    """A text that is not a duration; the message quotes it and says what a duration is."""


def parse_duration(text: str) -> int:
    """Whole seconds of `text` (>= 0; a bare `0` is zero); raises DurationError, whose message says why.

    Callers that need more than zero (a hold) or a ceiling say so themselves: the form is the same everywhere.
    """
    value = text.strip()
    if value == "0":
        return 0
    match = _FORM.fullmatch(value)
    if not value or match is None or not any(match.groups()):
        why = "a duration is never negative: " if value.startswith("-") else ""
        raise DurationError(f"{text!r} is not a duration: {why}expected {DURATION_FORM}")
    return sum(int(count) * seconds for count, (_, seconds) in zip(match.groups(), UNITS, strict=True) if count)


def format_duration(seconds: float) -> str:
    """`seconds`, rounded to whole seconds, in the shortest exact form `parse_duration` reads back (`5400` ->
    `1h30m`, `90061` -> `1d1h1m1s`); zero and less (a bake that just ended) is `0s`, a non-finite one `-`."""
    if not math.isfinite(seconds):
        return "-"
    rest = max(0, math.floor(seconds + 0.5))  # half up, as the dashboard script's Math.round
    if rest == 0:
        return "0s"
    parts = []
    for unit, size in UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
