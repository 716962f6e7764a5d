"""Issue 19, must-show 8: invalid plan annotations (`rollout-steps: 50%,10%`, `rollout-bake: soon`) get one
Warning Event each, naming the annotation and what it accepts, and the DaemonSet is rolled as if it had no plan
(never half-applied: no waves, no state, every node moved as plain AdvancedRollingUpdate does)."""

from __future__ import annotations

from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import annotations_of
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    daemonset_manifest,
    events_for,
    get_daemonset,
    set_image,
)
from tests.support.rollout_plans import annotate
from tests.support.waiting import eventually

NEW, NEWER = "nginx:1.20", "nginx:1.21"
BAD_PLAN = {"edgeagent.io/rollout-steps": "50%,10%", "edgeagent.io/rollout-bake": "soon",
            "apps.openyurt.io/max-unavailable": "100%"}


async def warnings(admin: KubeClient) -> list[str]:
    return [e["message"] for e in await events_for(admin, "web")
            if e["reason"] == "RolloutPlanInvalid" and e["type"] == "Warning"]


async def test_invalid_plan_is_reported_once_and_the_daemonset_rolls_without_it(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", annotations=BAD_PLAN))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    await controllers.start(sim)

    async def both_reported() -> list[str] | None:
        found = await warnings(admin)
        return found if len(found) >= 2 else None

    found = await eventually(both_reported, what="a Warning per invalid annotation")
    steps = next(m for m in found if "edgeagent.io/rollout-steps" in m)
    bake = next(m for m in found if "edgeagent.io/rollout-bake" in m)
    assert "'50%,10%'" in steps and "accepts" in steps and "increasing" in steps, steps
    assert "'soon'" in bake and "accepts" in bake and "'30s', '10m', '2h'" in bake, bake
    assert "as if it had no rollout plan" in steps and "as if it had no rollout plan" in bake

    # Rolled like a DaemonSet without a plan: every node at once (max-unavailable 100%), no state, no waves.
    await set_image(admin, "web", NEW)
    await eventually(lambda: all_running(admin, "web", 3, NEW), timeout=20, what="all upgraded without waves")
    await set_image(admin, "web", NEWER)
    await eventually(lambda: all_running(admin, "web", 3, NEWER), timeout=20, what="upgraded again")
    assert "edgeagent.io/rollout-state" not in annotations_of(await get_daemonset(admin, "web"))
    reasons = {e["reason"] for e in await events_for(admin, "web")}
    assert not reasons & {"WaveStarted", "WaveFinished", "RolloutComplete"}, reasons
    # Many reconciles later, still one Warning per distinct bad value.
    assert len(await warnings(admin)) == 2

    # A new bad value is a new Warning; fixing the plan makes it count.
    await annotate(admin, "web", {"edgeagent.io/rollout-bake": "later"})

    async def third() -> bool:
        return any("'later'" in m for m in await warnings(admin))

    await eventually(third, what="a Warning for the new bad value")
    await annotate(admin, "web", {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "0s"})

    async def planned() -> bool:
        return "edgeagent.io/rollout-state" in annotations_of(await get_daemonset(admin, "web"))

    await eventually(planned, what="the fixed plan in effect")
    assert len(await warnings(admin)) == 3
