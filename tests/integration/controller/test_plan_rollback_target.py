"""Issue 35, must-show 3: a 10-node DaemonSet, steps `1,50%,100%`, `maxFailed: 5`, `onFailure: Rollback`. Two good
versions roll out completely, then a bad one: its canary fails entirely, which stops the rollout at wave 1 although
max-failed would allow more; the template returns to the last *completed* version (not the one before it, nor the
first), the RolloutRolledBack Event names both images, and the plan's status.history lists all three."""

from __future__ import annotations

from typing import Any

from edgeagent.kube.client import KubeClient
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    get_daemonset,
    image_of,
    set_image,
)
from tests.support.rollout_plans import (
    PlanRecorder,
    create_plan,
    documented_order,
    install_plan_crd,
    new_hash,
    plan_events,
    plan_events_through,
    plan_state,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
V1, V2, V3, BAD = "nginx:1.19.4", "nginx:1.20", "nginx:1.21", "nginx:crashing"
SPEC = {"steps": [1, "50%", "100%"], "maxFailed": 5, "onFailure": "Rollback", "progressDeadlineSeconds": 2}


async def roll(admin: KubeClient, image: str) -> str:
    before = await current_hash(admin, "web")
    await set_image(admin, "web", image)
    revision = await new_hash(admin, "web", before)

    async def complete() -> bool:
        state = await plan_state(admin, "web")
        return state is not None and state["revision"] == revision and state["phase"] == "complete"

    await eventually(complete, timeout=60, what=f"{image} rolled out")
    await eventually(lambda: all_running(admin, "web", 10, image), timeout=30, what=f"all on {image}")
    return revision


async def test_a_bad_canary_stops_at_wave_one_and_rolls_back_to_the_last_completed_version(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=10)
    sim.set_image(BAD, crash=True)
    canary = documented_order(list(sim.node_names))[0]
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest(
            "web", strategy="AdvancedRollingUpdate", image=V1,
            annotations={"apps.openyurt.io/max-unavailable": "50%"}))
        await install_plan_crd(admin)
        await create_plan(admin, "web", SPEC)
        await eventually(lambda: all_running(admin, "web", 10), timeout=30, what="10 pods running")
        await controllers.start(sim)
        await eventually(lambda: plan_state(admin, "web"), what="initial status")
        r2 = await roll(admin, V2)
        r3 = await roll(admin, V3)

        async with PlanRecorder(sim, "web") as recorder:
            await set_image(admin, "web", BAD)
            bad = await new_hash(admin, "web", r3)

            async def rolled_back() -> JSON | None:
                state = await plan_state(admin, "web")
                return state if state and state["revision"] == bad and state["phase"] == "rolledBack" else None

            state = await eventually(rolled_back, timeout=60, what="the bad version rolled back")
            await eventually(lambda: all_running(admin, "web", 10, V3), timeout=30, what="all back on V3")
        # Stopped at wave 1: only the canary was ever touched (to the bad version and back).
        assert state["wave"] == 1 and state["stableRevision"] == r3, state
        assert [f["node"] for f in state["failures"]] == [canary] and state["counts"]["failed"] == 1, state
        assert set(recorder.terminated_nodes()) == {canary}, recorder.terminations
        assert image_of((await get_daemonset(admin, "web"))["spec"]["template"]) == V3
        assert await current_hash(admin, "web") == r3
        history = {h["revision"]: (h["phase"], h["images"]) for h in state["history"]}
        assert history[bad] == ("rolledBack", [BAD]) and history[r3] == ("complete", [V3]), history
        assert history[r2] == ("complete", [V2]), history

        events = await plan_events_through(admin, "web", "RolloutRolledBack")
        rolled = [e for e in events if e["reason"] == "RolloutRolledBack"]
        assert len(rolled) == 1 and BAD in rolled[0]["message"] and V3 in rolled[0]["message"], rolled
        assert V2 not in rolled[0]["message"]
        aborted = [e for e in await plan_events(admin, "web") if e["reason"] == "RolloutAborted"]
        assert len(aborted) == 1 and "every node of wave 1 failed" in aborted[0]["message"], aborted
        # The same Events are on the RolloutPlan.
        on_plan = [e for e in (await admin.get("/api/v1/namespaces/default/events"))["items"]
                   if e["involvedObject"].get("kind") == "RolloutPlan" and e["reason"] == "RolloutRolledBack"]
        assert len(on_plan) == 1 and on_plan[0]["source"]["component"] == "edgeagent-controller"
