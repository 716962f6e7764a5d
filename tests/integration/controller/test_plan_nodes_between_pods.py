"""Issue 23 (seed-29 soak): a controller that ranks the nodes afresh -- after a restart, a change of leader or a
new revision -- must not move a node into a wave not reached because another node is between two pods.

The soak's controller was killed in wave 3 of 4 while one agent was replacing its pod; the restarted process
ranked only the nodes with a live pod, so the first node of wave 4 moved one place forward into wave 3, got
`PodNeedUpgrade` True (`WaveReached`), and its agent deleted its pod. A node whose pod is terminating is ranked
like any other; while a node has no pod at all (old one gone, new one not created yet) the plan moves nothing.

With steps `1,100%` over three nodes, wave 1 is the first node in the documented order: if the ranking lost it,
the second node would take its place in wave 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import get_condition, is_pod_ready, is_terminating
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    get_daemonset,
    pods_of,
    set_image,
)
from tests.support.rollout_plans import documented_order, ds_annotations, new_hash, with_plan
from tests.support.waiting import eventually

JSON = dict[str, Any]
NEW = "nginx:1.20"
# A bake far longer than the test: the rollout stays in wave 1.
PLAN = {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1h"}
PODS = "/api/v1/namespaces/default/pods"


def reconciles(app: ControllerApp) -> float:
    return sum(s.value for m in app.metrics.reconciles.collect() for s in m.samples if s.name.endswith("_total"))


async def live_pod(admin: KubeClient, node: str) -> JSON | None:
    return next((p for p in await pods_of(admin, "ota") if p["spec"]["nodeName"] == node and not is_terminating(p)),
                None)


async def condition(admin: KubeClient, node: str) -> tuple[str, str] | None:
    pod = await live_pod(admin, node)
    if pod is None:
        return None
    cond = get_condition(pod, "PodNeedUpgrade") or {}
    return str(cond.get("status")), str(cond.get("reason") or "")


async def wave_one_gated(sim: SimCluster, admin: KubeClient, controllers: Controllers) -> tuple[list[str], str]:
    """An OTA DaemonSet with a plan, rolled to a new revision by a controller that is then gone (a crash):
    wave 1 (the first node) True/WaveReached, the others False/WaitingForWave."""
    await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA", annotations=ds_annotations(PLAN)))
    await with_plan(admin, "ota", PLAN)
    await eventually(lambda: all_running(admin, "ota", 3), what="3 pods running")
    order = documented_order(list(sim.node_names))
    app = await controllers.start(sim)
    old = await current_hash(admin, "ota")
    await set_image(admin, "ota", NEW)
    hash_ = await new_hash(admin, "ota", old)

    async def gated() -> bool:
        return [await condition(admin, n) for n in order] == [
            ("True", "WaveReached"), ("False", "WaitingForWave"), ("False", "WaitingForWave")]

    await eventually(gated, what="wave 1 True, the others WaitingForWave")
    await controllers.stop(app)
    return order, hash_


async def unset(admin: KubeClient, node: str) -> None:
    """Make the node's condition wrong, so that a controller that decides anything about the plan writes it."""
    pod = await live_pod(admin, node)
    assert pod is not None
    await admin.patch(f"{PODS}/{pod['metadata']['name']}/status", {"status": {"conditions": [
        {"type": "PodNeedUpgrade", "status": "Unknown", "reason": "Test", "message": "set by the test"}]}})


async def becomes(admin: KubeClient, node: str, want: tuple[str, str]) -> None:
    async def reached() -> bool:
        return await condition(admin, node) == want

    await eventually(reached, what=f"{node}'s PodNeedUpgrade {want}")


async def first_pass(app: ControllerApp) -> None:
    await eventually(lambda: reconciles(app) >= 1, what="the new controller's first reconcile done")


async def test_a_restarted_controller_ranks_a_node_whose_pod_is_terminating(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    order, _ = await wave_one_gated(sim, admin, controllers)
    first, second, third = order
    # The first node's agent is replacing its pod: the pod stays terminating (a finalizer) while the new
    # controller starts.
    pod = await live_pod(admin, first)
    assert pod is not None
    path = f"{PODS}/{pod['metadata']['name']}"
    await admin.patch(path, {"metadata": {"finalizers": ["example.com/hold"]}})
    await admin.delete(path, {"gracePeriodSeconds": 0})
    await unset(admin, third)
    app = await controllers.start(sim)
    await first_pass(app)
    # It decided (the third node's condition is written again) and left the second node waiting.
    await becomes(admin, third, ("False", "WaitingForWave"))
    assert await condition(admin, second) == ("False", "WaitingForWave")
    await admin.patch(path, {"metadata": {"finalizers": None}})
    await eventually(lambda: all_running(admin, "ota", 3), what="the first node's new pod running")
    assert await condition(admin, second) == ("False", "WaitingForWave")


async def test_a_restarted_controller_moves_nothing_while_a_node_has_no_pod(
        sim: SimCluster, admin: KubeClient, controllers: Controllers, monkeypatch: pytest.MonkeyPatch) -> None:
    order, hash_ = await wave_one_gated(sim, admin, controllers)
    first, second, third = order
    # The sim's DaemonSet controller does not create the first node's new pod until told: the moment, seconds on
    # a real cluster, between an old pod's removal and its successor's creation. Its status still counts the
    # node (desiredNumberScheduled 3).
    stalled = {first}
    manage: Callable[..., bool] = sim.daemonsets._manage

    def stalled_manage(ds: JSON, placement: list[tuple[str, bool, bool]], *args: Any) -> bool:
        return manage(ds, [(n, run and n not in stalled, keep) for n, run, keep in placement], *args)

    monkeypatch.setattr(sim.daemonsets, "_manage", stalled_manage)
    pod = await live_pod(admin, first)
    assert pod is not None
    await admin.delete(f"{PODS}/{pod['metadata']['name']}", {"gracePeriodSeconds": 0})

    async def gap() -> bool:
        ds = await get_daemonset(admin, "ota")
        status = ds.get("status") or {}
        return (not [p for p in await pods_of(admin, "ota") if p["spec"]["nodeName"] == first]
                and status.get("desiredNumberScheduled") == 3 and status.get("currentNumberScheduled") == 2)

    await eventually(gap, what="the first node without a pod, still desired")
    await unset(admin, third)
    app = await controllers.start(sim)
    await first_pass(app)
    assert await condition(admin, second) == ("False", "WaitingForWave")
    assert await condition(admin, third) == ("Unknown", "Test")  # held: nothing decided, nothing written

    stalled.clear()
    sim.daemonsets.enqueue(("default", "ota"))

    async def replaced() -> bool:
        pod = await live_pod(admin, first)
        return pod is not None and pod["metadata"]["labels"].get("controller-revision-hash") == hash_ \
            and is_pod_ready(pod)

    await eventually(replaced, what="the first node's new pod")
    await becomes(admin, third, ("False", "WaitingForWave"))
    assert await condition(admin, second) == ("False", "WaitingForWave")
