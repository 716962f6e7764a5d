"""An unwritable state dir: retried with backoff, logged once per episode plus a reminder, not per try.

Before: the snapshot writer retried every 0.5 s and logged two lines each time (~360k journal lines a day).
The hour below runs on an injected clock and sleep, so it costs no real waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from edgeagent.agent.link.cache import PodCache
from edgeagent.agent.state.episodes import REMINDER_INTERVAL, RETRY_CAP, Episode, retry_delay
from edgeagent.agent.state.store import StateStore
from edgeagent.kube.client import KubeClient
from edgeagent.kube.informer import Informer
from tests.integration.agent_runtime.conftest import NODE, Admin
from tests.support.waiting import eventually

HOUR = 3600.0
LOGGED = {"pod_snapshot_not_saved", "state_unwritable", "state_unreadable"}


class FakeTime:
    """A clock that moves only when the code under test sleeps; a sleep past `end` never returns."""

    def __init__(self, end: float = float("inf")) -> None:
        # From the real monotonic clock on: the store logged its first failure at open() with that clock, and a
        # fake clock behind it (a machine up for more than a fixed start value) would never reach a reminder.
        self.now = time.monotonic()
        self.end = self.now + end
        self.done = asyncio.Event()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if self.now + seconds > self.end:
            self.done.set()
            await asyncio.Event().wait()
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)


@contextlib.contextmanager
def blocked_state_dir(tmp_path: Path) -> Iterator[Path]:
    """A state dir that cannot be created, even by root: its parent is a regular file."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    yield blocker / "state"


async def _an_hour_of_failures(tmp_path: Path, node_client: KubeClient, admin: Admin) -> tuple[PodCache,
                                                                                            list[dict[str, Any]]]:
    await admin.create("a")
    informer = Informer(node_client, "/api/v1/pods", field_selector=f"spec.nodeName={NODE}", idle_timeout=2.0)
    fake = FakeTime(end=HOUR)
    with blocked_state_dir(tmp_path) as state_dir:
        store = await StateStore.open(state_dir)
    store.clock = fake.clock
    cache = PodCache(informer, store, NODE, clock=fake.clock, sleep=fake.sleep)
    watch = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: cache.get("default", "a") is not None, timeout=15)
        with capture_logs() as logs:
            writer = asyncio.create_task(cache.run())
            await eventually(fake.done.is_set, timeout=60)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await store.close()
    return cache, [dict(entry) for entry in logs if entry["event"] in LOGGED]


async def test_an_hour_of_an_unwritable_state_dir_logs_a_handful_of_lines(
        tmp_path: Path, node_client: KubeClient, admin: Admin) -> None:
    cache, lines = await _an_hour_of_failures(tmp_path, node_client, admin)
    # Backoff: 0.5 s doubling to 60 s is ~70 tries an hour, not 7200.
    assert 10 <= cache.snapshot_attempts <= HOUR / RETRY_CAP + 20, cache.snapshot_attempts
    assert cache.snapshot_writes == 0
    # Once per episode plus a reminder every 10 min, for each of the two reporters.
    reminders = int(HOUR // REMINDER_INTERVAL)
    snapshot_lines = [e for e in lines if e["event"] == "pod_snapshot_not_saved"]
    store_lines = [e for e in lines if e["event"] == "state_unwritable"]
    assert 1 <= len(snapshot_lines) <= 1 + reminders + 1, snapshot_lines
    assert 1 <= len(store_lines) <= 1 + reminders + 1, store_lines
    assert snapshot_lines[0]["failures"] == 1 and snapshot_lines[-1]["failures"] > 1


async def test_the_end_of_an_episode_is_logged_once_and_backoff_resets(tmp_path: Path, node_client: KubeClient,
                                                                        admin: Admin) -> None:
    await admin.create("a")
    informer = Informer(node_client, "/api/v1/pods", field_selector=f"spec.nodeName={NODE}", idle_timeout=2.0)
    fake = FakeTime()
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    store = await StateStore.open(blocker / "state")
    store.clock = fake.clock
    cache = PodCache(informer, store, NODE, clock=fake.clock, sleep=fake.sleep)
    watch = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: cache.get("default", "a") is not None, timeout=15)
        with capture_logs() as logs:
            gaps = []
            for _ in range(5):
                await cache.flush()
                gaps.append(cache.next_write_at() - fake.now)
                fake.now = cache.next_write_at()
            assert gaps == [0.5, 1.0, 2.0, 4.0, 8.0]
            blocker.unlink()  # the operator fixes the disk
            await cache.flush()
        assert cache.snapshot_writes == 1
        events = [e["event"] for e in logs]
        assert events.count("pod_snapshot_not_saved") == 1
        assert events.count("pod_snapshot_saved_again") == 1
        assert events.count("state_writable_again") == 1
        assert cache.next_write_at() <= fake.now + 0.5  # backoff reset: the next change is written promptly
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await store.close()


@given(st.integers(min_value=0, max_value=10_000))
def test_retry_delay_grows_from_base_to_cap(failures: int) -> None:
    delay = retry_delay(failures)
    assert 0.5 <= delay <= RETRY_CAP
    assert retry_delay(failures + 1) >= delay
    if failures <= 1:
        assert delay == 0.5


@given(st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=200))
def test_episode_logs_first_failure_and_then_at_most_one_per_reminder_interval(gaps: list[float]) -> None:
    episode = Episode(reminder_interval=60.0)
    now, logged = 0.0, []
    for gap in gaps:
        now += gap
        if episode.failed(now):
            logged.append(now)
    assert logged[0] == gaps[0]
    assert all(b - a >= 60.0 for a, b in itertools.pairwise(logged))
    assert episode.succeeded() == len(gaps) and episode.succeeded() == 0


@pytest.mark.parametrize("failures", [1, 2, 7, 8, 100])
def test_retry_delay_values(failures: int) -> None:
    assert retry_delay(failures) == min(60.0, 0.5 * 2 ** (failures - 1))
