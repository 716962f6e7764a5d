"""Issue 19 (the controller at 100,000 nodes): a wave change of an OTA rollout re-derives only the pods of the
nodes it moves, and the conditions it writes stay exactly right across wave 1 -> 2 -> 3 and an abort.

Before, the OTA tracker started over from every pod at each wave change (~360 ms at 100,000 pods); the
tracker's start-over count tells the two apart here, the conditions in the cluster tell that nothing was
missed. The test deletes each reached pod itself, as its agent would once told `True`."""

from __future__ import annotations

from typing import Any

from edgeagent.controller.app import ControllerApp
from edgeagent.controller.ota import OtaFacts
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import is_pod_ready, is_terminating, uid_of
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
    pods_of,
    set_image,
)
from tests.integration.controller.test_plan_ota import conditions_by_node
from tests.support.rollout_plans import documented_order, ds_annotations, new_hash, plan_state, steer, with_plan
from tests.support.waiting import eventually

JSON = dict[str, Any]
NEW = "nginx:1.20"
# A bake far longer than the test: only a promotion moves the rollout on, when the test says so.
PLAN = {"edgeagent.io/rollout-steps": "1,25%,100%", "edgeagent.io/rollout-bake": "1h"}
NODES = 20


async def ota_facts(app: ControllerApp, admin: KubeClient) -> OtaFacts:
    controller = app.controller
    assert controller is not None
    uid = uid_of(await get_daemonset(admin, "ota"))
    return controller._pods_by_owner[uid].tracker(OtaFacts)


async def upgrade_wave(admin: KubeClient, nodes: list[str], hash_: str, wave: int) -> None:
    """Delete the pods of `nodes` (what their agents do), then wait for the wave to bake."""
    for pod in await pods_of(admin, "ota"):
        if pod["spec"]["nodeName"] in nodes and not is_terminating(pod):
            await admin.delete(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}")

    async def baking() -> bool:
        state = await plan_state(admin, "ota")
        return bool(state and state["revision"] == hash_ and state["wave"] == wave and state["phase"] == "baking")

    await eventually(baking, timeout=30, what=f"wave {wave} upgraded and baking")


async def test_a_wave_change_re_derives_only_the_pods_it_moves_and_writes_exactly_the_right_conditions(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim: SimCluster = await sim_factory(nodes=NODES)
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA", annotations=ds_annotations(PLAN)))
        await with_plan(admin, "ota", PLAN)
        await eventually(lambda: all_running(admin, "ota", NODES), timeout=30, what=f"{NODES} pods running")
        app = await controllers.start(sim)
        order = documented_order(list(sim.node_names))
        waves = [order[:1], order[1:5], order[5:]]
        old_hash = await current_hash(admin, "ota")
        await set_image(admin, "ota", NEW)
        hash_ = await new_hash(admin, "ota", old_hash)
        message = f"controllerrevision: {hash_}"

        async def conditions_are(want: dict[str, tuple[str, str, str]]) -> bool:
            return await conditions_by_node(admin) == want

        def expected(reached: int, upgraded: int, frozen: bool = False) -> dict[str, tuple[str, str, str]]:
            """Upgraded nodes False (no reason), reached ones True/WaveReached, the others WaitingForWave."""
            want: dict[str, tuple[str, str, str]] = {}
            for k, nodes in enumerate(waves, start=1):
                for node in nodes:
                    if k <= upgraded:
                        want[node] = ("False", "", message)
                    elif k <= reached and not frozen:
                        want[node] = ("True", "WaveReached", message)
                    else:
                        want[node] = ("False", "WaitingForWave", message)
            return want

        await eventually(lambda: conditions_are(expected(1, 0)), timeout=30, what="wave 1 True, the rest waiting")
        facts = await ota_facts(app, admin)
        for k in (1, 2):
            await upgrade_wave(admin, waves[k - 1], hash_, k)
            await eventually(lambda k=k: conditions_are(expected(k, k)), timeout=30,  # type: ignore[misc]
                             what=f"wave {k}'s new pods False")
            starts, derived = facts.starts, facts.derived
            await steer(admin, "ota", "promote", wave=k)
            await eventually(lambda k=k: conditions_are(expected(k + 1, k)), timeout=30,  # type: ignore[misc]
                             what=f"wave {k + 1} True/WaveReached, the rest waiting")
            # Wave k+1's pods were derived again (and once more as their written conditions came back); no
            # start over from every pod.
            assert facts.starts == starts, f"the tracker started over at the change to wave {k + 1}"
            assert len(waves[k]) <= facts.derived - derived < NODES + len(waves[k])
        await eventually(lambda: conditions_are(expected(3, 2)), timeout=30, what="wave 3 still True")

        # An abort freezes the rollout: every outdated pod waits again (a start over: see Gate.moved_since).
        starts = facts.starts
        await steer(admin, "ota", "abort")
        await eventually(lambda: conditions_are(expected(3, 2, frozen=True)), timeout=30,
                         what="after the abort, every outdated pod False/WaitingForWave")
        assert facts.starts == starts + 1
        state = await plan_state(admin, "ota")
        assert state is not None and state["phase"] == "aborted" and state["wave"] == 3
        assert all(is_pod_ready(p) for p in await pods_of(admin, "ota") if not is_terminating(p))


async def test_after_an_ota_rollback_the_conditions_send_the_bad_wave_back_and_leave_the_rest_alone(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    """A crashing version in wave 1 with `on-failure: rollback`: once the template is the good revision again,
    the crashed wave-1 pods are told to upgrade (back) and every other pod has nothing to do. A rollback freezes
    the gate and changes the revision: both start the OTA tracker over, whatever the wave change does."""
    sim: SimCluster = await sim_factory(nodes=6)
    sim.set_image("nginx:crashing", crash=True)
    plan = {"edgeagent.io/rollout-steps": "2,100%", "edgeagent.io/rollout-bake": "1s",
            "edgeagent.io/on-failure": "rollback", "edgeagent.io/max-failed": "1",
            "edgeagent.io/progress-deadline-seconds": "2"}
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA", annotations=ds_annotations(plan)))
        await with_plan(admin, "ota", plan)
        await eventually(lambda: all_running(admin, "ota", 6), timeout=30, what="6 pods running")
        await controllers.start(sim)
        order = documented_order(list(sim.node_names))
        wave1 = order[:2]
        good = await current_hash(admin, "ota")
        assert good is not None
        await set_image(admin, "ota", "nginx:crashing")
        bad = await new_hash(admin, "ota", good)

        async def conditions_are(want: dict[str, tuple[str, str, str]]) -> bool:
            return await conditions_by_node(admin) == want

        told = {n: ("True", "WaveReached", f"controllerrevision: {bad}") for n in wave1}
        told.update({n: ("False", "WaitingForWave", f"controllerrevision: {bad}") for n in order[2:]})
        await eventually(lambda: conditions_are(told), timeout=30, what="wave 1 told to upgrade")
        for pod in await pods_of(admin, "ota"):
            if pod["spec"]["nodeName"] in wave1:
                await admin.delete(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}")

        async def rolled_back() -> bool:
            state = await plan_state(admin, "ota")
            return bool(state and state["phase"] == "rolledBack") and await current_hash(admin, "ota") == good

        await eventually(rolled_back, timeout=30, what="rolled back to the good revision")
        back = {n: ("True", "WaveReached", f"controllerrevision: {good}") for n in wave1}
        back.update({n: ("False", "", f"controllerrevision: {good}") for n in order[2:]})
        await eventually(lambda: conditions_are(back), timeout=30,
                         what="the crashed wave-1 pods told to go back, the others nothing to do")
