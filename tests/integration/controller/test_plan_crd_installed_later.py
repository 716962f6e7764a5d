"""Issue 35 (log noise): a controller started before the RolloutPlan CRD is installed says so once, in one clear
line, keeps retrying with backoff, and picks the plans up when the CRD appears, without a restart.

Before, every backoff of the rolloutplans informer logged the 404 as a warning (`list_watch_failed_backing_off`):
a line every 10 s for as long as the CRD stayed away."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from edgeagent.controller.reconciler import PLANS_NOT_SERVED, PLANS_PATH
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    set_image,
)
from tests.support.rollout_plans import PlanRecorder, create_plan, install_plan_crd, plan_state
from tests.support.waiting import eventually

JSON = dict[str, Any]
NODES = 4
NEW = "nginx:1.20"


async def test_plans_start_working_when_the_crd_is_installed_and_its_absence_is_said_once(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=NODES)

    def refused_lists(count: int) -> bool:
        """The informer's lists of RolloutPlans answered 404, at least `count` of them (its backoff retries)."""
        found = [e for e in sim.audit.find("GET", PLANS_PATH) if "watch=" not in e["query"] and e.get("code") == 404]
        return len(found) >= count

    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                         annotations={"apps.openyurt.io/max-unavailable": "50%"}))
        await eventually(lambda: all_running(admin, "web", NODES), timeout=30, what="the pods running")
        with capture_logs() as logs:
            await controllers.start(sim)
            # Backoff 0.2 s doubling (jittered): five tries within a few seconds, each one a 404.
            await eventually(lambda: refused_lists(5), timeout=30, what="five RolloutPlan lists answered 404")
            absent_lines = [e for e in logs if e.get("informer") == "rolloutplans"]

            await install_plan_crd(admin)
            await create_plan(admin, "web", {"steps": [1, "100%"]})
            # The same controller, not restarted: the plan gets a status once the informer's next try lists it.
            first: JSON = await eventually(lambda: plan_state(admin, "web"), timeout=60,
                                           what="the plan's first status, from the running controller")
            assert first["phase"] == "complete", first
            old_hash = await current_hash(admin, "web")
            async with PlanRecorder(sim, "web") as recorder:
                await set_image(admin, "web", NEW)

                async def complete() -> bool:
                    state = await plan_state(admin, "web")
                    return state is not None and state["phase"] == "complete" and state["revision"] != old_hash

                await eventually(complete, timeout=90, what="the rollout complete, wave by wave")
            new_hash = await current_hash(admin, "web")
            assert [wave for wave, _ in recorder.phases(new_hash)][:1] == [1], recorder.phases(new_hash)
            assert (2, "complete") in recorder.phases(new_hash), recorder.phases(new_hash)

    plans = [e for e in logs if e.get("informer") == "rolloutplans"]
    # While the CRD was missing: the one line saying so, a warning, and no other warning about it.
    not_served = [e for e in absent_lines if e["event"] == "resource_not_served"]
    assert len(not_served) == 1 and not_served[0]["log_level"] == "warning", absent_lines
    assert not_served[0]["message"] == PLANS_NOT_SERVED[0], not_served
    assert "rolloutplans.edgeagent.io is not installed" in not_served[0]["message"]
    assert [e for e in absent_lines if e["log_level"] in ("warning", "error")] == not_served, absent_lines
    # Over the whole test: said once, and once that the plans are on, at info level.
    assert len([e for e in plans if e["event"] == "resource_not_served"]) == 1, plans
    served = [e for e in plans if e["event"] == "resource_served"]
    assert len(served) == 1 and served[0]["log_level"] == "info", plans
    assert served[0]["message"] == PLANS_NOT_SERVED[1], served
    assert [e for e in plans if e["log_level"] in ("warning", "error")] == not_served, plans
