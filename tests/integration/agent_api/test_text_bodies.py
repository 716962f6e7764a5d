"""Text bodies end with a newline (so `curl` leaves the prompt on its own line), except the bodies OpenYurt
clients compare byte for byte: `Start updating pod ns/name`, `Image pre-pull requested for pod ns/name`
and the health `OK` stay exactly as YurtHub sends them (docs/contract.md)."""

from __future__ import annotations

import aiohttp

from tests.integration.agent_api.conftest import NODE, AgentFactory, World, wait_cached, wait_connected


async def _text(http: aiohttp.ClientSession, method: str, url: str) -> tuple[int, str]:
    async with http.request(method, url) as resp:
        return resp.status, (await resp.read()).decode()


async def test_text_bodies_end_with_one_newline_and_openyurt_bodies_stay_exact(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    mine, other = await world.pod(), await world.pod("edge-2")
    await wait_cached(agent, mine)
    base = agent.url
    ns, name = mine["metadata"]["namespace"], mine["metadata"]["name"]

    newline_terminated = [
        ("POST", f"/openyurt.io/v1/namespaces/default/pods/{other['metadata']['name']}/upgrade", 403),
        ("POST", "/openyurt.io/v1/namespaces/default/pods/no-such-pod/upgrade", 404),
        ("POST", "/openyurt.io/v1/namespaces/Bad_Name/pods/x/upgrade", 400),
        ("GET", "/openyurt.io/v1/upgrades/does-not-exist", 404),
        ("GET", "/no/such/endpoint", 404),
        ("PUT", "/pods", 405),
    ]
    for method, path, status in newline_terminated:
        got, body = await _text(http, method, base + path)
        assert got == status, (path, got, body)
        assert body.endswith("\n") and body.count("\n") == 1 and body.strip(), (path, body)

    assert await _text(http, "GET", base + "/v1/healthz") == (200, "OK")
    assert await _text(http, "GET", base + "/v1/readyz") == (200, "OK")

    # Queued (202) and cancelled (200) are our own bodies: newline-terminated. Before the pre-pull below: once
    # the agent's cache has seen PodImageReady False (the pre-pull it asks for), an upgrade is refused 403 until
    # the image is ready, so asking first made the 202 depend on whether that watch event had arrived yet.
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    status, queued = await _text(http, "POST", base + f"/openyurt.io/v1/namespaces/{ns}/pods/{name}/upgrade")
    assert status == 202 and queued.endswith("\n") and queued.count("\n") == 1, queued
    async with http.get(base + "/openyurt.io/v1/upgrades") as resp:
        [entry] = (await resp.json())["items"]
    status, cancelled = await _text(http, "DELETE", base + f"/openyurt.io/v1/upgrades/{entry['id']}")
    assert status == 200 and cancelled == f"Upgrade request {entry['id']} for pod {ns}/{name} cancelled\n"

    await world.sim.connect(NODE)
    await wait_connected(agent)
    assert await _text(http, "POST", base + f"/openyurt.io/v1/namespaces/{ns}/pods/{name}/imagepull") == (
        200, f"Image pre-pull requested for pod {ns}/{name}")
