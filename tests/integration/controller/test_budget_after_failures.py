"""AdvancedRollingUpdate keeps `max-unavailable` where pods are broken, lost from view, or deleted by a lost request.

Found by the soak (issue 23). Each test judges the roll with the soak's own checker (`tests/soak/checker.py`,
which reads the sim's audit log: every pod DELETE carries the pod's and its siblings' state at that instant),
so the budget is counted independently of the controller's code.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient
from edgeagent.kube.objects import is_node_ready, is_pod_ready
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    JSON,
    Controllers,
    DisruptionRecorder,
    admin_client,
    all_running,
    create_daemonset,
    daemonset_manifest,
    pods_of,
    set_image,
)
from tests.soak.checker import History, Violation, check_budget
from tests.support.waiting import eventually

PODS = "/api/v1/namespaces/default/pods"
GOOD, BAD, NEWER = "nginx:1.19.4", "registry.local/web:2-bad", "nginx:1.21"
NODES = [f"edge-{i}" for i in range(1, 7)]


def budget_violations(entries: list[dict[str, object]]) -> list[Violation]:
    checked = {"budget": 0}
    violations = check_budget(History(seed=0, audit=list(entries)), checked)
    assert checked["budget"] > 0, "no controller DELETE was audited"
    return violations


async def test_broken_old_pods_are_replaced_at_once_and_no_available_pod_on_top(
        sim_factory: SimFactory, tmp_path: Path, controllers: Controllers) -> None:
    """Three nodes run a crash-looping old revision (a bad version rolled back from, or put right by an operator),
    three a good old one; max-unavailable 1. The broken pods are all replaced at once (they are down anyway), but
    their nodes are unavailable: no available pod may be deleted until they are back. The controller used to
    delete max-unavailable available pods on top (after a rollback, 20 good pods with 22 broken ones)."""
    sim = await sim_factory(node_names=NODES, audit_log=tmp_path / "audit.jsonl")
    sim.set_image(BAD, crash=True)
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=GOOD,
                                                         annotations={"apps.openyurt.io/max-unavailable": "1"}))
        await eventually(lambda: all_running(admin, "web", 6), what="6 pods running")
        # OnDelete: pods deleted by hand come back on the template of the moment.
        await set_image(admin, "web", BAD)
        for pod in sorted(await pods_of(admin, "web"), key=lambda p: p["spec"]["nodeName"])[:3]:
            await admin.delete(f"{PODS}/{pod['metadata']['name']}")
        await eventually(lambda: _crash_looping(admin, 3), what="3 pods of the bad version crash-looping")
        await set_image(admin, "web", NEWER)

        await controllers.start(sim)
        await eventually(lambda: all_running(admin, "web", 6, NEWER), timeout=60, interval=0.2,
                         what="every node on the newer version")
    assert budget_violations(sim.audit.find("DELETE", PODS + "/")) == []


async def _crash_looping(admin: KubeClient, count: int) -> bool:
    pods = [p for p in await pods_of(admin, "web") if not p["metadata"].get("deletionTimestamp")]
    broken = [p for p in pods if p["spec"]["containers"][0]["image"] == BAD and any(
        (s.get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
        for s in (p.get("status") or {}).get("containerStatuses") or [])]
    return len(pods) == 6 and len(broken) == count


async def test_a_new_leader_counts_nodes_whose_pod_is_gone_and_not_yet_replaced(
        sim_factory: SimFactory, monkeypatch: pytest.MonkeyPatch, controllers: Controllers) -> None:
    """A node whose old pod is gone and whose replacement the DaemonSet controller has not created yet runs no pod
    at all. The controller that deleted the pod remembers it; a new leader (or a restarted controller) does not,
    and grouping pods by node does not see the node: it deleted `max-unavailable` more pods on top (the soak saw
    8 at once after a leader change). The DaemonSet's `desiredNumberScheduled` shows the nodes without a pod; it
    leaves out a node that is away (its NoSchedule taint), whose pod is still there: edge-6 is cut off, so that
    counting it would hide one missing pod. The sim's DaemonSet controller is held from creating pods meanwhile,
    as a busy one is slow to."""
    sim = await sim_factory(node_names=NODES)
    stalled = asyncio.Event()
    manage = sim.daemonsets._manage

    def slow_manage(ds: JSON, placement: list[tuple[str, bool, bool]], *args: Any) -> bool:
        if stalled.is_set():  # no pod is created; desiredNumberScheduled (from `placement`) is unchanged
            placement = [(node, False, keep) for node, _, keep in placement]
        return manage(ds, placement, *args)

    monkeypatch.setattr(sim.daemonsets, "_manage", slow_manage)
    async with admin_client(sim) as admin, DisruptionRecorder(admin, "web") as recorder:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=GOOD,
                                                         annotations={"apps.openyurt.io/max-unavailable": "2"}))
        await eventually(lambda: all_running(admin, "web", 6), what="6 pods running")
        await sim.disconnect("edge-6", "blackhole")
        await eventually(lambda: _desired(admin, 5), what="edge-6 away, left out of desiredNumberScheduled")
        stalled.set()
        first = await controllers.start(sim)
        await set_image(admin, "web", NEWER)
        await eventually(lambda: _pods_left(admin, 4), what="2 pods deleted and gone, none created")
        await controllers.stop(first)

        second = await controllers.start(sim)
        await eventually(lambda: _planned(second), what="the new leader's first plan")
        stalled.clear()
        sim.daemonsets.enqueue(("default", "web"))
        await sim.connect("edge-6")
        await eventually(lambda: all_running(admin, "web", 6, NEWER), timeout=60, interval=0.2,
                         what="every node on the newer version")
    assert recorder.max_disrupted <= 2, recorder.history


async def test_a_node_whose_pod_someone_else_deleted_counts_until_a_pod_shows_up_there_again(
        sim_factory: SimFactory, monkeypatch: pytest.MonkeyPatch, controllers: Controllers) -> None:
    """A node whose pod the controller saw go (deleted by someone else: the previous leader, an agent, an operator)
    runs no pod until the DaemonSet controller creates one. `desiredNumberScheduled` reveals it only while it
    agrees with the node cache: edge-6 is back from a partition, Ready in the cache, but the busy DaemonSet
    controller has not counted it again yet, so edge-6 hid edge-2 and an available pod was deleted beyond
    max-unavailable (seed-29 soak: 20 unavailable of 20, 199 of 200 nodes seen, one more deleted). The cache saw
    edge-2's pod go: that node counts as unavailable until a pod is seen there again."""
    sim = await sim_factory(node_names=NODES)
    busy = asyncio.Event()
    manage, update_status = sim.daemonsets._manage, sim.daemonsets._update_status

    def slow_manage(ds: JSON, placement: list[tuple[str, bool, bool]], *args: Any) -> bool:
        if busy.is_set():  # no pod is created
            placement = [(node, False, keep) for node, _, keep in placement]
        return manage(ds, placement, *args)

    def slow_status(ds: JSON, placement: list[tuple[str, bool, bool]], *args: Any) -> None:
        if busy.is_set():  # desiredNumberScheduled still leaves edge-6 out, as while it was away
            placement = [(node, run and node != "edge-6", keep) for node, run, keep in placement]
        update_status(ds, placement, *args)

    monkeypatch.setattr(sim.daemonsets, "_manage", slow_manage)
    monkeypatch.setattr(sim.daemonsets, "_update_status", slow_status)
    async with admin_client(sim) as admin, DisruptionRecorder(admin, "web") as recorder:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=GOOD,
                                                         annotations={"apps.openyurt.io/max-unavailable": "1"}))
        await eventually(lambda: all_running(admin, "web", 6), what="6 pods running")
        await sim.disconnect("edge-6", "blackhole")
        await eventually(lambda: _desired(admin, 5), what="edge-6 away, left out of desiredNumberScheduled")
        app = await controllers.start(sim)
        await eventually(lambda: _cached_pods(app, "web") == 6, what="the controller's cache showing 6 pods")
        busy.set()
        edge_2 = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in await pods_of(admin, "web")}["edge-2"]
        await admin.delete(f"{PODS}/{edge_2}")  # an operator's; no replacement while the DaemonSet controller is busy
        await sim.connect("edge-6")
        await eventually(lambda: _cached_pods(app, "web") == 5 and _cached_ready(app, "edge-6"),
                         what="the controller's cache: edge-2's pod gone, edge-6 and its pod Ready")
        await set_image(admin, "web", NEWER)
        # The plan for the newer version counts a node unavailable: edge-2 (or, without the memory, edge-1 once
        # deleted): either way nothing more is deleted while the DaemonSet controller is busy.
        await eventually(lambda: (_rollout(app, "outdated") or 0) >= 4 and (_rollout(app, "unavailable") or 0) >= 1,
                         what="the controller's plan for the newer version")
        busy.clear()
        sim.daemonsets.enqueue(("default", "web"))
        await eventually(lambda: all_running(admin, "web", 6, NEWER), timeout=60, interval=0.2,
                         what="every node on the newer version")
    assert recorder.max_disrupted <= 1, recorder.history


def _cached_pods(app: ControllerApp, name: str) -> int:
    if app.controller is None:
        return -1
    return sum(1 for p in app.controller.pods.items.values() if p["metadata"]["name"].startswith(name + "-"))


def _cached_ready(app: ControllerApp, node: str) -> bool:
    """The node and its pods Ready in the controller's cache (a returning kubelet re-reports its pods)."""
    if app.controller is None:
        return False
    found = app.controller.nodes.items.get(node)
    pods = [p for p in app.controller.pods.items.values() if p["spec"].get("nodeName") == node]
    return found is not None and is_node_ready(found) and bool(pods) and all(is_pod_ready(p) for p in pods)


def _rollout(app: ControllerApp, state: str) -> float | None:
    value: float | None = app.metrics.registry.get_sample_value(
        "edgeagent_controller_rollout_nodes", {"namespace": "default", "daemonset": "web", "state": state})
    return value


async def _pods_left(admin: KubeClient, count: int) -> bool:
    return len(await pods_of(admin, "web")) == count


def _planned(app: ControllerApp) -> bool:
    value = app.metrics.registry.get_sample_value(
        "edgeagent_controller_rollout_desired_nodes", {"namespace": "default", "daemonset": "web"})
    return value is not None


async def _desired(admin: KubeClient, count: int) -> bool:
    ds = await admin.get("/apis/apps/v1/namespaces/default/daemonsets/web")
    return bool((ds.get("status") or {}).get("desiredNumberScheduled") == count)


async def test_a_delete_on_its_way_when_leadership_is_lost_still_counts_when_it_comes_back(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    """A burst of 5xx on the Lease: the leader steps down while its DELETE of edge-2's pod is on its way (a slow
    answer: the server carries it out seconds later), and takes the Lease back a moment after. It used to start
    the new term with no memory of that DELETE (a cancelled one was taken for one that did not happen), while the
    cache still showed the pod live and available: with edge-1 released from its hold meanwhile, it deleted
    edge-1's pod too, two nodes down with max-unavailable 1. Found by the soak (leadership flaps under API bursts)."""
    sim = await sim_factory(node_names=NODES[:3])
    sim.set_image(NEWER, pull_seconds=3)  # a replaced node stays down a while: long enough to overlap
    async with admin_client(sim) as admin, DisruptionRecorder(admin, "web") as recorder, \
            aiohttp.ClientSession() as http:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=GOOD,
                                                         annotations={"apps.openyurt.io/max-unavailable": "1"}))
        await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
        held = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in await pods_of(admin, "web")}["edge-1"]
        await _hold(admin, held, True)
        slow = await _fault(http, sim.url, {"latencySeconds": 2, "durationSeconds": 60, "verbs": ["DELETE"],
                                            "path": PODS + "/", "userAgent": "edgeagent-controller/"})
        app = await controllers.start(sim, leader_elect=True)
        await eventually(lambda: app.is_leader, what="the controller leading")
        await set_image(admin, "web", NEWER)
        await eventually(lambda: len(_controller_deletes(sim)) == 1, what="the DELETE of edge-2's pod on its way")

        await _fault(http, sim.url, {"codes": [503], "durationSeconds": 1.5, "userAgent": "edgeagent-controller/",
                                     "path": "/apis/coordination.k8s.io/"})
        await eventually(lambda: not app.is_leader, what="the controller stepping down")
        async with http.delete(f"{sim.url}/sim/v1/faults/{slow}") as resp:  # later DELETEs are answered at once
            assert resp.status == 200
        await _hold(admin, held, False)
        await eventually(lambda: all_running(admin, "web", 3, NEWER), timeout=90, interval=0.2,
                         what="every node on the newer version")
    assert recorder.max_disrupted <= 1, recorder.history


async def _hold(admin: KubeClient, pod: str, on: bool) -> None:
    condition = {"type": "UpgradeHeld", "status": "True" if on else "False",
                 "reason": "HeldByOperator" if on else "Open", "message": "held" if on else ""}
    await admin.patch(f"{PODS}/{pod}/status", {"status": {"conditions": [condition]}}, CONTENT_STRATEGIC_MERGE_PATCH)


async def _fault(http: aiohttp.ClientSession, url: str, rule: JSON) -> str:
    async with http.post(f"{url}/sim/v1/faults", json=rule) as resp:
        assert resp.status == 201, await resp.text()
        return str((await resp.json())["id"])


def _controller_deletes(sim: SimCluster) -> list[JSON]:
    return [e for e in sim.audit.find("DELETE", PODS + "/") if e["userAgent"].startswith("edgeagent-controller/")]
