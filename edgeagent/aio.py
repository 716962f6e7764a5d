"""asyncio helpers that every long-running loop needs.

Why not `asyncio.wait_for(event.wait(), timeout)`: on Python 3.11 `wait_for` can swallow a
cancellation that arrives just as the awaited future completes (CPython gh-86296, fixed in 3.12,
where `wait_for` is built on `asyncio.timeout`). In a `while True` loop that turns `task.cancel()`
into a loop that never ends, and a SIGTERM or a TaskGroup shutdown into a hang. `asyncio.timeout`
does not have that race.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set or `timeout` seconds pass; True if it was set."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


async def cancel_and_wait(task: asyncio.Task[Any]) -> BaseException | None:
    """Cancel `task`, wait until it has ended, and return its exception (None if cancelled or clean).

    Why not `with suppress(CancelledError): await task`: that cannot tell the child's CancelledError
    from one aimed at the caller arriving meanwhile, so a caller cancelled during the wait (a SIGTERM,
    a test tearing down) would swallow its own cancellation and carry on. `asyncio.wait` does not
    raise the child's outcome, and lets the caller's own cancellation through.
    """
    task.cancel()
    await asyncio.wait({task})
    return None if task.cancelled() else task.exception()
