"""AdvancedRollingUpdate against the simulated cluster: the seed document's scenario and our extensions."""

from __future__ import annotations

from collections import Counter
from typing import Any

from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    NS,
    Controllers,
    DisruptionRecorder,
    admin_client,
    all_running,
    controller_deletions,
    create_daemonset,
    daemonset_manifest,
    events_for,
    images_by_node,
    node_ready,
    patch_daemonset,
    set_image,
)
from tests.support.waiting import eventually

OLD, NEW = "nginx:1.19.4", "nginx:1.19.5"
ARU = "AdvancedRollingUpdate"


def rollout_gauge(app: ControllerApp, name: str, state: str) -> float | None:
    return app.metrics.registry.get_sample_value(
        "edgeagent_controller_rollout_nodes", {"namespace": NS, "daemonset": name, "state": state})


async def reconciled(app: ControllerApp, name: str, **expected: int) -> bool:
    """The controller planned on a cache showing these node counts (total/updated/outdated/unavailable)."""
    return all(rollout_gauge(app, name, state) == value for state, value in expected.items())


def assert_deletions_guarded_and_unique(cluster: SimCluster) -> None:
    deletions = controller_deletions(cluster)
    assert all(d["precondition_uid"] == d["uid"] for d in deletions), deletions
    counts = Counter(d["uid"] for d in deletions)
    assert all(n == 1 for n in counts.values()), counts


async def test_seed_scenario_cut_nodes_wait_and_are_upgraded_when_they_return(
    sim_factory: SimFactory, controllers: Controllers
) -> None:
    sim = await sim_factory(nodes=4)
    async with admin_client(sim) as kube:
        await create_daemonset(kube, daemonset_manifest("nginx", strategy=ARU, image=OLD))
        await eventually(lambda: all_running(kube, "nginx", 4), what="4 pods running")
        app = await controllers.start(sim)
        async with DisruptionRecorder(kube, "nginx") as recorder:
            await sim.disconnect("edge-3")
            await sim.disconnect("edge-4")

            async def cut_nodes_not_ready() -> bool:
                return not await node_ready(kube, "edge-3") and not await node_ready(kube, "edge-4")

            await eventually(cut_nodes_not_ready, what="cut nodes NotReady")
            await set_image(kube, "nginx", NEW)

            async def ready_nodes_upgraded() -> bool:
                images = await images_by_node(kube, "nginx")
                return images.get("edge-1") == NEW and images.get("edge-2") == NEW
            await eventually(ready_nodes_upgraded, timeout=15, what="edge-1 and edge-2 upgraded")
            await eventually(lambda: reconciled(app, "nginx", updated=2, outdated=2, unavailable=0),
                             what="controller saw the Ready nodes done")
            images = await images_by_node(kube, "nginx")
            assert images["edge-3"] == OLD and images["edge-4"] == OLD

            await sim.connect("edge-3")
            await sim.connect("edge-4")
            await eventually(lambda: all_running(kube, "nginx", 4, NEW), timeout=15, what="all 4 upgraded")

        # 4 nodes at the default 10% (rounded up): one replacement of an available pod at a time.
        assert recorder.max_disrupted == 1, recorder.history
        assert_deletions_guarded_and_unique(sim)
        assert len(controller_deletions(sim)) == 4
        reasons = [e["reason"] for e in await events_for(kube, "nginx")]
        assert reasons.count("UpgradingPods") == 4


async def test_budget_from_max_unavailable_is_never_exceeded(
    sim_factory: SimFactory, controllers: Controllers
) -> None:
    sim = await sim_factory(nodes=6)
    async with admin_client(sim) as kube:
        manifest = daemonset_manifest("web", strategy=ARU, image=OLD,
                                      annotations={"apps.openyurt.io/max-unavailable": "2"})
        await create_daemonset(kube, manifest)
        await eventually(lambda: all_running(kube, "web", 6), what="6 pods running")
        await controllers.start(sim)
        async with DisruptionRecorder(kube, "web") as recorder:
            await set_image(kube, "web", NEW)
            await eventually(lambda: all_running(kube, "web", 6, NEW), timeout=20, what="all upgraded")
        assert recorder.max_disrupted == 2, recorder.history
        assert_deletions_guarded_and_unique(sim)


async def test_node_turning_ready_again_is_upgraded_without_any_pod_change(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy=ARU, image=OLD))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    # The kubelet reports NotReady but keeps its link: its pods are not touched, only the node changes.
    sim.set_node_ready("edge-2", False)
    await eventually(lambda: _not(node_ready(admin, "edge-2")), what="edge-2 NotReady")
    app = await controllers.start(sim)
    await set_image(admin, "web", NEW)

    async def others_upgraded() -> bool:
        images = await images_by_node(admin, "web")
        return images.get("edge-1") == NEW and images.get("edge-3") == NEW and images.get("edge-2") == OLD
    await eventually(others_upgraded, timeout=15, what="edge-1 and edge-3 upgraded")
    await eventually(lambda: reconciled(app, "web", updated=2, outdated=1, unavailable=0), what="roll idle")

    sim.set_node_ready("edge-2", True)
    await eventually(lambda: all_running(admin, "web", 3, NEW), timeout=10, what="edge-2 upgraded")


async def _not(probe: Any) -> bool:
    return not await probe


async def test_partition_keeps_pods_on_the_old_revision(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    annotations = {"apps.openyurt.io/max-unavailable": "100%", "edgeagent.io/partition": "1"}
    await create_daemonset(admin, daemonset_manifest("web", strategy=ARU, image=OLD, annotations=annotations))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    app = await controllers.start(sim)
    await set_image(admin, "web", NEW)

    async def two_upgraded() -> bool:
        images = await images_by_node(admin, "web")
        return sorted(images.values()) == [OLD, NEW, NEW] and await all_running(admin, "web", 3)
    await eventually(two_upgraded, timeout=10, what="two pods upgraded")
    await eventually(lambda: reconciled(app, "web", updated=2, outdated=1, unavailable=0), what="roll idle")
    # Deterministic order: the partition keeps the last node by name.
    assert (await images_by_node(admin, "web"))["edge-3"] == OLD
    assert len(controller_deletions(sim)) == 2

    await patch_daemonset(admin, "web", {"metadata": {"annotations": {"edgeagent.io/partition": None}}})
    await eventually(lambda: all_running(admin, "web", 3, NEW), timeout=10, what="partition lifted")


async def test_node_selector_upgrades_only_the_canary_nodes(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    await admin.patch("/api/v1/nodes/edge-2", {"metadata": {"labels": {"canary": "true"}}})
    annotations = {"apps.openyurt.io/max-unavailable": "100%", "edgeagent.io/node-selector": "canary=true"}
    await create_daemonset(admin, daemonset_manifest("web", strategy=ARU, image=OLD, annotations=annotations))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    app = await controllers.start(sim)
    await set_image(admin, "web", NEW)

    async def canary_upgraded() -> bool:
        return (await images_by_node(admin, "web")).get("edge-2") == NEW and await all_running(admin, "web", 3)
    await eventually(canary_upgraded, timeout=10, what="canary upgraded")
    await eventually(lambda: reconciled(app, "web", updated=1, outdated=2, unavailable=0), what="roll idle")
    assert await images_by_node(admin, "web") == {"edge-1": OLD, "edge-2": NEW, "edge-3": OLD}

    # Widening the selector to every node continues the roll.
    await patch_daemonset(admin, "web", {"metadata": {"annotations": {"edgeagent.io/node-selector": ""}}})
    await eventually(lambda: all_running(admin, "web", 3, NEW), timeout=10, what="selector widened")


async def test_paused_roll_deletes_nothing_until_resumed(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    annotations = {"apps.openyurt.io/max-unavailable": "100%", "edgeagent.io/paused": "true"}
    await create_daemonset(admin, daemonset_manifest("web", strategy=ARU, image=OLD, annotations=annotations))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    app = await controllers.start(sim)
    await set_image(admin, "web", NEW)
    await eventually(lambda: reconciled(app, "web", updated=0, outdated=3), what="controller saw the new revision")
    assert controller_deletions(sim) == []

    await patch_daemonset(admin, "web", {"metadata": {"annotations": {"edgeagent.io/paused": "false"}}})
    await eventually(lambda: all_running(admin, "web", 3, NEW), timeout=10, what="resumed roll done")
