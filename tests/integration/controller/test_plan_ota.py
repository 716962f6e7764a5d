"""Issue 19, must-show 2: OTA with a rollout plan. Pods on nodes outside the reached waves see
`PodNeedUpgrade` `False`, reason `WaitingForWave`, message `controllerrevision: <hash>`; their agent answers an
upgrade request 403 as for any pod that needs no upgrade; after a promotion they see `True`."""

from __future__ import annotations

from typing import Any

import aiohttp

from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import get_condition, is_pod_ready, is_terminating
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api.conftest import AgentFactory, agent_factory, wait_cached, wait_connected
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    pods_of,
    set_image,
)
from tests.support.rollout_plans import (
    documented_order,
    ds_annotations,
    get_plan,
    new_hash,
    plan_reasons,
    plan_state,
    steer,
    with_plan,
)
from tests.support.waiting import eventually

__all__ = ["agent_factory"]  # the fixture, imported so that pytest finds it here

JSON = dict[str, Any]
NEW = "nginx:1.20"
# A bake far longer than the test: only a promotion moves the rollout past wave 1.
PLAN = {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1h"}


async def conditions_by_node(admin: KubeClient) -> dict[str, tuple[str, str, str]]:
    out: dict[str, tuple[str, str, str]] = {}
    for pod in await pods_of(admin, "ota"):
        if is_terminating(pod):
            continue
        cond = get_condition(pod, "PodNeedUpgrade") or {}
        out[pod["spec"]["nodeName"]] = (str(cond.get("status")), str(cond.get("reason") or ""),
                                        str(cond.get("message")))
    return out


async def find_pod(admin: KubeClient, node: str) -> JSON | None:
    return next((p for p in await pods_of(admin, "ota") if p["spec"]["nodeName"] == node and not is_terminating(p)),
                None)


async def pod_on(admin: KubeClient, node: str) -> JSON:
    pod = await find_pod(admin, node)
    assert pod is not None, f"no live pod on {node}"
    return pod


async def upgrade(agent_url: str, pod: JSON) -> tuple[int, str]:
    url = f"{agent_url}/openyurt.io/v1/namespaces/default/pods/{pod['metadata']['name']}/upgrade"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, \
            session.post(url) as resp:
        return resp.status, await resp.text()


async def test_ota_pods_wait_for_their_wave_and_are_refused_until_promoted(
        sim: SimCluster, admin: KubeClient, controllers: Controllers, agent_factory: AgentFactory) -> None:
    await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA", annotations=ds_annotations(PLAN)))
    await with_plan(admin, "ota", PLAN)
    await eventually(lambda: all_running(admin, "ota", 3), what="3 pods running")
    order = documented_order(list(sim.node_names))
    first, rest = order[0], order[1:]
    agents = {node: await agent_factory(kubeconfig=sim.node_kubeconfig(node), node_name=node) for node in order}
    for agent in agents.values():
        await wait_connected(agent)
    await controllers.start(sim)
    old_hash = await current_hash(admin, "ota")
    await set_image(admin, "ota", NEW)
    hash_ = await new_hash(admin, "ota", old_hash)

    async def gated() -> dict[str, tuple[str, str, str]] | None:
        conds = await conditions_by_node(admin)
        want = {first: ("True", "WaveReached", f"controllerrevision: {hash_}"),
                **{n: ("False", "WaitingForWave", f"controllerrevision: {hash_}") for n in rest}}
        return conds if conds == want else None

    await eventually(gated, what="wave 1 True, the others False/WaitingForWave")

    # A waiting pod's agent refuses the upgrade (403), as for any pod whose PodNeedUpgrade is not True.
    waiting = await pod_on(admin, rest[0])
    await wait_cached(agents[rest[0]], waiting, need_upgrade="False")
    status, body = await upgrade(agents[rest[0]].url, waiting)
    assert status == 403, body
    assert (await pod_on(admin, rest[0]))["metadata"]["uid"] == waiting["metadata"]["uid"]

    # The wave-1 pod is upgraded by its agent; the wave is finished and bakes (for an hour).
    ready = await pod_on(admin, first)
    await wait_cached(agents[first], ready, need_upgrade="True")
    status, body = await upgrade(agents[first].url, ready)
    assert status == 200, body

    async def baking() -> JSON | None:
        state = await plan_state(admin, "ota")
        return state if state and state["revision"] == hash_ and state["phase"] == "baking" else None

    state = await eventually(baking, timeout=20, what="wave 1 finished, baking")
    assert state["wave"] == 1 and state["waves"] == 2
    assert (await conditions_by_node(admin))[rest[0]][1] == "WaitingForWave"

    # Promotion (what `edgeagent rollout promote` writes): wave 2 starts now, the request recorded Done.
    ident = await steer(admin, "ota", "promote", wave=1)

    async def promoted() -> bool:
        conds = await conditions_by_node(admin)
        return all(conds.get(n) == ("True", "WaveReached", f"controllerrevision: {hash_}") for n in rest)

    await eventually(promoted, what="the other nodes see PodNeedUpgrade True")
    state = await eventually(lambda: plan_state(admin, "ota"), what="state")
    assert state["wave"] == 2 and state["phase"] == "progressing", state
    handled = (await get_plan(admin, "ota"))["status"]["steer"]
    assert handled["id"] == ident and handled["verb"] == "promote" and handled["result"] == "Done", handled

    # Now the agent accepts the same request.
    pod = await pod_on(admin, rest[0])
    await wait_cached(agents[rest[0]], pod, need_upgrade="True")
    status, body = await upgrade(agents[rest[0]].url, pod)
    assert status == 200, body

    async def replaced() -> bool:
        current = await find_pod(admin, rest[0])
        return current is not None and current["metadata"]["uid"] != pod["metadata"]["uid"] and is_pod_ready(current)

    await eventually(replaced, what="the promoted node upgraded")
    assert await plan_reasons(admin, "ota") == ["WaveStarted", "WaveFinished", "WaveStarted"]


async def test_a_stale_promotion_is_removed_without_effect(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA", annotations=ds_annotations(PLAN)))
    await with_plan(admin, "ota", PLAN)
    await eventually(lambda: all_running(admin, "ota", 3), what="3 pods running")
    await controllers.start(sim)
    old_hash = await current_hash(admin, "ota")
    await set_image(admin, "ota", NEW)
    hash_ = await new_hash(admin, "ota", old_hash)
    await eventually(lambda: plan_state(admin, "ota"), what="state written")
    ident = await steer(admin, "ota", "promote", wave=2)

    async def ignored() -> JSON | None:
        found = ((await get_plan(admin, "ota")).get("status") or {}).get("steer")
        return found if found and found["id"] == ident else None

    handled = await eventually(ignored, what="the stale promotion recorded")
    assert handled["result"] == "Ignored" and "nothing to promote at wave 2" in handled["message"], handled
    state = await plan_state(admin, "ota")
    assert state is not None and state["revision"] == hash_ and state["wave"] == 1
    assert state["phase"] == "progressing"
