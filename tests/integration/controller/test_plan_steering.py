"""Steering a RolloutPlan, the controller's side (round 3's "steering" with plans as resources; the CLI that writes
the requests is tested on its own): `spec.paused`, and the `edgeagent.io/steer` annotation written as the CLI
writes it. Each request is handled once (its id recorded in status.steer with Done or Ignored, in the same write
as the transition it causes), a request that no longer matches moves nothing, promote never skips a wave, retry
goes on from the wave an abort stopped in, and undo restores the template of the stable revision."""

from __future__ import annotations

from typing import Any

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    get_daemonset,
    image_of,
    set_image,
)
from tests.support.rollout_plans import (
    STEER,
    create_plan,
    get_plan,
    install_plan_crd,
    new_hash,
    patch_plan,
    plan_state,
    steer,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
OLD, NEW = "nginx:1.19.4", "nginx:1.20"
SPEC = {"steps": [1, 2, "100%"], "bake": "1h"}


async def handled(admin: KubeClient, ident: str) -> JSON:
    async def found() -> JSON | None:
        record = ((await get_plan(admin, "web")).get("status") or {}).get("steer")
        return record if record and record["id"] == ident else None

    return dict(await eventually(found, what=f"request {ident} handled"))


async def phase_is(admin: KubeClient, wave: int, phase: str) -> JSON:
    async def found() -> JSON | None:
        state = await plan_state(admin, "web")
        return state if state and state["wave"] == wave and state["phase"] == phase else None

    return dict(await eventually(found, timeout=30, what=f"wave {wave} {phase}"))


async def test_steering_requests_are_handled_once_and_never_skip_a_wave(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                     annotations={"apps.openyurt.io/max-unavailable": "100%"}))
    await install_plan_crd(admin)
    await create_plan(admin, "web", SPEC)
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    await controllers.start(sim)
    await eventually(lambda: plan_state(admin, "web"), what="initial status")
    stable = await current_hash(admin, "web")
    await set_image(admin, "web", NEW)
    revision = await new_hash(admin, "web", stable)
    await phase_is(admin, 1, "baking")

    # Pause and resume: spec.paused, the bake clock kept.
    await patch_plan(admin, "web", {"spec": {"paused": True}})
    paused = await phase_is(admin, 1, "paused")
    await patch_plan(admin, "web", {"spec": {"paused": False}})
    resumed = await phase_is(admin, 1, "baking")
    assert resumed["bakeStartedAt"] == paused["bakeStartedAt"]

    # A promote naming a wave the rollout is not in: Ignored, nothing moves.
    ident = await steer(admin, "web", "promote", wave=2)
    record = await handled(admin, ident)
    assert record["result"] == "Ignored" and record["verb"] == "promote", record
    assert (await plan_state(admin, "web") or {})["wave"] == 1
    # The current wave: Done, the next wave starts (one wave, never two).
    ident = await steer(admin, "web", "promote", wave=1)
    assert (await handled(admin, ident))["result"] == "Done"
    await phase_is(admin, 2, "baking")
    # The same request again (the annotation rewritten with the same id): handled already, nothing moves.
    plan = await get_plan(admin, "web")
    await patch_plan(admin, "web", {"metadata": {"annotations": {STEER: plan["metadata"]["annotations"][STEER]}}})
    await phase_is(admin, 2, "baking")
    assert (await get_plan(admin, "web"))["status"]["steer"]["id"] == ident

    # Abort, then retry: the rollout goes on from the wave it stopped in.
    ident = await steer(admin, "web", "abort")
    assert (await handled(admin, ident))["result"] == "Done"
    await phase_is(admin, 2, "aborted")
    ident = await steer(admin, "web", "retry")
    assert (await handled(admin, ident))["result"] == "Done"
    retried = await phase_is(admin, 2, "baking")
    assert retried["revision"] == revision
    # Retry when nothing is Aborted: Ignored.
    ident = await steer(admin, "web", "retry")
    assert (await handled(admin, ident))["result"] == "Ignored"

    # Undo: the template back to the stable revision (the only write onto the DaemonSet), the current one
    # marked RolledBack; an undo to a revision that never completed is Ignored.
    ident = await steer(admin, "web", "undo", toRevision="0123456789")
    record = await handled(admin, ident)
    assert record["result"] == "Ignored" and "not a completed revision" in record["message"], record
    ident = await steer(admin, "web", "undo")
    assert (await handled(admin, ident))["result"] == "Done"
    await eventually(lambda: all_running(admin, "web", 3, OLD), timeout=30, what="all back on the old image")
    assert image_of((await get_daemonset(admin, "web"))["spec"]["template"]) == OLD
    state = await plan_state(admin, "web")
    assert state is not None and state["phase"] == "rolledBack" and state["stableRevision"] == stable, state
    assert (revision, "rolledBack") in [(h["revision"], h["phase"]) for h in state["history"]], state
