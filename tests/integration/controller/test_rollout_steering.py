"""`edgeagent rollout status|promote|pause|resume|abort` with a rollout plan, against the simulated cluster.

No controller runs here: the rollout state is the annotation a controller would have written (hand-written
JSON, as `edgeagent.rollout.plan.RolloutState` serialises it), so what is tested is the CLI's reading of it
and its writes. The controller acting on those writes is tested in test_rollout_plan_e2e.py.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from edgeagent.cli import main as cli_main
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import annotations_of, is_terminating, labels_of, name_of
from edgeagent.rollout.plan import parse_plan, rank
from edgeagent.rollout.state import RolloutState
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    get_daemonset,
    node_ready,
    patch_daemonset,
    pods_of,
    rollout,
    set_image,
)
from tests.support.waiting import eventually

JSON = dict[str, object]
PLAN = {"edgeagent.io/rollout-steps": "1,50%,100%", "edgeagent.io/rollout-bake": "10m",
        "edgeagent.io/on-failure": "rollback"}


async def planned(kube: KubeClient, annotations: dict[str, str] | None = None) -> tuple[str, str, list[str]]:
    """A 6-node AdvancedRollingUpdate DaemonSet with a plan, rolled to a new revision (old, new hash, order)."""
    await create_daemonset(kube, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                    annotations={**PLAN, **(annotations or {})}))
    await eventually(lambda: all_running(kube, "web", 6), what="6 pods running")
    old = await current_hash(kube, "web")
    await set_image(kube, "web", "nginx:2")
    await eventually(lambda: _hash_changed(kube, old), what="a new ControllerRevision")
    new = await current_hash(kube, "web")
    assert old and new
    plan, _ = parse_plan(await get_daemonset(kube, "web"))
    if plan is None:  # an invalid plan on purpose
        return old, new, []
    nodes = (await kube.get("/api/v1/nodes"))["items"]
    ranking = rank(plan, {name_of(n): labels_of(n) for n in nodes})
    assert ranking.targets == [1, 3, 6]
    return old, new, ranking.order


async def write_state(kube: KubeClient, state: RolloutState) -> None:
    await patch_daemonset(kube, "web", {"metadata": {"annotations": {"edgeagent.io/rollout-state": state.to_json()}}})


def state(new: str, old: str, *, wave: int, phase: str, **kw: object) -> RolloutState:
    now = time.time()
    return RolloutState(revision=new, stable_revision=old, waves=3, wave=wave, phase=phase,
                        wave_started_at=now - 60, nodes=6, **kw)  # type: ignore[arg-type]


async def test_status_shows_the_wave_the_phase_the_bake_left_and_each_node_in_its_wave(
        six: SimCluster, kube: KubeClient) -> None:
    old, new, order = await planned(kube)
    canary, second, later = order[0], order[1], order[3]
    await six.disconnect(second)  # wave 2: NotReady before its wave is reached
    await eventually(lambda: _not_ready(kube, second), what=f"{second} NotReady")
    await write_state(kube, state(new, old, wave=2, phase="baking", bake_started_at=time.time() - 5,
                                  upgraded=1, deferred=1))
    code, out, err = await rollout(six, "status")
    assert code == 3 and err == "", err  # in progress
    lines = out.splitlines()
    assert lines[1] == "plan: steps 1,50%,100%, bake 10m, on-failure rollback"
    assert re.fullmatch(r"wave 2/3: baking, bake left 9m5\ds; 1 of 6 node\(s\) upgraded, 1 deferred, 0 failed",
                        lines[2]), lines[2]
    assert lines[3].split() == ["NODE", "WAVE", "STATE", "POD", "REVISION", "WHY"]
    rows = {line.split()[0]: line for line in lines[4:10]}
    assert rows[canary].split()[1:3] == ["1", "upgrading"]  # no controller ran: still the old pod
    assert rows[second].split()[1:3] == ["2", "deferred"] and rows[second].rstrip().endswith("NotReady")
    assert re.search(r"^\S+\s+3\s+waiting for wave 3\s", rows[later])
    assert lines[-2] == "6 node(s): 0 upgraded, 2 upgrading, 3 waiting, 1 deferred"
    assert lines[-1] == "rollout in progress"


async def test_status_names_failed_nodes_and_exits_1_once_rolled_back(six: SimCluster, kube: KubeClient) -> None:
    old, new, order = await planned(kube)
    # The canary's pod replaced by one of the new revision (what the controller would have done).
    canary_pod = next(p for p in await pods_of(kube, "web") if p["spec"]["nodeName"] == order[0])
    await kube.delete(f"/api/v1/namespaces/default/pods/{name_of(canary_pod)}")
    await eventually(lambda: _runs(kube, order[0], new), what=f"a pod of {new} on {order[0]}")
    failure = {"node": order[0], "pod": f"default/web-{order[0]}", "reason": "not available within 30s"}
    await write_state(kube, state(new, old, wave=1, phase="progressing", failed=1, failures=[failure]))
    code, out, _ = await rollout(six, "status")
    assert code == 3
    row = next(line for line in out.splitlines() if line.startswith(order[0] + " "))
    assert row.split()[1:3] == ["1", "failed"] and row.endswith("not available within 30s")

    # Rolled back: the template is the old revision again, the state names the bad one.
    await set_image(kube, "web", "nginx:1.19.4")
    await eventually(lambda: _hash_is(kube, old), what="the old revision current again")
    await write_state(kube, state(new, old, wave=1, phase="rolledBack", failed=1, failures=[failure]))
    await patch_daemonset(kube, "web", {"metadata": {"annotations": {"edgeagent.io/rolled-back-from": new}}})
    code, out, _ = await rollout(six, "status")
    assert code == 1, out
    assert f"revision {new} was rolled back to {old}; edgeagent.io/rolled-back-from={new}" in out
    assert f"failed: {order[0]} (default/web-{order[0]}): not available within 30s" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("edge-")}
    assert rows[order[0]].split()[1:3] == ["1", "failed"]  # not "waiting": the good revision comes back to it
    assert {rows[node].split()[2] for node in order[1:]} == {"upgraded"}
    assert out.rstrip().endswith(f"rollout rolled back (revision {new} failed)")


async def test_status_exit_codes_follow_the_phase(six: SimCluster, kube: KubeClient) -> None:
    old, new, _ = await planned(kube)
    code, out, _ = await rollout(six, "status")  # the controller has not written a state yet
    assert code == 3 and "wave 0/3: not started by the controller yet" in out
    for phase, expected in (("paused", 3), ("aborted", 1), ("complete", 0)):
        await write_state(kube, state(new, old, wave=3 if phase == "complete" else 2, phase=phase))
        code, out, _ = await rollout(six, "status")
        assert code == expected, (phase, out)
    assert out.rstrip().endswith("rollout complete")


async def test_promote_names_the_revision_and_wave_seen(six: SimCluster, kube: KubeClient) -> None:
    old, new, _ = await planned(kube)
    await write_state(kube, state(new, old, wave=1, phase="baking", bake_started_at=time.time()))
    code, out, err = await rollout(six, "promote")
    assert (code, err) == (0, "")
    assert out == (f"daemonset.apps/web promote requested (edgeagent.io/rollout-promote={new}/1): once wave 1/3 is "
                   "finished the controller ends its bake and starts wave 2/3\n")
    assert annotations_of(await get_daemonset(kube, "web"))["edgeagent.io/rollout-promote"] == f"{new}/1"
    await write_state(kube, state(new, old, wave=2, phase="paused"))
    code, out, err = await rollout(six, "promote")
    assert (code, out) == (1, "")
    assert err == ('edgeagent: error: the rollout of daemonset "web" in namespace "default" is paused: '
                   "`edgeagent rollout resume web` first (a promote would be dropped unused)\n")


async def test_abort_names_the_revision_and_says_what_follows(six: SimCluster, kube: KubeClient) -> None:
    old, new, _ = await planned(kube)
    await write_state(kube, state(new, old, wave=2, phase="progressing"))
    argv = ["rollout", "abort", "web", "--kubeconfig", str(six.admin_kubeconfig)]
    assert await asyncio.to_thread(cli_main, argv) == 0
    assert annotations_of(await get_daemonset(kube, "web"))["edgeagent.io/rollout-abort"] == new
    code, out, _ = await rollout(six, "abort")
    assert code == 0 and f"the controller stops the rollout and rolls back to revision {old}" in out


async def test_pause_and_resume_set_and_clear_paused(six: SimCluster, kube: KubeClient) -> None:
    await planned(kube)
    assert (await rollout(six, "pause"))[:2] == (0, "daemonset.apps/web paused (edgeagent.io/paused=true): "
                                                   "no further pod moves until resumed\n")
    assert annotations_of(await get_daemonset(kube, "web"))["edgeagent.io/paused"] == "true"
    assert (await rollout(six, "pause"))[1] == "daemonset.apps/web already paused (edgeagent.io/paused=true)\n"
    assert (await rollout(six, "resume"))[:2] == (0, "daemonset.apps/web resumed (edgeagent.io/paused removed)\n")
    assert "edgeagent.io/paused" not in annotations_of(await get_daemonset(kube, "web"))
    assert (await rollout(six, "resume"))[1] == "daemonset.apps/web was not paused\n"


@pytest.mark.parametrize("action", ["status", "promote", "pause", "resume", "abort"])
async def test_a_daemonset_that_does_not_exist_is_one_clear_error(six: SimCluster, action: str) -> None:
    code, out, err = await rollout(six, action, "nope")
    assert (code, out) == (1, "")
    assert err == 'edgeagent: error: daemonset "nope" not found in namespace "default"\n'


@pytest.mark.parametrize("action", ["promote", "abort"])
async def test_steering_a_daemonset_without_a_plan_is_one_clear_error(
        six: SimCluster, kube: KubeClient, action: str) -> None:
    await create_daemonset(kube, daemonset_manifest("web", strategy="OTA"))
    code, out, err = await rollout(six, action)
    assert (code, out) == (1, "")
    assert err == ('edgeagent: error: daemonset "web" in namespace "default" has no rollout plan '
                   "(annotation edgeagent.io/rollout-steps is not set)\n")
    # pause means nothing to OTA without a plan: the same error rather than a write without effect
    assert (await rollout(six, "pause"))[2] == err


async def test_an_invalid_plan_or_nothing_to_steer_is_one_clear_error(six: SimCluster, kube: KubeClient) -> None:
    old, new, _ = await planned(kube, {"edgeagent.io/rollout-bake": "soon"})
    code, _, err = await rollout(six, "promote")
    assert code == 1 and err.count("\n") == 1
    assert err.startswith('edgeagent: error: daemonset "web" in namespace "default" has no usable rollout plan: '
                          "annotation edgeagent.io/rollout-bake='soon' is invalid")
    await patch_daemonset(kube, "web", {"metadata": {"annotations": {"edgeagent.io/rollout-bake": "1m"}}})
    code, _, err = await rollout(six, "promote")
    assert code == 1 and err == ('edgeagent: error: nothing to promote: daemonset "web" in namespace "default" has '
                                 "no rollout in progress (the controller has not started a rollout of it yet)\n")
    await write_state(kube, state(new, old, wave=3, phase="complete"))
    code, _, err = await rollout(six, "abort")
    assert code == 1 and err == (f"edgeagent: error: nothing to abort: the rollout of revision {new} of daemonset "
                                 '"web" in namespace "default" has ended (phase complete)\n')
    assert "edgeagent.io/rollout-abort" not in annotations_of(await get_daemonset(kube, "web"))


async def _hash_changed(kube: KubeClient, old: str | None) -> bool:
    return await current_hash(kube, "web") not in (None, old)


async def _hash_is(kube: KubeClient, wanted: str) -> bool:
    return await current_hash(kube, "web") == wanted and len(await pods_of(kube, "web")) > 0


async def _runs(kube: KubeClient, node: str, revision: str) -> bool:
    return any(p["spec"]["nodeName"] == node and labels_of(p).get("controller-revision-hash") == revision
               and not is_terminating(p) for p in await pods_of(kube, "web"))


async def _not_ready(kube: KubeClient, node: str) -> bool:
    return not await node_ready(kube, node)
