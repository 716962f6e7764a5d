"""`edgeagent_upgrades_total{outcome}` in one label style, and image pulls counted apart (issue 22 item 11).

The outcome label mixed `Started`, `NotFound`, `queued_verifying` and `imagepull_NotFound`, and counted image
pre-pull requests as upgrades. Now every value is snake_case and `POST …/imagepull` has its own counter.
"""

from __future__ import annotations

import re

import aiohttp

from edgeagent.agent.app import Agent
from tests.integration.agent_api.conftest import NODE, AgentFactory, World, orphan_ds_pod, wait_cached, wait_connected
from tests.support.waiting import eventually


def samples(text: str, metric: str) -> dict[str, float]:
    """outcome label -> value of `metric`'s samples in a Prometheus text exposition."""
    found: dict[str, float] = {}
    for match in re.finditer(rf'^{metric}{{outcome="([^"]*)"}} (\S+)$', text, re.MULTILINE):
        found[match.group(1)] = float(match.group(2))
    return found


async def metrics(http: aiohttp.ClientSession, agent: Agent) -> str:
    async with http.get(agent.url + "/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def post(http: aiohttp.ClientSession, agent: Agent, path: str) -> int:
    async with http.post(agent.url + path, headers={"Accept": "application/json"}) as resp:
        await resp.read()
        return resp.status


async def test_upgrade_outcomes_are_snake_case_and_image_pulls_are_counted_apart(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=2)
    await wait_connected(agent)
    pod = await world.pod()
    await wait_cached(agent, pod)
    name = pod["metadata"]["name"]
    base = "/openyurt.io/v1/namespaces/default/pods"

    assert await post(http, agent, f"{base}/ghost/upgrade") == 404
    assert await post(http, agent, f"{base}/{name}/imagepull") == 200
    assert await post(http, agent, f"{base}/ghost/imagepull") == 404
    # A queued request the drainer applies: held, queued with ?when=open, then released. (Another pod: the
    # image pull above made this one's PodImageReady False, which refuses upgrades until the pull is done.)
    other = await orphan_ds_pod(world.admin, "other")
    await wait_cached(agent, other)
    async with http.post(f"{agent.url}/v1/hold", json={}) as resp:
        assert resp.status == 200
    async with http.post(f"{agent.url}{base}/other/upgrade?when=open", headers={"Accept": "application/json"}) as resp:
        queued = await resp.json()
        assert resp.status == 202, queued
    async with http.delete(f"{agent.url}/v1/hold") as resp:
        assert resp.status == 200

    text = await eventually(lambda: _with(http, agent, "queued_verifying"), what="the drained outcome counted")
    upgrades = samples(text, "edgeagent_upgrades_total")
    assert upgrades == {"not_found": 1.0, "queued": 1.0, "queued_verifying": 1.0}, upgrades
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", label) for label in upgrades)
    assert samples(text, "edgeagent_image_pulls_total") == {"requested": 1.0, "not_found": 1.0}


async def _with(http: aiohttp.ClientSession, agent: Agent, outcome: str) -> str | None:
    text = await metrics(http, agent)
    return text if outcome in samples(text, "edgeagent_upgrades_total") else None
