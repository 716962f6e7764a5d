"""v1.24 differences that need the whole simulated cluster: the kubelet's pod conditions and the DaemonSet
controller's Events (what `kubectl describe ds` shows)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"
KUBECTL = shutil.which("kubectl")


def _daemonset(name: str) -> JSON:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "example/app:1"}]}}}}


async def test_kubelet_posts_the_pod_conditions_of_a_v124_kubelet(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                              "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "x:1"}]}})

    async def running() -> JSON | None:
        pod = await admin.get(f"{PODS}/p")
        return pod if pod["status"].get("phase") == "Running" else None

    pod = await eventually(running, what="pod p Running")
    types = {c["type"] for c in pod["status"]["conditions"]}
    assert types == {"Initialized", "Ready", "ContainersReady", "PodScheduled"}  # no PodReadyToStartContainers


async def _ds_events(admin: KubeClient, ds: JSON) -> list[JSON]:
    events = await admin.get("/api/v1/namespaces/default/events", query={
        "fieldSelector": f"involvedObject.kind=DaemonSet,involvedObject.name={ds['metadata']['name']},"
                         f"involvedObject.uid={ds['metadata']['uid']}"})
    return list(events["items"])


async def test_daemonset_controller_records_successful_create_and_delete_events(
        sim: SimCluster, admin: KubeClient) -> None:
    ds = await admin.create("/apis/apps/v1/namespaces/default/daemonsets", _daemonset("agent"))

    async def pods() -> list[JSON] | None:
        found = (await admin.get(PODS, query={"labelSelector": "app=agent"}))["items"]
        return found if len(found) == 3 else None

    names = sorted(p["metadata"]["name"] for p in await eventually(pods, what="3 daemon pods"))
    await eventually(lambda: _count(admin, ds, 3), what="one SuccessfulCreate per pod")
    events = await _ds_events(admin, ds)
    assert sorted(e["message"] for e in events) == [f"Created pod: {n}" for n in names]
    for event in events:
        assert (event["reason"], event["type"], event["source"]) == (
            "SuccessfulCreate", "Normal", {"component": "daemonset-controller"})
        assert event["involvedObject"]["apiVersion"] == "apps/v1"

    # A failed daemon pod is deleted by the controller (SuccessfulDelete) and replaced (SuccessfulCreate).
    victim = names[0]
    await admin.request("PATCH", f"{PODS}/{victim}/status", body={"status": {"phase": "Failed"}},
                        content_type="application/merge-patch+json")

    async def deleted() -> bool:
        return any(e["reason"] == "SuccessfulDelete" and e["message"] == f"Deleted pod: {victim}"
                   for e in await _ds_events(admin, ds))

    await eventually(deleted, what="SuccessfulDelete for the failed pod")
    await eventually(lambda: _count(admin, ds, 5), what="SuccessfulCreate for the replacement")


async def _count(admin: KubeClient, ds: JSON, want: int) -> bool:
    return len(await _ds_events(admin, ds)) >= want


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_describe_ds_lists_the_controllers_events(
        sim: SimCluster, admin: KubeClient, tmp_path: Path) -> None:
    ds = await admin.create("/apis/apps/v1/namespaces/default/daemonsets", _daemonset("agent"))
    await eventually(lambda: _count(admin, ds, 3), what="the controller's events")
    proc = await asyncio.create_subprocess_exec(
        str(KUBECTL), "--kubeconfig", str(sim.admin_kubeconfig), "--cache-dir", str(tmp_path / "cache"),
        "describe", "ds", "agent", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    events = text[text.index("Events:"):]
    assert "Events:  <none>" not in events
    lines = [line.split() for line in events.splitlines() if "SuccessfulCreate" in line]
    assert len(lines) == 3, events
    for words in lines:
        assert words[0] == "Normal" and words[1] == "SuccessfulCreate"
        assert "daemonset-controller" in words and "Created" in words


async def test_a_node_whose_kubelet_posts_not_ready_gets_its_pods_marked_not_ready(
        sim_factory: Any) -> None:
    """The node lifecycle controller marks pods NotReady on any transition of Ready away from True (not only when
    the node goes silent); the kubelet, healthy again, re-reports them after the node (pod_resync_delay)."""
    sim: SimCluster = await sim_factory(pod_resync_delay=1.0)
    admin = await KubeClient.connect(sim.admin_kubeconfig)
    try:
        await admin.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                  "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "x:1"}]}})

        async def pod_ready(want: str) -> bool:
            pod = await admin.get(f"{PODS}/p")
            ready = [c for c in pod["status"].get("conditions") or [] if c["type"] == "Ready"]
            return bool(ready) and ready[0]["status"] == want

        async def node_ready(want: str) -> bool:
            node = await admin.get("/api/v1/nodes/edge-1")
            return any(c["type"] == "Ready" and c["status"] == want for c in node["status"]["conditions"])

        await eventually(lambda: pod_ready("True"), what="pod Ready")
        sim.set_node_ready("edge-1", False)
        await eventually(lambda: node_ready("False"), what="edge-1 posts Ready=False")
        await eventually(lambda: pod_ready("False"), what="its pod marked NotReady")
        sim.set_node_ready("edge-1", True)
        await eventually(lambda: node_ready("True"), what="edge-1 Ready again")
        assert await pod_ready("False"), "the pod came back in the same step as its node"
        await eventually(lambda: pod_ready("True"), what="the kubelet re-reported the pod")
    finally:
        await admin.close()
