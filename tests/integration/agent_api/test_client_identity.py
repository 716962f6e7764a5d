"""Issue 14.4 and 14.6: what the API server's audit log sees of the agent.

Every DELETE carries a typed `DeleteOptions` (an untyped body is audited as `requestObject: null`, so nobody
could check afterwards which UID precondition a delete carried), and the agent's calls say who made them:
`edgeagent-agent/<version> (<node>)`, so API server logs tell our components and nodes apart.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from edgeagent import __version__
from tests.integration.agent_api.conftest import NODE, AgentFactory, World, wait_cached, wait_connected
from tests.support.waiting import eventually

AGENT_UA = f"edgeagent-agent/{__version__} ({NODE})"
DELETE_OPTIONS = {"apiVersion": "v1", "kind": "DeleteOptions"}


def pod_deletes(world: World, name: str) -> list[dict[str, Any]]:
    return world.sim.audit.find("DELETE", f"/api/v1/namespaces/default/pods/{name}")


async def _upgrade(http: aiohttp.ClientSession, url: str, name: str) -> int:
    async with http.post(f"{url}/openyurt.io/v1/namespaces/default/pods/{name}/upgrade") as resp:
        return resp.status


async def test_online_upgrade_delete_is_typed_and_names_the_agent(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    name = old["metadata"]["name"]
    assert await _upgrade(http, agent.url, name) == 200
    [delete] = [d for d in pod_deletes(world, name) if d["userAgent"] == AGENT_UA]
    assert delete["requestObject"] == DELETE_OPTIONS
    # The pods list and watch come from the agent too, under the same name.
    reads = world.sim.audit.find("GET", "/api/v1/pods")
    assert reads and {e["userAgent"] for e in reads} == {AGENT_UA}


async def test_drained_upgrade_delete_is_typed(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    name = old["metadata"]["name"]
    assert await _upgrade(http, agent.url, name) == 202
    await world.sim.connect(NODE)

    def drained() -> list[dict[str, Any]]:
        return [d for d in pod_deletes(world, name) if d["userAgent"] == AGENT_UA]

    [delete] = await eventually(drained, what="the drainer's DELETE")
    assert delete["requestObject"] == DELETE_OPTIONS
