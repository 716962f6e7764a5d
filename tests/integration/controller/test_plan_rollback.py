"""Issue 19, must-show 4: a bad version (its containers crash, never Ready) in wave 1 with `on-failure: rollback`:
no pod of wave 2 is touched, the template is restored to the previous revision, the bad revision is marked and
not rolled again, the wave-1 nodes return to the good revision, and the Events tell the story in order."""

from __future__ import annotations

from typing import Any

from edgeagent.controller.app import ControllerApp
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    images_by_node,
    patch_daemonset,
    set_image,
    template_back_on,
)
from tests.support.rollout_plans import (
    PlanRecorder,
    documented_order,
    ds_annotations,
    new_hash,
    plan_events,
    plan_state,
    with_plan,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
OLD, BAD, FIXED = "nginx:1.19.4", "nginx:crashing", "nginx:1.20"
PLAN = {"edgeagent.io/rollout-steps": "2,100%", "edgeagent.io/rollout-bake": "1s",
        "edgeagent.io/on-failure": "rollback", "edgeagent.io/max-failed": "1",
        "edgeagent.io/progress-deadline-seconds": "2", "apps.openyurt.io/max-unavailable": "50%"}


def reconciles(app: ControllerApp) -> float:
    return sum(s.value for m in app.metrics.reconciles.collect() for s in m.samples if s.name.endswith("_total"))


async def test_bad_version_in_wave_one_is_rolled_back_and_never_rolled_again(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=6)
    sim.set_image(BAD, crash=True)
    order = documented_order(list(sim.node_names))
    wave1 = order[:2]
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                         annotations=ds_annotations(PLAN)))
        await with_plan(admin, "web", PLAN)
        await eventually(lambda: all_running(admin, "web", 6), timeout=20, what="6 pods running")
        app = await controllers.start(sim)
        await eventually(lambda: plan_state(admin, "web"), what="initial state")
        good = await current_hash(admin, "web")
        async with PlanRecorder(sim, "web") as recorder:
            await set_image(admin, "web", BAD)
            bad = await new_hash(admin, "web", good)

            async def rolled_back() -> JSON | None:
                state = await plan_state(admin, "web")
                return state if state and state["phase"] == "rolledBack" else None

            state = await eventually(rolled_back, timeout=30, what="the rollout rolled back")
            assert state["revision"] == bad and state["stableRevision"] == good and state["wave"] == 1, state
            assert state["counts"]["failed"] >= 1 and state["failures"], state
            assert all(f["node"] in wave1 for f in state["failures"]), state
            ds = await template_back_on(admin, "web", OLD)
            # Nothing of the rollout is written onto the DaemonSet but the template: the bad revision is marked in
            # the plan's history.
            assert not any(a.startswith("edgeagent.io/roll") for a in ds["metadata"].get("annotations") or {})
            assert [(h["revision"], h["phase"]) for h in state["history"]][:2] == [(bad, "rolledBack"),
                                                                                  (good, "complete")], state
            # The restored template is the old revision again (the DaemonSet controller renumbers it).
            await eventually(lambda: all_running(admin, "web", 6, OLD), timeout=30, what="wave 1 back on the old image")
            assert await current_hash(admin, "web") == good
            # Only wave 1's nodes were ever touched: to the bad version and back.
            assert set(recorder.terminated_nodes()) == set(wave1), recorder.terminations
            assert sorted(recorder.terminated_nodes()) == sorted(wave1 * 2), recorder.terminations

        reasons = [e["reason"] for e in await plan_events(admin, "web") if e["reason"] != "UpgradingPods"]
        assert reasons == ["WaveStarted", "RolloutAborted", "RolloutRolledBack"], reasons
        events = {e["reason"]: e for e in await plan_events(admin, "web")}
        aborted = events["RolloutAborted"]
        assert aborted["type"] == "Warning" and "maxFailed is 1" in aborted["message"]
        assert any(node in aborted["message"] for node in wave1), aborted["message"]
        assert "CrashLoopBackOff" in aborted["message"] or "not available" in aborted["message"]
        assert good in events["RolloutRolledBack"]["message"]

        # A fixed version rolls as usual (waves, bake), and completes.
        await set_image(admin, "web", FIXED)
        fixed = await new_hash(admin, "web", good)

        async def fixed_complete() -> bool:
            state = await plan_state(admin, "web")
            return state is not None and state["revision"] == fixed and state["phase"] == "complete"

        await eventually(fixed_complete, timeout=30, what="the fixed version rolled out")
        assert (await plan_state(admin, "web") or {})["stableRevision"] == good
        await eventually(lambda: all_running(admin, "web", 6, FIXED), timeout=30, what="all on the fixed version")

        # The bad template applied again (a GitOps re-sync, say): the controller does not roll it.
        async with PlanRecorder(sim, "web") as recorder:
            await set_image(admin, "web", BAD)
            await eventually(lambda: _is(current_hash(admin, "web"), bad), what="the bad revision current again")

            async def warned() -> bool:
                return any(e["reason"] == "RolloutHeld" and e["type"] == "Warning"
                           and f"revision {bad} ({BAD}) was rolled back and is the template again" in e["message"]
                           for e in await plan_events(admin, "web"))

            await eventually(warned, what="a Warning that the rolled-back revision is held")
            # One more reconcile (poked by a harmless annotation) ends after the one that warned: a DaemonSet is
            # never reconciled twice at once.
            seen = reconciles(app)
            await patch_daemonset(admin, "web", {"metadata": {"annotations": {"example.com/poke": "1"}}})
            await eventually(lambda: reconciles(app) > seen, what="the reconcile that warned has finished")
            assert recorder.terminations == []
            assert set((await images_by_node(admin, "web")).values()) == {FIXED}
            final = await plan_state(admin, "web")
            assert final is not None and final["revision"] == fixed and final["phase"] == "complete", final
            assert [c["type"] for c in final["conditions"]] == ["Held"] and bad in final["conditions"][0]["message"]
            held = [e for e in await plan_events(admin, "web") if e["reason"] in ("RolloutHeld", "RolloutRolledBack")]
            assert [e["reason"] for e in held] == ["RolloutRolledBack", "RolloutHeld"], held  # one each


async def _is(value: Any, want: str) -> bool:
    return bool(await value == want)
