"""Upgrade paths the row tests do not reach: a DELETE that times out, a drainer call that times out, a pod
already queued when the cloud answers again, and a pod replaced between the imagepull's read and write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from edgeagent.agent.api.http import HTTP_STATUS
from edgeagent.agent.requests.upgrade import UpgradeService
from edgeagent.agent.state.store import StateStore
from edgeagent.kube.client import KubeClient, Timeouts
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    orphan_ds_pod,
    wait_cached,
    wait_connected,
    write_kubeconfig,
)
from tests.support.hook_proxy import HookProxy, method_on
from tests.support.waiting import eventually


async def post_upgrade(http: aiohttp.ClientSession, url: str, name: str) -> tuple[int, dict[str, Any]]:
    async with http.post(f"{url}/openyurt.io/v1/namespaces/default/pods/{name}/upgrade",
                         headers={"Accept": "application/json"}) as resp:
        return resp.status, await resp.json()


async def finished(http: aiohttp.ClientSession, url: str, request_id: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        async with http.get(f"{url}/openyurt.io/v1/upgrades/{request_id}") as resp:
            entry: dict[str, Any] = await resp.json()
        return entry if entry["state"] in ("succeeded", "failed", "cancelled", "obsolete") else None

    return await eventually(probe, what=f"request {request_id} finished")


async def test_connected_upgrade_whose_delete_times_out_is_queued_then_applied(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        hook_proxy: HookProxy) -> None:
    hung = hook_proxy.hang(method_on("DELETE", "/pods/"), times=1)
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", hook_proxy.url),
                                upgrade_timeout=0.5)
    await wait_connected(agent)
    pod = await world.pod()
    await wait_cached(agent, pod)

    status, body = await post_upgrade(http, agent.url, pod["metadata"]["name"])
    assert status == 202 and body["status"] == "Queued", body
    assert "DELETE" in body["message"] and "timed out" in body["message"]
    assert hung.hits == 1 and world.agent_deletes() == []  # the cloud never saw the first DELETE

    done = await finished(http, agent.url, body["id"])
    assert done["state"] == "succeeded", done
    assert world.agent_deletes()[0]["precondition_uid"] == pod["metadata"]["uid"]
    await eventually(lambda: world.replaced(pod), what="pod replaced after the drain")


async def test_drainer_call_that_times_out_is_retried(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        hook_proxy: HookProxy) -> None:
    pod = await world.pod()
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", hook_proxy.url))
    await wait_connected(agent)
    await wait_cached(agent, pod)
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    status, body = await post_upgrade(http, agent.url, pod["metadata"]["name"])
    assert status == 202, body

    hung = hook_proxy.hang(method_on("DELETE", "/pods/"), times=1)
    await world.sim.connect(NODE)
    done = await finished(http, agent.url, body["id"])
    assert done["state"] == "succeeded" and done["attempts"] == 2, done
    assert hung.hits == 1
    await eventually(lambda: world.replaced(pod), what="pod replaced")


class _Up:
    """A link that is up: the online path, with no drainer racing the test for the queued entry."""

    connected = True

    def report_failure(self, reason: str) -> None:
        raise AssertionError(f"no cloud call may fail here: {reason}")


class _NoCache:
    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


async def test_online_upgrade_of_a_pod_already_queued_answers_the_existing_request(
        tmp_path: Path, world: World) -> None:
    pod = await world.pod()
    state = await StateStore.open(tmp_path / "state")
    client = await KubeClient.connect(world.sim.node_kubeconfig(NODE), Timeouts(connect=1, request=2))
    try:
        queued, _ = await state.enqueue("default", pod["metadata"]["name"], pod["metadata"]["uid"], NODE)
        service = UpgradeService(client=client, cache=_NoCache(), link=_Up(), state=state, node_name=NODE,
                                 upgrade_timeout=2.0, request_timeout=2.0)
        outcome = await service.upgrade("default", pod["metadata"]["name"])
        assert (HTTP_STATUS[outcome.answer], outcome.request_id) == (202, queued.id), outcome
        assert "already queued" in outcome.message
        assert world.agent_deletes() == []
        assert [r.id for r in await state.list_requests()] == [queued.id]
    finally:
        await client.close()
        await state.close()


async def test_imagepull_of_a_pod_replaced_meanwhile_is_409_and_the_new_pod_is_untouched(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        hook_proxy: HookProxy) -> None:
    old = await orphan_ds_pod(world.admin, "swapped")
    path = "/api/v1/namespaces/default/pods/swapped"

    async def replace_pod() -> None:
        # The same name, a new UID: what a DaemonSet controller does between our GET and our PATCH.
        await world.admin.delete(path, {"gracePeriodSeconds": 0})  # unfinalized, grace 0: gone at once
        await orphan_ds_pod(world.admin, "swapped")

    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", hook_proxy.url))
    await wait_connected(agent)
    # The agent's own UpgradeHeld patch of the pod goes first; the hook is for the imagepull's PATCH.
    await eventually(lambda: agent.held is not None and agent.held.patches >= 1, what="UpgradeHeld published")
    hook = hook_proxy.before(method_on("PATCH", "/pods/swapped/status"), replace_pod)
    async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/default/pods/swapped/imagepull",
                         headers={"Accept": "application/json"}) as resp:
        status, body = resp.status, await resp.json()
    assert hook.hits == 1
    assert status == 409 and "replaced meanwhile" in body["message"], body
    new = await world.admin.get(path)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert "PodImageReady" not in {c["type"] for c in new["status"].get("conditions", [])}



async def test_upgrade_of_a_pod_replaced_between_get_and_delete_is_409_and_the_new_pod_survives(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        hook_proxy: HookProxy) -> None:
    """Issue 14 test gap: the online path's UID precondition, exercised in the race it exists for."""
    old = await orphan_ds_pod(world.admin, "raced")
    path = "/api/v1/namespaces/default/pods/raced"

    async def replace_pod() -> None:
        await world.admin.delete(path, {"gracePeriodSeconds": 0})
        await orphan_ds_pod(world.admin, "raced")

    hook = hook_proxy.before(method_on("DELETE", "/pods/raced"), replace_pod)
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", hook_proxy.url))
    await wait_connected(agent)
    async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/default/pods/raced/upgrade",
                         headers={"Accept": "application/json"}) as resp:
        status, body = resp.status, await resp.json()
    assert hook.hits == 1
    assert status == 409 and "replaced meanwhile" in body["message"], body
    new = await world.admin.get(path)
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and not new["metadata"].get("deletionTimestamp")
