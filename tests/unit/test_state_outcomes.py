"""StateStore, verified outcomes: the v1 → v2 migration, the `verifying` state, transition hooks and listeners."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from edgeagent.agent.state import store as st
from edgeagent.agent.state.store import InvalidTransition, StateStore, UpgradeRequest


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[StateStore]:
    s = await StateStore.open(tmp_path)
    yield s
    await s.close()


def _v1_file(path: Path) -> None:
    """A database as the round-1 agent wrote it (schema version 1), with a queued and a succeeded request."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for step in st._SCHEMA_V1:
            conn.execute(step)
        conn.execute("INSERT INTO requests (id, namespace, name, uid, node, state, message, attempts, created, updated)"
                     " VALUES ('q1', 'default', 'a', 'uid-a', 'n1', 'queued', 'queued: offline', 0, 10, 10)")
        conn.execute("INSERT INTO requests (id, namespace, name, uid, node, state, message, attempts, created, updated)"
                     " VALUES ('s1', 'default', 'b', 'uid-b', 'n1', 'succeeded', 'deleted', 1, 5, 6)")
        conn.execute("PRAGMA user_version = 1")
    finally:
        conn.close()


async def test_v1_database_is_migrated_keeping_every_request(tmp_path: Path) -> None:
    _v1_file(tmp_path / st.DB_NAME)
    store = await StateStore.open(tmp_path)
    try:
        assert store.available, store.problem
        requests = {r.id: r for r in await store.list_requests()}
        assert set(requests) == {"q1", "s1"}
        q1 = requests["q1"]
        assert (q1.state, q1.message, q1.created) == ("queued", "queued: offline", 10)
        assert requests["s1"].state == "succeeded" and requests["s1"].attempts == 1
        assert [r.id for r in await store.pending()] == ["q1"]
        # The migrated table takes the new state, and new requests get ids after the old ones.
        await store.set_state("q1", st.RUNNING)
        verifying = await store.start_verifying("q1", "deleted", revision="old", generation="1", owner_uid="ds",
                                                target="new", deadline=123.0)
        assert verifying.state == st.VERIFYING
        fresh, _ = await store.enqueue("default", "c", "uid-c", "n1")
        assert (await store.list_requests())[0].id == fresh.id
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / st.DB_NAME)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == st.SCHEMA_VERSION
        with pytest.raises(sqlite3.IntegrityError):  # the one-active-per-pod index was rebuilt too
            conn.execute("INSERT INTO requests (id, namespace, name, uid, node, state, created, updated) "
                         "VALUES ('x', 'default', 'c', 'u', 'n1', 'running', 0, 0)")
    finally:
        conn.close()


async def test_verifying_records_what_the_verifier_needs_and_survives_reopen(tmp_path: Path) -> None:
    store = await StateStore.open(tmp_path)
    req, _ = await store.enqueue("default", "a", "uid-a", "n1", state=st.RUNNING, origin="online")
    assert req.state == st.RUNNING and req.origin == "online"
    await store.start_verifying(req.id, "deleted", revision="h1", generation="3", owner_uid="ds-uid",
                                target="h2", deadline=1000.5)
    await store.close()
    store = await StateStore.open(tmp_path)
    try:
        [again] = await store.verifying()
        assert (again.revision, again.generation, again.owner_uid, again.target, again.deadline) == \
            ("h1", "3", "ds-uid", "h2", 1000.5)
        assert again.to_json()["deadline"] == "1970-01-01T00:16:40.500000Z"
        # A verifying request is past the cloud: it cannot go back to the queue, and is not pending.
        assert await store.pending() == []
        with pytest.raises(InvalidTransition):
            await store.set_state(req.id, st.QUEUED)
        with pytest.raises(InvalidTransition):
            await store.cancel(req.id)
        done = await store.set_state(req.id, st.FAILED, "not ready", reason="ImagePullBackOff", replacement="default/b")
        assert (done.reason, done.replacement) == ("ImagePullBackOff", "default/b")
        assert await store.verifying() == []
    finally:
        await store.close()


async def test_hooks_run_in_the_transaction_and_listeners_after_it(store: StateStore) -> None:
    seen_in_tx: list[tuple[str | None, str]] = []
    heard: list[tuple[str | None, str]] = []

    def hook(conn: sqlite3.Connection, before: UpgradeRequest | None, after: UpgradeRequest) -> None:
        assert conn.in_transaction
        seen_in_tx.append((before.state if before else None, after.state))

    store.tx_hooks.append(hook)
    store.listeners.append(lambda before, after: heard.append((before.state if before else None, after.state)))
    await store.enqueue("default", "a", "uid-old", "n1")
    await store.enqueue("default", "a", "uid-new", "n1")  # supersedes the first: two changes in one transaction
    expected = [(None, "queued"), ("queued", "obsolete"), (None, "queued")]
    assert seen_in_tx == expected and heard == expected


async def test_a_failing_hook_rolls_the_change_back(store: StateStore) -> None:
    def hook(conn: sqlite3.Connection, before: UpgradeRequest | None, after: UpgradeRequest) -> None:
        raise sqlite3.OperationalError("disk full")

    store.tx_hooks.append(hook)
    with pytest.raises(st.StateUnavailable):
        await store.enqueue("default", "a", "uid-a", "n1")
    assert await store.list_requests() == []
