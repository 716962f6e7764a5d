"""Issue 14.2: a node returning from a partition does not make its new-version pod count as failed.

On a real cluster a returning node reports Ready seconds before its kubelet re-reports its pods (the node
lifecycle controller had marked them unready); the sim plays that order (`pod_resync_delay`). The controller
used to count such a pod — available long ago, within its deadline — as failed and paused the roll.
"""

from __future__ import annotations

import functools
import time

from edgeagent.controller.app import ControllerApp
from edgeagent.controller.pods import created_at
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import get_condition, is_pod_ready, is_terminating
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    daemonset_manifest,
    events_for,
    get_daemonset,
    node_ready,
    patch_daemonset,
    pods_of,
    set_image,
)
from tests.support.waiting import eventually

NEW = "nginx:1.20"
DEADLINE = 2
# Long enough to see the pod Ready, swap controllers and lose the node before it passes, on a loaded machine.
AWAY_DEADLINE = 10


async def test_pod_ready_within_its_deadline_is_not_failed_when_its_node_returns(
    sim_factory: SimFactory, controllers: Controllers
) -> None:
    sim = await sim_factory(pod_resync_delay=3.0)
    admin = await KubeClient.connect(sim.admin_kubeconfig)
    try:
        # Partition 2: only edge-1 gets the new version, so two stay outdated and a pause stays possible.
        annotations = {"apps.openyurt.io/max-unavailable": "1", "edgeagent.io/partition": "2",
                       "edgeagent.io/max-failed": "1", "edgeagent.io/progress-deadline-seconds": str(DEADLINE)}
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                         annotations=annotations))
        await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
        await controllers.start(sim)
        await set_image(admin, "web", NEW)

        new_pod_ready = functools.partial(_new_pod_ready_on_edge_1, admin)

        pod = await eventually(new_pod_ready, what="edge-1's new pod Ready")
        # The cut must come after the pod's progress deadline: then only a wrong verdict can pause the roll.
        await eventually(lambda: time.time() > created_at(pod) + DEADLINE + 0.5, what="past the deadline")

        await sim.disconnect("edge-1", "refuse")
        await eventually(lambda: _not_ready(admin), what="edge-1's pod marked unready by the node lifecycle")
        await sim.connect("edge-1")
        await eventually(lambda: node_ready(admin, "edge-1"), what="edge-1 Ready again")
        assert not is_pod_ready(await eventually(lambda: _pod_on(admin), what="the pod")), \
            "the pod was re-reported in the same step as the node: the sim no longer plays the real order"
        await eventually(new_pod_ready, what="the kubelet re-reported the pod Ready")

        ds = await get_daemonset(admin, "web")
        assert ds["metadata"]["annotations"].get("edgeagent.io/paused") != "true"
        assert [e for e in await events_for(admin, "web") if e["reason"] == "RolloutAutoPaused"] == []
    finally:
        await admin.close()


async def _new_pod_ready_on_edge_1(admin: KubeClient) -> dict[str, object] | None:
    pods = [p for p in await pods_of(admin, "web") if not is_terminating(p)
            and p["spec"]["nodeName"] == "edge-1" and p["spec"]["containers"][0]["image"] == NEW]
    return pods[0] if pods and is_pod_ready(pods[0]) else None


async def _pod_on(admin: KubeClient) -> dict[str, object] | None:
    pods = [p for p in await pods_of(admin, "web") if not is_terminating(p) and p["spec"]["nodeName"] == "edge-1"]
    return pods[0] if pods else None


async def _not_ready(admin: KubeClient) -> bool:
    pod = await _pod_on(admin)
    cond = get_condition(pod, "Ready") if pod else None
    return cond is not None and cond.get("status") == "False"


async def test_a_new_leader_does_not_fail_a_pod_that_came_up_before_its_node_went_away(
    sim_factory: SimFactory, controllers: Controllers
) -> None:
    """Issue 23 (found by the soak): the controller that saw edge-1's new pod available is replaced (a leader
    change, a restart) while edge-1's link is cut, and the pod's deadline passes while the node is away. The new
    controller never saw the pod available; it took the node's going away for the version's doing and paused
    the roll of a good version. The kubelet's last report (ContainersReady) says the pod worked."""
    sim = await sim_factory()
    admin = await KubeClient.connect(sim.admin_kubeconfig)
    try:
        annotations = {"apps.openyurt.io/max-unavailable": "1", "edgeagent.io/partition": "2",
                       "edgeagent.io/max-failed": "1", "edgeagent.io/progress-deadline-seconds": str(AWAY_DEADLINE)}
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                         annotations=annotations))
        await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
        first = await controllers.start(sim)
        await set_image(admin, "web", NEW)

        new_pod_ready = functools.partial(_new_pod_ready_on_edge_1, admin)

        pod = await eventually(new_pod_ready, what="edge-1's new pod Ready")
        await controllers.stop(first)
        await sim.disconnect("edge-1", "blackhole")
        await eventually(lambda: _not_ready(admin), what="edge-1's pod marked unready by the node lifecycle")
        assert time.time() < created_at(pod) + AWAY_DEADLINE, "the machine is too slow for this test's deadline"

        second = await controllers.start(sim)
        await eventually(lambda: time.time() > created_at(pod) + AWAY_DEADLINE + 0.5, what="past the deadline")
        # Make sure the new controller has judged the pod after its deadline, with the node still away.
        done = _reconciles(second)
        await patch_daemonset(admin, "web", {"metadata": {"annotations": {"example.com/poke": "1"}}})
        await eventually(lambda: _reconciles(second) > done, what="a reconcile after the deadline")
        assert not await node_ready(admin, "edge-1")

        ds = await get_daemonset(admin, "web")
        assert ds["metadata"]["annotations"].get("edgeagent.io/paused") != "true"
        assert [e for e in await events_for(admin, "web") if e["reason"] == "RolloutAutoPaused"] == []
    finally:
        await admin.close()


def _reconciles(app: ControllerApp) -> float:
    return app.metrics.registry.get_sample_value("edgeagent_controller_reconciles_total", {"result": "ok"}) or 0.0
