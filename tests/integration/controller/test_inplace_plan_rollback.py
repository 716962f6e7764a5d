"""Issue 37, must-show 4 (second half): an in-place roll to an image the registry lacks fails on the node
(`ImagePullBackOff`), the RolloutPlan counts the failure and, with `onFailure: Rollback`, puts the previous
template back; the previous image then comes back IN PLACE: the same pods (UIDs), one more restart, the good
image running and Ready, and no pod ever deleted -- real controller against the simulated cluster over HTTP."""

from __future__ import annotations

from typing import Any

from edgeagent.contract import LABEL_REVISION_HASH
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import is_pod_ready, is_terminating
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    controller_deletions,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    pods_of,
    set_image,
    template_back_on,
)
from tests.support.rollout_plans import documented_order, ds_annotations, new_hash, plan_events, plan_state, with_plan
from tests.support.waiting import eventually

JSON = dict[str, Any]
GOOD, BAD = "nginx:1.19.4", "registry.local/nginx:not-there"
PLAN = {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1s",
        "edgeagent.io/on-failure": "rollback", "edgeagent.io/max-failed": "1",
        "edgeagent.io/progress-deadline-seconds": "2", "apps.openyurt.io/max-unavailable": "1",
        "edgeagent.io/update-type": "InPlaceIfPossible"}


def main_status(pod: JSON) -> JSON:
    return next(s for s in (pod.get("status") or {}).get("containerStatuses") or [] if s["name"] == "main")


async def backing_off(kube: KubeClient) -> JSON | None:
    """The pod whose kubelet waits in ImagePullBackOff on the bad image, patched in place (same pod)."""
    for pod in await pods_of(kube, "web"):
        waiting = (main_status(pod).get("state") or {}).get("waiting") or {}
        if pod["spec"]["containers"][0]["image"] == BAD and waiting.get("reason") == "ImagePullBackOff":
            return pod
    return None


async def test_a_bad_image_in_place_is_counted_rolled_back_and_the_good_image_restored_in_place(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=3)
    sim.set_image(BAD, missing=True)
    first = documented_order(list(sim.node_names))[0]
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=GOOD,
                                                         annotations=ds_annotations(PLAN)))
        await with_plan(admin, "web", PLAN)
        await eventually(lambda: all_running(admin, "web", 3), timeout=20, what="3 pods running")
        before = {p["spec"]["nodeName"]: p for p in await pods_of(admin, "web")}
        await controllers.start(sim)
        await eventually(lambda: plan_state(admin, "web"), what="the plan's first state")
        good = await current_hash(admin, "web")
        await set_image(admin, "web", BAD)
        bad = await new_hash(admin, "web", good)

        # Wave 1 (one node) is patched in place to the bad image; its kubelet cannot pull it.
        failing = await eventually(lambda: backing_off(admin), timeout=20, what="ImagePullBackOff in place")
        assert failing["spec"]["nodeName"] == first
        assert failing["metadata"]["uid"] == before[first]["metadata"]["uid"]
        assert failing["metadata"]["labels"][LABEL_REVISION_HASH] == bad

        async def rolled_back() -> JSON | None:
            state = await plan_state(admin, "web")
            return state if state and state["phase"] == "rolledBack" else None

        state = await eventually(rolled_back, timeout=30, what="the plan rolled back")
        # Counted: one failure, on wave 1's node, with the kubelet's reason.
        assert state["revision"] == bad and state["stableRevision"] == good, state
        assert state["counts"]["failed"] == 1, state
        assert [f["node"] for f in state["failures"]] == [first], state
        assert "ImagePullBackOff" in state["failures"][0]["reason"], state
        await template_back_on(admin, "web", GOOD)

        # The previous image comes back in place: same pods, one more restart on the failed node, Ready.
        async def restored() -> list[JSON] | None:
            pods = [p for p in await pods_of(admin, "web") if not is_terminating(p)]
            done = [p for p in pods if is_pod_ready(p) and p["spec"]["containers"][0]["image"] == GOOD
                    and main_status(p)["image"].endswith(GOOD) and main_status(p)["ready"]
                    and p["metadata"]["labels"][LABEL_REVISION_HASH] == good]
            return pods if len(done) == len(pods) == 3 else None

        pods = await eventually(restored, timeout=30, what="the good image back in place on every node")
        for pod in pods:
            node = pod["spec"]["nodeName"]
            old = before[node]
            assert pod["metadata"]["uid"] == old["metadata"]["uid"], node
            status = main_status(pod)
            if node == first:
                # Killed for the bad image (restart 1, which never started), started again on the good one.
                assert status["restartCount"] > main_status(old)["restartCount"], status
                assert status["containerID"] != main_status(old)["containerID"]
            else:
                # Never touched: the rollback stopped the roll at wave 1.
                assert status["containerID"] == main_status(old)["containerID"], node
        assert controller_deletions(sim) == []
        reasons = [e["reason"] for e in await plan_events(admin, "web") if e["reason"] != "UpgradingPods"]
        assert reasons == ["WaveStarted", "RolloutAborted", "RolloutRolledBack"], reasons
        assert all(p["spec"]["containers"][0]["image"] == GOOD for p in await pods_of(admin, "web"))
