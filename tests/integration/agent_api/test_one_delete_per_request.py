"""One upgrade, one DELETE: the agent never deletes the same pod twice (found by the soak, issue 23).

Ways it used to: the drainer took a `running` entry that an online upgrade of the same process was still
applying for a crash leftover and applied it too (while the DELETE was slow to answer); two upgrade calls
for the same pod at once (an operator's and the auto-upgrade's) both went on to delete; the drainer deleted
a queued pod that was already being deleted; and a DELETE carried only the UID, so a pod that changed
between the agent's checks and its DELETE (PodNeedUpgrade turned False) was deleted all the same. Slowness
comes from the sim's fault switch (`POST /sim/v1/faults`), over real HTTP.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from edgeagent import __version__
from tests.integration.agent_api.conftest import NODE, AgentFactory, World, wait_cached, wait_connected
from tests.support.waiting import eventually

AGENT_UA = f"edgeagent-agent/{__version__} ({NODE})"
PODS = "/api/v1/namespaces/default/pods"


def deletes_of(world: World, name: str) -> list[dict[str, Any]]:
    return [e for e in world.sim.audit.find("DELETE", f"{PODS}/{name}") if e["userAgent"] == AGENT_UA]


async def slow_deletes(http: aiohttp.ClientSession, world: World, seconds: float) -> None:
    async with http.post(f"{world.sim.url}/sim/v1/faults", json={
            "latencySeconds": seconds, "durationSeconds": 60, "verbs": ["DELETE"], "userAgent": AGENT_UA}) as resp:
        assert resp.status == 201, await resp.text()


async def upgrade(http: aiohttp.ClientSession, url: str, name: str) -> tuple[int, dict[str, Any]]:
    async with http.post(f"{url}/openyurt.io/v1/namespaces/default/pods/{name}/upgrade",
                         headers={"Accept": "application/json"}) as resp:
        return resp.status, await resp.json()


async def requests_of(http: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    async with http.get(f"{url}/openyurt.io/v1/upgrades") as resp:
        body = await resp.json()
    return list(body["items"] if isinstance(body, dict) else body)


async def test_the_drainer_leaves_alone_a_request_the_online_call_is_still_applying(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    # The online DELETE takes 2.5 s to be answered: longer than the drainer's poll (1 s), within the deadline.
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), upgrade_timeout=6.0, request_timeout=6.0)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    await slow_deletes(http, world, 2.5)
    status, body = await upgrade(http, agent.url, old["metadata"]["name"])
    assert status == 200, body
    await eventually(lambda: world.replaced(old), timeout=10, what="the replacement")
    assert len(deletes_of(world, old["metadata"]["name"])) == 1, deletes_of(world, old["metadata"]["name"])
    states = [r["state"] for r in await requests_of(http, agent.url)]
    assert len(states) == 1 and states[0] in ("verifying", "succeeded"), states


async def test_two_upgrade_calls_for_one_pod_at_once_delete_it_once(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), upgrade_timeout=6.0, request_timeout=6.0)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    await slow_deletes(http, world, 1.0)
    name = old["metadata"]["name"]
    # Both calls read the pod at the same moment, so both find no request yet and both record one.
    async with http.post(f"{world.sim.url}/sim/v1/faults", json={
            "latencySeconds": 0.5, "durationSeconds": 60, "verbs": ["GET"], "path": f"{PODS}/{name}",
            "userAgent": AGENT_UA}) as resp:
        assert resp.status == 201
    (first, a), (second, b) = await asyncio.gather(upgrade(http, agent.url, name), upgrade(http, agent.url, name))
    assert sorted((first, second)) == [200, 202], (a, b)
    assert a.get("id") == b.get("id")  # the second answer names the request being applied
    await eventually(lambda: world.replaced(old), timeout=10, what="the replacement")
    assert len(deletes_of(world, name)) == 1, deletes_of(world, name)


async def test_a_queued_pod_already_being_deleted_is_not_deleted_again(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    name = old["metadata"]["name"]
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    status, body = await upgrade(http, agent.url, name)
    assert status == 202, body
    # Meanwhile someone else deletes it; a finalizer keeps it terminating (with its UID) for a while.
    await world.admin.patch(f"{PODS}/{name}", {"metadata": {"finalizers": ["soak.test/keep"]}})
    await world.admin.delete(f"{PODS}/{name}")
    await world.sim.connect(NODE)

    async def ended() -> str | None:
        found = [r for r in await requests_of(http, agent.url) if r["id"] == body["id"]]
        return found[0]["state"] if found and found[0]["state"] not in ("queued", "running") else None

    assert await eventually(ended, timeout=15, what="the queued request to end") == "obsolete"
    assert deletes_of(world, name) == []
    await world.admin.patch(f"{PODS}/{name}", {"metadata": {"finalizers": None}})


def effective_deletes(world: World, uid: str) -> list[dict[str, Any]]:
    """The agent's DELETEs of this pod that took effect (the sim's kubelet finishing a deletion is not one)."""
    return [e["delete"] for e in world.sim.audit.find("DELETE", PODS + "/")
            if e["userAgent"] == AGENT_UA and (e.get("delete") or {}).get("uid") == uid
            and e["delete"]["outcome"] in ("graceful", "deleted")]


async def test_a_pod_that_stops_needing_an_upgrade_before_the_delete_arrives_is_kept(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), upgrade_timeout=6.0, request_timeout=6.0)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    name = old["metadata"]["name"]
    await slow_deletes(http, world, 1.5)
    answer = asyncio.create_task(upgrade(http, agent.url, name))
    await eventually(lambda: deletes_of(world, name), timeout=10, what="the agent's DELETE on its way")
    # The controller moves the pod out of the rollout (a rollback, a wave not reached) in the gap.
    await world.admin.patch(f"{PODS}/{name}/status", {"status": {"conditions": [{
        "type": "PodNeedUpgrade", "status": "False", "reason": "WaitingForWave", "message": "controllerrevision: x"}]}})
    status, body = await answer
    assert status != 200 and "does not need an upgrade" in body["message"], body
    assert effective_deletes(world, old["metadata"]["uid"]) == []
