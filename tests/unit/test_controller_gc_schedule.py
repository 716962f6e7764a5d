"""The controller's schedule for full garbage collections (controller/gc_schedule.py): never inside a step of
the event loop, and cyclic garbage still reclaimed, frozen or not."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import AsyncIterator, Iterator

from hypothesis import given
from hypothesis import strategies as st

from edgeagent.controller import gc_schedule
from tests.support.gc_watch import Cycle, collections, heavy_step, tracked
from tests.support.tasks import running
from tests.support.waiting import eventually


@contextlib.asynccontextmanager
async def schedule(tick: float = 0.01) -> AsyncIterator[None]:
    holders = gc_schedule.SCHEDULE.holders
    async with running(gc_schedule.run(tick)):
        await eventually(lambda: gc_schedule.SCHEDULE.holders > holders, what="schedule started")
        yield


@contextlib.contextmanager
def taken_over() -> Iterator[None]:
    gc_schedule.SCHEDULE.take_over()
    try:
        yield
    finally:
        gc_schedule.SCHEDULE.give_back()


async def test_no_full_collection_starts_inside_a_step() -> None:
    async with schedule():
        with collections() as seen:
            kept = heavy_step()
        assert seen.seen and 2 not in seen.seen, seen.seen  # the young generations still run, by themselves
        with collections() as later:
            await eventually(lambda: 2 in later.seen, what="the schedule's full collection, after the step")
        assert not tracked(kept)  # what survived it is frozen
        del kept


def deep_collection() -> None:
    """Freeze enough new objects that the next collection is a deep one, and do it."""
    schedule_ = gc_schedule.SCHEDULE
    deep = schedule_.deep_collections
    ballast = [[i] for i in range(max(0, schedule_.kept // 4 + 1 - schedule_.frozen_since))]
    schedule_.collect()  # freezes the ballast, which makes the next one deep (unless this one already was)
    if schedule_.deep_collections == deep:
        schedule_.collect()
    del ballast
    assert schedule_.deep_collections == deep + 1


def test_a_collection_freezes_what_survived_and_only_a_deep_one_reclaims_a_frozen_cycle() -> None:
    with taken_over():
        schedule_ = gc_schedule.SCHEDULE
        deep_collection()
        cycle = Cycle()
        gone = weakref.ref(cycle)
        deep = schedule_.deep_collections
        schedule_.collect()
        assert schedule_.deep_collections == deep  # not a deep one: what is not frozen only
        assert not tracked(cycle)  # frozen: no later collection walks it
        del cycle
        schedule_.collect()
        assert schedule_.deep_collections == deep and gone() is not None
        deep_collection()
        assert gone() is None


async def test_stopping_gives_the_collector_back() -> None:
    before = gc.get_threshold()
    async with schedule():
        assert gc.get_threshold()[2] > 1_000_000
        gc_schedule.SCHEDULE.collect()
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def test_two_holders_share_one_schedule() -> None:
    before = gc.get_threshold()
    async with schedule():
        async with schedule():
            assert gc_schedule.SCHEDULE.holders == 2
        assert gc.get_threshold()[2] > 1_000_000  # the first holder still runs
    assert gc.get_threshold() == before


@given(kept=st.integers(min_value=0, max_value=10**8), frozen_since=st.integers(min_value=0, max_value=10**8))
def test_a_deep_collection_is_due_past_a_quarter_of_what_the_last_kept(kept: int, frozen_since: int) -> None:
    assert gc_schedule.deep_due(frozen_since, kept) == (4 * frozen_since > kept - kept % 4)


def test_the_first_deep_collection_is_due_at_once() -> None:
    assert gc_schedule.deep_due(1, 0)
    assert not gc_schedule.deep_due(0, 0)
    assert not gc_schedule.deep_due(25, 100) and gc_schedule.deep_due(26, 100)

