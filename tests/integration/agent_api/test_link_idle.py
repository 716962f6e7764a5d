"""Issue 15: an idle link is not probed; a queued request brings probing (and the drain) back.

Traffic is counted at a TCP proxy between the agent and its node's link, which is what a metered
edge link would carry; the proxy also sees each request line, so probes (Lease reads) are told
apart from the watch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from bench.counting_proxy import CountingProxy
from edgeagent.agent.app import Agent
from edgeagent.kube.objects import get_condition
from tests.integration.agent_api.conftest import (
    FAST_AGENT,
    NODE,
    AgentFactory,
    World,
    wait_cached,
    wait_connected,
    write_kubeconfig,
)
from tests.support.faulty_proxy import FaultyProxy
from tests.support.waiting import eventually

LEASE = "/leases/"


@pytest.fixture
async def counted(world: World) -> AsyncIterator[CountingProxy]:
    link = urlsplit(world.sim.node_url(NODE))
    proxy = CountingProxy(link.hostname or "127.0.0.1", int(link.port or 0))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


async def _entry(http: aiohttp.ClientSession, agent: Agent, request_id: str, state: str) -> dict[str, Any] | None:
    async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}") as resp:
        entry: dict[str, Any] = await resp.json()
    return entry if entry["state"] == state else None


def _published(agent: Agent, pod: dict[str, Any]) -> bool:
    """The agent's own first write (UpgradeHeld, agent/policy/held.py) is in its cache: nothing left to send.
    A cut while that PATCH is in flight times it out, and a timed-out call makes the monitor probe."""
    cached = agent.cache.get("default", pod["metadata"]["name"]) if agent.cache is not None else None
    return cached is not None and get_condition(cached, "UpgradeHeld") is not None


async def _idle(agent: Agent) -> bool:
    return agent.link is not None and agent.link.connected and not agent.link.probing


async def test_blackholed_idle_link_is_not_probed_until_a_request_is_queued(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession, counted: CountingProxy,
        tmp_path: Path) -> None:
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "counted.kubeconfig", counted.url))
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    await eventually(lambda: _published(agent, old), what="UpgradeHeld published and seen")
    await eventually(lambda: _idle(agent), what="probes paused: watch healthy, nothing queued")
    assert agent.link is not None

    await world.sim.disconnect(NODE, "blackhole")
    counted.reset()
    # Absence can only be shown by waiting: 30 probe intervals, far below the watch's 60 s idle deadline.
    await asyncio.sleep(30 * FAST_AGENT["probe_interval"])
    assert counted.counts.matching(LEASE) == [], "an idle link was probed"
    assert agent.link.connected, "nothing waits, so nothing has noticed the cut yet"

    async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/default/pods/{old['metadata']['name']}/upgrade",
                         headers={"Accept": "application/json"}) as resp:
        assert resp.status == 202
        body = await resp.json()
    # The upgrade's own GET timed out; with an entry queued the monitor probes again and notices the cut.
    await eventually(lambda: counted.counts.matching(LEASE), what="probes while something is queued")
    await wait_connected(agent, False)

    await world.sim.connect(NODE)
    await eventually(lambda: _entry(http, agent, body["id"], "succeeded"), what="the queued request drained")
    # Nothing waits any more and the watch is back: the probes stop again.
    await eventually(lambda: _idle(agent), what="probes paused again after the drain")
    counted.reset()
    await asyncio.sleep(10 * FAST_AGENT["probe_interval"])
    assert counted.counts.matching(LEASE) == []


async def test_a_failing_watch_is_probed_with_an_empty_queue(
        world: World, agent_factory: AgentFactory, counted: CountingProxy, tmp_path: Path) -> None:
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "counted.kubeconfig", counted.url))
    await eventually(lambda: _idle(agent), what="probes paused")
    counted.reset()
    await world.sim.disconnect(NODE, "refuse")  # resets the watch at once
    await wait_connected(agent, False)
    assert counted.counts.matching(LEASE), "the cut was noticed without a probe"
    await world.sim.connect(NODE)
    await eventually(lambda: _idle(agent), what="probes paused once the watch is healthy again")


async def test_an_entry_waiting_on_a_busy_cloud_keeps_the_link_probed(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession, proxy: FaultyProxy,
        tmp_path: Path) -> None:
    # The cloud answers the DELETE 503: the request is queued while the link and the watch are fine, and no
    # failure is reported to the monitor. Only the queue says that something waits for the link.
    proxy.fail("DELETE", r"/pods/", 503, "the API server is overloaded")
    upstream = urlsplit(proxy.url)
    counted = CountingProxy(upstream.hostname or "127.0.0.1", int(upstream.port or 0))
    await counted.start()
    try:
        agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "counted.kubeconfig", counted.url))
        old = await world.pod()
        await wait_cached(agent, old)
        await eventually(lambda: _idle(agent), what="probes paused")
        async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/default/pods/{old['metadata']['name']}"
                             "/upgrade", headers={"Accept": "application/json"}) as resp:
            assert resp.status == 202
            body = await resp.json()
        counted.reset()
        await eventually(lambda: counted.counts.matching(LEASE), what="probes while an entry waits")
        assert agent.link is not None and agent.link.connected
        await world.sim.disconnect(NODE, "blackhole")
        await wait_connected(agent, False)
        proxy.clear()
        await world.sim.connect(NODE)
        await eventually(lambda: _entry(http, agent, body["id"], "succeeded"), what="the queued request drained")
    finally:
        await counted.close()


async def test_after_a_partition_the_watch_resumes_instead_of_relisting(
        world: World, agent_factory: AgentFactory, counted: CountingProxy, tmp_path: Path) -> None:
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "counted.kubeconfig", counted.url))
    old = await world.pod()
    await wait_cached(agent, old)

    await eventually(lambda: _published(agent, old), what="UpgradeHeld published and seen")
    await eventually(lambda: _idle(agent), what="probes paused")
    assert agent.informer is not None
    relists = agent.informer.relists
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    name = old["metadata"]["name"]
    await world.admin.patch(f"/api/v1/namespaces/default/pods/{name}", {"metadata": {"labels": {"moved": "on"}}},
                            "application/merge-patch+json")
    counted.reset()
    await world.sim.connect(NODE)

    def labelled() -> bool:
        cached = agent.cache.get("default", name) if agent.cache is not None else None
        return cached is not None and cached["metadata"].get("labels", {}).get("moved") == "on"

    await eventually(labelled, what="the change made during the partition in the cache")
    assert agent.informer.relists == relists
    lists = [r for r in counted.counts.requests if r.startswith("GET /api/v1/pods") and "watch=" not in r]
    assert not lists, counted.counts.requests


async def test_the_agent_cache_stores_repeated_strings_once(
        world: World, agent_factory: AgentFactory, tmp_path: Path) -> None:
    """Issue 15 (agent RSS at 1,000 pods): equal pods, with namespaces, label keys and the like shared."""
    await world.admin.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "second", "labels": {"app": "x"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox:1"}]}})
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await eventually(lambda: agent.cache is not None and len(agent.cache.pods()) == 2, what="both pods cached")
    assert agent.cache is not None
    first, second = agent.cache.pods()
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]
    assert first["spec"]["nodeName"] is second["spec"]["nodeName"]
