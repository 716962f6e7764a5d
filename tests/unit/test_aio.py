"""wait_event never swallows a cancellation, unlike Python 3.11's asyncio.wait_for (CPython gh-86296)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable

import pytest

from edgeagent.aio import cancel_and_wait, wait_event

Waiter = Callable[[asyncio.Event, float], Awaitable[object]]


async def _as_coroutine(waiter: Waiter, event: asyncio.Event) -> object:
    return await waiter(event, 10.0)


async def _cancel_as_the_event_fires(waiter: Waiter) -> bool:
    """True when the waiting task ended cancelled, as a cancelled loop must."""
    event = asyncio.Event()
    task: asyncio.Task[object] = asyncio.create_task(_as_coroutine(waiter, event))
    await asyncio.sleep(0)  # let it start waiting
    event.set()
    task.cancel()  # in the same loop step: the race that 3.11's wait_for loses
    try:
        await task
    except asyncio.CancelledError:
        return True
    return False


async def test_a_cancellation_racing_the_event_is_never_swallowed() -> None:
    results = [await _cancel_as_the_event_fires(wait_event) for _ in range(50)]
    assert all(results)


async def test_the_race_is_real_with_wait_for_on_this_python() -> None:
    """Shows the test above can fail: on 3.11 wait_for swallows the cancellation in this exact race."""
    if sys.version_info >= (3, 12):
        pytest.skip("wait_for is built on asyncio.timeout from 3.12 on; the race no longer exists")

    async def with_wait_for(event: asyncio.Event, timeout: float) -> object:
        return await asyncio.wait_for(event.wait(), timeout)

    results = [await _cancel_as_the_event_fires(with_wait_for) for _ in range(50)]
    assert not all(results)


async def test_wait_event_reports_set_or_timeout() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0.01) is True


async def _caller_cancelled_while_child_cleans_up(stop_child: Callable[[asyncio.Task[None]], Awaitable[object]]) -> str:
    """Cancel the caller while it waits for its cancelled child to finish cleaning up; how did it end?"""
    cleaning, release = asyncio.Event(), asyncio.Event()

    async def child() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cleaning.set()
            await release.wait()  # slow clean-up, during which the caller gets cancelled
            raise

    child_task = asyncio.create_task(child())

    async def caller() -> str:
        await asyncio.sleep(0)  # let the child start
        await stop_child(child_task)
        return "carried on"

    caller_task = asyncio.create_task(caller())
    await cleaning.wait()
    caller_task.cancel()
    release.set()
    try:
        return await caller_task
    except asyncio.CancelledError:
        return "cancelled"


async def test_cancel_and_wait_lets_the_callers_own_cancellation_through() -> None:
    assert await _caller_cancelled_while_child_cleans_up(cancel_and_wait) == "cancelled"


async def test_suppressing_cancelled_error_would_swallow_it() -> None:
    """The pattern cancel_and_wait replaces: the caller's cancellation is lost and it carries on."""
    async def suppressing(task: asyncio.Task[None]) -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    assert await _caller_cancelled_while_child_cleans_up(suppressing) == "carried on"


async def test_cancel_and_wait_returns_the_childs_failure() -> None:
    async def failing() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise ValueError("broke while stopping") from None

    task = asyncio.create_task(failing())
    await asyncio.sleep(0)
    error = await cancel_and_wait(task)
    assert isinstance(error, ValueError)
