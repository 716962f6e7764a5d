"""Issue 19, must-show 1 (issue 35: the plan a RolloutPlan object): a 20-node DaemonSet with steps `1,25%,100%` and
bake `3s` (AdvancedRollingUpdate):
each wave starts only after the previous one is finished and has stayed healthy for the bake, and the nodes
go in the documented order (sha256 of the name, no canary or group)."""

from __future__ import annotations

from typing import Any

from edgeagent.kube.client import KubeClient
from edgeagent.kube.timeutil import parse_time
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
from tests.support.rollout_plans import (
    PlanRecorder,
    create_plan,
    documented_order,
    ds_annotations,
    install_plan_crd,
    plan_events_through,
    plan_state,
    spec_of,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
NEW = "nginx:1.20"
PLAN = {"edgeagent.io/rollout-steps": "1,25%,100%", "edgeagent.io/rollout-bake": "3s",
        "apps.openyurt.io/max-unavailable": "50%"}


async def test_waves_wait_for_the_bake_and_follow_the_documented_order(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=20)
    async with admin_client(sim) as admin:
        await run_waves(sim, admin, controllers)


async def run_waves(sim: object, admin: KubeClient, controllers: Controllers) -> None:
    from edgeagent.sim.cluster import SimCluster
    assert isinstance(sim, SimCluster)
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                     annotations=ds_annotations(PLAN)))
    await install_plan_crd(admin)
    await create_plan(admin, "web", spec_of("web", PLAN))
    await eventually(lambda: all_running(admin, "web", 20), timeout=30, what="20 pods running")
    await controllers.start(sim)
    # A DaemonSet whose pods all run the current revision is complete at once, with no waves.
    first: JSON = await eventually(lambda: plan_state(admin, "web"), what="the initial rollout-state")
    assert first["phase"] == "complete", first
    old_hash = await current_hash(admin, "web")

    order = documented_order(list(sim.node_names))
    waves = [order[:1], order[1:5], order[5:]]
    async with PlanRecorder(sim, "web") as recorder:
        await set_image(admin, "web", NEW)

        async def complete() -> bool:
            state = await plan_state(admin, "web")
            return state is not None and state["phase"] == "complete" and state["revision"] != old_hash

        await eventually(complete, timeout=90, what="the rollout complete")
        await eventually(lambda: all_running(admin, "web", 20, NEW), timeout=30, what="all on the new image")

    new_hash = await current_hash(admin, "web")
    assert recorder.phases(new_hash) == [(1, "progressing"), (1, "baking"), (2, "progressing"), (2, "baking"),
                                 (3, "progressing"), (3, "baking"), (3, "complete")]
    final = recorder.states[-1].state
    assert final["revision"] == new_hash and final["stableRevision"] == old_hash
    assert final["waves"] == 3 and final["counts"]["nodes"] == 20 and final["counts"]["upgraded"] == 20

    # Each node's pod was replaced exactly once, in its wave, after the wave had started.
    assert sorted(recorder.terminated_nodes()) == sorted(order), recorder.terminations
    for index, wave in enumerate(waves, start=1):
        started = recorder.first(index, "progressing", new_hash)
        for node in wave:
            assert recorder.first_termination(node) >= started.time, (node, index)
        later = [n for w in waves[index:] for n in w]
        for node in later:
            assert recorder.first_termination(node) > started.time
        # When the wave was declared finished, every node of it ran the new revision, Ready.
        baking = recorder.first(index, "baking", new_hash)
        for node in (n for w in waves[:index] for n in w):
            assert baking.pods.get(node) == (new_hash, True), (node, baking.pods.get(node))
        # The next wave starts (and its first pod is deleted) only when the bake is over.
        bake_started = parse_time(baking.state["bakeStartedAt"])
        assert bake_started is not None
        if index < len(waves):
            following = recorder.first(index + 1, "progressing", new_hash)
            assert following.time >= bake_started + 3
            assert min(recorder.first_termination(n) for n in waves[index]) >= bake_started + 3

    events = [e for e in await plan_events_through(admin, "web", "RolloutComplete")
              if e["reason"] != "UpgradingPods"]
    assert [e["reason"] for e in events] == ["WaveStarted", "WaveFinished", "WaveStarted", "WaveFinished",
                                             "WaveStarted", "WaveFinished", "RolloutComplete"]
    assert all(e["type"] == "Normal" for e in events)
    # A later wave's WaveStarted is recorded after that wave's first deletions, which do not wait for it (the
    # Event's name carries the nanosecond it was made).
    for index, event in enumerate([e for e in events if e["reason"] == "WaveStarted"][1:], start=2):
        made = int(str(event["metadata"]["name"]).rsplit(".", 1)[1], 16) / 1e9
        assert made >= min(recorder.first_termination(n) for n in waves[index - 1]), index
    assert f"({waves[0][0]})" in events[0]["message"] and "1/3" in events[0]["message"]
    assert ", ".join(waves[1]) in events[2]["message"]
