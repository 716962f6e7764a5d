"""The fault suite's agents: real `edgeagent run` processes against the in-process simulated cluster.

A crash must be a real SIGKILL and a full disk a real kernel error, so every agent here is a child
process; its JSON log lines (stderr) are collected through a pipe, never a file, so that a disk-full
fault injected into the agent cannot break its logging instead of its state store. Flags are short
(probe every 0.1 s) so that link transitions take a fraction of a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from edgeagent.kube.client import KubeClient, Timeouts
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

JSON = dict[str, Any]
NODE = "edge-1"
NAMESPACE = "default"
FAST_FLAGS = ("--request-timeout", "1", "--upgrade-timeout", "0.8", "--probe-interval", "0.1",
              "--probe-timeout", "0.3", "--failures-to-disconnect", "1", "--successes-to-connect", "1",
              "--log-format", "json")
TERMINAL = {"succeeded", "failed", "cancelled", "obsolete"}


class AgentProc:
    """One agent process; `prefix` runs it under a wrapper (e.g. `unshare` for a private mount namespace)."""

    def __init__(self, args: Sequence[str], prefix: Sequence[str] = ()) -> None:
        self.args = list(args)
        self.prefix = list(prefix)
        self.proc: asyncio.subprocess.Process | None = None
        self.logs: list[JSON] = []
        self.raw: list[str] = []
        self._reader: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> AgentProc:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("EDGEAGENT_", "NOTIFY_", "WATCHDOG_")) and k not in ("KUBECONFIG", "NODE_NAME")}
        self.logs, self.raw, self.port = [], [], 0
        self.proc = await asyncio.create_subprocess_exec(
            *self.prefix, sys.executable, "-m", "edgeagent.cli", "run", *self.args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env=env)
        self._reader = asyncio.create_task(self._read())
        listening = await eventually(lambda: self.logged("agent_listening") or not self.alive, timeout=30,
                                     what="the agent to listen")
        assert isinstance(listening, dict), f"agent exited early: {self.raw[-20:]}"
        self.port = int(listening["port"])
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for line in self.proc.stderr:
            text = line.decode(errors="replace").rstrip("\n")
            self.raw.append(text)
            with contextlib.suppress(ValueError):
                entry = json.loads(text)
                if isinstance(entry, dict):
                    self.logs.append(entry)

    def logged(self, event: str) -> JSON | None:
        return next((e for e in self.logs if e.get("event") == event), None)

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a power cut."""
        if self.proc is None:
            return
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        await self._finish()

    async def terminate(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await self._finish()

    async def _finish(self) -> int:
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), 20)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, 5)
        return code

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")


AgentSpawner = Callable[..., Awaitable[AgentProc]]


def agent_args(kubeconfig: Path, state_dir: Path, *extra: str) -> list[str]:
    return ["--node-name", NODE, "--kubeconfig", str(kubeconfig), "--port", "0", "--state-dir", str(state_dir),
            *FAST_FLAGS, *extra]


@pytest.fixture
async def spawn_agent() -> AsyncIterator[AgentSpawner]:
    """`await spawn_agent(kubeconfig, state_dir, prefix=...)`: a listening agent process, killed after the test."""
    started: list[AgentProc] = []

    async def spawn(kubeconfig: Path, state_dir: Path, *extra: str, prefix: Sequence[str] = ()) -> AgentProc:
        agent = AgentProc(agent_args(kubeconfig, state_dir, *extra), prefix)
        started.append(agent)
        return await agent.start()

    try:
        yield spawn
    finally:
        for agent in started:
            await agent.kill()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


@pytest.fixture
async def admin(sim: SimCluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=10))
    try:
        yield client
    finally:
        await client.close()


# ---------------------------------------------------------------------- talking to an agent


async def get_json(http: aiohttp.ClientSession, agent: AgentProc, path: str) -> Any:
    async with http.get(agent.url + path, headers={"Accept": "application/json"}) as resp:
        assert resp.status == 200, f"GET {path}: {resp.status} {await resp.text()}"
        return await resp.json()


async def readyz(http: aiohttp.ClientSession, agent: AgentProc) -> JSON:
    body: JSON = await get_json(http, agent, "/v1/readyz")
    return body


async def wait_link(http: aiohttp.ClientSession, agent: AgentProc, connected: bool, timeout: float = 15) -> None:
    async def probe() -> bool:
        return bool((await readyz(http, agent))["link"]["connected"] == connected)

    await eventually(probe, timeout=timeout, what=f"agent link connected={connected}")


async def upgrade(http: aiohttp.ClientSession, agent: AgentProc, name: str) -> tuple[int, JSON]:
    path = f"/openyurt.io/v1/namespaces/{NAMESPACE}/pods/{name}/upgrade"
    async with http.post(agent.url + path, headers={"Accept": "application/json"}) as resp:
        return resp.status, await resp.json()


async def requests(http: aiohttp.ClientSession, agent: AgentProc) -> list[JSON]:
    body = await get_json(http, agent, "/openyurt.io/v1/upgrades")
    return list(body["items"])


async def cached_pods(http: aiohttp.ClientSession, agent: AgentProc) -> list[JSON]:
    body = await get_json(http, agent, "/pods")
    return list(body["items"])


# ---------------------------------------------------------------------- the cloud side


def fingerprint(pods: list[JSON]) -> dict[str, str]:
    """uid → resourceVersion: two pod lists are the same state exactly when these are equal."""
    return {p["metadata"]["uid"]: p["metadata"]["resourceVersion"] for p in pods}


async def node_pods(admin: KubeClient, node: str = NODE) -> list[JSON]:
    listing = await admin.get("/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"})
    return list(listing["items"])


async def cache_matches_cloud(http: aiohttp.ClientSession, agent: AgentProc, admin: KubeClient) -> bool:
    return fingerprint(await cached_pods(http, agent)) == fingerprint(await node_pods(admin))


def daemonset(name: str) -> JSON:
    """An OnDelete DaemonSet: a deleted pod is replaced by one with a new name and UID, nothing else moves."""
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"terminationGracePeriodSeconds": 1,
                                  "containers": [{"name": "app", "image": "registry.local/app:1"}]}},
        },
    }


def orphan_pod(name: str) -> JSON:
    """A pod owned by a DaemonSet that does not exist: upgradeable, and nobody recreates it."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gone",
                                          "uid": "gone-uid", "controller": True}]},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "registry.local/app:1"}]},
    }


def live(pods: list[JSON]) -> list[JSON]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


async def mark_need_upgrade(admin: KubeClient, pod: JSON) -> None:
    """What the OTA controller does: PodNeedUpgrade True, so the agent may upgrade the pod."""
    meta = pod["metadata"]
    await admin.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                      {"status": {"conditions": [{"type": "PodNeedUpgrade", "status": "True",
                                                  "message": "controllerrevision: next"}]}})


def needs_upgrade(pod: JSON) -> bool:
    return any(c.get("type") == "PodNeedUpgrade" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])
