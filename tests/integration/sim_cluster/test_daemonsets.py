"""The simulated DaemonSet controller, observed over HTTP the way clients (kubectl, our agent) observe it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient
from edgeagent.kube.objects import is_pod_ready
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.resources import DAEMONSETS, PODS
from edgeagent.sim.store import NAME_ALPHABET
from tests.support.waiting import eventually

JSON = dict[str, Any]
DS_PATH = "/apis/apps/v1/namespaces/default/daemonsets"
REV_PATH = "/apis/apps/v1/namespaces/default/controllerrevisions"
POD_PATH = "/api/v1/namespaces/default/pods"

STANDARD_TOLERATIONS = {
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
}


def daemonset(name: str = "agent", image: str = "example/agent:1", *, strategy: JSON | None = None,
              template_spec: JSON | None = None, **spec: Any) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {"note": "kept"}},
                "spec": {"containers": [{"name": "agent", "image": image}], **(template_spec or {})},
            },
            "updateStrategy": strategy or {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            **spec,
        },
    }


async def pods_of(admin: KubeClient, name: str = "agent") -> list[JSON]:
    items: list[JSON] = (await admin.get(POD_PATH, query={"labelSelector": f"app={name}"}))["items"]
    return items


def by_node(pods: list[JSON]) -> dict[str, JSON]:
    return {p["spec"]["nodeName"]: p for p in pods}


async def settled(admin: KubeClient, name: str = "agent", *, image: str | None = None, nodes: int = 3,
                  on: list[str] | None = None) -> list[JSON]:
    """Every node runs exactly one Ready, non-terminating pod (of `image`) and the status says so; `on`: the
    pods are on exactly these nodes (a change of placement must be waited for, not the state before it)."""

    async def probe() -> list[JSON] | None:
        pods = await pods_of(admin, name)
        ds = await admin.get(f"{DS_PATH}/{name}")
        status = ds.get("status") or {}
        ok = (
            len(pods) == nodes
            and len(by_node(pods)) == nodes
            and all(is_pod_ready(p) and "deletionTimestamp" not in p["metadata"] for p in pods)
            and (image is None or all(p["spec"]["containers"][0]["image"] == image for p in pods))
            and (on is None or sorted(by_node(pods)) == sorted(on))
            and status.get("observedGeneration") == ds["metadata"]["generation"]
            and status.get("numberAvailable") == nodes
            and status.get("updatedNumberScheduled") == nodes
        )
        return pods if ok else None

    return await eventually(probe, what=f"daemonset {name} settled on {nodes} nodes")


async def set_image(admin: KubeClient, image: str, name: str = "agent") -> None:
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": image}]}}}}
    await admin.patch(f"{DS_PATH}/{name}", patch)


async def revisions(admin: KubeClient) -> list[JSON]:
    items: list[JSON] = (await admin.get(REV_PATH))["items"]
    return sorted(items, key=lambda r: int(r["revision"]))


async def test_pods_revision_labels_owner_affinity_and_tolerations(sim: SimCluster, admin: KubeClient) -> None:
    ds = await admin.create(DS_PATH, daemonset(template_spec={"hostNetwork": True}))
    pods = await settled(admin)
    [rev] = await revisions(admin)
    hash_ = rev["metadata"]["labels"]["controller-revision-hash"]
    assert 8 <= len(hash_) <= 10 and set(hash_) <= set(NAME_ALPHABET)
    assert rev["metadata"]["name"] == f"agent-{hash_}"
    assert rev["metadata"]["labels"] == {"app": "agent", "controller-revision-hash": hash_}
    assert rev["revision"] == 1
    assert rev["data"]["spec"]["template"]["$patch"] == "replace"
    assert rev["data"]["spec"]["template"]["spec"]["containers"][0]["image"] == "example/agent:1"
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": ds["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    assert rev["metadata"]["ownerReferences"] == [owner]

    assert sorted(by_node(pods)) == ["edge-1", "edge-2", "edge-3"]
    for pod in pods:
        node = pod["spec"]["nodeName"]
        assert pod["metadata"]["generateName"] == "agent-"
        assert pod["metadata"]["name"].startswith("agent-")
        assert pod["metadata"]["labels"] == {"app": "agent", "controller-revision-hash": hash_,
                                             "pod-template-generation": "1"}
        assert pod["metadata"]["annotations"] == {"note": "kept"}
        assert pod["metadata"]["ownerReferences"] == [owner]
        required = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required == {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
        tolerations = {(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]}
        assert tolerations == STANDARD_TOLERATIONS | {("node.kubernetes.io/network-unavailable", "NoSchedule")}
        assert all(t["operator"] == "Exists" and "tolerationSeconds" not in t for t in pod["spec"]["tolerations"])


async def test_status_fields(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset())
    await settled(admin)
    status = (await admin.get(f"{DS_PATH}/agent"))["status"]
    assert status == {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberMisscheduled": 0,
                      "numberReady": 3, "numberAvailable": 3, "updatedNumberScheduled": 3, "observedGeneration": 1}


async def test_status_written_only_when_it_changes(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset())
    await settled(admin)
    before = sim.store.get(DAEMONSETS, "default", "agent")["metadata"]["resourceVersion"]
    sim.daemonsets.sync("default", "agent")
    sim.daemonsets.sync("default", "agent")
    assert sim.store.get(DAEMONSETS, "default", "agent")["metadata"]["resourceVersion"] == before


async def test_number_available_waits_for_min_ready_seconds(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset(minReadySeconds=1))

    async def ready_not_available() -> bool:
        status = (await admin.get(f"{DS_PATH}/agent")).get("status") or {}
        return status.get("numberReady") == 3 and "numberAvailable" not in status \
            and status.get("numberUnavailable") == 3

    await eventually(ready_not_available, what="3 ready, 0 available")
    await settled(admin)


async def test_template_change_makes_a_new_revision_and_undo_renumbers_the_old_one(
        sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset())
    [first] = await revisions(admin)
    await settled(admin)

    await set_image(admin, "example/agent:2")
    pods = await settled(admin, image="example/agent:2")
    ds = await admin.get(f"{DS_PATH}/agent")
    assert ds["metadata"]["generation"] == 2
    assert ds["metadata"]["annotations"]["deprecated.daemonset.template.generation"] == "2"
    old, second = await revisions(admin)
    assert (old["metadata"]["name"], old["revision"]) == (first["metadata"]["name"], 1)
    assert second["revision"] == 2
    hash2 = second["metadata"]["labels"]["controller-revision-hash"]
    assert {p["metadata"]["labels"]["controller-revision-hash"] for p in pods} == {hash2}
    assert {p["metadata"]["labels"]["pod-template-generation"] for p in pods} == {"2"}

    # What `kubectl rollout undo` does: patch the DaemonSet with the old revision's data.
    await admin.patch(f"{DS_PATH}/agent", first["data"])
    pods = await settled(admin, image="example/agent:1")
    revs = await revisions(admin)
    assert [(r["metadata"]["name"], r["revision"]) for r in revs] == [
        (second["metadata"]["name"], 2), (first["metadata"]["name"], 3)]
    hash1 = first["metadata"]["labels"]["controller-revision-hash"]
    assert {p["metadata"]["labels"]["controller-revision-hash"] for p in pods} == {hash1}
    assert {p["metadata"]["labels"]["pod-template-generation"] for p in pods} == {"3"}


async def test_on_delete_replaces_a_pod_only_after_the_old_one_is_gone(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset(strategy={"type": "OnDelete"}))
    original = by_node(await settled(admin))
    await set_image(admin, "example/agent:2")

    async def observed_new_revision() -> bool:
        status = (await admin.get(f"{DS_PATH}/agent"))["status"]
        return status.get("observedGeneration") == 2 and "updatedNumberScheduled" not in status

    await eventually(observed_new_revision, what="status: generation 2 seen, nothing updated")
    assert by_node(await pods_of(admin)) == original  # nothing replaced by itself (checked after the sync)

    events = sim.store.subscribe([PODS])
    try:
        old = original["edge-1"]
        await admin.delete(f"{POD_PATH}/{old['metadata']['name']}")

        async def replaced() -> JSON | None:
            pods = by_node(await pods_of(admin))
            new = pods.get("edge-1")
            return new if new and new["metadata"]["uid"] != old["metadata"]["uid"] and is_pod_ready(new) else None

        new = await eventually(replaced, what="a new pod on edge-1")
        assert new["spec"]["containers"][0]["image"] == "example/agent:2"
        assert new["metadata"]["labels"]["pod-template-generation"] == "2"
        order = [(e.type, e.object["metadata"]["uid"]) for e in events.drain()
                 if e.object["spec"]["nodeName"] == "edge-1"]
        assert order.index(("DELETED", old["metadata"]["uid"])) < order.index(("ADDED", new["metadata"]["uid"]))
    finally:
        events.close()
    now = by_node(await pods_of(admin))
    for node in ("edge-2", "edge-3"):
        assert now[node]["metadata"]["uid"] == original[node]["metadata"]["uid"]


async def test_failed_pod_is_deleted_and_replaced(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset(strategy={"type": "OnDelete"}))
    old = by_node(await settled(admin))["edge-3"]
    await admin.patch(f"{POD_PATH}/{old['metadata']['name']}/status", {"status": {"phase": "Failed"}},
                      CONTENT_MERGE_PATCH)

    async def replaced() -> bool:
        new = by_node(await pods_of(admin)).get("edge-3")
        return new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]

    await eventually(replaced, what="the failed pod replaced")


async def test_rolling_update_stays_within_max_unavailable(sim_factory: Any) -> None:
    sim = await sim_factory(nodes=4)
    admin = await KubeClient.connect(sim.admin_kubeconfig)
    try:
        strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}}
        await admin.create(DS_PATH, daemonset(strategy=strategy))
        await settled(admin, nodes=4)
        events = sim.store.subscribe([PODS])
        before = sim.store.list(PODS, "default")[0]
        try:
            await set_image(admin, "example/agent:2")
            await settled(admin, image="example/agent:2", nodes=4)
            worst = max_nodes_without_serving_pod(before, events.drain(), sim.node_names)
        finally:
            events.close()
        assert worst == 2  # 50% of 4: the budget is used, never exceeded
    finally:
        await admin.close()


def max_nodes_without_serving_pod(initial: list[JSON], events: list[Any], nodes: list[str]) -> int:
    """Replay pod events; at every step count the nodes lacking a Ready, non-terminating pod."""
    pods = {p["metadata"]["uid"]: p for p in initial}
    worst = 0
    for event in events:
        uid = event.object["metadata"]["uid"]
        if event.type == "DELETED":
            pods.pop(uid, None)
        else:
            pods[uid] = event.object
        serving = {p["spec"]["nodeName"] for p in pods.values()
                   if is_pod_ready(p) and "deletionTimestamp" not in p["metadata"]}
        worst = max(worst, len(set(nodes) - serving))
    return worst


async def test_rolling_update_replaces_a_not_ready_pod_first(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset())
    pods = by_node(await settled(admin))
    sick = pods["edge-2"]
    ready_false = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    await admin.patch(f"{POD_PATH}/{sick['metadata']['name']}/status", ready_false)

    async def counted() -> bool:
        ready: int | None = (await admin.get(f"{DS_PATH}/agent"))["status"].get("numberReady")
        return ready == 2

    await eventually(counted, what="status numberReady 2")
    first_delete = len(sim.store.deletes)
    await set_image(admin, "example/agent:2")
    await settled(admin, image="example/agent:2")
    graceful = [d for d in sim.store.deletes[first_delete:] if d["outcome"] == "graceful"]
    # The unavailable pod uses up the budget of 1: it must go first, alone.
    assert graceful[0]["name"] == sick["metadata"]["name"]
    assert len(graceful) == 3


async def test_no_new_pod_on_untolerated_taints_and_existing_pods_stay(sim: SimCluster, admin: KubeClient) -> None:
    await admin.patch("/api/v1/nodes/edge-3", {"spec": {"taints": [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}, CONTENT_MERGE_PATCH)
    await admin.create(DS_PATH, daemonset())
    pods = await settled(admin, nodes=2)
    assert sorted(by_node(pods)) == ["edge-1", "edge-2"]
    status = (await admin.get(f"{DS_PATH}/agent"))["status"]
    assert status["desiredNumberScheduled"] == 2

    # A NoSchedule taint added later leaves the running pod alone (it is only counted as misscheduled).
    await admin.patch("/api/v1/nodes/edge-2", {"spec": {"taints": [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}, CONTENT_MERGE_PATCH)

    async def misscheduled() -> bool:
        misscheduled: int = (await admin.get(f"{DS_PATH}/agent"))["status"]["numberMisscheduled"]
        return misscheduled == 1

    await eventually(misscheduled, what="edge-2's pod counted as misscheduled")
    assert sorted(by_node(await pods_of(admin))) == ["edge-1", "edge-2"]

    # An untolerated NoExecute taint evicts.
    await admin.patch("/api/v1/nodes/edge-1", {"spec": {"taints": [
        {"key": "maintenance", "effect": "NoExecute"}]}}, CONTENT_MERGE_PATCH)

    async def evicted() -> bool:
        pods = [p for p in await pods_of(admin) if "deletionTimestamp" not in p["metadata"]]
        return sorted(by_node(pods)) == ["edge-2"]

    await eventually(evicted, what="the pod on edge-1 deleted")


async def test_template_tolerations_are_honoured(sim: SimCluster, admin: KubeClient) -> None:
    await admin.patch("/api/v1/nodes/edge-3", {"spec": {"taints": [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}, CONTENT_MERGE_PATCH)
    tolerate = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}
    await admin.create(DS_PATH, daemonset(template_spec=tolerate))
    pods = await settled(admin)
    assert ("dedicated", "NoSchedule") in {(t["key"], t["effect"]) for t in by_node(pods)["edge-3"]["spec"]
                                           ["tolerations"]}


async def test_node_selector_and_affinity_choose_nodes(sim: SimCluster, admin: KubeClient) -> None:
    await admin.patch("/api/v1/nodes/edge-2", {"metadata": {"labels": {"role": "gateway"}}}, CONTENT_MERGE_PATCH)
    await admin.create(DS_PATH, daemonset("gw", template_spec={"nodeSelector": {"role": "gateway"}}))
    affinity = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "role", "operator": "NotIn", "values": ["gateway"]}]}]}}}}
    await admin.create(DS_PATH, daemonset("edge", template_spec=affinity))
    assert sorted(by_node(await settled(admin, "gw", nodes=1))) == ["edge-2"]
    assert sorted(by_node(await settled(admin, "edge", nodes=2))) == ["edge-1", "edge-3"]

    # Relabelling moves the daemon: a new pod where it now fits, the old one deleted where it no longer does.
    await admin.patch("/api/v1/nodes/edge-3", {"metadata": {"labels": {"role": "gateway"}}}, CONTENT_MERGE_PATCH)
    await admin.patch("/api/v1/nodes/edge-2", {"metadata": {"labels": {"role": None}}}, CONTENT_MERGE_PATCH)
    await settled(admin, "gw", nodes=1, on=["edge-3"])
    await settled(admin, "edge", nodes=2, on=["edge-1", "edge-2"])


async def test_no_new_pod_on_an_unreachable_node_but_the_old_one_stays(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset(strategy={"type": "OnDelete"}))
    pods = by_node(await settled(admin))
    await sim.disconnect("edge-1", "refuse")

    async def tainted() -> bool:
        node = await admin.get("/api/v1/nodes/edge-1")
        return any(t["key"] == "node.kubernetes.io/unreachable" for t in node["spec"].get("taints") or [])

    await eventually(tainted, what="edge-1 tainted unreachable")
    # Force-delete (as an operator would): the node cannot run a replacement while unreachable.
    name = pods["edge-1"]["metadata"]["name"]
    await admin.delete(f"{POD_PATH}/{name}", {"gracePeriodSeconds": 0})

    async def status_excludes_node() -> bool:
        desired: int = (await admin.get(f"{DS_PATH}/agent"))["status"]["desiredNumberScheduled"]
        return desired == 2

    await eventually(status_excludes_node, what="desiredNumberScheduled 2")
    assert "edge-1" not in by_node(await pods_of(admin))
    await sim.connect("edge-1")
    await settled(admin)


async def test_revision_history_is_truncated(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset(revisionHistoryLimit=1))
    for version in (2, 3, 4):
        await set_image(admin, f"example/agent:{version}")
        await settled(admin, image=f"example/agent:{version}")

    async def truncated() -> list[int] | None:
        numbers = [int(r["revision"]) for r in await revisions(admin)]
        return numbers if numbers == [3, 4] else None

    await eventually(truncated, what="only the current revision and one old one")


async def test_deleting_the_daemonset_removes_its_pods(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset())
    await settled(admin)
    await admin.delete(f"{DS_PATH}/agent", {"propagationPolicy": "Background"})

    async def gone() -> bool:
        return not await pods_of(admin) and not (await admin.get(REV_PATH))["items"]

    await eventually(gone, what="pods and revisions collected")


async def test_two_daemonsets_do_not_interfere(sim: SimCluster, admin: KubeClient) -> None:
    await asyncio.gather(admin.create(DS_PATH, daemonset("a")), admin.create(DS_PATH, daemonset("b")))
    a = await settled(admin, "a")
    b = await settled(admin, "b")
    assert {p["metadata"]["ownerReferences"][0]["name"] for p in a} == {"a"}
    assert {p["metadata"]["ownerReferences"][0]["name"] for p in b} == {"b"}


async def test_replacing_a_deleted_pod_looks_only_at_its_node(sim_factory: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync driven by pod events looks at the nodes whose pods changed, not at every node: at 100,000 nodes a
    full pass per few pod removals made the sim recreate a wave's deleted pods at ~11 pods/s."""
    sim = await sim_factory(nodes=12)
    admin = await KubeClient.connect(sim.admin_kubeconfig)
    try:
        await admin.create(DS_PATH, daemonset(strategy={"type": "OnDelete"}))
        old = by_node(await settled(admin, nodes=12))["edge-7"]
        looked: list[list[str]] = []
        placement_of: Callable[[JSON, list[str]], list[tuple[str, bool, bool]]] = sim.daemonsets._placement_of

        def recorded(ds: JSON, names: list[str]) -> list[tuple[str, bool, bool]]:
            looked.append(list(names))
            return placement_of(ds, names)

        monkeypatch.setattr(sim.daemonsets, "_placement_of", recorded)
        await admin.delete(f"{POD_PATH}/{old['metadata']['name']}")
        pods = await settled(admin, nodes=12)
        assert by_node(pods)["edge-7"]["metadata"]["uid"] != old["metadata"]["uid"]
        assert looked and all(names == ["edge-7"] for names in looked if names), looked
    finally:
        await admin.close()


async def test_status_counts_stay_exact_through_syncs_that_look_at_changed_nodes(
        sim_factory: Any) -> None:
    """The status a sync driven by events writes (each node's share counted again only when it changed) is the one
    a full count over every node gives, through replacements, readiness changes and placement changes."""
    sim = await sim_factory(nodes=4)
    admin = await KubeClient.connect(sim.admin_kubeconfig)
    path = f"{DS_PATH}/agent"

    async def status_is(**want: int) -> JSON:
        async def probe() -> JSON | None:
            status: JSON = (await admin.get(path)).get("status") or {}
            return status if all(status.get(k, 0) == v for k, v in want.items()) else None
        status: JSON = await eventually(probe, what=f"status {want}")
        # A full count over every node finds nothing to change: the status written was already exact.
        before = sim.store.get(DAEMONSETS, "default", "agent")["metadata"]["resourceVersion"]
        sim.daemonsets.sync("default", "agent")
        assert sim.store.get(DAEMONSETS, "default", "agent")["metadata"]["resourceVersion"] == before
        return status

    try:
        await admin.create(DS_PATH, daemonset(strategy={"type": "OnDelete"}))
        pods = by_node(await settled(admin, nodes=4))
        await set_image(admin, "example/agent:2")
        await status_is(observedGeneration=2, desiredNumberScheduled=4, numberReady=4, updatedNumberScheduled=0)
        for node, updated in (("edge-1", 1), ("edge-3", 2)):
            await admin.delete(f"{POD_PATH}/{pods[node]['metadata']['name']}")
            await status_is(currentNumberScheduled=4, numberReady=4, numberAvailable=4,
                            updatedNumberScheduled=updated)
        not_ready = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
        await admin.patch(f"{POD_PATH}/{pods['edge-2']['metadata']['name']}/status", not_ready)
        await status_is(numberReady=3, numberAvailable=3, numberUnavailable=1, updatedNumberScheduled=2)
        await admin.patch("/api/v1/nodes/edge-4", {"spec": {"taints": [
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}, CONTENT_MERGE_PATCH)
        await status_is(desiredNumberScheduled=3, currentNumberScheduled=3, numberMisscheduled=1, numberReady=2,
                        updatedNumberScheduled=2)
        await admin.delete(f"{POD_PATH}/{pods['edge-4']['metadata']['name']}")
        await status_is(desiredNumberScheduled=3, currentNumberScheduled=3, numberMisscheduled=0, numberReady=2)
        await admin.delete(f"{POD_PATH}/{pods['edge-2']['metadata']['name']}")
        await status_is(desiredNumberScheduled=3, numberReady=3, numberAvailable=3, updatedNumberScheduled=3)
    finally:
        await admin.close()
