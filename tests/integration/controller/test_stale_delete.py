"""A pod that changes between the controller's decision and its DELETE is not deleted on the stale view.

Found by the soak (issue 23): a node's agent published `UpgradeHeld` True (or a crash-looping pod turned
Ready) after the controller planned to replace the pod but before its DELETE arrived; the UID precondition
alone let the delete through, so a held pod was deleted, or a budget spent twice. The DELETE now carries the
resourceVersion it was planned from as well: the server refuses it (409) when the pod changed, and the next
plan sees the change. Made deterministic with the sim's fault switch: the controller's DELETEs are slowed
by 1.5 s, and the test holds the pod inside that gap, as its agent would.
"""

from __future__ import annotations

import aiohttp

from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    daemonset_manifest,
    set_image,
)
from tests.support.waiting import eventually

PODS = "/api/v1/namespaces/default/pods"
OLD, NEW = "nginx:1.19.4", "nginx:1.20"


async def test_a_pod_held_after_the_plan_but_before_the_delete_is_not_deleted(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                     annotations={"apps.openyurt.io/max-unavailable": "1"}))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    async with aiohttp.ClientSession() as http, http.post(f"{sim.url}/sim/v1/faults", json={
            "latencySeconds": 1.5, "durationSeconds": 120, "verbs": ["DELETE"], "path": PODS + "/",
            "userAgent": "edgeagent-controller/"}) as resp:
        assert resp.status == 201
    await controllers.start(sim)
    await set_image(admin, "web", NEW)

    # The audit log records a request as it arrives, before the injected latency: the DELETE is on its way.
    def first_delete() -> str | None:
        found = [e for e in sim.audit.find("DELETE", PODS + "/") if e["userAgent"].startswith("edgeagent-controller")]
        return str(found[0]["path"]).rsplit("/", 1)[-1] if found else None

    name = await eventually(first_delete, timeout=20, what="the controller's first DELETE")
    pod = await admin.get(f"{PODS}/{name}")
    await admin.patch(f"{PODS}/{name}/status", {"status": {"conditions": [{
        "type": "UpgradeHeld", "status": "True", "reason": "HeldByOperator", "message": "held in the gap"}]}},
        CONTENT_STRATEGIC_MERGE_PATCH)

    # The other two nodes are rolled; the held pod stays, on the old version, with its UID.
    def others_rolled() -> bool:
        return sum(1 for d in sim.store.deletes if d["resource"] == "pods" and d["outcome"] == "graceful") >= 2

    await eventually(others_rolled, timeout=30, what="the two open nodes rolled")
    await eventually(lambda: _rolled_except(admin, str(pod["spec"]["nodeName"])), timeout=30,
                     what="both open nodes on the new version")
    kept = await admin.get(f"{PODS}/{name}")
    assert kept["metadata"]["uid"] == pod["metadata"]["uid"] and not kept["metadata"].get("deletionTimestamp")
    attempts = [d for d in sim.store.deletes if d["name"] == name]
    assert attempts and all(d["outcome"] == "conflict" for d in attempts), attempts
    by_controller = [e for e in sim.audit.find("DELETE", PODS + "/")
                     if e["userAgent"].startswith("edgeagent-controller")]
    assert by_controller and all(e["delete"]["precondition_rv"] for e in by_controller), by_controller


async def _rolled_except(admin: KubeClient, held_node: str) -> bool:
    pods = (await admin.get(PODS))["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    others = [p for p in live if p["spec"].get("nodeName") != held_node]
    return len(others) == 2 and all(p["spec"]["containers"][0]["image"] == NEW for p in others)
