"""Agents started in-process on port 0, against the simulated cluster or an unreachable API server.

An agent whose kubeconfig points at a closed loopback port is a node that boots offline: the link
monitor never connects, so every upgrade takes the queued path, served from the state dir's snapshot.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from edgeagent.agent.app import Agent
from edgeagent.agent.policy.site import Clock
from edgeagent.agent.state.store import StateStore
from edgeagent.config import AgentConfig
from edgeagent.kube.client import KubeClient, Timeouts
from tests.support.faulty_proxy import FaultyProxy
from tests.support.hook_proxy import HookProxy
from tests.support.inprocess_agent import RunningAgent, start_in_process
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

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


# Bound, never listening: connections are refused, and no server started later in this process (an agent on
# port 0) can be handed the same port, which made "offline" agents talk to another test's agent.
_HELD_PORTS: list[socket.socket] = []


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _HELD_PORTS.append(sock)
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
    running: list[RunningAgent] = []

    async def start(*, kubeconfig: Path, node_name: str = NODE, clock: Clock | None = None, **fields: Any) -> Agent:
        values = {**FAST_AGENT, "state_dir": tmp_path / f"state-{len(running)}", **fields}
        cfg = AgentConfig(node_name=node_name, kubeconfig=kubeconfig, bind="127.0.0.1", port=0, **values)
        handle = await start_in_process(Agent(cfg, clock=clock))
        running.append(handle)
        return handle.agent

    try:
        yield start
    finally:
        # A shutdown that fails (or hangs) fails the test; an agent that failed to start already raised in start().
        for handle in reversed(running):
            if not handle.task.done():
                await handle.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def wait_connected(agent: Agent, connected: bool = True) -> None:
    await eventually(lambda: agent.link is not None and agent.link.connected == connected, timeout=10,
                     what=f"link connected={connected}")


# ---------------------------------------------------------------------- against the simulated cluster

DS_NAME = "edge-app"


def _daemonset(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": DS_NAME, "namespace": "default",
                     "annotations": {"apps.openyurt.io/update-strategy": "OTA"}},
        "spec": {
            "selector": {"matchLabels": {"app": DS_NAME}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {"metadata": {"labels": {"app": DS_NAME}},
                         "spec": {"containers": [{"name": "app", "image": image}]}},
        },
    }


async def ds_pod_on(admin: KubeClient, node: str) -> dict[str, Any] | None:
    """The DaemonSet's live (not terminating) pod on `node`, from the cloud."""
    listing = await admin.get("/api/v1/namespaces/default/pods",
                              query={"fieldSelector": f"spec.nodeName={node}", "labelSelector": f"app={DS_NAME}"})
    live = [p for p in listing["items"] if not p["metadata"].get("deletionTimestamp")]
    return live[0] if live else None


async def set_condition(admin: KubeClient, pod: dict[str, Any], cond_type: str, status: str, message: str) -> None:
    await admin.patch(
        f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/status",
        {"status": {"conditions": [{"type": cond_type, "status": status, "message": message}]}},
    )


@dataclass
class World:
    """A DaemonSet on every node whose template moved on (OnDelete): each pod has PodNeedUpgrade True."""

    sim: SimCluster
    admin: KubeClient
    new_hash: str
    old_hash: str

    async def pod(self, node: str = NODE) -> dict[str, Any]:
        pod = await ds_pod_on(self.admin, node)
        assert pod is not None, f"no {DS_NAME} pod on {node}"
        return pod

    async def replaced(self, old: dict[str, Any], node: str = NODE) -> dict[str, Any] | None:
        """The new pod on `node` once the old one is gone and the new template's pod exists."""
        pod = await ds_pod_on(self.admin, node)
        if pod is None or pod["metadata"]["uid"] == old["metadata"]["uid"]:
            return None
        return pod if pod["metadata"]["labels"].get("controller-revision-hash") == self.new_hash else None

    def agent_deletes(self) -> list[dict[str, Any]]:
        return [d for d in self.sim.store.deletes if d["resource"] == "pods"]


@contextlib.asynccontextmanager
async def make_world(sim: SimCluster) -> AsyncIterator[World]:
    admin = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=5))
    try:
        await admin.create("/apis/apps/v1/namespaces/default/daemonsets", _daemonset("registry.local/app:1"))

        async def all_running() -> bool:
            pods = [await ds_pod_on(admin, n) for n in sim.node_names]
            return all(p is not None and p["status"].get("phase") == "Running" for p in pods)

        await eventually(all_running, what="DaemonSet pods running on every node")
        old_hash = (await ds_pod_on(admin, NODE) or {})["metadata"]["labels"]["controller-revision-hash"]
        await admin.patch(f"/apis/apps/v1/namespaces/default/daemonsets/{DS_NAME}",
                          {"spec": {"template": {"spec": {"containers": [
                              {"name": "app", "image": "registry.local/app:2"}]}}}})

        async def new_revision() -> str | None:
            revisions = (await admin.get("/apis/apps/v1/namespaces/default/controllerrevisions"))["items"]
            newest = max(revisions, key=lambda r: int(r.get("revision", 0)), default=None)
            found = newest["metadata"]["labels"]["controller-revision-hash"] if newest else None
            return found if found and found != old_hash else None

        new_hash = await eventually(new_revision, what="the DaemonSet's new ControllerRevision")
        for node in sim.node_names:
            pod = await ds_pod_on(admin, node)
            assert pod is not None
            await set_condition(admin, pod, "PodNeedUpgrade", "True", f"controllerrevision: {new_hash}")
        yield World(sim, admin, new_hash, old_hash)
    finally:
        await admin.close()


@pytest.fixture
async def world(sim: SimCluster) -> AsyncIterator[World]:
    async with make_world(sim) as w:
        yield w


@pytest.fixture
async def hook_proxy(world: World) -> AsyncIterator[HookProxy]:
    """A started HookProxy in front of NODE's link (hangs, canned answers, races made deterministic)."""
    hook = HookProxy(world.sim.node_url(NODE))
    await hook.start()
    try:
        yield hook
    finally:
        await hook.stop()


@pytest.fixture
async def proxy(world: World) -> AsyncIterator[FaultyProxy]:
    """A started FaultyProxy in front of NODE's link (point an agent at it with write_kubeconfig)."""
    faulty = FaultyProxy(world.sim.node_url(NODE))
    await faulty.start()
    try:
        yield faulty
    finally:
        await faulty.stop()


async def wait_cached(agent: Agent, pod: dict[str, Any], *, need_upgrade: str | None = "True") -> None:
    """Until the agent's cache holds this pod (by UID), with PodNeedUpgrade in the given state."""
    ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]

    def probe() -> bool:
        cached = agent.cache.get(ns, name) if agent.cache is not None else None
        if cached is None or cached["metadata"]["uid"] != uid:
            return False
        if need_upgrade is None:
            return True
        conds = {c["type"]: c.get("status") for c in cached.get("status", {}).get("conditions", [])}
        return conds.get("PodNeedUpgrade") == need_upgrade

    await eventually(probe, what=f"pod {ns}/{name} in the agent's cache")


async def orphan_ds_pod(admin: KubeClient, name: str, *, node: str = NODE) -> dict[str, Any]:
    """A pod owned by a DaemonSet that does not exist: nobody recreates it, so many can share a node."""
    pod = await admin.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                                        "name": "gone", "uid": "gone-uid", "controller": True}]},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "registry.local/app:1"}]},
    })
    await set_condition(admin, pod, "PodNeedUpgrade", "True", "controllerrevision: next")
    return pod
