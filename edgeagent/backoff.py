"""How long to wait before trying again: one formula for every retry loop of the agent, controller and clients.

Pure functions (the caller passes the attempt number, and the random draw for jitter), so they can be
property-tested: the delay doubles from `initial` with each consecutive failure and stops at `cap`;
jitter spreads a fleet of nodes that failed together, so they do not retry in lock step.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# 2**64 times any useful initial delay is past every cap; the bound keeps the float finite.
_MAX_DOUBLINGS = 64


def exponential(attempt: int, *, initial: float, cap: float) -> float:
    """The delay before retry number `attempt` (1 = the first): initial, 2·initial, 4·initial … at most cap.

    No delay for attempt 0 (nothing failed yet) or a non-positive initial delay.
    """
    if attempt <= 0 or initial <= 0:
        return 0.0
    return min(cap, initial * 2.0 ** min(attempt - 1, _MAX_DOUBLINGS))


def jittered(delay: float, *, low: float, high: float, draw: Callable[[], float] = random.random) -> float:
    """`delay` scaled by a factor drawn uniformly from [low, high] (`draw()` returns a float in [0, 1))."""
    return delay * (low + (high - low) * draw())


__all__ = ["exponential", "jittered"]
