"""Node simulation: kubelet heartbeats and pod lifecycle, node-lifecycle controller conditions and taints."""

from __future__ import annotations

from typing import Any

from edgeagent.config import SimConfig
from edgeagent.kube.client import KubeClient, KubeError
from edgeagent.kube.objects import get_condition
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.kubelet import NodeLifecycleController, node_object, node_status
from edgeagent.sim.resources import LEASES, NODES
from edgeagent.sim.store import Store
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, node: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "example/app:1"}]}}


async def running_pod(admin: KubeClient, name: str, node: str) -> JSON:
    await admin.create(PODS, pod(name, node))

    async def ready() -> JSON | None:
        obj = await admin.get(f"{PODS}/{name}")
        return obj if (get_condition(obj, "Ready") or {}).get("status") == "True" else None

    return await eventually(ready, what=f"pod {name} Ready")


def ready_status(node: JSON) -> str:
    return str((get_condition(node, "Ready") or {}).get("status"))


def condition_taints(node: JSON) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in (node.get("spec") or {}).get("taints") or []
            if t["key"].startswith("node.kubernetes.io/")}


async def test_nodes_are_registered_like_real_kubelets(sim: SimCluster, admin: KubeClient) -> None:
    nodes = (await admin.get("/api/v1/nodes"))["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["edge-1", "edge-2", "edge-3"]
    for node in nodes:
        name = node["metadata"]["name"]
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == name
        status = node["status"]
        assert {a["type"] for a in status["addresses"]} == {"InternalIP", "Hostname"}
        assert status["capacity"]["pods"] == "110"
        assert status["nodeInfo"]["kubeletVersion"].startswith("v1.")
        ready = get_condition(node, "Ready")
        assert ready is not None
        assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
        assert condition_taints(node) == set()


async def test_kubelet_renews_its_lease(sim: SimCluster, admin: KubeClient) -> None:
    lease = await admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1")
    assert lease["spec"]["holderIdentity"] == "edge-1"
    assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
    first = lease["spec"]["renewTime"]

    async def renewed() -> bool:
        again = await admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1")
        return bool(again["spec"]["renewTime"] > first)

    await eventually(renewed, what="a newer renewTime")


async def test_cut_link_turns_node_unknown_with_unreachable_taints_then_back(sim: SimCluster,
                                                                             admin: KubeClient) -> None:
    await sim.disconnect("edge-2", "blackhole")

    async def unknown() -> JSON | None:
        node = await admin.get("/api/v1/nodes/edge-2")
        return node if ready_status(node) == "Unknown" and condition_taints(node) else None

    node = await eventually(unknown, what="edge-2 Ready=Unknown with taints")
    ready = get_condition(node, "Ready")
    assert ready is not None
    assert ready["reason"] == "NodeStatusUnknown"
    assert ready["message"] == "Kubelet stopped posting node status."
    assert condition_taints(node) == {("node.kubernetes.io/unreachable", "NoSchedule"),
                                      ("node.kubernetes.io/unreachable", "NoExecute")}
    assert all(t.get("timeAdded") for t in node["spec"]["taints"])
    assert ready_status(await admin.get("/api/v1/nodes/edge-1")) == "True"

    await sim.connect("edge-2")

    async def recovered() -> bool:
        node = await admin.get("/api/v1/nodes/edge-2")
        return ready_status(node) == "True" and not condition_taints(node)

    await eventually(recovered, what="edge-2 Ready again without taints")


async def test_pods_stay_running_but_lose_ready_while_the_node_is_unreachable(sim: SimCluster,
                                                                              admin: KubeClient) -> None:
    await running_pod(admin, "app", "edge-2")
    await sim.disconnect("edge-2", "refuse")

    async def marked() -> JSON | None:
        obj = await admin.get(f"{PODS}/app")
        return obj if (get_condition(obj, "Ready") or {}).get("status") == "False" else None

    obj = await eventually(marked, what="pod marked not ready by the node controller")
    assert obj["status"]["phase"] == "Running"
    assert "deletionTimestamp" not in obj["metadata"]

    await sim.connect("edge-2")

    async def ready_again() -> bool:
        obj = await admin.get(f"{PODS}/app")
        return (get_condition(obj, "Ready") or {}).get("status") == "True"

    await eventually(ready_again, what="the kubelet to report the pod Ready again")


async def test_kubelet_reporting_not_ready_adds_not_ready_taints(sim: SimCluster, admin: KubeClient) -> None:
    sim.set_node_ready("edge-3", False)

    async def not_ready() -> JSON | None:
        node = await admin.get("/api/v1/nodes/edge-3")
        return node if ready_status(node) == "False" and condition_taints(node) else None

    node = await eventually(not_ready, what="edge-3 Ready=False with taints")
    assert (get_condition(node, "Ready") or {}).get("reason") == "KubeletNotReady"
    assert condition_taints(node) == {("node.kubernetes.io/not-ready", "NoSchedule"),
                                      ("node.kubernetes.io/not-ready", "NoExecute")}

    sim.set_node_ready("edge-3", True)

    async def cleared() -> bool:
        node = await admin.get("/api/v1/nodes/edge-3")
        return ready_status(node) == "True" and not condition_taints(node)

    await eventually(cleared, what="edge-3 Ready without taints")


async def test_bound_pod_becomes_running_and_ready(sim: SimCluster, admin: KubeClient) -> None:
    obj = await running_pod(admin, "web", "edge-1")
    status = obj["status"]
    assert status["phase"] == "Running"
    for cond in ("Initialized", "Ready", "ContainersReady", "PodScheduled"):
        assert (get_condition(obj, cond) or {}).get("status") == "True", cond
    node = await admin.get("/api/v1/nodes/edge-1")
    internal = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    assert status["hostIP"] == internal
    assert status["podIP"]
    [container] = status["containerStatuses"]
    assert container["name"] == "app"
    assert container["ready"] is True
    assert container["started"] is True
    assert "running" in container["state"]
    assert container["image"] == "docker.io/example/app:1"  # as containerd names it (issue 22 item 13)


async def test_kubelet_finishes_graceful_deletion_with_grace_zero_and_uid_precondition(
        sim: SimCluster, admin: KubeClient) -> None:
    obj = await running_pod(admin, "gone", "edge-1")
    uid = obj["metadata"]["uid"]
    deleted = await admin.delete(f"{PODS}/gone")
    assert deleted["metadata"]["deletionTimestamp"]
    assert deleted["metadata"]["deletionGracePeriodSeconds"] == 30

    async def removed() -> bool:
        try:
            await admin.get(f"{PODS}/gone")
        except KubeError as exc:
            return exc.code == 404
        return False

    await eventually(removed, what="the kubelet to remove the terminating pod")
    log = (await admin.get("/sim/v1/deletes"))["items"]
    records = [r for r in log if r["name"] == "gone"]
    assert [r["outcome"] for r in records] == ["graceful", "deleted"]
    assert records[1]["precondition_uid"] == uid


async def test_partitioned_kubelet_neither_starts_nor_removes_pods(sim: SimCluster, admin: KubeClient) -> None:
    await running_pod(admin, "old", "edge-1")
    await sim.disconnect("edge-1", "refuse")
    await admin.create(PODS, pod("new", "edge-1"))
    await admin.delete(f"{PODS}/old")

    async def unknown() -> bool:
        return ready_status(await admin.get("/api/v1/nodes/edge-1")) == "Unknown"

    # The node turning Unknown takes node_grace: many times what starting or removing a pod takes.
    await eventually(unknown, what="edge-1 Unknown")
    assert (await admin.get(f"{PODS}/new"))["status"]["phase"] == "Pending"
    assert (await admin.get(f"{PODS}/old"))["metadata"]["deletionTimestamp"]

    await sim.connect("edge-1")

    async def caught_up() -> bool:
        new = await admin.get(f"{PODS}/new")
        try:
            await admin.get(f"{PODS}/old")
        except KubeError as exc:
            return exc.code == 404 and new["status"]["phase"] == "Running"
        return False

    await eventually(caught_up, what="the kubelet to start 'new' and remove 'old'")


def test_node_controller_ignores_silence_measured_across_its_own_stall() -> None:
    store = Store()
    store.create(NODES, node_object("n1", 1))
    store.patch(NODES, None, "n1", {"status": node_status("n1", 1, ready=True)}, "application/merge-patch+json",
                subresource="status")
    store.create(LEASES, {"metadata": {"name": "n1", "namespace": "kube-node-lease"},
                          "spec": {"holderIdentity": "n1", "renewTime": "2024-01-01T00:00:00.000000Z"}})
    now = [0.0]
    controller = NodeLifecycleController(store, SimConfig(node_grace=1.0), clock=lambda: now[0])

    def ready() -> str:
        return ready_status(store.get(NODES, None, "n1"))

    controller.check_leases()
    now[0] = 5.0  # the whole process stood still for 5 s: the kubelet could not have renewed either
    controller.check_leases()
    assert ready() == "True"
    while now[0] < 6.5:  # then a real silence longer than node_grace, watched at the normal period
        now[0] += controller.period
        controller.check_leases()
    assert ready() == "Unknown"


async def test_node_without_a_kubelet_turns_unknown(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ghost"}})

    async def unknown() -> JSON | None:
        node = await admin.get("/api/v1/nodes/ghost")
        return node if ready_status(node) == "Unknown" and condition_taints(node) else None

    node = await eventually(unknown, what="ghost Unknown")
    assert (get_condition(node, "Ready") or {}).get("message") == "Kubelet never posted node status."
    assert condition_taints(node) == {("node.kubernetes.io/unreachable", "NoSchedule"),
                                      ("node.kubernetes.io/unreachable", "NoExecute")}


async def test_returning_node_is_ready_before_its_pods_are_re_reported(sim_factory: Any) -> None:
    """Measured on v1.24: on a real cluster the Lease and node Ready come back first, the pods' Ready seconds later."""
    sim: SimCluster = await sim_factory(nodes=1, pod_resync_delay=3.0)
    admin = await KubeClient.connect(sim.admin_kubeconfig)
    try:
        await running_pod(admin, "app", "edge-1")
        await sim.disconnect("edge-1", "refuse")

        async def pod_not_ready() -> bool:
            obj = await admin.get(f"{PODS}/app")
            return (get_condition(obj, "Ready") or {}).get("status") == "False"

        await eventually(pod_not_ready, what="pod marked not ready while edge-1 is unknown")
        lease_before = await admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1")
        await sim.connect("edge-1")

        async def node_ready() -> JSON | None:
            node = await admin.get("/api/v1/nodes/edge-1")
            return node if ready_status(node) == "True" else None

        node = await eventually(node_ready, what="edge-1 Ready again")
        # The node is back, its pods not yet: the kubelet re-reports them from its own loop, later.
        assert await pod_not_ready(), "pod Ready came back in the same step as the node"
        lease = await admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1")
        assert lease["spec"]["renewTime"] != lease_before["spec"]["renewTime"]

        async def pod_ready() -> JSON | None:
            obj = await admin.get(f"{PODS}/app")
            return obj if (get_condition(obj, "Ready") or {}).get("status") == "True" else None

        pod_obj = await eventually(pod_ready, what="pod Ready re-reported after the node")
        assert int(pod_obj["metadata"]["resourceVersion"]) > int(node["metadata"]["resourceVersion"])
    finally:
        await admin.close()


async def test_kubelet_version_is_the_release_the_api_server_claims(sim: SimCluster, admin: KubeClient) -> None:
    """A 1.32 API server with v1.30.0-sim kubelets was a skew no real cluster shows (issue 22 item 17)."""
    version = await admin.get("/version")
    for node in (await admin.get("/api/v1/nodes"))["items"]:
        assert node["status"]["nodeInfo"]["kubeletVersion"] == f"v{version['major']}.{version['minor']}.0"


async def test_work_that_falls_into_a_short_cut_is_done_once_the_link_is_back(sim_factory: Any) -> None:
    """A flapping link: the kubelet's removal of a terminating pod, and its start of a new one, come due while
    the link is down, and no heartbeat runs during the cut (a cut shorter than the heartbeat interval). A real
    kubelet retries; the sim's dropped the work for good, so a pod stayed terminating (or Pending) until the
    next partition that a heartbeat noticed (found by the soak, issue 23)."""
    sim: SimCluster = await sim_factory(nodes=1, heartbeat_interval=60.0, node_grace=120.0, pod_resync_delay=0.2,
                                        pod_termination=0.5, pod_startup=0.5)
    kubelet = sim.nodes.kubelet("edge-1")
    admin = await KubeClient.connect(sim.admin_kubeconfig)
    try:
        old = await running_pod(admin, "old", "edge-1")
        await admin.delete(f"{PODS}/old")
        await admin.create(PODS, pod("new", "edge-1"))
        new = await admin.get(f"{PODS}/new")
        uids = {old["metadata"]["uid"], new["metadata"]["uid"]}
        await eventually(lambda: uids <= set(kubelet._timers), what="removal and start under way")
        await sim.disconnect("edge-1", "refuse")
        await eventually(lambda: not uids & set(kubelet._timers), what="both due during the cut")
        await sim.connect("edge-1")

        async def caught_up() -> bool:
            started = (await admin.get(f"{PODS}/new"))["status"].get("phase") == "Running"
            try:
                await admin.get(f"{PODS}/old")
            except KubeError as exc:
                return exc.code == 404 and started
            return False

        await eventually(caught_up, what="'old' removed and 'new' Running after the link's return")
    finally:
        await admin.close()


async def test_a_crash_looping_pod_stays_not_ready_after_its_node_returns(sim_factory: Any) -> None:
    """After a partition the kubelet re-reports its pods Ready (the containers never stopped), but not a pod
    whose container is crash-looping: that one reports its own status, not Ready. The sim restored Ready for it
    too, so a bad version looked available for a while after every cut."""
    sim: SimCluster = await sim_factory(nodes=1, kubelet_backoff=60.0)
    sim.set_image("example/crash:1", crash=True)
    admin = await KubeClient.connect(sim.admin_kubeconfig)
    try:
        await running_pod(admin, "healthy", "edge-1")
        crash = pod("crash", "edge-1")
        crash["spec"]["containers"][0]["image"] = "example/crash:1"
        await admin.create(PODS, crash)

        async def crash_looping() -> bool:
            statuses = (await admin.get(f"{PODS}/crash"))["status"].get("containerStatuses") or []
            return any((s.get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
                       for s in statuses)

        await eventually(crash_looping, what="the crash pod in CrashLoopBackOff")
        await sim.disconnect("edge-1", "refuse")

        async def healthy_ready(want: str) -> bool:
            return (get_condition(await admin.get(f"{PODS}/healthy"), "Ready") or {}).get("status") == want

        await eventually(lambda: healthy_ready("False"), what="pods marked not ready while edge-1 is away")
        await sim.connect("edge-1")
        # The resync re-reports every pod of the node in one pass: once 'healthy' is Ready, 'crash' was seen.
        await eventually(lambda: healthy_ready("True"), what="'healthy' re-reported Ready")
        assert (get_condition(await admin.get(f"{PODS}/crash"), "Ready") or {}).get("status") != "True"
    finally:
        await admin.close()
