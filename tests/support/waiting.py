"""Waiting on a condition with a deadline: the only way tests synchronise (never a bare sleep)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float = ..., interval: float = ..., what: str = ...
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T | None], *, timeout: float = ..., interval: float = ..., what: str = ...
) -> T: ...


async def eventually(
    probe: Callable[[], Any],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str = "condition",
) -> Any:
    """Poll `probe` until it returns a truthy value; fail with the last value seen at the deadline.

    The overloads strip `None` from the probe's result type: a falsy value is never returned, so a probe
    written as `-> JSON | None` ("not there yet") yields a plain `JSON` to the caller."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        result = probe()
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        if result:
            return result
        last = result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
        await asyncio.sleep(interval)
