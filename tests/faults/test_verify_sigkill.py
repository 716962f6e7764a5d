"""A verifying request survives `kill -9` of a real agent process (issue 12): the next process resumes it with
the stored deadline, judges it from its own cache, and the cloud gets each of its Events exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from edgeagent.kube.client import KubeClient
from tests.faults.conftest import NODE, AgentSpawner, cached_pods, get_json, requests, upgrade, wait_link
from tests.integration.agent_api.conftest import make_world
from tests.support.agent_outcomes import set_image
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

JSON = dict[str, Any]


async def _edgeagent_events(admin: KubeClient, uid: str) -> list[JSON]:
    items = (await admin.get("/api/v1/namespaces/default/events"))["items"]
    return [e for e in items if e["involvedObject"].get("uid") == uid and e["source"].get("component") == "edgeagent"]


async def test_verifying_request_survives_sigkill_and_ends_succeeded_with_each_event_once(
        sim: SimCluster, spawn_agent: AgentSpawner, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    async with make_world(sim) as world:
        await set_image(world.admin, missing=True)  # the new version cannot be pulled yet
        state_dir = tmp_path / "state"
        agent = await spawn_agent(sim.node_kubeconfig(NODE), state_dir, "--ready-timeout", "120")
        await wait_link(http, agent, True)
        old = await world.pod()
        name = old["metadata"]["name"]

        async def cached_needing_upgrade() -> bool:
            return any(p["metadata"]["name"] == name and any(
                c["type"] == "PodNeedUpgrade" and c["status"] == "True" for c in p["status"].get("conditions", []))
                for p in await cached_pods(http, agent))

        await eventually(cached_needing_upgrade, what="the pod cached with PodNeedUpgrade True")
        status, body = await upgrade(http, agent, name)
        assert status == 200, body
        before = await get_json(http, agent, f"/openyurt.io/v1/upgrades/{body['id']}")
        assert before["state"] == "verifying"
        await eventually(lambda: _edgeagent_events(world.admin, old["metadata"]["uid"]), what="UpgradeStarted sent")
        await agent.kill()  # SIGKILL: no shutdown code runs

        await set_image(world.admin, missing=False)  # the registry has it now; the kubelet's retry pulls it

        async def ready_in_cloud() -> bool:
            new = await world.replaced(old)
            return new is not None and any(c["type"] == "Ready" and c["status"] == "True"
                                           for c in new["status"].get("conditions", []))

        await eventually(ready_in_cloud, timeout=30, what="the replacement Ready while no agent runs")
        again = await spawn_agent(sim.node_kubeconfig(NODE), state_dir, "--ready-timeout", "120")

        async def final() -> JSON | None:
            items = [r for r in await requests(http, again) if r["id"] == body["id"]]
            return items[0] if items and items[0]["state"] not in ("verifying",) else None

        done = await eventually(final, timeout=30, what="the request judged by the restarted agent")
        assert done["state"] == "succeeded", done
        assert done["deadline"] == before["deadline"]

        async def both_events() -> list[JSON] | None:
            events = await _edgeagent_events(world.admin, old["metadata"]["uid"])
            return events if len(events) >= 2 else None

        events = await eventually(both_events, what="UpgradeSucceeded sent by the new process")
        assert sorted(e["reason"] for e in events) == ["UpgradeStarted", "UpgradeSucceeded"]
        assert all(e["count"] == 1 for e in events)
