"""Events other control-plane components write on a real cluster (issue 22 item 14): `Scheduled` from
default-scheduler on each pod it binds, `RegisteredNode` and `NodeNotReady` from node-controller."""

from __future__ import annotations

from typing import Any

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.sim_cluster.test_daemonsets import DS_PATH, POD_PATH, daemonset, settled
from tests.support.waiting import eventually

JSON = dict[str, Any]


async def _events(admin: KubeClient, **involved: str) -> list[JSON]:
    selector = ",".join(f"involvedObject.{k}={v}" for k, v in involved.items())
    items: list[JSON] = (await admin.get("/api/v1/events", query={"fieldSelector": selector}))["items"]
    return items


async def test_each_daemonset_pod_is_scheduled_by_default_scheduler(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(DS_PATH, daemonset())
    pods = await settled(admin)
    for pod in pods:
        uid, node, name = pod["metadata"]["uid"], pod["spec"]["nodeName"], pod["metadata"]["name"]

        async def scheduled(uid: str = uid) -> list[JSON]:
            return [e for e in await _events(admin, uid=uid) if e["reason"] == "Scheduled"]

        [event] = await eventually(scheduled, what=f"Scheduled for {name}")
        assert event["type"] == "Normal" and event["action"] == "Binding"
        assert event["message"] == f"Successfully assigned default/{name} to {node}"
        assert event["reportingComponent"] == "default-scheduler"
        assert event["metadata"]["namespace"] == "default"
        assert event["involvedObject"]["kind"] == "Pod" and event["eventTime"]


async def test_a_pod_created_on_a_node_never_meets_the_scheduler(sim: SimCluster, admin: KubeClient) -> None:
    """As on a real cluster: spec.nodeName set by the author skips the scheduler, so no Scheduled Event."""
    await admin.create(DS_PATH, daemonset())
    pod = await admin.create(POD_PATH, {"metadata": {"name": "direct"}, "spec": {
        "nodeName": "edge-1", "containers": [{"name": "a", "image": "example/a:1"}]}})
    await settled(admin)  # the DaemonSet's pods were created after ours: their Events have been seen by now
    await eventually(lambda: _scheduled_count(admin, 3), what="the DaemonSet pods' three Scheduled Events")
    assert not [e for e in await _events(admin, uid=pod["metadata"]["uid"])]


async def _scheduled_count(admin: KubeClient, count: int) -> bool:
    items = (await admin.get("/api/v1/events", query={"fieldSelector": "reason=Scheduled"}))["items"]
    return len(items) >= count


async def test_node_controller_registers_nodes_and_reports_not_ready_nodes_and_pods(
        sim: SimCluster, admin: KubeClient) -> None:
    for node_name in sim.node_names:
        node = await admin.get(f"/api/v1/nodes/{node_name}")

        async def registered(node: JSON = node) -> list[JSON]:
            return [e for e in await _events(admin, kind="Node", name=node["metadata"]["name"])
                    if e["reason"] == "RegisteredNode"]

        [event] = await eventually(registered, what=f"RegisteredNode for {node_name}")
        assert event["message"] == f"Node {node_name} event: Registered Node {node_name} in Controller"
        assert event["source"] == {"component": "node-controller"}
        assert event["involvedObject"]["uid"] == node["metadata"]["uid"]
        assert event["metadata"]["namespace"] == "default"
    await admin.create(DS_PATH, daemonset())
    pods = {p["spec"]["nodeName"]: p for p in await settled(admin)}
    await sim.disconnect("edge-2")

    async def node_not_ready() -> list[JSON]:
        return [e for e in await _events(admin, kind="Node", name="edge-2") if e["reason"] == "NodeNotReady"]

    [event] = await eventually(node_not_ready, what="NodeNotReady on edge-2")
    assert (event["type"], event["message"]) == ("Normal", "Node edge-2 status is now: NodeNotReady")

    async def pod_not_ready() -> list[JSON]:
        return [e for e in await _events(admin, uid=pods["edge-2"]["metadata"]["uid"]) if e["reason"] == "NodeNotReady"]

    [event] = await eventually(pod_not_ready, what="NodeNotReady on the pod of edge-2")
    assert (event["type"], event["message"], event["source"]) == (
        "Warning", "Node is not ready", {"component": "node-controller"})
    for node_name in ("edge-1", "edge-3"):
        uid = pods[node_name]["metadata"]["uid"]
        assert not [e for e in await _events(admin, uid=uid) if e["reason"] == "NodeNotReady"]


async def test_a_repeated_event_raises_the_count_of_the_first(sim: SimCluster, admin: KubeClient) -> None:
    """As client-go's recorder does: a second partition does not add a second NodeNotReady Event per pod."""
    await admin.create(DS_PATH, daemonset())
    pod = {p["spec"]["nodeName"]: p for p in await settled(admin)}["edge-2"]
    uid = pod["metadata"]["uid"]

    async def not_ready_events(count: int) -> list[JSON] | None:
        found = [e for e in await _events(admin, uid=uid) if e["reason"] == "NodeNotReady"]
        return found if found and found[0].get("count") == count else None

    await sim.disconnect("edge-2")
    await eventually(lambda: not_ready_events(1), what="the first NodeNotReady")
    await sim.connect("edge-2")
    await settled(admin)
    await sim.disconnect("edge-2")
    [event] = await eventually(lambda: not_ready_events(2), what="the same Event counted twice")
    assert event["lastTimestamp"] >= event["firstTimestamp"]


async def test_control_plane_events_can_be_turned_off(sim_factory: SimFactory) -> None:
    sim = await sim_factory(control_plane_events=False)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await admin.create(DS_PATH, daemonset())
        await settled(admin)
        await sim.disconnect("edge-2")

        async def node_unknown() -> bool:
            node = await admin.get("/api/v1/nodes/edge-2")
            return any(c["type"] == "Ready" and c["status"] == "Unknown" for c in node["status"]["conditions"])

        await eventually(node_unknown, what="edge-2 Unknown")
        reasons = {e["reason"] for e in (await admin.get("/api/v1/events"))["items"]}
        assert not reasons & {"Scheduled", "RegisteredNode", "NodeNotReady"}, reasons
