"""What `kubectl get` prints against the sim: the columns kube-apiserver sends (v1.24, measured).

The real server (v1.24, measured) makes kubectl print `NAME READY STATUS RESTARTS AGE IP NODE NOMINATED
NODE READINESS GATES` for `get pods -o wide`, `NAME STATUS ROLES AGE VERSION [INTERNAL-IP …]` for nodes
and `NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE` for daemonsets; a server without
Tables makes it print only NAME and AGE.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.support.kubectl import KUBECTL, Kubectl, table
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (needed for the kubectl e2e tests)"),
]

POD_WIDE = ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
NODE = ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
NODE_WIDE = [*NODE, "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"]
DS = ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE"]
AGE = re.compile(r"^\d+s$")  # everything in these tests is seconds old

DS_MANIFEST = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "agent", "namespace": "default"},
    "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {"metadata": {"labels": {"app": "agent"}},
                     "spec": {"containers": [{"name": "agent", "image": "example/agent:1"}]}},
    },
}


@pytest.fixture
def kubectl(sim: SimCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.admin_kubeconfig, tmp_path / "kube-cache")


async def agent_pods(kubectl: Kubectl, admin: KubeClient) -> list[dict[str, Any]]:
    await kubectl("apply", "-f", "-", stdin=json.dumps(DS_MANIFEST))

    async def ready() -> list[dict[str, Any]] | None:
        pods = (await admin.get("/api/v1/namespaces/default/pods"))["items"]
        ok = len(pods) == 3 and all(p["status"].get("phase") == "Running" for p in pods)
        return pods if ok else None

    pods: list[dict[str, Any]] = await eventually(ready, what="3 running agent pods")
    return pods


async def test_get_pods_wide_prints_the_real_columns_and_cells(kubectl: Kubectl, admin: KubeClient) -> None:
    pods = await agent_pods(kubectl, admin)
    header, rows = table(await kubectl("get", "pods", "-o", "wide"))
    assert header == POD_WIDE
    expected = sorted([p["metadata"]["name"], "1/1", "Running", "0", p["status"]["podIP"], p["spec"]["nodeName"],
                       "<none>", "<none>"] for p in pods)
    assert sorted([r[:4] + r[5:] for r in rows]) == expected
    assert all(AGE.match(r[4]) for r in rows), rows
    header, _ = table(await kubectl("get", "pods"))
    assert header == POD_WIDE[:5]


async def test_get_nodes_prints_status_roles_and_version(sim: SimCluster, kubectl: Kubectl,
                                                         admin: KubeClient) -> None:
    header, rows = table(await kubectl("get", "nodes"))
    assert header == NODE
    assert [r[:3] for r in rows] == [[n, "Ready", "<none>"] for n in ("edge-1", "edge-2", "edge-3")]
    node = await admin.get("/api/v1/nodes/edge-1")
    assert {r[4] for r in rows} == {node["status"]["nodeInfo"]["kubeletVersion"]}
    header, rows = table(await kubectl("get", "nodes", "-o", "wide"))
    assert header == NODE_WIDE
    internal = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    assert rows[0][5:7] == [internal, "<none>"]

    await kubectl("label", "node", "edge-1", "node-role.kubernetes.io/edge=")
    await kubectl("cordon", "edge-2")
    await sim.disconnect("edge-3")

    async def printed() -> list[list[str]] | None:
        _, now = table(await kubectl("get", "nodes"))
        return now if now[2][1] == "NotReady" else None

    rows = await eventually(printed, what="edge-3 printed NotReady")
    assert [r[1:3] for r in rows] == [["Ready", "edge"], ["Ready,SchedulingDisabled", "<none>"],
                                      ["NotReady", "<none>"]]


async def test_get_daemonsets_wide(kubectl: Kubectl, admin: KubeClient) -> None:
    await agent_pods(kubectl, admin)

    async def settled() -> list[list[str]] | None:
        header, rows = table(await kubectl("get", "ds", "-o", "wide"))
        assert header == [*DS, "CONTAINERS", "IMAGES", "SELECTOR"]
        return rows if rows[0][1:6] == ["3"] * 5 else None

    rows = await eventually(settled, what="daemonset status 3/3")
    assert rows[0][0] == "agent" and rows[0][6] == "<none>" and AGE.match(rows[0][7])
    assert rows[0][8:] == ["agent", "example/agent:1", "app=agent"]
    header, rows = table(await kubectl("get", "controllerrevisions"))
    assert header == ["NAME", "CONTROLLER", "REVISION", "AGE"]
    assert rows[0][1:3] == ["daemonset.apps/agent", "1"]


async def test_pod_status_on_an_unreachable_node(sim: SimCluster, kubectl: Kubectl, admin: KubeClient) -> None:
    """A cut node's kubelet writes nothing, so what the test writes is what kubectl must show."""
    pods = await agent_pods(kubectl, admin)
    on_edge1 = next(p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == "edge-1")
    await sim.disconnect("edge-1")
    await sim.disconnect("edge-2")
    await kubectl("delete", "pod", on_edge1, "--wait=false")
    pulling = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pulling", "namespace": "default"},
               "spec": {"nodeName": "edge-2", "containers": [{"name": "app", "image": "example/app:2"}]}}
    await admin.create("/api/v1/namespaces/default/pods", pulling)
    waiting = {"state": {"waiting": {"reason": "ErrImagePull", "message": "pull failed"}}, "ready": False,
               "restartCount": 0, "name": "app", "image": "example/app:2", "imageID": ""}
    await admin.patch("/api/v1/namespaces/default/pods/pulling/status",
                      {"status": {"phase": "Pending", "containerStatuses": [waiting]}})
    _, rows = table(await kubectl("get", "pods"))
    status = {r[0]: r[1:3] for r in rows}
    assert status[on_edge1] == ["1/1", "Terminating"]
    assert status["pulling"] == ["0/1", "ErrImagePull"]


async def test_get_watch_prints_rows_as_they_change(kubectl: Kubectl, admin: KubeClient) -> None:
    pods = await agent_pods(kubectl, admin)
    name = pods[0]["metadata"]["name"]
    async with kubectl.stream("get", "pods", "--watch") as out:
        header = (await asyncio.wait_for(out.readline(), 30)).decode().split()
        assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        for _ in pods:
            await asyncio.wait_for(out.readline(), 30)
        await admin.patch(f"/api/v1/namespaces/default/pods/{name}", {"metadata": {"labels": {"color": "blue"}}})
        line = (await asyncio.wait_for(out.readline(), 30)).decode().split()
    assert line[:4] == [name, "1/1", "Running", "0"]


@pytest.mark.parametrize(
    ("args", "header"),
    [
        (("get", "leases", "-n", "kube-node-lease"), ["NAME", "HOLDER", "AGE"]),
        (("get", "namespaces"), ["NAME", "STATUS", "AGE"]),
        (("get", "clusterroles"), ["NAME", "CREATED AT"]),
    ],
)
async def test_other_kinds_print_their_columns(kubectl: Kubectl, args: tuple[str, ...], header: list[str]) -> None:
    async def printed() -> list[str] | None:
        out = await kubectl(*args)
        return table(out)[0] if out.strip() else None

    if args[1] == "clusterroles":
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}
        await kubectl("apply", "-f", "-", stdin=json.dumps(role))
    assert await eventually(printed, what=f"kubectl {' '.join(args)}") == header
