"""Issues 19/23: a rollout plan stops a crash-looping version within its progress deadline, even when the
version's containers come up Ready for a moment before each crash (a readiness probe passes, then the process
dies, as on a real kubelet).

Each crash turns the pod not Ready again; the controller used to give a pod that turned not Ready a fresh
deadline, so such a version kept sliding it and was only failed once the kubelet's back-off (here 1, 2, 4, 8 s)
outgrew the deadline: ~17 s after the pod came with a 6 s deadline (the 1800 s soak: 266 s with 90 s). A pod that
has crashed is held to the deadline it got when it came.
"""

from __future__ import annotations

import time
from typing import Any

from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    set_image,
    template_back_on,
)
from tests.support.rollout_plans import ds_annotations, new_hash, plan_state, with_plan
from tests.support.waiting import eventually

JSON = dict[str, Any]
OLD, BAD = "nginx:1.19.4", "nginx:flaky"
DEADLINE = 6
# The controller's reaction after the deadline (a reconcile, the rollback's writes) on a loaded shared machine.
SLACK = 5
# Long bake: wave 1's pods are Ready now and then, and the plan must not move on to wave 2 meanwhile.
PLAN = {"edgeagent.io/rollout-steps": "2,100%", "edgeagent.io/rollout-bake": "60s",
        "edgeagent.io/on-failure": "rollback", "edgeagent.io/max-failed": "1",
        "edgeagent.io/progress-deadline-seconds": str(DEADLINE), "apps.openyurt.io/max-unavailable": "50%"}


async def test_version_ready_briefly_before_each_crash_is_rolled_back_within_the_deadline(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=4, kubelet_backoff=1.0)
    sim.set_image(BAD, crash=True, ready_seconds=1.0)
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                         annotations=ds_annotations(PLAN)))
        await with_plan(admin, "web", PLAN)
        await eventually(lambda: all_running(admin, "web", 4), timeout=20, what="4 pods running")
        await controllers.start(sim)
        await eventually(lambda: plan_state(admin, "web"), what="initial state")
        good = await current_hash(admin, "web")
        await set_image(admin, "web", BAD)
        started = time.monotonic()  # the bad pods come after this: their deadlines end no earlier than here + 6 s
        bad = await new_hash(admin, "web", good)

        async def rolled_back() -> JSON | None:
            state = await plan_state(admin, "web")
            return state if state and state["phase"] == "rolledBack" else None

        # Without the fix the rollback still comes, late (~17 s): wait long enough to say how late.
        state = await eventually(rolled_back, timeout=60, what="the rollout rolled back")
        elapsed = time.monotonic() - started
        assert state["revision"] == bad and state["stableRevision"] == good, state
        assert state["failures"], state
        assert elapsed <= DEADLINE + SLACK, (
            f"rolled back {elapsed:.1f}s after the bad version came; its pods' deadline is {DEADLINE}s", state)
        await template_back_on(admin, "web", OLD)
