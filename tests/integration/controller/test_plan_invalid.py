"""Issue 35 (round 3's must-show 8 with plans as RolloutPlans): bad input.

- An invalid plan is refused when it is applied (the CRD's rules), with a message naming the field: nothing to roll.
- A DaemonSet still carrying round-3 plan annotations gets one Warning Event naming the RolloutPlan kind and is
  rolled as if it had no plan (the annotations are never read, no state is written onto it).
- A plan naming a DaemonSet that does not exist, and a second plan for the same DaemonSet, get a condition saying
  so and move nothing; the plan takes effect once its DaemonSet exists."""

from __future__ import annotations

from typing import Any

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.kube.errors import Invalid
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
from tests.support.rollout_plans import create_plan, get_plan, install_plan_crd, plan_state
from tests.support.waiting import eventually

JSON = dict[str, Any]
NEW, NEWER = "nginx:1.20", "nginx:1.21"
ROUND3 = {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1h",
          "apps.openyurt.io/max-unavailable": "100%"}


async def ignored_warnings(admin: KubeClient) -> list[JSON]:
    return [e for e in await events_for(admin, "web")
            if e["reason"] == "RolloutAnnotationsIgnored" and e["type"] == "Warning"]


def accepted(plan: JSON) -> JSON | None:
    return next((c for c in (plan.get("status") or {}).get("conditions") or [] if c.get("type") == "Accepted"), None)


async def test_an_invalid_plan_is_refused_at_apply_naming_the_field(admin: KubeClient) -> None:
    await install_plan_crd(admin)
    with pytest.raises(Invalid) as refused:
        await create_plan(admin, "web", {"steps": ["50%", "10%"]})
    assert "spec.steps" in refused.value.message, refused.value.message
    with pytest.raises(Invalid) as refused:
        await create_plan(admin, "web", {"steps": [1, "100%"], "bake": "soon"})
    assert "spec.bake" in refused.value.message, refused.value.message


async def test_round3_annotations_are_warned_once_and_never_read(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await install_plan_crd(admin)
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", annotations=ROUND3))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    await controllers.start(sim)
    found = await eventually(lambda: ignored_warnings(admin), what="the Warning about the round-3 annotations")
    assert len(found) == 1
    message = found[0]["message"]
    assert "edgeagent.io/rollout-steps" in message and "RolloutPlan" in message, message
    assert "kubectl explain rolloutplan" in message, message

    # Rolled like a DaemonSet without a plan: every node at once (max-unavailable 100%), no state, no waves.
    await set_image(admin, "web", NEW)
    await eventually(lambda: all_running(admin, "web", 3, NEW), timeout=20, what="all upgraded without waves")
    await set_image(admin, "web", NEWER)
    await eventually(lambda: all_running(admin, "web", 3, NEWER), timeout=20, what="upgraded again")
    assert "edgeagent.io/rollout-state" not in annotations_of(await get_daemonset(admin, "web"))
    reasons = {e["reason"] for e in await events_for(admin, "web")}
    assert not reasons & {"WaveStarted", "WaveFinished", "RolloutComplete"}, reasons
    # Many reconciles later, still one Warning.
    assert len(await ignored_warnings(admin)) == 1


async def test_a_plan_without_its_daemonset_or_a_second_plan_moves_nothing_and_says_so(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await install_plan_crd(admin)
    await create_plan(admin, "web", {"steps": [1, "100%"]})
    await controllers.start(sim)

    async def missing() -> JSON | None:
        cond = accepted(await get_plan(admin, "web"))
        return cond if cond is not None and cond["reason"] == "DaemonSetNotFound" else None

    cond = await eventually(missing, what="the plan says its DaemonSet is missing")
    assert cond["status"] == "False" and "default/web does not exist" in cond["message"], cond

    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate"))
    first: JSON = await eventually(lambda: plan_state(admin, "web"), what="the plan in effect")
    assert first["phase"] == "complete", first
    assert accepted(await get_plan(admin, "web")) is None

    # A second plan for the same DaemonSet: a condition, no status of its own, and the first one still rolls.
    await create_plan(admin, "web", {"steps": [1, "100%"], "bake": "1h"}, name="web-again")

    async def duplicate() -> JSON | None:
        cond = accepted(await get_plan(admin, "web-again"))
        return cond if cond is not None and cond["reason"] == "DuplicatePlan" else None

    cond = await eventually(duplicate, what="the second plan says it moves nothing")
    assert "RolloutPlan web already" in cond["message"], cond
    assert "phase" not in ((await get_plan(admin, "web-again")).get("status") or {})
    await set_image(admin, "web", NEW)
    await eventually(lambda: all_running(admin, "web", 3, NEW), timeout=30, what="rolled by the first plan")
    state = await plan_state(admin, "web")
    assert state is not None and state["phase"] == "complete" and state["waves"] == 2, state
