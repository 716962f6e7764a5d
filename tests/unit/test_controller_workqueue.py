from __future__ import annotations

import asyncio

import pytest

from edgeagent.controller.workqueue import ShutDown, WorkQueue
from tests.support.waiting import eventually


async def test_a_burst_of_adds_is_one_entry() -> None:
    q = WorkQueue()
    for _ in range(50):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"


async def test_a_key_being_processed_is_requeued_after_done_not_handed_out_twice() -> None:
    q = WorkQueue()
    q.add("a")
    assert await q.get() == "a"
    q.add("a")
    assert len(q) == 0  # not given to a second worker while the first holds it
    q.done("a")
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_get_waits_for_work() -> None:
    q = WorkQueue()
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not waiter.done()
    q.add("x")
    assert await asyncio.wait_for(waiter, 1) == "x"


async def test_add_after_adds_later_and_earliest_wins() -> None:
    q = WorkQueue()
    q.add_after("a", 30)
    q.add_after("a", 0.01)
    q.add_after("a", 60)
    await eventually(lambda: len(q) == 1, timeout=2, what="delayed add")
    assert await q.get() == "a"


async def test_rate_limited_backoff_doubles_until_forget() -> None:
    q = WorkQueue(base_delay=0.001, max_delay=0.004)
    delays = [q.add_rate_limited("a") for _ in range(4)]
    assert delays == [0.001, 0.002, 0.004, 0.004]
    assert q.failures("a") == 4
    q.forget("a")
    assert q.failures("a") == 0
    assert q.add_rate_limited("a") == 0.001


async def test_shutdown_wakes_waiters() -> None:
    q = WorkQueue()
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(waiter, 1)
