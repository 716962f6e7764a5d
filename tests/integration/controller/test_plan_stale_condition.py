"""Issue 23 (soak seed 1): the template of a DaemonSet with a RolloutPlan changes while its controller cannot keep
up. A pod whose `PodNeedUpgrade` is still `True` for the previous revision must not be deleted by its agent: its
node would get the new revision before its wave. The agent reads the DaemonSet and its RolloutPlan and compares the
plan status's generation (`observedGeneration`) and revision with the DaemonSet and the pod's condition (403 while
they lag). And a change of the DaemonSet's spec that keeps the revision rewrites the status's generation without
starting the wave or the bake again."""

from __future__ import annotations

from typing import Any

import aiohttp

from edgeagent.agent.app import Agent
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import get_condition, is_terminating
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api.conftest import AgentFactory, agent_factory, wait_cached, wait_connected
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    get_daemonset,
    patch_daemonset,
    pods_of,
    set_image,
)
from tests.support.rollout_plans import (
    PLANS_PATH,
    documented_order,
    get_plan,
    new_hash,
    patch_plan,
    plan_reasons,
    plan_state,
    spec_of,
    steer,
    with_plan,
)
from tests.support.waiting import eventually

__all__ = ["agent_factory"]  # the fixture, imported so that pytest finds it here

JSON = dict[str, Any]
# A bake far longer than the test: the rollout only moves past wave 1 when promoted.
PLAN = {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1h"}
ONE_WAVE = {**PLAN, "edgeagent.io/rollout-steps": "100%"}
CONTROLLER = "edgeagent-controller/"
# The controller's only write of the rollout state: a PUT of the plan's status subresource.
PLAN_STATUS = f"{PLANS_PATH}/ota/status"


async def pod_on(admin: KubeClient, node: str) -> JSON:
    found = [p for p in await pods_of(admin, "ota") if p["spec"]["nodeName"] == node and not is_terminating(p)]
    assert len(found) == 1, found
    return found[0]


async def condition_on(admin: KubeClient, node: str) -> tuple[str, str, str]:
    cond = get_condition(await pod_on(admin, node), "PodNeedUpgrade") or {}
    return str(cond.get("status")), str(cond.get("reason") or ""), str(cond.get("message"))


async def upgrade(agent_url: str, pod: JSON) -> tuple[int, str]:
    url = f"{agent_url}/openyurt.io/v1/namespaces/default/pods/{pod['metadata']['name']}/upgrade"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session, \
            session.post(url) as resp:
        return resp.status, await resp.text()


async def add_fault(sim: SimCluster, path: str, verb: str = "PATCH") -> str:
    """The controller's `verb` requests under `path` are answered 429 (it is kept from catching up)."""
    async with aiohttp.ClientSession() as http, http.post(f"{sim.url}/sim/v1/faults", json={
            "codes": [429], "retryAfterSeconds": 1, "durationSeconds": 120, "verbs": [verb], "path": path,
            "userAgent": CONTROLLER}) as resp:
        assert resp.status == 201, await resp.text()
        return str((await resp.json())["id"])


async def remove_fault(sim: SimCluster, rule: str) -> None:
    async with aiohttp.ClientSession() as http, http.delete(f"{sim.url}/sim/v1/faults/{rule}") as resp:
        assert resp.status == 200, await resp.text()


def deletes_of(sim: SimCluster, name: str) -> list[JSON]:
    return [e for e in sim.audit.find("DELETE", "/api/v1/namespaces/default/pods/") if e["path"].endswith("/" + name)]


async def roll_to_a_new_revision(admin: KubeClient, order: list[str]) -> tuple[str, tuple[str, str, str]]:
    """A new template reaching every node in one wave: its hash, and the condition every pod then shows."""
    r0 = await current_hash(admin, "ota")
    await set_image(admin, "ota", "nginx:1.20")
    r1 = await new_hash(admin, "ota", r0)
    want = ("True", "WaveReached", f"controllerrevision: {r1}")

    async def all_true() -> bool:
        return all([await condition_on(admin, n) == want for n in order])

    await eventually(all_true, what=f"every pod True for {r1}")
    return r1, want


async def one_wave_everywhere(sim: SimCluster, admin: KubeClient, controllers: Controllers,
                              agent_factory: AgentFactory) -> tuple[list[str], Agent, str, tuple[str, str, str], JSON]:
    """An OTA DaemonSet whose RolloutPlan rolled it in one wave to a new revision r1, an agent on the second node of
    the documented order whose cache shows its pod `True`: (order, agent, r1, the condition every pod shows, that
    pod)."""
    await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA"))
    await with_plan(admin, "ota", ONE_WAVE)
    await eventually(lambda: all_running(admin, "ota", 3), what="3 pods running")
    order = documented_order(list(sim.node_names))
    agent = await agent_factory(kubeconfig=sim.node_kubeconfig(order[1]), node_name=order[1])
    await wait_connected(agent)
    await controllers.start(sim)
    r1, want_r1 = await roll_to_a_new_revision(admin, order)
    pod = await pod_on(admin, order[1])
    await wait_cached(agent, pod, need_upgrade="True")
    return order, agent, r1, want_r1, pod


async def test_a_stale_pod_need_upgrade_after_a_template_change_is_refused_until_the_controller_catches_up(
        sim: SimCluster, admin: KubeClient, controllers: Controllers, agent_factory: AgentFactory) -> None:
    # Revision 1 reaches every node at once (one wave): PodNeedUpgrade True for r1 everywhere.
    order, agent, r1, want_r1, pod = await one_wave_everywhere(sim, admin, controllers, agent_factory)
    first, later = order[0], order[1]

    # The controller is kept from reacting: its plan status writes and pod PATCHes are answered 429. The plan now
    # has two waves (the later node in wave 2), and a new template r2.
    plan_rule = await add_fault(sim, PLAN_STATUS, "PUT")
    pods_rule = await add_fault(sim, "/api/v1/namespaces/default/pods/")
    generation_before = (await get_daemonset(admin, "ota"))["metadata"]["generation"]
    await patch_plan(admin, "ota", {"spec": spec_of("ota", PLAN)})
    await patch_daemonset(admin, "ota", {
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.21"}]}}}})
    r2 = await new_hash(admin, "ota", r1)
    assert (await get_daemonset(admin, "ota"))["metadata"]["generation"] == generation_before + 1
    assert await condition_on(admin, later) == want_r1  # stale: r1, though the template is r2

    # The plan status is still r1's, for the previous generation: refused, the pod is not deleted.
    status, body = await upgrade(agent.url, pod)
    assert status == 403, body
    assert "changed" in body and "has not caught up" in body and "generation" in body, body
    assert (await pod_on(admin, later))["metadata"]["uid"] == pod["metadata"]["uid"]
    assert deletes_of(sim, pod["metadata"]["name"]) == []

    # The controller writes r2's status (wave 1: another node), its condition flips are still refused: the status
    # is current but the pod's condition names r1. Refused again (the soak's case).
    await remove_fault(sim, plan_rule)

    async def r2_planned() -> JSON | None:
        state = await plan_state(admin, "ota")
        return state if state is not None and state["revision"] == r2 else None

    state = await eventually(r2_planned, what="the state of r2 written")
    assert state["wave"] == 1 and state["generation"] == generation_before + 1, state
    assert await condition_on(admin, later) == want_r1
    status, body = await upgrade(agent.url, pod)
    assert status == 403, body
    assert f"names revision {r1}" in body and f"the rollout is of revision {r2}" in body, body
    assert deletes_of(sim, pod["metadata"]["name"]) == []

    # Caught up: the later node waits for its wave of r2 (403 as for any pod that needs no upgrade), the first
    # node's pod is upgraded.
    await remove_fault(sim, pods_rule)

    async def flipped() -> bool:
        return await condition_on(admin, later) == ("False", "WaitingForWave", f"controllerrevision: {r2}")

    await eventually(flipped, what="the later node's pod False/WaitingForWave for r2")
    await wait_cached(agent, pod, need_upgrade="False")
    status, body = await upgrade(agent.url, pod)
    assert status == 403 and "does not need an upgrade" in body, (status, body)
    assert (await pod_on(admin, later))["metadata"]["uid"] == pod["metadata"]["uid"]
    first_agent = await agent_factory(kubeconfig=sim.node_kubeconfig(first), node_name=first)
    await wait_connected(first_agent)
    want_first = ("True", "WaveReached", f"controllerrevision: {r2}")
    await eventually(lambda: _is(condition_on(admin, first), want_first), what="the first node's pod True for r2")
    first_pod = await pod_on(admin, first)
    await wait_cached(first_agent, first_pod, need_upgrade="True")
    status, body = await upgrade(first_agent.url, first_pod)
    assert status == 200, body
    assert deletes_of(sim, first_pod["metadata"]["name"])


async def _is(value: Any, want: object) -> bool:
    return bool(await value == want)


async def test_a_generation_only_change_rewrites_the_state_without_restarting_the_wave(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA"))
    await with_plan(admin, "ota", PLAN)
    await eventually(lambda: all_running(admin, "ota", 3), what="3 pods running")
    await controllers.start(sim)
    r0 = await current_hash(admin, "ota")
    await set_image(admin, "ota", "nginx:1.20")
    r1 = await new_hash(admin, "ota", r0)
    generation = (await get_daemonset(admin, "ota"))["metadata"]["generation"]

    async def planned() -> JSON | None:
        state = await plan_state(admin, "ota")
        return state if state is not None and state["revision"] == r1 else None

    before = await eventually(planned, what="the state of r1")
    assert before["generation"] == generation and before["wave"] == 1, before

    # Only the spec outside the template changes: a new generation, the same revision.
    await patch_daemonset(admin, "ota", {"spec": {"minReadySeconds": 5}})
    assert (await get_daemonset(admin, "ota"))["metadata"]["generation"] == generation + 1
    assert await current_hash(admin, "ota") == r1

    async def rewritten() -> JSON | None:
        state = await plan_state(admin, "ota")
        return state if state is not None and state.get("generation") == generation + 1 else None

    after = await eventually(rewritten, what="the state rewritten for the new generation")
    assert {k: v for k, v in after.items() if k != "generation"} == \
        {k: v for k, v in before.items() if k != "generation"}, (before, after)
    assert await plan_reasons(admin, "ota") == ["WaveStarted"]  # wave 1 was not started again


async def test_queued_and_automatic_upgrades_wait_while_the_state_lags_and_go_on_once_it_catches_up(
        sim: SimCluster, admin: KubeClient, controllers: Controllers, agent_factory: AgentFactory) -> None:
    await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA"))
    await with_plan(admin, "ota", ONE_WAVE)
    await eventually(lambda: all_running(admin, "ota", 3), what="3 pods running")
    order = documented_order(list(sim.node_names))
    queued_node, auto_node = order[1], order[2]
    app = await controllers.start(sim)
    r1, _ = await roll_to_a_new_revision(admin, order)
    queued_pod, auto_pod = await pod_on(admin, queued_node), await pod_on(admin, auto_node)

    # A request is queued on a node whose link is cut.
    agent = await agent_factory(kubeconfig=sim.node_kubeconfig(queued_node), node_name=queued_node)
    await wait_connected(agent)
    await wait_cached(agent, queued_pod, need_upgrade="True")
    await sim.disconnect(queued_node, "refuse")
    await wait_connected(agent, False)
    async with aiohttp.ClientSession() as http:
        url = f"{agent.url}/openyurt.io/v1/namespaces/default/pods/{queued_pod['metadata']['name']}/upgrade"
        async with http.post(url, headers={"Accept": "application/json"}) as resp:
            assert resp.status == 202, await resp.text()
            request_id = (await resp.json())["id"]

        # The controller is down; the DaemonSet's spec changes without a new revision (a new generation).
        await controllers.stop(app)
        await patch_daemonset(admin, "ota", {"spec": {"minReadySeconds": 1}})
        assert await current_hash(admin, "ota") == r1
        auto = await agent_factory(kubeconfig=sim.node_kubeconfig(auto_node), node_name=auto_node,
                                   auto_upgrade=True, ready_timeout=30)
        await wait_connected(auto)
        await sim.connect(queued_node)

        async def entry() -> JSON:
            async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}") as resp:
                assert resp.status == 200
                found: JSON = await resp.json()
                return found

        async def waiting() -> JSON | None:
            found = await entry()
            return found if found["state"] == "queued" and "has not caught up" in found["message"] else None

        await eventually(waiting, what="the drained request refused for now and queued again")

        def ds_reads_by(node: str) -> int:
            return len([e for e in sim.audit.find("GET", "/apis/apps/v1/namespaces/default/daemonsets/ota")
                        if f"({node})" in e["userAgent"]])

        # The automatic upgrade is refused too, and asked again (not given up on this pod).
        await eventually(lambda: ds_reads_by(auto_node) >= 2, timeout=20, what="the auto-upgrader asked twice")
        assert deletes_of(sim, queued_pod["metadata"]["name"]) == []
        assert deletes_of(sim, auto_pod["metadata"]["name"]) == []

        # The controller catches up (the plan status gets the new generation): both go on, nothing was lost.
        await controllers.start(sim)
        await eventually(lambda: deletes_of(sim, queued_pod["metadata"]["name"]), timeout=30,
                         what="the queued request applied")
        await eventually(lambda: deletes_of(sim, auto_pod["metadata"]["name"]), timeout=30,
                         what="the automatic upgrade done")
        assert (await entry())["state"] in ("verifying", "succeeded"), await entry()


async def test_a_pod_need_upgrade_that_outlived_an_abort_is_refused(
        sim: SimCluster, admin: KubeClient, controllers: Controllers, agent_factory: AgentFactory) -> None:
    order, agent, r1, want_r1, pod = await one_wave_everywhere(sim, admin, controllers, agent_factory)
    node = order[1]

    # The operator aborts (a steering request on the plan) while the controller is kept from writing anything
    # (429): the abort is only asked for.
    plan_rule = await add_fault(sim, PLAN_STATUS, "PUT")
    pods_rule = await add_fault(sim, "/api/v1/namespaces/default/pods/")
    ident = await steer(admin, "ota", "abort")
    status, body = await upgrade(agent.url, pod)
    assert status == 403 and f"the rollout of revision {r1}" in body and "was aborted" in body, (status, body)

    # The controller records the abort (and the request as handled) but cannot withdraw the conditions yet.
    await remove_fault(sim, plan_rule)

    async def aborted() -> JSON | None:
        state = await plan_state(admin, "ota")
        return state if state is not None and state["phase"] == "aborted" else None

    await eventually(aborted, what="the rollout of r1 aborted in the state")
    handled = ((await get_plan(admin, "ota")).get("status") or {}).get("steer") or {}
    assert handled.get("id") == ident and handled.get("result") == "Done", handled
    assert await condition_on(admin, node) == want_r1  # outlived the abort
    status, body = await upgrade(agent.url, pod)
    assert status == 403 and "was aborted" in body, (status, body)
    assert deletes_of(sim, pod["metadata"]["name"]) == []

    # Once the controller can write, the condition goes False and the pod stays.
    await remove_fault(sim, pods_rule)

    async def withdrawn() -> bool:
        return (await condition_on(admin, node))[0] == "False"

    await eventually(withdrawn, what="the condition withdrawn after the abort")
    assert (await pod_on(admin, node))["metadata"]["uid"] == pod["metadata"]["uid"]
    assert deletes_of(sim, pod["metadata"]["name"]) == []
