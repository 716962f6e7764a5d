"""Agents started in-process on port 0, against the simulated cluster or an unreachable API server.

An agent whose kubeconfig points at a closed loopback port is a node that boots offline: the link
monitor never connects, so every upgrade takes the queued path, served from the state dir's snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgeagent.agent.app import Agent
from edgeagent.agent.state import StateStore
from edgeagent.config import AgentConfig
from tests.waiting import eventually

NODE = "edge-1"

# Short intervals so that link transitions and drains happen within a test's budget.
FAST_AGENT: dict[str, Any] = {
    "request_timeout": 1.0,
    "upgrade_timeout": 0.8,
    "probe_interval": 0.1,
    "probe_timeout": 0.3,
    "failures_to_disconnect": 1,
    "successes_to_connect": 1,
}

AgentFactory = Callable[..., Awaitable[Agent]]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return path


@pytest.fixture
def offline_kubeconfig(tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "offline.kubeconfig", f"http://127.0.0.1:{closed_port()}")


def ds_pod(name: str, *, namespace: str = "default", node: str = NODE, uid: str | None = None,
           need_upgrade: str | None = "True", version: str = "newhash", image_ready: str | None = None,
           image_version: str | None = None, owner: str = "DaemonSet", terminating: bool = False) -> dict[str, Any]:
    """A DaemonSet pod as the cloud would have it, for snapshots of an offline agent."""
    conditions: list[dict[str, Any]] = [{"type": "Ready", "status": "True"}]
    if need_upgrade is not None:
        conditions.append({"type": "PodNeedUpgrade", "status": need_upgrade,
                           "message": f"controllerrevision: {version}"})
    if image_ready is not None:
        conditions.append({"type": "PodImageReady", "status": image_ready,
                           "message": f"controllerrevision: {image_version or version}"})
    metadata: dict[str, Any] = {
        "name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "resourceVersion": "5",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": "ds", "uid": "ds-uid",
                             "controller": True}],
    }
    if terminating:
        metadata["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": conditions}}


async def seed_snapshot(state_dir: Path, pods: list[dict[str, Any]], rv: str = "5") -> None:
    store = await StateStore.open(state_dir)
    try:
        await store.save_snapshot(pods, rv)
    finally:
        await store.close()


@pytest.fixture
async def agent_factory(tmp_path: Path) -> AsyncIterator[AgentFactory]:
    """`await agent_factory(kubeconfig=..., **AgentConfig fields)`: a running agent; stopped after the test."""
    running: list[tuple[Agent, asyncio.Event, asyncio.Task[None]]] = []

    async def start(*, kubeconfig: Path, node_name: str = NODE, **fields: Any) -> Agent:
        values = {**FAST_AGENT, "state_dir": tmp_path / f"state-{len(running)}", **fields}
        cfg = AgentConfig(node_name=node_name, kubeconfig=kubeconfig, bind="127.0.0.1", port=0, **values)
        agent = Agent(cfg)
        ready, stop = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(agent.run(ready=ready, stop=stop))
        running.append((agent, stop, task))
        ready_wait = asyncio.create_task(ready.wait())
        done, _ = await asyncio.wait({ready_wait, task}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            ready_wait.cancel()
            task.result()  # raises the start-up error
            raise AssertionError("agent stopped before it was ready")
        if ready_wait not in done:
            raise AssertionError("agent not ready within 10 s")
        return agent

    try:
        yield start
    finally:
        for agent, stop, task in reversed(running):
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
            del agent


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def wait_connected(agent: Agent, connected: bool = True) -> None:
    await eventually(lambda: agent.link is not None and agent.link.connected == connected, timeout=10,
                     what=f"link connected={connected}")
