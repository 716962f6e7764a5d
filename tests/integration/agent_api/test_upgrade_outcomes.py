"""Every upgrade outcome docs/api.md lists, against the simulated cluster over real HTTP (one test each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from edgeagent.agent.app import Agent
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    set_condition,
    wait_cached,
    wait_connected,
    write_kubeconfig,
)
from tests.support import openapi
from tests.support.faulty_proxy import FaultyProxy
from tests.support.waiting import eventually

UPGRADE_ROUTE = "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/upgrade"
IMAGEPULL_ROUTE = "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/imagepull"


async def call(http: aiohttp.ClientSession, agent: Agent, pod: dict[str, Any] | tuple[str, str], *,
               action: str = "upgrade", as_json: bool = False) -> tuple[int, Any]:
    """POST the action; the answer is checked against docs/openapi.yaml before it is returned."""
    ns, name = (pod["metadata"]["namespace"], pod["metadata"]["name"]) if isinstance(pod, dict) else pod
    headers = {"Accept": "application/json"} if as_json else {}
    async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/{ns}/pods/{name}/{action}",
                         headers=headers) as resp:
        raw = await resp.read()
        openapi.check_response("POST", UPGRADE_ROUTE if action == "upgrade" else IMAGEPULL_ROUTE, resp.status,
                               resp.content_type, raw)
        return resp.status, (await resp.json()) if as_json else raw.decode()


async def requests(http: aiohttp.ClientSession, agent: Agent) -> list[dict[str, Any]]:
    async with http.get(f"{agent.url}/openyurt.io/v1/upgrades") as resp:
        assert resp.status == 200
        items: list[dict[str, Any]] = (await resp.json())["items"]
        return items


async def connected_agent(world: World, agent_factory: AgentFactory, **fields: Any) -> Agent:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), **fields)
    await wait_connected(agent)
    await wait_cached(agent, await world.pod())
    return agent


# ---------------------------------------------------------------------- 200


async def test_connected_upgrade_deletes_with_uid_precondition_and_pod_is_replaced(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    old = await world.pod()
    status, body = await call(http, agent, old)
    assert (status, body) == (200, f"Start updating pod default/{old['metadata']['name']}")
    # The first delete is the agent's (the kubelet's final removal may follow, with the same precondition).
    delete = world.agent_deletes()[0]
    assert (delete["name"], delete["outcome"]) == (old["metadata"]["name"], "graceful")
    assert delete["precondition_uid"] == old["metadata"]["uid"]
    new = await eventually(lambda: world.replaced(old), what="pod replaced by the DaemonSet controller")
    assert new["spec"]["nodeName"] == NODE
    # Recorded too (issue 12), but never queued: it went straight to the delete.
    [entry] = await requests(http, agent)
    assert entry["origin"] == "online" and entry["state"] in ("verifying", "succeeded") and entry["attempts"] == 0


# ---------------------------------------------------------------------- 202


async def test_disconnected_upgrade_is_queued_and_applied_on_reconnect(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    old = await world.pod()
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)

    status, body = await call(http, agent, old, as_json=True)
    assert status == 202 and body["status"] == "Queued" and body["id"]
    [entry] = await requests(http, agent)
    assert (entry["id"], entry["state"], entry["uid"]) == (body["id"], "queued", old["metadata"]["uid"])
    assert world.agent_deletes() == []

    await world.sim.connect(NODE)
    done = await eventually(lambda: _state_is(http, agent, body["id"], "succeeded"), what="entry succeeded")
    assert done["attempts"] == 1
    delete = world.agent_deletes()[0]  # the agent's; the kubelet's final removal may follow
    assert delete["precondition_uid"] == old["metadata"]["uid"] and delete["outcome"] == "graceful"
    await eventually(lambda: world.replaced(old), what="pod replaced after the drain")


async def test_blackholed_cloud_queues_within_the_upgrade_timeout(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    # The link monitor would take many probes to notice: the upgrade's own GET has to time out.
    agent = await connected_agent(world, agent_factory, failures_to_disconnect=1000, upgrade_timeout=0.5)
    old = await world.pod()
    await world.sim.disconnect(NODE, "blackhole")
    assert agent.link is not None and agent.link.connected
    status, body = await call(http, agent, old, as_json=True)
    assert status == 202 and "timed out" in body["message"]
    assert agent.link.reported_failures >= 1
    [entry] = await requests(http, agent)
    assert entry["state"] in ("queued", "running") and entry["uid"] == old["metadata"]["uid"]


async def test_same_pod_twice_is_one_entry(world: World, agent_factory: AgentFactory,
                                           http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    old = await world.pod()
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    _, first = await call(http, agent, old, as_json=True)
    status, second = await call(http, agent, old, as_json=True)
    assert status == 202 and second["id"] == first["id"]
    assert len(await requests(http, agent)) == 1


# ---------------------------------------------------------------------- 403


async def test_pod_of_another_node_is_403(world: World, agent_factory: AgentFactory,
                                          http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    other = await world.pod("edge-2")
    status, body = await call(http, agent, other)
    assert status == 403 and "edge-2" in body and "not to this node" in body
    assert world.agent_deletes() == []


async def test_pod_not_needing_an_upgrade_is_403(world: World, agent_factory: AgentFactory,
                                                 http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    pod = await world.pod()
    await set_condition(world.admin, pod, "PodNeedUpgrade", "False", f"controllerrevision: {world.old_hash}")
    status, body = await call(http, agent, pod)
    assert status == 403 and "does not need an upgrade" in body
    assert world.agent_deletes() == []


async def test_pod_being_deleted_is_403(world: World, agent_factory: AgentFactory,
                                        http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    pod = await world.pod()
    path = f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}"
    await world.admin.patch(path, {"metadata": {"finalizers": ["example.com/hold"]}})
    await world.admin.delete(path, {"gracePeriodSeconds": 0})
    status, body = await call(http, agent, pod)
    assert status == 403 and "being deleted" in body
    await world.admin.patch(path, {"metadata": {"finalizers": None}})


async def test_image_not_ready_for_the_current_version_is_403(world: World, agent_factory: AgentFactory,
                                                              http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    pod = await world.pod()
    await set_condition(world.admin, pod, "PodImageReady", "True", f"controllerrevision: {world.old_hash}")
    status, body = await call(http, agent, pod)
    assert status == 403 and "PodImageReady" in body
    await set_condition(world.admin, pod, "PodImageReady", "False", f"controllerrevision: {world.new_hash}")
    status, _ = await call(http, agent, pod)
    assert status == 403
    assert world.agent_deletes() == []
    await set_condition(world.admin, pod, "PodImageReady", "True", f"controllerrevision: {world.new_hash}")
    status, _ = await call(http, agent, pod)
    assert status == 200


# ---------------------------------------------------------------------- 404 / 400


async def test_unknown_pod_is_404(world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    status, body = await call(http, agent, ("default", "no-such-pod"), as_json=True)
    assert status == 404 and body["status"] == "NotFound" and "default/no-such-pod" in body["message"]


async def test_pod_not_owned_by_a_daemonset_is_400(world: World, agent_factory: AgentFactory,
                                                   http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    bare = await world.admin.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox:1"}]}})
    await set_condition(world.admin, bare, "PodNeedUpgrade", "True", "controllerrevision: x")
    status, body = await call(http, agent, bare)
    assert status == 400 and "not owned by a DaemonSet" in body


async def test_invalid_names_are_400(world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    status, body = await call(http, agent, ("Default", "x"))
    assert status == 400 and "DNS-1123" in body


# ---------------------------------------------------------------------- 503 / 502


async def test_unwritable_state_dir_is_503_and_nothing_is_stored(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state directory's parent should be")
    agent = await connected_agent(world, agent_factory, state_dir=blocker / "state")
    old = await world.pod()
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    status, body = await call(http, agent, old, as_json=True)
    assert status == 503 and body["status"] == "ServiceUnavailable"
    assert "could not be stored" in body["message"] and "id" not in body
    assert await requests(http, agent) == []
    assert world.agent_deletes() == []
    async with http.get(f"{agent.url}/v1/readyz", headers={"Accept": "application/json"}) as resp:
        assert (await resp.json())["state"]["available"] is False


async def test_cloud_refusing_the_delete_is_502_with_its_message(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        proxy: FaultyProxy) -> None:
    message = 'pods "x" is forbidden: User "system:node:edge-1" cannot delete resource "pods"'
    proxy.fail("DELETE", r"/pods/", 403, message)
    kubeconfig = write_kubeconfig(tmp_path / "proxied.kubeconfig", proxy.url)
    agent = await agent_factory(kubeconfig=kubeconfig)
    await wait_connected(agent)
    pod = await world.pod()
    await wait_cached(agent, pod)
    status, body = await call(http, agent, pod, as_json=True)
    assert status == 502 and body["status"] == "BadGateway"
    assert message in body["message"]
    # Recorded (it was accepted and tried), ended failed with the cloud's word; never queued.
    [entry] = await requests(http, agent)
    assert (entry["id"], entry["state"], entry["origin"]) == (body["id"], "failed", "online")
    assert message in entry["message"]
    assert (await world.pod())["metadata"]["uid"] == pod["metadata"]["uid"]


# ---------------------------------------------------------------------- imagepull


async def test_imagepull_sets_only_pod_image_ready_with_the_next_version(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    pod = await world.pod()
    status, body = await call(http, agent, pod, action="imagepull")
    assert (status, body) == (200, f"Image pre-pull requested for pod default/{pod['metadata']['name']}")
    after = await world.pod()
    conditions = {c["type"]: c for c in after["status"]["conditions"]}
    image = conditions["PodImageReady"]
    assert (image["status"], image["reason"], image["message"]) == (
        "False", "WaitPullImage", f"controllerrevision: {world.new_hash}")
    assert conditions["PodNeedUpgrade"]["status"] == "True"
    assert conditions["Ready"]["status"] == "True"
    before = {c["type"] for c in pod["status"]["conditions"]}
    assert set(conditions) == before | {"PodImageReady"}
    # Image not ready yet: the upgrade itself is refused until it is.
    status, _ = await call(http, agent, pod)
    assert status == 403


async def test_imagepull_of_a_pod_without_a_pending_version_is_403(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    pod = await world.pod()
    await set_condition(world.admin, pod, "PodNeedUpgrade", "False", "")
    status, body = await call(http, agent, pod, action="imagepull")
    assert status == 403 and "no pending version" in body


async def test_imagepull_of_a_pod_of_another_node_is_403(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await connected_agent(world, agent_factory)
    other = await world.pod("edge-2")
    status, body = await call(http, agent, other, action="imagepull")
    assert status == 403 and "bound to node 'edge-2'" in body and "not to this node" in body
    conditions = {c["type"] for c in (await world.pod("edge-2"))["status"]["conditions"]}
    assert "PodImageReady" not in conditions


async def _state_is(http: aiohttp.ClientSession, agent: Agent, request_id: str, state: str) -> dict[str, Any] | None:
    async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}") as resp:
        entry: dict[str, Any] = await resp.json()
    return entry if entry["state"] == state else None
