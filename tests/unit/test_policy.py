"""SitePolicy: hold persistence and migration, held/open answers, listeners, wait_open, edge timers."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from edgeagent.agent.policy.hold_table import HoldTable, StoredHold
from edgeagent.agent.policy.site import InvalidHold, PolicyStatus, SitePolicy
from edgeagent.agent.policy.times import parse_time
from edgeagent.agent.policy.windows import parse_windows
from edgeagent.agent.state import store as st
from edgeagent.agent.state.store import StateStore
from edgeagent.aio import cancel_and_wait
from edgeagent.contract import AUTO_UPGRADE_FAILED, HELD_BY_OPERATOR, OPEN, OUTSIDE_MAINTENANCE_WINDOW
from tests.support.clock import FakeClock
from tests.support.waiting import eventually

BERLIN = ZoneInfo("Europe/Berlin")
# A Saturday, 10:00 in Berlin (CET, +01:00).
SAT_10 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[StateStore]:
    s = await StateStore.open(tmp_path)
    yield s
    await s.close()


async def test_no_windows_no_hold_is_open(store: StateStore) -> None:
    policy = SitePolicy(store, (), BERLIN)
    await policy.load()
    status = policy.status(SAT_10)
    assert (status.held, status.reason, status.next_opening, status.next_change) == (False, OPEN, SAT_10, None)
    assert policy.is_open(SAT_10)


async def test_outside_window_is_held_with_next_opening_in_the_message(store: StateStore) -> None:
    policy = SitePolicy(store, parse_windows(["Sun 02:00-04:00"]), BERLIN)
    status = policy.status(SAT_10)
    assert status.held and status.reason == OUTSIDE_MAINTENANCE_WINDOW
    assert status.next_opening == datetime(2026, 11, 22, 1, 0, tzinfo=UTC)
    assert "2026-11-22T02:00+01:00" in status.message
    assert status.next_change == status.next_opening
    inside = datetime(2026, 11, 22, 1, 30, tzinfo=UTC)
    assert policy.status(inside).reason == OPEN
    assert policy.status(inside).next_change == datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


async def test_hold_wins_over_an_open_window_and_survives_reopening_the_store(tmp_path: Path) -> None:
    store = await StateStore.open(tmp_path)
    policy = SitePolicy(store, parse_windows(["* 00:00-24:00"]), BERLIN)
    await policy.load()
    until = datetime.now(UTC) + timedelta(hours=2)
    await policy.hold("site audit", until)
    await store.close()

    store = await StateStore.open(tmp_path)
    try:
        again = SitePolicy(store, parse_windows(["* 00:00-24:00"]), BERLIN)
        await again.load()
        status = again.status()
        assert status.held and status.reason == HELD_BY_OPERATOR
        assert status.message.startswith("site audit (until ")
        assert status.hold is not None and status.hold.until == until.replace(microsecond=until.microsecond)
        assert status.to_json()["hold"]["reason"] == "site audit"
        # After `until` the hold no longer counts, without anyone releasing it.
        assert again.status(until + timedelta(seconds=1)).reason == OPEN
        await again.release()
        assert await HoldTable(store).load() is None
    finally:
        await store.close()


async def test_auto_upgrade_failed_kind_and_bad_holds(store: StateStore) -> None:
    policy = SitePolicy(store, (), BERLIN)
    await policy.load()
    status = await policy.hold("replacement ds/x-abc not Ready in 300s", kind=AUTO_UPGRADE_FAILED)
    assert (status.held, status.reason, status.next_opening) == (True, AUTO_UPGRADE_FAILED, None)
    with pytest.raises(InvalidHold, match="not in the future"):
        await policy.hold("late", datetime.now(UTC) - timedelta(seconds=1))
    with pytest.raises(InvalidHold, match="unknown hold kind"):
        await policy.hold("x", kind="Whatever")
    with pytest.raises(InvalidHold, match="at most 1024"):
        await policy.hold("x" * 1025)
    # The failed attempts changed nothing.
    assert policy.status().reason == AUTO_UPGRADE_FAILED


async def test_listeners_hear_each_change_once_and_wait_open_returns_on_release(store: StateStore) -> None:
    policy = SitePolicy(store, (), BERLIN)
    await policy.load()
    heard: list[PolicyStatus] = []
    policy.add_listener(heard.append)
    await policy.hold("audit")
    await policy.hold("audit")  # same answer: nothing new to tell
    waiter = asyncio.create_task(policy.wait_open())
    await asyncio.sleep(0)
    assert not waiter.done()
    await policy.release()
    await asyncio.wait_for(waiter, 5)
    assert [(s.held, s.reason) for s in heard] == [(True, HELD_BY_OPERATOR), (False, OPEN)]


async def test_wait_open_is_cancellable(store: StateStore) -> None:
    policy = SitePolicy(store, (), BERLIN)
    await policy.hold("audit")
    waiter = asyncio.create_task(policy.wait_open())
    await asyncio.sleep(0)
    assert await cancel_and_wait(waiter) is None and waiter.cancelled()


async def test_run_wakes_at_the_window_edge_without_polling(store: StateStore) -> None:
    """The timer comes from next_opening: the clock stands 1.5 s before Sunday 02:00 and the window opens."""
    opening = datetime(2026, 11, 22, 1, 0, tzinfo=UTC)
    clock = FakeClock(opening - timedelta(seconds=1.5))
    policy = SitePolicy(store, parse_windows(["Sun 02:00-04:00"]), BERLIN, clock=clock)
    await policy.load()
    heard: list[PolicyStatus] = []
    policy.add_listener(heard.append)
    assert policy.status().held
    runner = asyncio.create_task(policy.run())
    try:
        await asyncio.wait_for(policy.wait_open(), 30)
        assert clock() >= opening
        await eventually(lambda: heard and heard[-1].reason == OPEN, timeout=10)
        # Near the closing edge the node is held again, by the same timer.
        clock.set(datetime(2026, 11, 22, 3, 0, tzinfo=UTC) - timedelta(seconds=1))
        policy.poke()
        await eventually(lambda: heard[-1].reason == OUTSIDE_MAINTENANCE_WINDOW, timeout=20)
    finally:
        await cancel_and_wait(runner)


async def test_a_version_1_state_file_is_migrated_keeping_its_queue(tmp_path: Path) -> None:
    path = tmp_path / st.DB_NAME
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in st._MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("INSERT INTO requests (id, namespace, name, uid, node, state, message, attempts, created, updated) "
                 "VALUES ('r1', 'default', 'p', 'u1', 'n1', 'queued', 'queued: offline', 0, 1.0, 1.0)")
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    store = await StateStore.open(tmp_path)
    try:
        (request,) = await store.pending()
        assert (request.id, request.when_open) == ("r1", False)
        assert await HoldTable(store).load() is None
        await HoldTable(store).save(StoredHold(HELD_BY_OPERATOR, "r", None, 2.0))
        assert await HoldTable(store).load() == StoredHold(HELD_BY_OPERATOR, "r", None, 2.0)
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == st.SCHEMA_VERSION >= 2
    conn.close()


def test_times() -> None:
    assert parse_time("2026-11-22T18:00:00Z") == datetime(2026, 11, 22, 18, tzinfo=UTC)
    assert parse_time("2026-11-22T19:00:00+01:00") == datetime(2026, 11, 22, 18, tzinfo=UTC)
    with pytest.raises(ValueError, match="no time zone"):
        parse_time("2026-11-22T18:00:00")
    with pytest.raises(ValueError, match="not RFC 3339"):
        parse_time("tomorrow")


async def test_a_hold_with_until_ends_by_itself_on_the_policy_timer(store: StateStore) -> None:
    policy = SitePolicy(store, (), BERLIN)
    await policy.load()
    heard: list[PolicyStatus] = []
    policy.add_listener(heard.append)
    await policy.hold("short", datetime.now(UTC) + timedelta(seconds=1))
    runner = asyncio.create_task(policy.run())
    try:
        await asyncio.wait_for(policy.wait_open(), 30)
        await eventually(lambda: heard[-1].reason == OPEN, timeout=10)
        assert [s.reason for s in heard] == [HELD_BY_OPERATOR, OPEN]
    finally:
        await cancel_and_wait(runner)
