"""OTA against the simulated cluster: PodNeedUpgrade follows the DaemonSet's current revision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from edgeagent.controller import reconciler
from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import get_condition, is_terminating, name_of, uid_of
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    NS,
    Controllers,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    need_upgrade,
    pods_of,
    set_image,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]


async def conditions(kube: KubeClient, name: str) -> dict[str, tuple[str, str] | None]:
    return {name_of(p): need_upgrade(p) for p in await pods_of(kube, name) if not is_terminating(p)}


async def test_ota_flags_outdated_pods_and_clears_the_flag_on_replacement(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    await create_daemonset(admin, daemonset_manifest("nginx", strategy="OTA"))
    await eventually(lambda: all_running(admin, "nginx", 3), what="3 pods running")
    app = await controllers.start(sim)
    first = await eventually(lambda: current_hash(admin, "nginx"), what="first revision")

    async def all_flagged(status: str, hash_: str) -> bool:
        found = await conditions(admin, "nginx")
        return len(found) == 3 and all(c == (status, f"controllerrevision: {hash_}") for c in found.values())

    await eventually(lambda: all_flagged("False", first), what="PodNeedUpgrade False on every pod")

    await set_image(admin, "nginx", "nginx:1.19.5")

    async def new_hash() -> str | None:
        found = await current_hash(admin, "nginx")
        return found if found != first else None

    second = await eventually(new_hash, what="second revision")
    await eventually(lambda: all_flagged("True", second), what="PodNeedUpgrade True with the new hash")

    # Replace one pod (what the agent's upgrade does): the new pod is up to date and says so.
    victim = sorted(await pods_of(admin, "nginx"), key=name_of)[0]
    before = {c["type"]: c for c in victim["status"]["conditions"] if c["type"] != "PodNeedUpgrade"}
    await admin.delete(f"/api/v1/namespaces/{NS}/pods/{name_of(victim)}", {"preconditions": {"uid": uid_of(victim)}})

    async def replaced() -> bool:
        found = await conditions(admin, "nginx")
        flags = sorted(v for v in found.values() if v is not None)
        return len(found) == 3 and name_of(victim) not in found and flags == [
            ("False", f"controllerrevision: {second}"),
            ("True", f"controllerrevision: {second}"),
            ("True", f"controllerrevision: {second}"),
        ]

    await eventually(replaced, what="the replacement pod flagged False")

    # Other conditions (the kubelet's) are untouched on a pod we patched.
    survivor = next(p for p in await pods_of(admin, "nginx")
                    if need_upgrade(p) == ("True", f"controllerrevision: {second}"))
    others = {c["type"] for c in survivor["status"]["conditions"]} - {"PodNeedUpgrade"}
    assert others == set(before)
    ready = get_condition(survivor, "Ready")
    assert ready is not None and ready["status"] == "True"
    assert app.metrics.writes("pod_delete") == 0  # OTA never deletes
    # One write per condition change: 3 False, 3 True, 1 False on the replacement; none repeated.
    assert app.metrics.writes("condition_patch") == 7


def patched(app: ControllerApp) -> float:
    """PodNeedUpgrade patches answered (`edgeagent_controller_condition_patches{outcome="patched"}`): counted after
    the controller noted the write (`OwnerPods.wrote`), where `writes("condition_patch")` counts a patch as it is
    sent. A pass run by hand while a worker's patches are on their way sees them neither answered nor in the cache,
    and repeats them."""
    return app.metrics.registry.get_sample_value("edgeagent_controller_condition_patches_total",
                                                 {"outcome": "patched"}) or 0.0


def written_and_seen(app: ControllerApp, count: int, name: str, status: str) -> Callable[[], bool]:
    """All `count` patches answered, and the controller's pod index (what `_on_pod` put in it) shows `status` on
    every pod of `name`: its own watch events arrived, so no write of ours is unobserved any more. Only then may a
    test hold those events back; one held before they arrive keeps the pods `unobserved`, and every later pass
    leaves them out (that is what the rule is for)."""
    controller = app.controller
    assert controller is not None

    def probe() -> bool:
        ds = controller.daemonsets.items.get(f"{NS}/{name}")
        if ds is None or patched(app) != count:
            return False
        pods = controller.pods_of(ds)
        return len(pods) == 3 and all((need_upgrade(p) or ("", ""))[0] == status for p in pods)

    return probe


async def test_a_pass_before_the_writes_own_events_arrive_writes_nothing_again(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    """A condition patch's answer can come before its watch event (two connections), and every write enqueues the
    DaemonSet again: a pass in between decides on the pods as cached before the writes and must not repeat them
    (`OwnerPods.unobserved`). Here the pod events are held back, as a slow watch would, while passes run."""
    await create_daemonset(admin, daemonset_manifest("nginx", strategy="OTA"))
    await eventually(lambda: all_running(admin, "nginx", 3), what="3 pods running")
    app = await controllers.start(sim)
    controller = app.controller
    assert controller is not None
    first = await eventually(lambda: current_hash(admin, "nginx"), what="first revision")
    await eventually(written_and_seen(app, 3, "nginx", "False"),
                     what="PodNeedUpgrade False written on the 3 pods and seen in the controller's cache")
    assert app.metrics.writes("condition_patch") == 3

    held: list[tuple[str, JSON, JSON | None]] = []
    handlers = controller.pods._handlers
    index = handlers.index(controller._on_pod)
    handlers[index] = lambda etype, obj, old: held.append((etype, obj, old))
    try:
        await set_image(admin, "nginx", "nginx:1.19.5")

        async def second_revision() -> str | None:
            found = await current_hash(admin, "nginx")
            return found if found != first else None

        second = await eventually(second_revision, what="second revision")
        # Answered, not only sent: each write is then noted as unobserved (its event is held), and no pass of the
        # worker's is still writing while the passes below run.
        await eventually(lambda: patched(app) == 6, what="PodNeedUpgrade True written and answered")
        assert app.metrics.writes("condition_patch") == 6
        for _ in range(3):
            await controller.reconcile(f"{NS}/nginx")
        assert app.metrics.writes("condition_patch") == 6
    finally:
        handlers[index] = controller._on_pod
    for etype, obj, old in held:
        controller._on_pod(etype, obj, old)

    async def all_true() -> bool:
        found = await conditions(admin, "nginx")
        return len(found) == 3 and all(c == ("True", f"controllerrevision: {second}") for c in found.values())

    await eventually(all_true, what="PodNeedUpgrade True on every pod")
    await controller.reconcile(f"{NS}/nginx")
    assert app.metrics.writes("condition_patch") == 6


async def test_conditions_beyond_a_pass_s_burst_are_written_by_the_next_pass(
    sim: SimCluster, admin: KubeClient, controllers: Controllers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass writes at most `_CONDITION_BURST` conditions and queues the DaemonSet again for the rest: here a burst
    of 2 for 3 pods. The pod events are held back, so nothing but that requeue brings the DaemonSet back (the
    events of the first batch would, in a live cluster; not when its patches changed nothing)."""
    monkeypatch.setattr(reconciler, "_CONDITION_BURST", 2)
    await create_daemonset(admin, daemonset_manifest("nginx", strategy="OTA"))
    await eventually(lambda: all_running(admin, "nginx", 3), what="3 pods running")
    app = await controllers.start(sim)
    controller = app.controller
    assert controller is not None
    await eventually(written_and_seen(app, 3, "nginx", "False"),
                     what="PodNeedUpgrade False written on the 3 pods, in two passes, and seen in the cache")
    assert app.metrics.writes("condition_patch") == 3
    handlers = controller.pods._handlers
    index = handlers.index(controller._on_pod)
    handlers[index] = lambda etype, obj, old: None
    try:
        await set_image(admin, "nginx", "nginx:1.19.5")
        await eventually(lambda: app.metrics.writes("condition_patch") == 6, what="PodNeedUpgrade True written")
    finally:
        handlers[index] = controller._on_pod


async def test_the_controller_caches_trimmed_pods_and_nodes(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    """Issue 15: at 10,000 nodes the caches must hold only what the controller reads (controller/trim.py)."""
    await create_daemonset(admin, daemonset_manifest("nginx", strategy="OTA"))
    await eventually(lambda: all_running(admin, "nginx", 3), what="3 pods running")
    app = await controllers.start(sim)
    assert app.controller is not None
    controller = app.controller
    await eventually(lambda: len(controller.pods.items) >= 3 and len(controller.nodes.items) == 3,
                     what="pods and nodes cached")
    for pod in controller.pods.items.values():
        assert set(pod["spec"]) <= {"nodeName", "affinity", "containers", "initContainers", "readinessGates"}, \
            pod["spec"]
        assert set(pod["status"]) <= {"phase", "conditions", "containerStatuses"}, pod["status"]
        # Per container only what an in-place upgrade's end is read from (issue 37), and a waiting reason.
        assert all(set(c) <= {"name", "ready", "containerID", "state"} for c in pod["status"]["containerStatuses"])
    for node in controller.nodes.items.values():
        assert set(node["status"]) <= {"conditions", "images"}
        assert [c["type"] for c in node["status"]["conditions"]] == ["Ready"]


async def test_a_condition_changed_by_someone_else_after_sync_is_written_back(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    """A pass re-reads only the pods the informer reported changed (controller/pod_index.py). A controller whose
    first pass found every condition right must still see, and undo, a later change by another writer."""
    await create_daemonset(admin, daemonset_manifest("nginx", strategy="OTA"))
    await eventually(lambda: all_running(admin, "nginx", 3), what="3 pods running")
    first = await controllers.start(sim)
    hash_ = await eventually(lambda: current_hash(admin, "nginx"), what="first revision")
    right = ("False", f"controllerrevision: {hash_}")

    async def all_right() -> bool:
        found = await conditions(admin, "nginx")
        return len(found) == 3 and all(c == right for c in found.values())

    await eventually(all_right, what="PodNeedUpgrade False on every pod")
    await controllers.stop(first)
    app = await controllers.start(sim)  # its first pass finds every condition right

    async def passed() -> bool:
        return (app.metrics.registry.get_sample_value("edgeagent_controller_reconciles_total",
                                                      {"result": "ok"}) or 0) >= 1

    await eventually(passed, what="the new controller's first reconcile")
    victim = sorted(await pods_of(admin, "nginx"), key=name_of)[1]
    await admin.patch(f"/api/v1/namespaces/{NS}/pods/{name_of(victim)}/status", {"status": {"conditions": [
        {"type": "PodNeedUpgrade", "status": "True", "message": "controllerrevision: someone-else"}]}})
    await eventually(all_right, what="the condition written back")
    assert app.metrics.writes("condition_patch") == 1
