"""A rollback's template restore that did not follow its status write is done later, never left half-done.

Found by the short soak under load: a controller wrote the plan's status (RolledBack), lost its leadership before
the template PATCH, and every later pass read the bad revision, still the template, as one an operator had set
again: held, the fleet left on the bad version for good. The same happened when the PATCH met a 5xx. The status
write now carries a pending `TemplateRestored=False` condition naming the DaemonSet's generation; the restore is
done again while the DaemonSet is at that generation, by this controller or the next one.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
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
    template_back_on,
)
from tests.support.rollout_plans import (
    ds_annotations,
    get_plan,
    new_hash,
    plan_events,
    plan_events_through,
    plan_state,
    steer,
    with_plan,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
OLD, BAD, FIXED = "nginx:1.19.4", "nginx:crashing", "nginx:1.20"
PLAN = {"edgeagent.io/rollout-steps": "2,100%", "edgeagent.io/rollout-bake": "1s",
        "edgeagent.io/on-failure": "rollback", "edgeagent.io/max-failed": "1",
        "edgeagent.io/progress-deadline-seconds": "2", "apps.openyurt.io/max-unavailable": "50%"}
DS = "/apis/apps/v1/namespaces/default/daemonsets/web"
CONTROLLER = "edgeagent-controller/"


async def fault(sim: SimCluster, **rule: Any) -> None:
    async with aiohttp.ClientSession() as http, http.post(f"{sim.url}/sim/v1/faults", json={
            "durationSeconds": 300, "verbs": ["PATCH"], "path": DS, "userAgent": CONTROLLER, **rule}) as resp:
        assert resp.status == 201, await resp.text()


async def clear_faults(sim: SimCluster) -> None:
    async with aiohttp.ClientSession() as http, http.delete(f"{sim.url}/sim/v1/faults") as resp:
        assert resp.status in (200, 204), await resp.text()


async def rolled_back_messages(admin: KubeClient) -> list[str]:
    return [e.get("message", "") for e in await plan_events(admin, "web") if e["reason"] == "RolloutRolledBack"]


def restore_condition(plan: JSON) -> JSON | None:
    found = [c for c in (plan.get("status") or {}).get("conditions") or [] if c.get("type") == "TemplateRestored"]
    return found[0] if found else None


async def pending_restore(admin: KubeClient) -> JSON:
    """The plan once it says RolledBack with its restore pending."""
    async def probe() -> JSON | None:
        plan = await get_plan(admin, "web")
        cond = restore_condition(plan)
        return plan if cond is not None and (plan.get("status") or {}).get("phase") == "RolledBack" else None

    found: JSON = await eventually(probe, timeout=30, what="the rollback written, its restore pending")
    return found


async def planned_on_old(sim: SimCluster, admin: KubeClient, controllers: Controllers) -> str:
    """A plan DaemonSet on OLD on 4 nodes, the controller running: its revision."""
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                     annotations=ds_annotations(PLAN)))
    await with_plan(admin, "web", PLAN)
    await eventually(lambda: all_running(admin, "web", 4), timeout=20, what="4 pods running")
    await controllers.start(sim)
    await eventually(lambda: plan_state(admin, "web"), what="initial state")
    good = await current_hash(admin, "web")
    assert good is not None
    return good


async def bad_version_out(sim: SimCluster, admin: KubeClient, controllers: Controllers) -> tuple[str, str]:
    """`planned_on_old`, then BAD set: (good, bad) revisions."""
    good = await planned_on_old(sim, admin, controllers)
    await set_image(admin, "web", BAD)
    return good, await new_hash(admin, "web", good)


async def refused_restore(sim: SimCluster, admin: KubeClient, controllers: Controllers) -> tuple[str, str, JSON]:
    """Every template PATCH of the controller refused (500), then a bad version out: (good, bad, the plan once
    its rollback is written with the restore pending)."""
    await fault(sim, codes=[500])
    good, bad = await bad_version_out(sim, admin, controllers)
    return good, bad, await pending_restore(admin)


async def test_a_restore_refused_by_the_api_server_is_done_by_the_next_controller(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=4)
    sim.set_image(BAD, crash=True)
    async with admin_client(sim) as admin:
        good, bad, plan = await refused_restore(sim, admin, controllers)
        cond = restore_condition(plan)
        ds = await get_daemonset(admin, "web")
        # The condition names the generation whose template it replaces, as an integer (the CRD's schema).
        assert cond is not None and cond["status"] == "False" and cond["reason"] == "Pending", cond
        assert cond["observedGeneration"] == ds["metadata"]["generation"], (cond, ds["metadata"])
        assert bad in cond["message"] and good in cond["message"], cond
        assert image_of(ds["spec"]["template"]) == BAD
        await eventually(lambda: [e for e in sim.audit.find("PATCH", DS) if e.get("code") == 500], timeout=10,
                         what="the controller's restore refused with 500")
        # The abort is told although the restore failed (the status says it already).
        await plan_events_through(admin, "web", "RolloutAborted")
        # The controller dies (no lease release: a crash); the API server recovers; another one starts.
        await controllers.stop_all()
        await clear_faults(sim)
        await controllers.start(sim)
        await template_back_on(admin, "web", OLD)
        assert await current_hash(admin, "web") == good

        async def settled() -> JSON | None:
            found = await get_plan(admin, "web")
            return found if restore_condition(found) is None else None

        plan = await eventually(settled, timeout=30, what="the pending restore settled")
        status = plan["status"]
        assert status["phase"] == "RolledBack" and status["revision"] == bad and status["stableRevision"] == good
        await eventually(lambda: all_running(admin, "web", 4, OLD), timeout=30, what="every node back on OLD")
        reasons = [e["reason"] for e in await plan_events(admin, "web")]
        # Restored, not held: the bad revision was never read as one an operator set again.
        assert "RolloutHeld" not in reasons and "RolloutRolledBack" in reasons, reasons
        assert reasons.index("RolloutAborted") < reasons.index("RolloutRolledBack"), reasons


async def test_a_restore_whose_answer_was_lost_is_not_done_twice_nor_called_failed(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=4)
    sim.set_image(BAD, crash=True)
    async with admin_client(sim) as admin:
        # The PATCH is applied, its answer replaced by a 500: the controller cannot know it worked.
        await fault(sim, codes=[500], after=True)
        good, _ = await bad_version_out(sim, admin, controllers)
        await template_back_on(admin, "web", OLD)
        generation = (await get_daemonset(admin, "web"))["metadata"]["generation"]

        async def settled() -> JSON | None:
            found = await get_plan(admin, "web")
            status = found.get("status") or {}
            return found if status.get("phase") == "RolledBack" and restore_condition(found) is None else None

        await eventually(settled, timeout=30, what="the pending restore settled")
        await clear_faults(sim)
        await eventually(lambda: all_running(admin, "web", 4, OLD), timeout=30, what="every node back on OLD")
        # One template change: the restore was not applied twice (its test of the template refused a repeat).
        assert (await get_daemonset(admin, "web"))["metadata"]["generation"] == generation
        assert await current_hash(admin, "web") == good
        messages = [(e["reason"], e.get("message", "")) for e in await plan_events(admin, "web")]
        assert not [m for r, m in messages if "not restored" in m or "not on revision" in m], messages
        assert "RolloutHeld" not in [r for r, _ in messages], messages


async def test_an_operators_template_change_before_the_restore_wins_and_is_said(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=4)
    sim.set_image(BAD, crash=True)
    async with admin_client(sim) as admin:
        _, bad, _ = await refused_restore(sim, admin, controllers)
        # The operator fixes it by hand while the restore keeps failing: their template wins.
        await set_image(admin, "web", FIXED)
        fixed = await new_hash(admin, "web", bad)

        async def warned() -> list[str] | None:
            return await rolled_back_messages(admin) or None

        messages = await eventually(warned, timeout=30, what="the restore said not done")
        assert any("template not on revision" in m and fixed in m for m in messages), messages
        await clear_faults(sim)
        # FIXED rolls by the plan (it is a new revision), and the template is never put back on OLD.
        await eventually(lambda: all_running(admin, "web", 4, FIXED), timeout=60, what="every node on FIXED")
        assert image_of((await get_daemonset(admin, "web"))["spec"]["template"]) == FIXED
        state = await plan_state(admin, "web")
        assert state is not None and state["revision"] == fixed and restore_condition(
            await get_plan(admin, "web")) is None, state


async def test_the_bad_revision_set_again_while_the_restore_was_pending_is_held_not_restored(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    """The generation tells a restore still due from a template an operator set since, even back to the bad one."""
    sim = await sim_factory(nodes=4)
    sim.set_image(BAD, crash=True)
    async with admin_client(sim) as admin:
        _, bad, plan = await refused_restore(sim, admin, controllers)
        await controllers.stop_all()
        # With no controller running, someone moves the template away and back to the bad version.
        await set_image(admin, "web", FIXED)
        await set_image(admin, "web", BAD)
        assert await current_hash(admin, "web") == bad
        ds = await get_daemonset(admin, "web")
        cond = restore_condition(plan)
        assert cond is not None and ds["metadata"]["generation"] == cond["observedGeneration"] + 2, (cond, ds)
        await clear_faults(sim)
        await controllers.start(sim)

        async def held() -> list[str] | None:
            reasons = [e["reason"] for e in await plan_events(admin, "web")]
            return reasons if "RolloutHeld" in reasons else None

        await eventually(held, timeout=30, what="the bad revision held")
        assert restore_condition(await get_plan(admin, "web")) is None
        assert image_of((await get_daemonset(admin, "web"))["spec"]["template"]) == BAD
        assert not [e for e in sim.audit.find("PATCH", DS) if e.get("code") == 200
                    and str(e.get("userAgent", "")).startswith(CONTROLLER)], "the controller restored the template"


async def test_an_undo_tells_its_story(sim_factory: SimFactory, controllers: Controllers) -> None:
    """`rollout undo` returns a hold from the reconcile: its Events were dropped with it."""
    sim = await sim_factory(nodes=4)
    async with admin_client(sim) as admin:
        good = await planned_on_old(sim, admin, controllers)
        await set_image(admin, "web", FIXED)
        await new_hash(admin, "web", good)

        async def complete() -> bool:
            state = await plan_state(admin, "web")
            return state is not None and state["phase"] == "complete"

        await eventually(complete, timeout=60, what="FIXED rolled")
        await steer(admin, "web", "undo")
        await template_back_on(admin, "web", OLD)

        async def told() -> list[str] | None:
            return await rolled_back_messages(admin) or None

        messages = await eventually(told, timeout=30, what="the undo's RolloutRolledBack Event")
        assert any("template restored" in m for m in messages), messages
