"""The loop of the agent's idempotent publishers: one pass whenever the link is up and something changed.

A pass compares the cache with what should be in the cloud and writes the difference; it answers whether
anything is left for later. Left over (a refused write, the link dropping mid-pass): the next pass comes after a
doubling delay, or at once when woken. Nothing left: wait for the next wake-up (a cache change, the link's
return, a policy change). `policy/held.py` (UpgradeHeld), `policy/autoprepull.py` (pre-pull requests) and
`requests/failure_status.py` (edgeagent.io/UpgradeFailed) run on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from edgeagent import backoff
from edgeagent.aio import wait_event


class _Link(Protocol):
    async def wait_connected(self) -> None: ...


async def run_passes(one_pass: Callable[[], Awaitable[bool]], *, link: _Link, wake: asyncio.Event,
                     initial: float, cap: float, failed: Callable[[Exception], bool]) -> None:
    """Forever (until cancelled): `one_pass()` while connected. `failed(exc)` is asked about an exception a pass
    raised: True means it was handled (logged) and counts as "left for later"; False re-raises it."""
    failures = 0
    while True:
        await link.wait_connected()
        wake.clear()
        try:
            complete = await one_pass()
        except Exception as exc:
            if not failed(exc):
                raise
            complete = False
        if complete:
            failures = 0
            await wake.wait()
        else:
            failures += 1
            await wait_event(wake, backoff.exponential(failures, initial=initial, cap=cap))
