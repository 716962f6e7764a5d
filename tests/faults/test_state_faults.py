"""A state directory that fills up or is read-only: 503 on enqueue, reads keep working, nothing half-written.

The tests run as root, for whom chmod changes nothing, so the faults come from the kernel itself, for
the agent process only:
- full: the agent runs in a private mount namespace (`unshare --mount`) whose state directory is a
  small tmpfs, which the test fills through `/proc/<pid>/root/...` until the kernel answers ENOSPC,
  then empties again. Where mount namespaces are not allowed, the agent's RLIMIT_FSIZE is set to 0
  instead (every write fails with EFBIG: a disk that takes nothing more).
- read-only: the state directory is bind-mounted read-only in the agent's private namespace, so every
  write fails with EROFS (chmod for a non-root run). Linux refuses to remount a filesystem read-only
  while a process has files open for writing on it (EBUSY), as SQLite always has, so this is the
  state dir of an agent restarted after its filesystem went read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import get_condition
from tests.faults.conftest import (
    NODE,
    AgentProc,
    AgentSpawner,
    cached_pods,
    fingerprint,
    mark_need_upgrade,
    needs_upgrade,
    node_pods,
    orphan_pod,
    readyz,
    requests,
    upgrade,
    wait_link,
)
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PODS = ["state-0", "state-1", "state-2"]
TMPFS = 'mount -t tmpfs -o size=8m,mode=0700 tmpfs "$0" && exec "$@"'
READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
IS_ROOT = os.geteuid() == 0


def _namespace_prefix(script: str, directory: Path) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, str(directory)]


@pytest.fixture(scope="module")
def mount_namespaces() -> bool:
    """Whether this machine lets us mount a tmpfs in a private mount namespace (root with CAP_SYS_ADMIN)."""
    with tempfile.TemporaryDirectory() as directory:
        try:
            done = subprocess.run([*_namespace_prefix(TMPFS, Path(directory)), "true"], capture_output=True,
                                  timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0


async def _flagged_pods(admin: KubeClient) -> None:
    for name in PODS:
        pod = await admin.create("/api/v1/namespaces/default/pods", orphan_pod(name))
        await mark_need_upgrade(admin, pod)


async def _wait_cached(http: aiohttp.ClientSession, agent: AgentProc) -> None:
    async def probe() -> bool:
        cached = {p["metadata"]["name"]: p for p in await cached_pods(http, agent)}
        # ... with the agent's own UpgradeHeld on them, so the pods no longer change under the test.
        return all(name in cached and needs_upgrade(cached[name]) and get_condition(cached[name], "UpgradeHeld")
                   for name in PODS)

    await eventually(probe, what="the flagged pods in the agent's cache")


async def _cancel(http: aiohttp.ClientSession, agent: AgentProc, request_id: str) -> int:
    async with http.delete(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}",
                           headers={"Accept": "application/json"}) as resp:
        return resp.status


_QUEUE_ROWS = """
import json, sqlite3, sys
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
print(json.dumps({"check": conn.execute("PRAGMA integrity_check").fetchone()[0],
                  "rows": conn.execute("SELECT id, state FROM requests ORDER BY seq").fetchall()}))
"""


async def _queue_rows(agent: AgentProc, db: Path, *, in_namespace: bool) -> list[tuple[str, str]]:
    """The queue as SQLite itself reads it from the file, after an integrity check.

    Read from inside the agent's mount namespace when it has one: SQLite resolves symbolic links, so a
    `/proc/<pid>/root/...` path would lead it back to this namespace's (empty) directory.
    """
    enter = ["nsenter", "--target", str(agent.pid), "--mount", "--"] if in_namespace else []
    proc = await asyncio.create_subprocess_exec(*enter, sys.executable, "-c", _QUEUE_ROWS, str(db),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    found = json.loads(out)
    assert found["check"] == "ok", found
    return [(str(i), str(s)) for i, s in found["rows"]]


# ---------------------------------------------------------------------- full


@contextlib.contextmanager
def _filled(agent: AgentProc, state_dir: Path, mechanism: str) -> Iterator[None]:
    if mechanism == "tmpfs":
        filler = Path(f"/proc/{agent.pid}/root") / state_dir.relative_to("/") / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            chunk = b"\0" * (256 * 1024)
            with pytest.raises(OSError) as full:
                for _ in range(10_000):
                    os.write(fd, chunk)
            assert full.value.errno == errno.ENOSPC
        finally:
            os.close(fd)
        try:
            yield
        finally:
            filler.unlink()
    else:
        soft, hard = resource.prlimit(agent.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(agent.pid, resource.RLIMIT_FSIZE, (0, hard))
        try:
            yield
        finally:
            resource.prlimit(agent.pid, resource.RLIMIT_FSIZE, (soft, hard))


@pytest.mark.parametrize("mechanism", ["tmpfs", "rlimit"])
async def test_full_state_disk_refuses_enqueue_keeps_reads_and_heals(
        mechanism: str, mount_namespaces: bool, sim: SimCluster, admin: KubeClient, spawn_agent: AgentSpawner,
        http: aiohttp.ClientSession, tmp_path: Path) -> None:
    if mechanism == "tmpfs" and not mount_namespaces:
        pytest.skip("no private mount namespace here (needs root with CAP_SYS_ADMIN); the rlimit variant runs")
    await _flagged_pods(admin)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    prefix = _namespace_prefix(TMPFS, state_dir) if mechanism == "tmpfs" else []
    agent = await spawn_agent(sim.node_kubeconfig(NODE), state_dir, prefix=prefix)
    db = state_dir / "edgeagent.db"
    in_namespace = mechanism == "tmpfs"
    await wait_link(http, agent, True)
    await _wait_cached(http, agent)
    truth = fingerprint(await node_pods(admin))
    await sim.disconnect(NODE, "refuse")
    await wait_link(http, agent, False)
    status, first = await upgrade(http, agent, PODS[0])
    assert status == 202, first

    with _filled(agent, state_dir, mechanism):
        status, body = await upgrade(http, agent, PODS[1])
        assert status == 503 and body["status"] == "ServiceUnavailable" and "id" not in body, body
        assert await _cancel(http, agent, first["id"]) == 503
        # Reads keep working, from memory and from the database.
        assert fingerprint(await cached_pods(http, agent)) == truth
        assert [(r["id"], r["state"]) for r in await requests(http, agent)] == [(first["id"], "queued")]
        assert (await readyz(http, agent))["status"] == "ok"
        # Nothing half-written: the file is intact and holds exactly the committed entry.
        assert await _queue_rows(agent, db, in_namespace=in_namespace) == [(first["id"], "queued")]

    # Space again: the next write succeeds without a restart, and the drain applies both entries.
    status, second = await upgrade(http, agent, PODS[1])
    assert status == 202, second
    both = [(first["id"], "queued"), (second["id"], "queued")]
    assert await _queue_rows(agent, db, in_namespace=in_namespace) == both
    await sim.connect(NODE)

    async def both_succeeded() -> bool:
        # Applied: deleted, then `verifying` until a replacement on a newer revision is Ready (or succeeded).
        states = [r["state"] for r in await requests(http, agent)]
        return len(states) == 2 and all(s in ("verifying", "succeeded") for s in states)

    await eventually(both_succeeded, what="both entries applied after the disk healed")
    assert agent.alive


# ---------------------------------------------------------------------- read-only


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


@contextlib.contextmanager
def _read_only(state_dir: Path, mount_namespaces: bool) -> Iterator[list[str]]:
    """The agent-process prefix that makes `state_dir` read-only for it (chmod where that binds)."""
    if mount_namespaces:
        yield _namespace_prefix(READ_ONLY, state_dir)
        return
    if IS_ROOT:
        pytest.skip("root ignores permissions and this machine allows no private mount namespace")
    modes = {p: p.stat().st_mode for p in [state_dir, *state_dir.iterdir()]}
    for path in modes:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        yield []
    finally:
        for path, mode in modes.items():
            path.chmod(mode)


async def _previous_life(sim: SimCluster, admin: KubeClient, spawn_agent: AgentSpawner,
                         http: aiohttp.ClientSession, state_dir: Path) -> tuple[dict[str, str], str]:
    """An agent that cached the pods and queued one upgrade offline, then stopped cleanly."""
    await _flagged_pods(admin)
    agent = await spawn_agent(sim.node_kubeconfig(NODE), state_dir)
    await wait_link(http, agent, True)
    await _wait_cached(http, agent)
    served = fingerprint(await cached_pods(http, agent))
    await sim.disconnect(NODE, "refuse")
    await wait_link(http, agent, False)
    status, body = await upgrade(http, agent, PODS[0])
    assert status == 202, body
    assert await agent.terminate() == 0
    return served, str(body["id"])


async def test_read_only_state_dir_refuses_enqueue_and_keeps_serving(
        mount_namespaces: bool, sim: SimCluster, admin: KubeClient, spawn_agent: AgentSpawner,
        http: aiohttp.ClientSession, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    await _previous_life(sim, admin, spawn_agent, http, state_dir)
    await sim.connect(NODE)
    before = _digest(state_dir)
    with _read_only(state_dir, mount_namespaces) as prefix:
        agent = await spawn_agent(sim.node_kubeconfig(NODE), state_dir, prefix=prefix)
        state: dict[str, Any] = (await readyz(http, agent))["state"]
        assert state["available"] is False and state["problem"], state
        await wait_link(http, agent, True)
        await eventually(lambda: _cache_is_truth(http, agent, admin), what="cache synced from the cloud")
        await sim.disconnect(NODE, "refuse")
        await wait_link(http, agent, False)
        for name in PODS[1:]:
            status, body = await upgrade(http, agent, name)
            assert status == 503 and body["status"] == "ServiceUnavailable" and "id" not in body, body
        assert await _cache_is_truth(http, agent, admin)
        assert agent.alive
        await agent.terminate()
    assert _digest(state_dir) == before  # not one byte written


async def _cache_is_truth(http: aiohttp.ClientSession, agent: AgentProc, admin: KubeClient) -> bool:
    return fingerprint(await cached_pods(http, agent)) == fingerprint(await node_pods(admin))


async def test_read_only_state_dir_still_serves_its_snapshot_offline(
        mount_namespaces: bool, sim: SimCluster, admin: KubeClient, spawn_agent: AgentSpawner,
        http: aiohttp.ClientSession, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    served, request_id = await _previous_life(sim, admin, spawn_agent, http, state_dir)
    with _read_only(state_dir, mount_namespaces) as prefix:
        agent = await spawn_agent(sim.node_kubeconfig(NODE), state_dir, prefix=prefix)
        assert (await readyz(http, agent))["link"]["connected"] is False
        assert [r["id"] for r in await requests(http, agent)] == [request_id]
        assert fingerprint(await cached_pods(http, agent)) == served
        await agent.terminate()
