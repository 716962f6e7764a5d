"""Helpers for the verified-outcomes tests: the sim's image registry (a missing or crashing new version, as
`POST /sim/v1/images` makes it), and following upgrade requests through the agent's API.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from edgeagent.agent.app import Agent
from edgeagent.config import AgentConfig
from edgeagent.kube.client import KubeClient
from tests.integration.agent_api.conftest import FAST_AGENT
from tests.support.inprocess_agent import start_in_process
from tests.support.waiting import eventually

JSON = dict[str, Any]
FINAL = ("succeeded", "failed", "cancelled", "obsolete")


NEW_IMAGE = "registry.local/app:2"  # the version make_world's DaemonSet moves to


async def set_image(admin: KubeClient, image: str = NEW_IMAGE, **spec: Any) -> None:
    """Tell the sim's registry how `image` behaves: `missing=True` (ErrImagePull, then ImagePullBackOff),
    `crash=True` (CrashLoopBackOff), `pullSeconds=N`; over the sim's real HTTP API."""
    await admin.request("POST", "/sim/v1/images", body={"image": image, **spec})


def waiting_reason(pod: JSON | None) -> str | None:
    """The first container's waiting reason in this copy of the pod, if it waits."""
    if pod is None:
        return None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        reason = ((status.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return str(reason)
    return None


async def request_entry(http: aiohttp.ClientSession, agent: Agent, request_id: str) -> JSON:
    async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}") as resp:
        assert resp.status == 200, await resp.text()
        body: JSON = await resp.json()
        return body


async def final_entry(http: aiohttp.ClientSession, agent: Agent, request_id: str, *, timeout: float = 20) -> JSON:
    async def probe() -> JSON | None:
        entry = await request_entry(http, agent, request_id)
        return entry if entry["state"] in FINAL else None

    return await eventually(probe, timeout=timeout, what=f"request {request_id} final")


async def upgrade_json(http: aiohttp.ClientSession, agent: Agent, pod: JSON) -> tuple[int, JSON]:
    url = f"{agent.url}/openyurt.io/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/upgrade"
    async with http.post(url, headers={"Accept": "application/json"}) as resp:
        body: JSON = await resp.json()
        return resp.status, body


def cached(agent: Agent, pod: JSON) -> JSON | None:
    """The agent's cached copy of this pod (by name and uid)."""
    assert agent.cache is not None
    found = agent.cache.get(pod["metadata"]["namespace"], pod["metadata"]["name"])
    return found if found is not None and found["metadata"]["uid"] == pod["metadata"]["uid"] else None


@contextlib.asynccontextmanager
async def running_agent(kubeconfig: Path, state_dir: Path, **fields: Any) -> AsyncIterator[Agent]:
    """An in-process agent on port 0, stopped cleanly (SIGTERM path) when the block ends: for restarts."""
    cfg = AgentConfig(node_name=fields.pop("node_name", "edge-1"), kubeconfig=kubeconfig, bind="127.0.0.1", port=0,
                      state_dir=state_dir, **{**FAST_AGENT, **fields})
    handle = await start_in_process(Agent(cfg))
    try:
        yield handle.agent
    finally:
        await handle.stop(timeout=15)
