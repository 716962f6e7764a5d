"""The whole agent after a 410 (served PodList equals the cloud), on a corrupt database, and an informer
whose watch is refused with HTTP 410 on connect (not the in-stream ERROR event the sim sends)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from edgeagent.kube.client import KubeClient, Timeouts
from edgeagent.kube.informer import Informer
from tests.integration.agent_api.conftest import write_kubeconfig
from tests.integration.agent_runtime.conftest import NODE, OTHER, Admin, AgentFactory, get_pods
from tests.support.hook_proxy import HookProxy, is_watch
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster


def versions(podlist: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """namespace/name -> (uid, resourceVersion): equal only if every pod is the same version of the same pod."""
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}":
            (p["metadata"]["uid"], p["metadata"]["resourceVersion"]) for p in podlist["items"]}


async def cloud_versions(admin: Admin) -> dict[str, tuple[str, str]]:
    return versions(await admin.client.get("/api/v1/pods", query={"fieldSelector": f"spec.nodeName={NODE}"}))


async def test_after_410_get_pods_equals_the_clouds_truth(
        sim: SimCluster, admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession) -> None:
    for name in ("keep", "change", "remove"):
        await admin.create(name)
    agent = await start_agent()

    async def served_is_truth() -> bool:
        return versions(await get_pods(http, agent)) == await cloud_versions(admin)

    await eventually(served_is_truth, what="GET /pods equal to the cloud")
    await sim.disconnect(NODE, "refuse")
    await eventually(lambda: agent.agent.link is not None and not agent.agent.link.connected, what="link down")
    await admin.delete_now("remove")
    await admin.label("change", version="2")
    await admin.create("new")
    await admin.create("elsewhere", OTHER)
    sim.store.compact()  # the agent's resourceVersion is gone: its next watch gets 410 and must relist
    await sim.connect(NODE)

    await eventually(served_is_truth, what="GET /pods equal to the cloud after the relist")
    assert set(versions(await get_pods(http, agent))) == {"default/keep", "default/change", "default/new"}
    async with http.get(agent.url + "/metrics") as response:
        assert "edgeagent_watch_relists_total 2.0" in await response.text()


async def test_corrupt_database_is_moved_aside_and_the_agent_starts(
        admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "edgeagent.db").write_bytes(b"not a database, a torn write from a power cut " * 100)
    await admin.create("p")
    agent = await start_agent(state_dir=state_dir)

    async def served_is_truth() -> bool:
        return versions(await get_pods(http, agent)) == await cloud_versions(admin)

    await eventually(served_is_truth, what="the fresh agent serving the cloud's pods")
    aside = [f for f in state_dir.iterdir() if f.name.startswith("edgeagent.db.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"not a database")
    async with http.get(agent.url + "/v1/readyz", headers={"Accept": "application/json"}) as response:
        assert (await response.json())["state"]["available"] is True


async def test_watch_refused_with_http_410_relists(sim: SimCluster, admin: Admin, tmp_path: Path) -> None:
    await admin.create("before")
    proxy = HookProxy(sim.node_url(NODE))
    await proxy.start()
    client = await KubeClient.connect(write_kubeconfig(tmp_path / "proxy.kubeconfig", proxy.url),
                                      Timeouts(connect=1, request=2))
    informer = Informer(client, "/api/v1/pods", field_selector=f"spec.nodeName={NODE}", idle_timeout=2.0,
                        backoff_initial=0.05, backoff_max=0.2)
    task = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: "default/before" in informer.items, what="the first list")
        gone = proxy.answer(is_watch, 410, "Expired", "too old resource version: 1 (2)", times=1)
        await eventually(lambda: gone.hits == 1, what="a watch refused with 410")
        await admin.create("after")
        await eventually(lambda: informer.relists >= 2 and "default/after" in informer.items,
                         what="a relist after the 410")
        assert informer.healthy
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()
        await proxy.stop()
