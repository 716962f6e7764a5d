"""`edgeagent rollout promote|pause|resume|abort` steering a real controller on the simulated cluster.

Each command is run as the CLI runs it (main() in a thread, over HTTP with the admin kubeconfig); the
controller runs in this event loop; the plan is a RolloutPlan object. What is checked is what the rollout plan
contract promises: promote ends the bake now and the next wave starts; pause stops every further move until
resume; abort stops the rollout and, with onFailure: Rollback, restores the previous template.
"""

from __future__ import annotations

from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import annotations_of, is_terminating
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    images_by_node,
    pods_of,
    rollout,
    set_image,
    template_back_on,
)
from tests.support.rollout_plans import ds_annotations, get_plan, plan_state, with_plan
from tests.support.waiting import eventually

JSON = dict[str, object]
OLD, NEW = "nginx:1.19.4", "nginx:2"




async def state_of(kube: KubeClient) -> dict[str, object]:
    return dict(await plan_state(kube, "web") or {})


async def until_state(kube: KubeClient, what: str, **want: object) -> dict[str, object]:
    async def probe() -> dict[str, object] | None:
        state = await state_of(kube)
        return state if state and all(state.get(k) == v for k, v in want.items()) else None

    return await eventually(probe, what=f"rollout-state {what} ({want})", timeout=20)


async def started(kube: KubeClient, controllers: Controllers, sim: SimCluster, **annotations: str) -> str:
    """A 6-node AdvancedRollingUpdate DaemonSet with plan 1,50%,100%, rolled to NEW; returns the new hash."""
    plan = {"edgeagent.io/rollout-steps": "1,50%,100%", "edgeagent.io/rollout-bake": "1h",
            "apps.openyurt.io/max-unavailable": "100%", **annotations}
    await create_daemonset(kube, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                    annotations=ds_annotations(plan)))
    await with_plan(kube, "web", plan)
    await eventually(lambda: all_running(kube, "web", 6), what="6 pods running")
    await controllers.start(sim)
    old = await current_hash(kube, "web")
    await set_image(kube, "web", NEW)
    new = await eventually(lambda: _new_hash(kube, old), what="the new revision")
    await until_state(kube, "wave 1 baking", revision=new, wave=1, phase="baking")
    return str(new)


async def test_promote_ends_the_bake_now_and_the_next_wave_starts(
        six: SimCluster, kube: KubeClient, controllers: Controllers) -> None:
    new = await started(kube, controllers, six)
    assert await _on_new(kube) == 1  # the bake (1 h) holds wave 2 back
    code, out, _ = await rollout(six, "promote")
    assert code == 0, out
    await until_state(kube, "wave 2", revision=new, wave=2)
    await eventually(lambda: _request_done(kube, "promote"), what="the promote request handled (status.steer)")
    await eventually(lambda: _count_on_new(kube, 3), what="wave 2 (3 nodes in all) on the new revision")
    code, out, _ = await rollout(six, "status")
    assert code == 3 and "wave 2/3: " in out


async def test_pause_holds_the_rollout_until_resume(
        six: SimCluster, kube: KubeClient, controllers: Controllers) -> None:
    new = await started(kube, controllers, six)
    code, out, _ = await rollout(six, "pause")
    assert code == 0, out
    await until_state(kube, "paused", revision=new, wave=1, phase="paused")
    code, out, _ = await rollout(six, "status")
    assert code == 3 and "wave 1/3: Paused (spec.paused: true)" in out
    assert await shown_in_history(six, new) == "Paused"  # as `rollout status` says, not Progressing
    code, _, err = await rollout(six, "promote")  # the controller would drop it: the CLI says so instead
    assert code == 1 and "is paused; `edgeagent rollout resume` first" in err
    await rollout(six, "resume")
    await until_state(kube, "baking again", revision=new, wave=1, phase="baking")
    assert await shown_in_history(six, new) == "Baking"
    await rollout(six, "promote")
    await until_state(kube, "wave 2", revision=new, wave=2)


async def test_abort_stops_the_rollout_and_rolls_back(
        six: SimCluster, kube: KubeClient, controllers: Controllers) -> None:
    new = await started(kube, controllers, six, **{"edgeagent.io/on-failure": "rollback"})
    code, out, _ = await rollout(six, "abort")
    assert code == 0, out
    await until_state(kube, "rolled back", revision=new, phase="rolledBack")
    ds = await template_back_on(kube, "web", OLD)
    assert not [k for k in annotations_of(ds) if k.startswith("edgeagent.io/roll")]  # nothing on the DaemonSet
    history = (await get_plan(kube, "web"))["status"]["history"]
    assert [h["phase"] for h in history if h["revision"] == new] == ["RolledBack"]
    await eventually(lambda: _all_on(kube, OLD), what=f"every node back on {OLD}")
    code, out, _ = await rollout(six, "status")
    assert code == 1 and out.rstrip().endswith(f"rollout rolled back (revision {new})")
    assert "by the operator (rollout abort)" in out
    code, _, err = await rollout(six, "abort")  # nothing left to abort
    assert code == 1 and "nothing to abort" in err


async def shown_in_history(sim: SimCluster, revision: str) -> str:
    """The PHASE `edgeagent rollout history` shows for `revision`."""
    code, out, err = await rollout(sim, "history")
    assert code == 0, err
    phases = [line.split()[2] for line in out.splitlines()[1:] if line.split()[0] == revision]
    assert len(phases) == 1, out
    return phases[0]


async def _new_hash(kube: KubeClient, old: str | None) -> str | None:
    current = await current_hash(kube, "web")
    return current if current != old else None


async def _on_new(kube: KubeClient) -> int:
    return sum(1 for image in (await images_by_node(kube, "web")).values() if image == NEW)


async def _count_on_new(kube: KubeClient, count: int) -> bool:
    pods = [p for p in await pods_of(kube, "web") if not is_terminating(p)]
    return sum(1 for p in pods if p["spec"]["containers"][0]["image"] == NEW) >= count


async def _request_done(kube: KubeClient, verb: str) -> bool:
    status = (await get_plan(kube, "web")).get("status") or {}
    steer = status.get("steer") or {}
    return bool(steer.get("verb") == verb and steer.get("result") == "Done")


async def _all_on(kube: KubeClient, image: str) -> bool:
    return await all_running(kube, "web", 6, image)
