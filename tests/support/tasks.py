"""A background task for the length of a `with` block, cancelled and awaited on the way out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def running(coro: Coroutine[Any, Any, Any]) -> AsyncIterator[asyncio.Task[Any]]:
    task = asyncio.create_task(coro)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
