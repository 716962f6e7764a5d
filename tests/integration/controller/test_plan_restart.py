"""Issue 19, must-show 6 (issue 35: the state in the RolloutPlan's status): the rollout continues from the status.

- `kill -9` of the controller process in the middle of a bake: the next process continues the same wave, and
  the bake ends at the original time (not a fresh bake from the restart).
- A leader change in the middle of a wave: the new leader continues the same wave.

In both, no pod is deleted twice (the sim records every DELETE) and no wave is skipped or started twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.kube.timeutil import parse_time
from edgeagent.rollout.machine import OPEN_GATE, Decision
from edgeagent.rollout.state import RolloutState
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    controller_deletions,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    events_for,
    set_image,
)
from tests.support.rollout_plans import (
    PlanRecorder,
    ds_annotations,
    get_plan,
    new_hash,
    plan_events_through,
    plan_state,
    with_plan,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
NEW = "nginx:1.20"
BAKE = 8
# The controller is killed this long into the bake: a bake restarted by the next process would then end at least
# this much later than the original one.
KILL_AFTER = 3


@contextlib.asynccontextmanager
async def controller_process(sim: SimCluster, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    args = [sys.executable, "-m", "edgeagent.cli", "controller", "--kubeconfig", str(sim.admin_kubeconfig),
            "--metrics-port", "0", "--log-format", "json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEAGENT_")}
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(*args, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def deleted_once(sim: SimCluster) -> None:
    uids = Counter(d["uid"] for d in controller_deletions(sim) if d.get("uid"))
    twice = {uid: n for uid, n in uids.items() if n > 1}
    assert not twice, f"pods deleted more than once: {twice}"


async def complete(admin: KubeClient, revision: str) -> bool:
    state = await plan_state(admin, "web")
    return state is not None and state["revision"] == revision and state["phase"] == "complete"


@pytest.mark.slow(seconds=20)
async def test_kill_9_mid_bake_keeps_the_wave_and_the_bake_clock(
        sim_factory: SimFactory, tmp_path: Path) -> None:
    sim = await sim_factory(nodes=6)
    plan = {"edgeagent.io/rollout-steps": "2,100%", "edgeagent.io/rollout-bake": f"{BAKE}s",
            "apps.openyurt.io/max-unavailable": "100%"}
    log = tmp_path / "controller.log"
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                     annotations=ds_annotations(plan)))
        await with_plan(admin, "web", plan)
        await eventually(lambda: all_running(admin, "web", 6), timeout=20, what="6 pods running")
        async with PlanRecorder(sim, "web") as recorder:
            async with controller_process(sim, log) as first:
                await eventually(lambda: plan_state(admin, "web"), timeout=20, what="initial state")
                old = await current_hash(admin, "web")
                await set_image(admin, "web", NEW)
                revision = await new_hash(admin, "web", old)
                baking = await eventually(lambda: recorder.find(1, "baking", revision), timeout=30,
                                          what="wave 1 baking")
                bake_started = parse_time(baking.state["bakeStartedAt"])
                assert bake_started is not None
                # The scenario needs the kill well inside the bake (a point in time, not a synchronisation).
                await eventually(lambda: time.time() >= bake_started + KILL_AFTER, timeout=BAKE, what="mid-bake")
                assert recorder.phases(revision)[-1] == (1, "baking")
                first.send_signal(signal.SIGKILL)
                await first.wait()
            async with controller_process(sim, log):
                await eventually(lambda: complete(admin, revision), timeout=60, what="rollout complete")
                # Its Event follows the state write: wait for it while the controller still runs (leaving the
                # block stops it, and a loaded machine stopped it in between, so the Event was never sent).
                events = await plan_events_through(admin, "web", "RolloutComplete")

        assert recorder.phases(revision) == [(1, "progressing"), (1, "baking"), (2, "progressing"), (2, "baking"),
                                             (2, "complete")]
        # The same bake: its start never rewritten; wave 2 at its original end, not a full bake after the restart.
        bakes = {s.state["bakeStartedAt"] for s in recorder.states
                 if s.state.get("revision") == revision and s.state["wave"] == 1 and s.state["phase"] == "baking"}
        assert bakes == {baking.state["bakeStartedAt"]}
        wave2 = recorder.first(2, "progressing", revision)
        # A bake started again by the new process would end no earlier than bake_started + KILL_AFTER + BAKE.
        assert bake_started + BAKE <= wave2.time < bake_started + BAKE + KILL_AFTER - 1, (bake_started, wave2.time)
        reasons = [e["reason"] for e in events if e["reason"] != "UpgradingPods"]
        assert reasons == ["WaveStarted", "WaveFinished", "WaveStarted", "WaveFinished", "RolloutComplete"], reasons
        await eventually(lambda: all_running(admin, "web", 6, NEW), what="all upgraded")
        deleted_once(sim)


@pytest.mark.slow
async def test_leader_change_mid_wave_continues_the_same_wave(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=10)
    plan = {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1s",
            "apps.openyurt.io/max-unavailable": "1"}
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                     annotations=ds_annotations(plan)))
        await with_plan(admin, "web", plan)
        await eventually(lambda: all_running(admin, "web", 10), timeout=20, what="10 pods running")
        a = await controllers.start(sim, leader_elect=True, release_lease=False)
        b = await controllers.start(sim, leader_elect=True, release_lease=False)
        leader = await eventually(lambda: a if a.is_leader else b if b.is_leader else None, what="a leader")
        standby = b if leader is a else a
        await eventually(lambda: plan_state(admin, "web"), what="initial state")
        old = await current_hash(admin, "web")
        async with PlanRecorder(sim, "web") as recorder:
            await set_image(admin, "web", NEW)
            revision = await new_hash(admin, "web", old)
            wave2 = await eventually(lambda: recorder.find(2, "progressing", revision), timeout=30,
                                     what="wave 2 started")

            def some_of_wave_two_replaced() -> bool:
                return sum(1 for _, t, _ in recorder.terminations if t > wave2.time) >= 2

            await eventually(some_of_wave_two_replaced, timeout=20, what="wave 2 under way")
            await controllers.stop(leader)  # a crash: the Lease is not released
            await eventually(lambda: standby.is_leader, timeout=10, what="the standby takes over")
            await eventually(lambda: complete(admin, revision), timeout=60, what="rollout complete")

        assert recorder.phases(revision) == [(1, "progressing"), (1, "baking"), (2, "progressing"), (2, "baking"),
                                             (2, "complete")]
        starts = {s.state["waveStartedAt"] for s in recorder.states
                  if s.state.get("revision") == revision and s.state["wave"] == 2}
        assert starts == {wave2.state["waveStartedAt"]}, starts
        reasons = [e["reason"] for e in await plan_events_through(admin, "web", "RolloutComplete")
                   if e["reason"] != "UpgradingPods"]
        assert reasons == ["WaveStarted", "WaveFinished", "WaveStarted", "WaveFinished", "RolloutComplete"], reasons
        # Both controllers deleted pods of wave 2: the new leader continued the wave the old one had started.
        deleters = {e.get("reportingInstance") for e in await events_for(admin, "web")
                    if e["reason"] == "UpgradingPods"}
        assert deleters == {leader.identity, standby.identity}, deleters
        await eventually(lambda: all_running(admin, "web", 10, NEW), what="all upgraded")
        deleted_once(sim)


async def test_a_decision_from_a_stale_state_is_not_written(sim: SimCluster, admin: KubeClient,
                                                            controllers: Controllers) -> None:
    """The status write carries the plan's resourceVersion as precondition: a controller whose cache still shows an
    older plan (a new leader behind its predecessor's last write) writes nothing and records no Event."""
    plan = {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1h"}
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                     annotations=ds_annotations(plan)))
    await with_plan(admin, "web", plan)
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    app = await controllers.start(sim)
    await eventually(lambda: plan_state(admin, "web"), what="initial state")
    first_rv = (await get_plan(admin, "web"))["metadata"]["resourceVersion"]
    old = await current_hash(admin, "web")
    await set_image(admin, "web", NEW)
    revision = await new_hash(admin, "web", old)

    async def started() -> JSON | None:
        state = await plan_state(admin, "web")
        return state if state and state["revision"] == revision else None

    current = await eventually(started, what="wave 1 started")
    controller = app.controller
    assert controller is not None
    # What a controller that missed the last write would hold: the plan as it was with the initial status.
    stale = await get_plan(admin, "web")
    stale["metadata"]["resourceVersion"] = first_rv
    ds = await admin.get("/apis/apps/v1/namespaces/default/daemonsets/web")
    state = RolloutState.from_json(json.dumps(current))[0]
    assert state is not None
    decision = Decision(OPEN_GATE, state=dataclasses.replace(state, wave=2),
                        events=[("Normal", "WaveStarted", "a duplicate")])
    story: list[tuple[str, str, str]] = []
    assert await controller._write_status(stale, ds, decision.state, None, story, decision.events, decision) is False
    assert story == []  # no Event held back to be recorded either
    assert await plan_state(admin, "web") == current
    assert not [e for e in await events_for(admin, "web") if e["message"] == "a duplicate"]
