"""StateStore: durability, atomicity, one entry per pod, and degraded modes (corrupt, read-only, full)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from edgeagent.agent.state import store as st
from edgeagent.agent.state.store import InvalidTransition, StateStore, StateUnavailable, UnknownRequest


def pod(name: str, rv: str = "1", pad: int = 0) -> dict[str, object]:
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}", "resourceVersion": rv},
            "spec": {"nodeName": "n1", "pad": "x" * pad}}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[StateStore]:
    s = await StateStore.open(tmp_path)
    yield s
    await s.close()


def moved_aside(state_dir: Path) -> list[Path]:
    return sorted(state_dir.glob("edgeagent.db.corrupt-*"))


def raw(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


async def test_open_creates_wal_full_sync_versioned_db(tmp_path: Path) -> None:
    s = await StateStore.open(tmp_path / "sub" / "dir")
    try:
        assert s.available and s.problem == ""
        assert s.path == tmp_path / "sub" / "dir" / "edgeagent.db"
        pragmas = await s._call(lambda: (
            s._conn.execute("PRAGMA journal_mode").fetchone()[0],  # type: ignore[union-attr]
            s._conn.execute("PRAGMA synchronous").fetchone()[0],  # type: ignore[union-attr]
        ))
        assert pragmas == ("wal", 2)  # 2 = FULL
    finally:
        await s.close()
    assert raw(tmp_path / "sub" / "dir" / "edgeagent.db", "PRAGMA user_version") == [(st.SCHEMA_VERSION,)]


async def test_snapshot_empty_then_roundtrip_then_replaced_whole(store: StateStore) -> None:
    assert await store.load_snapshot() == ([], "")
    await store.save_snapshot([pod("a"), pod("b")], "10")
    assert await store.load_snapshot() == ([pod("a"), pod("b")], "10")
    await store.save_snapshot([pod("c")], "12")
    assert await store.load_snapshot() == ([pod("c")], "12")
    await store.save_snapshot([], "13")
    assert await store.load_snapshot() == ([], "13")


async def test_snapshot_and_queue_survive_restart(tmp_path: Path) -> None:
    s = await StateStore.open(tmp_path)
    await s.save_snapshot([pod("a")], "7")
    req, created = await s.enqueue("default", "a", "uid-a", "n1")
    running, _ = await s.enqueue("default", "b", "uid-b", "n1")
    await s.set_state(running.id, st.RUNNING, "deleting")
    await s.close()

    s2 = await StateStore.open(tmp_path)
    try:
        assert created
        assert await s2.load_snapshot() == ([pod("a")], "7")
        assert await s2.get_request(req.id) == req
        # A crash mid-apply leaves `running`: it is still pending so the drainer re-checks it.
        assert [r.id for r in await s2.pending()] == [req.id, running.id]
    finally:
        await s2.close()


async def test_enqueue_same_pod_returns_existing_entry(store: StateStore) -> None:
    first, created1 = await store.enqueue("default", "a", "uid-a", "n1")
    second, created2 = await store.enqueue("default", "a", "uid-a", "n1")
    assert (created1, created2) == (True, False)
    assert second == first
    other, created3 = await store.enqueue("default", "b", "uid-b", "n1")
    assert created3 and other.id != first.id
    assert len(await store.list_requests()) == 2


async def test_concurrent_enqueues_of_one_pod_make_one_entry(store: StateStore) -> None:
    results = await asyncio.gather(*(store.enqueue("default", "a", "uid-a", "n1") for _ in range(20)))
    assert sum(created for _, created in results) == 1
    assert len({r.id for r, _ in results}) == 1
    assert len(await store.list_requests()) == 1


async def test_active_request_finds_queued_or_running_only(store: StateStore) -> None:
    assert await store.active_request("default", "a") is None
    req, _ = await store.enqueue("default", "a", "uid-a", "n1")
    assert await store.active_request("default", "a") == req
    running = await store.set_state(req.id, st.RUNNING)
    assert await store.active_request("default", "a") == running
    await store.set_state(req.id, st.SUCCEEDED)
    assert await store.active_request("default", "a") is None


async def test_running_entry_is_returned_too(store: StateStore) -> None:
    first, _ = await store.enqueue("default", "a", "uid-a", "n1")
    await store.set_state(first.id, st.RUNNING)
    again, created = await store.enqueue("default", "a", "uid-a", "n1")
    assert not created and again.id == first.id and again.state == st.RUNNING


async def test_finished_entry_allows_a_new_one(store: StateStore) -> None:
    first, _ = await store.enqueue("default", "a", "uid-a", "n1")
    await store.set_state(first.id, st.SUCCEEDED, "deleted")
    second, created = await store.enqueue("default", "a", "uid-a2", "n1")
    assert created and second.id != first.id


async def test_queued_entry_for_replaced_pod_is_superseded(store: StateStore) -> None:
    old, _ = await store.enqueue("default", "a", "uid-old", "n1")
    new, created = await store.enqueue("default", "a", "uid-new", "n1")
    assert created and new.id != old.id and new.uid == "uid-new"
    old_now = await store.get_request(old.id)
    assert old_now is not None and old_now.state == st.OBSOLETE and "superseded" in old_now.message
    assert [r.id for r in await store.pending()] == [new.id]


async def test_partial_unique_index_forbids_two_active_entries(store: StateStore) -> None:
    await store.enqueue("default", "a", "uid-a", "n1")
    await store.close()
    conn = sqlite3.connect(store.path)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO requests (id, namespace, name, uid, node, state, created, updated) "
                         "VALUES ('x', 'default', 'a', 'u', 'n1', 'running', 0, 0)")
        # ...while finished history rows for the same pod are fine.
        conn.execute("INSERT INTO requests (id, namespace, name, uid, node, state, created, updated) "
                     "VALUES ('y', 'default', 'a', 'u', 'n1', 'succeeded', 0, 0)")
    finally:
        conn.close()


async def test_list_newest_first_pending_oldest_first(store: StateStore) -> None:
    ids = [(await store.enqueue("default", f"p{i}", f"u{i}", "n1"))[0].id for i in range(5)]
    await store.set_state(ids[1], st.SUCCEEDED)
    await store.set_state(ids[3], st.RUNNING)
    assert [r.id for r in await store.list_requests()] == list(reversed(ids))
    assert [r.id for r in await store.pending()] == [ids[0], ids[2], ids[3], ids[4]]
    counts = await store.counts()
    assert counts == {"queued": 3, "running": 1, "verifying": 0, "succeeded": 1, "failed": 0, "cancelled": 0,
                      "obsolete": 0}


async def test_set_state_records_message_attempts_and_refuses_leaving_a_final_state(store: StateStore) -> None:
    req, _ = await store.enqueue("default", "a", "uid-a", "n1")
    updated = await store.set_state(req.id, st.QUEUED, "retrying: 503", attempts=3)
    assert (updated.state, updated.message, updated.attempts) == (st.QUEUED, "retrying: 503", 3)
    assert updated.updated >= req.updated
    done = await store.set_state(req.id, st.FAILED, "forbidden")
    assert done.attempts == 3
    with pytest.raises(InvalidTransition):
        await store.set_state(req.id, st.RUNNING)
    with pytest.raises(UnknownRequest):
        await store.set_state("nope", st.RUNNING)
    with pytest.raises(ValueError):
        await store.set_state(req.id, "bogus")


async def test_cancel_only_while_queued(store: StateStore) -> None:
    a, _ = await store.enqueue("default", "a", "uid-a", "n1")
    b, _ = await store.enqueue("default", "b", "uid-b", "n1")
    cancelled = await store.cancel(a.id)
    assert cancelled.state == st.CANCELLED
    await store.set_state(b.id, st.RUNNING)
    with pytest.raises(InvalidTransition) as info:
        await store.cancel(b.id)
    assert info.value.request.state == st.RUNNING
    with pytest.raises(InvalidTransition):
        await store.cancel(a.id)
    with pytest.raises(UnknownRequest):
        await store.cancel("unknown")
    # A drainer that picked the entry before the cancel cannot resurrect it.
    with pytest.raises(InvalidTransition):
        await store.set_state(a.id, st.RUNNING)


async def test_to_json_has_rfc3339_times(store: StateStore) -> None:
    req, _ = await store.enqueue("default", "a", "uid-a", "n1")
    body = req.to_json()
    assert set(body) == {"id", "namespace", "name", "uid", "node", "state", "message", "attempts",
                         "created", "updated", "whenOpen", "origin", "reason", "revision", "target", "deadline",
                         "replacement"}
    assert body["created"].endswith("Z") and "T" in body["created"]


async def test_finished_history_is_bounded(store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "KEEP_FINISHED", 3)
    for i in range(6):
        req, _ = await store.enqueue("default", f"p{i}", "u", "n1")
        await store.set_state(req.id, st.SUCCEEDED)
    await store.enqueue("default", "last", "u", "n1")
    states = [r.state for r in await store.list_requests()]
    assert states == ["queued", "succeeded", "succeeded", "succeeded"]


# ------------------------------------------------------------------ corruption


async def test_garbage_file_is_moved_aside_and_fresh_db_created(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "edgeagent.db"
    db.write_bytes(b"this is not a database at all" * 200)
    s = await StateStore.open(tmp_path)
    try:
        assert s.available
        assert await s.load_snapshot() == ([], "")
        _, created = await s.enqueue("default", "a", "uid-a", "n1")
        assert created
    finally:
        await s.close()
    aside = moved_aside(tmp_path)
    assert len(aside) == 1
    assert aside[0].read_bytes().startswith(b"this is not a database")
    out = capsys.readouterr()
    assert "state_corrupt_moved_aside" in out.out + out.err


async def test_db_failing_integrity_check_is_moved_aside(tmp_path: Path) -> None:
    s = await StateStore.open(tmp_path)
    for i in range(50):
        await s.enqueue("default", f"pod-{i}", f"uid-{i}", "n1")
    await s.save_snapshot([pod(f"p{i}", pad=500) for i in range(40)], "99")
    await s.close()
    db = tmp_path / "edgeagent.db"
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[2 * page:4 * page] = b"\xff" * (2 * page)  # clobber two b-tree pages, keep the header valid
    db.write_bytes(bytes(data))

    s2 = await StateStore.open(tmp_path)
    try:
        assert s2.available
        assert await s2.list_requests() == []
    finally:
        await s2.close()
    assert len(moved_aside(tmp_path)) == 1


async def test_db_from_newer_schema_is_kept_aside(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "edgeagent.db")
    conn.execute(f"PRAGMA user_version = {st.SCHEMA_VERSION + 1}")
    conn.close()
    s = await StateStore.open(tmp_path)
    try:
        assert s.available
    finally:
        await s.close()
    assert len(moved_aside(tmp_path)) == 1


# ------------------------------------------------------------------ unwritable


async def test_read_only_store_reads_but_refuses_writes(tmp_path: Path) -> None:
    s = await StateStore.open(tmp_path)
    await s.save_snapshot([pod("a")], "5")
    existing, _ = await s.enqueue("default", "a", "uid-a", "n1")
    await s.close()

    ro = await StateStore.open(tmp_path, read_only=True)
    try:
        assert not ro.available
        assert await ro.load_snapshot() == ([pod("a")], "5")
        with pytest.raises(StateUnavailable):
            await ro.enqueue("default", "b", "uid-b", "n1")
        with pytest.raises(StateUnavailable):
            await ro.save_snapshot([], "6")
        with pytest.raises(StateUnavailable):
            await ro.cancel(existing.id)
    finally:
        await ro.close()
    assert raw(tmp_path / "edgeagent.db", "SELECT name FROM requests") == [("a",)]


async def test_state_dir_that_cannot_be_created_degrades_and_heals(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a regular file where a directory should be")
    s = await StateStore.open(blocker / "state")
    try:
        assert not s.available and "state" in s.problem
        assert await s.load_snapshot() == ([], "")
        assert await s.list_requests() == []
        with pytest.raises(StateUnavailable):
            await s.enqueue("default", "a", "uid-a", "n1")
        # Once the directory can be created, the next write succeeds without a restart.
        blocker.unlink()
        req, created = await s.enqueue("default", "a", "uid-a", "n1")
        assert created and s.available
        assert await s.get_request(req.id) == req
    finally:
        await s.close()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
async def test_chmod_read_only_state_dir(tmp_path: Path) -> None:
    s = await StateStore.open(tmp_path / "state")
    await s.close()
    (tmp_path / "state").chmod(0o500)
    (tmp_path / "state" / "edgeagent.db").chmod(0o400)
    try:
        s2 = await StateStore.open(tmp_path / "state")
        try:
            assert not s2.available
            with pytest.raises(StateUnavailable):
                await s2.enqueue("default", "a", "uid-a", "n1")
        finally:
            await s2.close()
    finally:
        (tmp_path / "state").chmod(0o700)
        (tmp_path / "state" / "edgeagent.db").chmod(0o600)


async def test_full_disk_rolls_back_whole_writes(tmp_path: Path) -> None:
    s = await StateStore.open(tmp_path, max_bytes=64 * 1024)
    try:
        await s.save_snapshot([pod("small")], "1")
        with pytest.raises(StateUnavailable, match="full"):
            await s.save_snapshot([pod(f"p{i}", pad=2000) for i in range(100)], "2")
        assert await s.load_snapshot() == ([pod("small")], "1")
        accepted = 0
        with pytest.raises(StateUnavailable):
            for i in range(10_000):
                await s.enqueue("default", f"pod-with-a-rather-long-name-{i:05d}" + "x" * 180, f"uid-{i}", "n1")
                accepted += 1
        assert accepted > 0
        assert len(await s.list_requests()) == accepted  # the failed one left nothing behind
    finally:
        await s.close()


# ------------------------------------------------------------------ kill -9

_ENQUEUE_THEN_HANG = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from edgeagent.agent.state.store import StateStore

    async def main() -> None:
        s = await StateStore.open(Path(sys.argv[1]))
        req, _ = await s.enqueue("default", "a", "uid-a", "n1")
        print("ENQUEUED", req.id, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
""")


async def test_committed_entry_survives_sigkill(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _ENQUEUE_THEN_HANG, str(tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        request_id = ""
        for _ in range(20):  # log lines may come first
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            if line.startswith("ENQUEUED "):
                request_id = line.split()[1]
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert request_id.strip()
    s = await StateStore.open(tmp_path)
    try:
        req = await s.get_request(request_id.strip())
        assert req is not None and req.state == st.QUEUED and req.key == "default/a"
    finally:
        await s.close()
