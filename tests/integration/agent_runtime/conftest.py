"""Agents and their parts, run in-process against the simulated cluster through a node's cuttable link."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from edgeagent.agent.app import Agent
from edgeagent.agent.sdnotify import SdNotifier
from edgeagent.config import AgentConfig
from edgeagent.kube.client import KubeClient, Timeouts
from tests.support.inprocess_agent import RunningAgent, start_in_process

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

NODE = "edge-1"
OTHER = "edge-2"
FAST_TIMEOUTS = Timeouts(connect=0.5, request=1.0)

# Short intervals so link transitions happen well within a test's budget.
FAST_AGENT: dict[str, Any] = {
    "request_timeout": 1.0,
    "upgrade_timeout": 0.8,
    "probe_interval": 0.1,
    "probe_timeout": 0.3,
    "failures_to_disconnect": 2,
    "successes_to_connect": 1,
}


def pod(name: str, node: str = NODE, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "t", **labels}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1"}]},
    }


class Admin:
    """Cluster-admin writes over HTTP, as an operator's kubectl would make them."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def create(self, name: str, node: str = NODE, **labels: str) -> dict[str, Any]:
        return await self.client.create("/api/v1/namespaces/default/pods", pod(name, node, **labels))

    async def label(self, name: str, **labels: str) -> dict[str, Any]:
        return await self.client.patch(f"/api/v1/namespaces/default/pods/{name}", {"metadata": {"labels": labels}},
                                       "application/merge-patch+json")

    async def delete_now(self, name: str) -> None:
        await self.client.delete(f"/api/v1/namespaces/default/pods/{name}", {"gracePeriodSeconds": 0})

    async def names_on(self, node: str = NODE) -> set[str]:
        listed = await self.client.get("/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"})
        return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in listed["items"]}


@pytest.fixture
async def admin(sim: SimCluster) -> AsyncIterator[Admin]:
    client = await KubeClient.connect(sim.admin_kubeconfig, FAST_TIMEOUTS)
    try:
        yield Admin(client)
    finally:
        await client.close()


@pytest.fixture
async def node_client(sim: SimCluster) -> AsyncIterator[KubeClient]:
    """A client on NODE's link (what the agent itself uses)."""
    client = await KubeClient.connect(sim.node_kubeconfig(NODE), FAST_TIMEOUTS)
    try:
        yield client
    finally:
        await client.close()


AgentFactory = Callable[..., Awaitable[RunningAgent]]


@pytest.fixture
async def start_agent(sim: SimCluster, tmp_path: Path) -> AsyncIterator[AgentFactory]:
    """`await start_agent(state_dir=..., notifier=..., **AgentConfig fields)`: ready (listening) on port 0."""
    running: list[RunningAgent] = []

    async def start(*, state_dir: Path | None = None, notifier: SdNotifier | None = None,
                    node_name: str = NODE, kubeconfig: Path | None = None, **fields: Any) -> RunningAgent:
        cfg = AgentConfig(node_name=node_name, kubeconfig=kubeconfig or sim.node_kubeconfig(node_name),
                          bind="127.0.0.1",
                          port=0, state_dir=state_dir or tmp_path / "state", **{**FAST_AGENT, **fields})
        handle = await start_in_process(Agent(cfg, notifier=notifier or SdNotifier({})))
        running.append(handle)
        return handle

    try:
        yield start
    finally:
        # A shutdown that fails (or hangs past its 10 s) fails the test: SIGTERM's path is part of the contract.
        for handle in reversed(running):
            if not handle.task.done():
                await handle.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        yield session


async def get_pods(http: aiohttp.ClientSession, agent: RunningAgent) -> dict[str, Any]:
    async with http.get(agent.url + "/pods") as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        body: dict[str, Any] = await response.json()
        return body


def names(podlist: dict[str, Any]) -> set[str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in podlist["items"]}
