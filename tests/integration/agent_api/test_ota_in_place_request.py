"""Issue 37: the agent's half of OTA in place (no controller runs but in the last test). For a pod of an
`InPlaceIfPossible` DaemonSet the agent never deletes: after the same checks as a delete (the rollout plan's
included) it records the node's request on the pod's status, naming the revision PodNeedUpgrade asks for, and
answers 200; a request the checks refuse writes nothing. A DaemonSet without the annotation is still deleted (the
recreate OTA of today). A restart in place that fails is reported on the kept pod's own status."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from edgeagent.contract import (
    CONDITION_IN_PLACE_UPGRADE_REQUESTED,
    REASON_IN_PLACE_REQUESTED,
    ReportedFailure,
    reported_failure,
    version_message,
)
from edgeagent.kube.objects import get_condition
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    set_condition,
    wait_cached,
    wait_connected,
    write_kubeconfig,
)
from tests.integration.controller.conftest import Controllers
from tests.support.hook_proxy import HookProxy, method_on
from tests.support.rolloutplan_crd import create_plan, install_crd, write_status
from tests.support.rolloutplan_crd import status as plan_status
from tests.support.waiting import eventually

UPGRADE = "/openyurt.io/v1/namespaces/default/pods/{name}/upgrade"


async def in_place(world: World) -> None:
    await world.admin.patch("/apis/apps/v1/namespaces/default/daemonsets/edge-app", {"metadata": {"annotations": {
        "edgeagent.io/update-type": "InPlaceIfPossible"}}})


async def post(http: aiohttp.ClientSession, url: str, name: str) -> tuple[int, dict[str, str]]:
    async with http.post(url + UPGRADE.format(name=name), headers={"Accept": "application/json"}) as resp:
        return resp.status, dict(await resp.json())


async def test_the_agent_records_the_request_and_deletes_nothing(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    await in_place(world)
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    pod = await world.pod()
    await wait_cached(agent, pod)
    code, body = await post(http, agent.url, pod["metadata"]["name"])
    assert (code, body["status"]) == (200, "Started"), body
    now = await world.pod()
    assert now["metadata"]["uid"] == pod["metadata"]["uid"] and world.agent_deletes() == []
    cond = get_condition(now, CONDITION_IN_PLACE_UPGRADE_REQUESTED) or {}
    assert (cond.get("status"), cond.get("reason"), cond.get("message")) == (
        "True", REASON_IN_PLACE_REQUESTED, version_message(world.new_hash))
    async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{body['id']}") as resp:
        assert (await resp.json())["state"] == "verifying"  # the controller carries it out; the verifier judges
    # Another node's pod: refused by the checks, nothing written on it.
    theirs = await world.pod("edge-2")
    code, body = await post(http, agent.url, theirs["metadata"]["name"])
    assert code == 403, body
    assert get_condition(await world.pod("edge-2"), CONDITION_IN_PLACE_UPGRADE_REQUESTED) is None


async def test_the_plan_check_applies_before_the_request(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    await in_place(world)
    pod = await world.pod()
    await install_crd(world.admin)
    await create_plan(world.admin, daemonset="edge-app", steps=["100%"])
    generation = (await world.admin.get("/apis/apps/v1/namespaces/default/daemonsets/edge-app"))["metadata"][
        "generation"]
    # The plan's status still rolls the old revision: the controller has not caught up with the template.
    await write_status(world.admin, "edge-app", plan_status(world.old_hash, phase="Complete", wave=1, waves=1,
                                                            observedGeneration=generation))
    await world.admin.patch(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/status", {"status": {
        "conditions": [{"type": "PodNeedUpgrade", "status": "True", "reason": "WaveReached",
                        "message": version_message(world.new_hash)}]}})
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    await wait_cached(agent, pod)
    code, body = await post(http, agent.url, pod["metadata"]["name"])
    assert (code, body["status"]) == (403, "Forbidden"), body
    assert "has not caught up" in body["message"], body
    assert get_condition(await world.pod(), CONDITION_IN_PLACE_UPGRADE_REQUESTED) is None
    # Caught up: the request goes ahead.
    await write_status(world.admin, "edge-app", plan_status(world.new_hash, phase="Progressing", wave=1, waves=1,
                                                            stableRevision=world.old_hash,
                                                            observedGeneration=generation))
    code, body = await post(http, agent.url, pod["metadata"]["name"])
    assert (code, body["status"]) == (200, "Started"), body
    assert (get_condition(await world.pod(), CONDITION_IN_PLACE_UPGRADE_REQUESTED) or {}).get("status") == "True"
    assert world.agent_deletes() == []


async def test_without_the_annotation_the_pod_is_deleted_as_before(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    pod = await world.pod()
    await wait_cached(agent, pod)
    code, body = await post(http, agent.url, pod["metadata"]["name"])
    assert (code, body["status"]) == (200, "Started"), body
    assert [d["uid"] for d in world.agent_deletes()] == [pod["metadata"]["uid"]]


@pytest.fixture
async def controllers() -> AsyncIterator[Controllers]:
    running = Controllers()
    try:
        yield running
    finally:
        await running.stop_all()


async def test_a_failed_restart_in_place_is_reported_on_the_pod_itself(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession, controllers: Controllers) -> None:
    """The new image crash-loops: the request fails with the kubelet's reason, and the node reports it on the
    kept pod's status (the failure a rollout plan counts), naming the revision the pod now carries."""
    await in_place(world)
    world.sim.set_image("registry.local/app:2", crash=True)
    await controllers.start(world.sim)
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=3.0)
    await wait_connected(agent)
    pod = await world.pod()
    await wait_cached(agent, pod)
    code, body = await post(http, agent.url, pod["metadata"]["name"])
    assert (code, body["status"]) == (200, "Started"), body

    async def ended() -> dict[str, str] | None:
        async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{body['id']}") as resp:
            found = dict(await resp.json())
        return found if found["state"] in ("failed", "succeeded") else None

    request = await eventually(ended, timeout=30, what="the request judged")
    assert (request["state"], request["reason"]) == ("failed", "CrashLoopBackOff"), request
    assert request["replacement"] == f"default/{pod['metadata']['name']}"

    async def reported() -> ReportedFailure | None:
        now = await world.pod()
        assert now["metadata"]["uid"] == pod["metadata"]["uid"]  # kept: the failure is on the same pod
        return reported_failure(now)

    failure = await eventually(reported, what="the failure on the pod's status")
    assert (failure.revision, failure.reason) == (world.new_hash, "CrashLoopBackOff")
    assert world.agent_deletes() == []


async def test_a_pod_changed_before_the_request_is_read_again_and_checked_again(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        hook_proxy: HookProxy) -> None:
    """The request's resourceVersion precondition: a pod whose PodNeedUpgrade turned False between the agent's read
    and its write is refused (409), read again and checked again: 403, nothing written on it."""
    await in_place(world)
    pod = await world.pod()
    name = pod["metadata"]["name"]
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", hook_proxy.url))
    await wait_connected(agent)
    await wait_cached(agent, pod)

    async def held_published() -> bool:  # the agent's other status write is done before the hook is set
        return get_condition(await world.pod(), "UpgradeHeld") is not None

    await eventually(held_published, what="UpgradeHeld published")

    async def withdrawn() -> None:
        await set_condition(world.admin, pod, "PodNeedUpgrade", "False", version_message(world.new_hash))

    hook = hook_proxy.before(method_on("PATCH", f"/pods/{name}/status"), withdrawn)
    code, body = await post(http, agent.url, name)
    assert (code, body["status"]) == (403, "Forbidden"), body
    assert "does not need an upgrade" in body["message"], body
    assert hook.hits == 1
    assert get_condition(await world.pod(), CONDITION_IN_PLACE_UPGRADE_REQUESTED) is None
    patches = [e for e in world.sim.audit.find("PATCH", f"/api/v1/namespaces/default/pods/{name}/status")
               if e["userAgent"].startswith("edgeagent-agent")]
    assert [e["code"] for e in patches][-1] == 409, patches
