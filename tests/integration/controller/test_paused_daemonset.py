"""Audit additions for `edgeagent.io/paused` (issue 4): a paused DaemonSet still gets its
OTA conditions, and a paused AdvancedRollingUpdate deletes nothing even after the reconcile that saw the
new revision has run to its end (not just up to the moment it published its plan)."""

from __future__ import annotations

from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import is_terminating
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    NS,
    Controllers,
    all_running,
    controller_deletions,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    need_upgrade,
    patch_daemonset,
    pods_of,
    set_image,
)
from tests.support.waiting import eventually

OLD, NEW = "nginx:1.19.4", "nginx:1.19.5"
PAUSED = {"edgeagent.io/paused": "true"}


def finished_reconciles(app: ControllerApp) -> float:
    value = app.metrics.registry.get_sample_value("edgeagent_controller_reconciles_total", {"result": "ok"})
    return value or 0.0


async def test_paused_ota_daemonset_still_gets_its_conditions(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="OTA", image=OLD, annotations=PAUSED))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    await controllers.start(sim)
    await set_image(admin, "web", NEW)

    async def new_hash() -> str | None:
        found = await current_hash(admin, "web")
        ds = await admin.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets/web")
        return found if ds["status"].get("observedGeneration") == ds["metadata"]["generation"] else None

    hash_ = await eventually(new_hash, what="the new revision")

    async def all_flagged() -> bool:
        pods = [p for p in await pods_of(admin, "web") if not is_terminating(p)]
        return len(pods) == 3 and all(need_upgrade(p) == ("True", f"controllerrevision: {hash_}") for p in pods)

    await eventually(all_flagged, what="PodNeedUpgrade True with the new hash on a paused DaemonSet")
    assert controller_deletions(sim) == []


async def test_paused_roll_has_deleted_nothing_once_its_reconciles_have_finished(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    annotations = {"apps.openyurt.io/max-unavailable": "100%", **PAUSED}
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                    annotations=annotations))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    app = await controllers.start(sim)
    await set_image(admin, "web", NEW)

    async def saw_outdated() -> bool:
        value = app.metrics.registry.get_sample_value(
            "edgeagent_controller_rollout_nodes", {"namespace": NS, "daemonset": "web", "state": "outdated"})
        return value == 3
    await eventually(saw_outdated, what="controller planned on the new revision")
    # The gauge is set before a reconcile's deletions; the ok-counter after them. Touch the DaemonSet and
    # wait for one more finished reconcile: the one that published the plan has then ended too.
    before = finished_reconciles(app)
    await patch_daemonset(admin, "web", {"metadata": {"annotations": {"audit.example/touch": "1"}}})
    await eventually(lambda: finished_reconciles(app) > before, what="a later reconcile finished")
    assert controller_deletions(sim) == []
    assert app.metrics.writes("pod_delete") == 0
