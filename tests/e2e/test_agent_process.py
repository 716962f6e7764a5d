"""`edgeagent run` as a real process against a simulated node: signals, exit codes, systemd, restart offline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from edgeagent.agent.state.store import StateStore
from edgeagent.kube.client import KubeClient, Timeouts
from tests.support.notify import NotifyReceiver
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

NODE = "edge-1"
FAST_FLAGS = ["--request-timeout", "1", "--probe-interval", "0.1", "--probe-timeout", "0.3",
              "--failures-to-disconnect", "2", "--successes-to-connect", "1", "--log-format", "json"]


class AgentProcess:
    """One `edgeagent run` child; its JSON log lines on stderr are collected as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.logs: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            text = line.decode(errors="replace").rstrip("\n")
            self.raw.append(text)
            with contextlib.suppress(ValueError):
                entry = json.loads(text)
                if isinstance(entry, dict):
                    self.logs.append(entry)

    def logged(self, event: str) -> dict[str, Any] | None:
        return next((e for e in self.logs if e.get("event") == event), None)

    async def port(self) -> int:
        listening = await eventually(lambda: self.logged("agent_listening") or self.proc.returncode is not None,
                                     timeout=20, what="the agent to listen")
        assert isinstance(listening, dict), f"agent exited early: {self.raw}"
        return int(listening["port"])

    async def wait(self, timeout: float = 15) -> int:
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await asyncio.wait_for(self._reader, 5)
        return code

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.wait()


Spawn = Callable[..., Awaitable[AgentProcess]]


@pytest.fixture
async def spawn() -> AsyncIterator[Spawn]:
    started: list[AgentProcess] = []

    async def start(*args: str, env: dict[str, str] | None = None) -> AgentProcess:
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGEAGENT_", "NOTIFY_", "WATCHDOG_"))}
        child_env.pop("KUBECONFIG", None)
        child_env.update(env or {})
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "edgeagent.cli", "run", *args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env=child_env)
        handle = AgentProcess(proc)
        started.append(handle)
        return handle

    try:
        yield start
    finally:
        for handle in started:
            await handle.kill()


def _run_args(sim: SimCluster, state_dir: Path, *extra: str) -> list[str]:
    return ["--node-name", NODE, "--kubeconfig", str(sim.node_kubeconfig(NODE)), "--port", "0",
            "--state-dir", str(state_dir), *FAST_FLAGS, *extra]


async def _create_pod(sim: SimCluster, name: str) -> None:
    async with await KubeClient.connect(sim.admin_kubeconfig, Timeouts(1, 2)) as admin:
        await admin.create("/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox:1"}]}})


async def _pod_names(port: int) -> set[str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http, \
            http.get(f"http://127.0.0.1:{port}/pods") as response:
        assert response.status == 200
        body = await response.json()
    return {p["metadata"]["name"] for p in body["items"]}


async def _snapshot_names(state_dir: Path) -> set[str]:
    store = await StateStore.open(state_dir, read_only=True)
    try:
        pods, _ = await store.load_snapshot()
    finally:
        await store.close()
    return {p["metadata"]["name"] for p in pods}


async def test_sigterm_stops_cleanly_with_exit_0_and_sd_notify(
        sim: SimCluster, spawn: Spawn, tmp_path: Path) -> None:
    await _create_pod(sim, "p1")
    notify_path = str(tmp_path / "notify.sock")
    state_dir = tmp_path / "state"
    with NotifyReceiver(notify_path) as receiver:
        agent = await spawn(*_run_args(sim, state_dir),
                            env={"NOTIFY_SOCKET": notify_path, "WATCHDOG_USEC": "200000"})
        port = await agent.port()

        async def p1_listed() -> bool:
            return "p1" in await _pod_names(port)

        await eventually(p1_listed, timeout=10, what="p1 in GET /pods")
        await eventually(lambda: any(m.startswith("READY=1") for m in receiver.messages()), what="READY=1")
        await eventually(lambda: receiver.messages().count("WATCHDOG=1") >= 2, what="WATCHDOG=1 pings")

        agent.proc.send_signal(signal.SIGTERM)
        assert await agent.wait() == 0, agent.raw
        assert any(m.startswith("STOPPING=1") for m in receiver.messages())
    assert agent.logged("state_store_closed") is not None
    # SQLite removes the WAL file when the last connection closes cleanly; a crash leaves it behind.
    assert not (state_dir / "edgeagent.db-wal").exists()
    assert await _snapshot_names(state_dir) == {"p1"}


async def test_non_loopback_bind_is_refused_before_anything_happens(spawn: Spawn, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    # No kubeconfig exists at all: the refusal must come first, before any file is read or any socket opened.
    agent = await spawn("--node-name", NODE, "--kubeconfig", str(tmp_path / "absent.kubeconfig"),
                        "--bind", "0.0.0.0", "--port", "0", "--state-dir", str(state_dir))
    assert await agent.wait() == 2
    errors = [line for line in agent.raw if line.startswith("edgeagent:")]
    assert errors == ["edgeagent: error: refusing to listen on non-loopback address 0.0.0.0: set --token-file "
                      "(bearer token for mutating endpoints) or --insecure-allow-remote"]
    assert not state_dir.exists()


async def test_missing_kubeconfig_exits_2_with_one_clear_line(spawn: Spawn, tmp_path: Path) -> None:
    """2 like a missing --token-file: a file named by a flag that is not there is a usage error."""
    missing = tmp_path / "absent.kubeconfig"
    agent = await spawn("--node-name", NODE, "--kubeconfig", str(missing), "--port", "0",
                        "--state-dir", str(tmp_path / "state"))
    assert await agent.wait() == 2
    assert [line for line in agent.raw if line.startswith("edgeagent:")] == [
        f"edgeagent: error: kubeconfig not found: {missing}"]


async def test_sigkill_then_restart_offline_serves_the_snapshot(
        sim: SimCluster, spawn: Spawn, tmp_path: Path) -> None:
    for name in ("a", "b"):
        await _create_pod(sim, name)
    state_dir = tmp_path / "state"
    first = await spawn(*_run_args(sim, state_dir))
    await first.port()

    async def persisted() -> bool:
        return await _snapshot_names(state_dir) == {"a", "b"}

    await eventually(persisted, timeout=10, what="the snapshot on disk")
    first.proc.kill()
    assert await first.wait() == -signal.SIGKILL

    await sim.disconnect(NODE, "blackhole")
    second = await spawn(*_run_args(sim, state_dir))
    port = await second.port()
    # The first answer already holds the pods: it can only have come from the snapshot.
    assert await _pod_names(port) == {"a", "b"}
    second.proc.send_signal(signal.SIGTERM)
    assert await second.wait() == 0, second.raw
