"""Issue 19, must-show 3: a NotReady node and a held node in wave 1 are deferred: wave 2 starts without them,
both are upgraded once they return / open, and `rollout status` names them and why."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime
from typing import Any

from edgeagent.config import RolloutConfig
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import is_terminating
from edgeagent.rollout import command as rollout_command
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    images_by_node,
    node_ready,
    pods_of,
    set_image,
)
from tests.support.rollout_plans import (
    PlanRecorder,
    documented_order,
    ds_annotations,
    plan_events_through,
    plan_state,
    with_plan,
)
from tests.support.rollout_plans import new_hash as wait_new_hash
from tests.support.waiting import eventually

JSON = dict[str, Any]
OLD, NEW = "nginx:1.19.4", "nginx:1.20"
PLAN = {"edgeagent.io/rollout-steps": "3,100%", "edgeagent.io/rollout-bake": "1s",
        "apps.openyurt.io/max-unavailable": "50%"}


async def set_held(admin: KubeClient, node: str, held: bool) -> None:
    """What a held agent publishes on its node's pods (edgeagent/agent/policy/held.py)."""
    pod = next(p for p in await pods_of(admin, "web") if p["spec"]["nodeName"] == node and not is_terminating(p))
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cond = ({"type": "UpgradeHeld", "status": "True", "reason": "HeldByOperator", "message": "site visit",
             "lastTransitionTime": now} if held else
            {"type": "UpgradeHeld", "status": "False", "reason": "Open", "message": "", "lastTransitionTime": now})
    await admin.patch(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/status",
                      {"metadata": {"uid": pod["metadata"]["uid"]}, "status": {"conditions": [cond]}})


async def status_text(sim: SimCluster) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    cfg = RolloutConfig(daemonset="web", namespace="default", kubeconfig=sim.admin_kubeconfig)
    code = await asyncio.to_thread(rollout_command.main, cfg, out=out, err=err)
    return code, out.getvalue() + err.getvalue()


async def test_not_ready_and_held_nodes_are_deferred_and_caught_up(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=6)
    order = documented_order(list(sim.node_names))
    normal, offline, held = order[:3]
    wave2 = order[3:]
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                         annotations=ds_annotations(PLAN)))
        await with_plan(admin, "web", PLAN)
        await eventually(lambda: all_running(admin, "web", 6), timeout=20, what="6 pods running")
        await controllers.start(sim)
        await eventually(lambda: plan_state(admin, "web"), what="initial state")
        await set_held(admin, held, True)
        sim.set_node_ready(offline, False)

        async def offline_not_ready() -> bool:
            return not await node_ready(admin, offline)

        await eventually(offline_not_ready, what=f"{offline} NotReady")

        old_hash = await current_hash(admin, "web")
        async with PlanRecorder(sim, "web") as recorder:
            await set_image(admin, "web", NEW)
            new_hash = await wait_new_hash(admin, "web", old_hash)

            async def wave_two() -> JSON | None:
                state = await plan_state(admin, "web")
                return state if state and state["revision"] == new_hash and state["wave"] == 2 else None

            state = await eventually(wave_two, timeout=30, what="wave 2 started without the deferred nodes")
            started = await eventually(lambda: recorder.find(2, "progressing", new_hash), what="recorded")
            # Wave 2 started while the deferred nodes still ran the old revision.
            assert started.pods[held][0] != new_hash and started.pods[offline][0] != new_hash, started.pods
            assert started.pods[normal] == (new_hash, True)
            finished = next(e for e in await plan_events_through(admin, "web", "WaveFinished")
                            if e["reason"] == "WaveFinished")
            assert "2 deferred" in finished["message"] and offline in finished["message"]
            assert held in finished["message"]
            assert state["counts"]["deferred"] >= 2

            code, text = await status_text(sim)
            lines = {line.split()[0]: line for line in text.splitlines() if line.split()}
            # The fleet's states (one state model): a deferred node is offline, or held with its agent's why.
            assert " offline " in lines[offline] and "Ready is" in lines[offline], text
            assert " held " in lines[held], text
            assert code in (0, 3), text

            # Wave 2's nodes are upgraded meanwhile; the deferred two still wait for their node.
            async def wave_two_done() -> bool:
                images = await images_by_node(admin, "web")
                return all(images.get(n) == NEW for n in wave2)

            await eventually(wave_two_done, timeout=30, what="wave 2 upgraded")
            images = await images_by_node(admin, "web")
            assert images[held] == OLD and images[offline] == OLD

            # They return / open and catch up.
            sim.set_node_ready(offline, True)
            await set_held(admin, held, False)
            await eventually(lambda: all_running(admin, "web", 6, NEW), timeout=30, what="every node upgraded")
            assert sorted(recorder.terminated_nodes()) == sorted(order), recorder.terminations

            async def complete() -> bool:
                state = await plan_state(admin, "web")
                return state is not None and state["phase"] == "complete"

            await eventually(complete, timeout=20, what="rollout complete")
