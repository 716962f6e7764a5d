"""The real kubectl against the simulated cluster: the commands people use while working with the sim.

kubectl runs as a subprocess while the sim runs in this test's event loop, so every call goes through
asyncio.create_subprocess_exec (a blocking call would freeze the server kubectl is talking to).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient, KubeError
from edgeagent.kube.objects import get_condition, is_pod_ready
from edgeagent.sim.cluster import SimCluster
from tests.support.kubectl import KUBECTL, Kubectl
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (needed for the kubectl e2e tests)"),
]

DS_MANIFEST = """\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  namespace: default
spec:
  selector:
    matchLabels:
      app: agent
  template:
    metadata:
      labels:
        app: agent
    spec:
      containers:
      - name: agent
        image: example/agent:1
"""


@pytest.fixture
def kubectl(sim: SimCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.admin_kubeconfig, tmp_path / "kube-cache")


async def apply_daemonset(kubectl: Kubectl, admin: KubeClient, tmp_path: Path) -> list[dict[str, Any]]:
    manifest = tmp_path / "ds.yaml"
    manifest.write_text(DS_MANIFEST)
    assert "daemonset.apps/agent created" in await kubectl("apply", "-f", str(manifest))
    return await ready_pods(admin, "example/agent:1")


async def ready_pods(admin: KubeClient, image: str) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]] | None:
        pods = (await admin.get("/api/v1/namespaces/default/pods", query={"labelSelector": "app=agent"}))["items"]
        ok = len(pods) == 3 and all(
            is_pod_ready(p) and not p["metadata"].get("deletionTimestamp")
            and p["spec"]["containers"][0]["image"] == image for p in pods)
        return pods if ok else None

    result: list[dict[str, Any]] = await eventually(probe, what=f"3 ready pods of {image}")
    return result


async def test_get_nodes(sim: SimCluster, kubectl: Kubectl) -> None:
    out = await kubectl("get", "nodes")
    lines = out.strip().splitlines()
    assert lines[0].split()[0] == "NAME"
    assert [line.split()[0] for line in lines[1:]] == ["edge-1", "edge-2", "edge-3"]


async def test_get_pods_all_namespaces_json(sim: SimCluster, kubectl: Kubectl, admin: KubeClient,
                                            tmp_path: Path) -> None:
    await apply_daemonset(kubectl, admin, tmp_path)
    listed = json.loads(await kubectl("get", "pods", "-A", "-o", "json"))
    assert listed["kind"] == "List"
    assert sorted(p["spec"]["nodeName"] for p in listed["items"]) == ["edge-1", "edge-2", "edge-3"]
    assert {p["metadata"]["namespace"] for p in listed["items"]} == {"default"}


async def test_apply_creates_a_daemonset_and_reapply_is_unchanged(sim: SimCluster, kubectl: Kubectl,
                                                                   admin: KubeClient, tmp_path: Path) -> None:
    pods = await apply_daemonset(kubectl, admin, tmp_path)
    assert {p["metadata"]["ownerReferences"][0]["name"] for p in pods} == {"agent"}
    assert "daemonset.apps/agent unchanged" in await kubectl("apply", "-f", str(tmp_path / "ds.yaml"))


async def test_delete_pod_waits_until_the_pod_is_gone(sim: SimCluster, kubectl: Kubectl, admin: KubeClient,
                                                      tmp_path: Path) -> None:
    pods = await apply_daemonset(kubectl, admin, tmp_path)
    name = pods[0]["metadata"]["name"]
    assert f'pod "{name}" deleted' in await kubectl("delete", "pod", name)
    # kubectl only returns once it has watched the DELETED event: the pod is gone right now.
    with pytest.raises(KubeError) as caught:
        await admin.get(f"/api/v1/namespaces/default/pods/{name}")
    assert caught.value.code == 404


async def test_patch_status_subresource(sim: SimCluster, kubectl: Kubectl, admin: KubeClient,
                                        tmp_path: Path) -> None:
    pods = await apply_daemonset(kubectl, admin, tmp_path)
    name = pods[0]["metadata"]["name"]
    patch = {"status": {"conditions": [{"type": "PodNeedUpgrade", "status": "True", "reason": "Test"}]}}
    await kubectl("patch", "pod", name, "--subresource=status", "--type=strategic", "-p", json.dumps(patch))
    pod = await admin.get(f"/api/v1/namespaces/default/pods/{name}")
    assert (get_condition(pod, "PodNeedUpgrade") or {}).get("status") == "True"
    assert is_pod_ready(pod)  # merged by type: the kubelet's conditions are still there


async def test_get_pods_watch_sees_a_change(sim: SimCluster, kubectl: Kubectl, admin: KubeClient,
                                            tmp_path: Path) -> None:
    pods = await apply_daemonset(kubectl, admin, tmp_path)
    name = pods[0]["metadata"]["name"]
    template = '{.metadata.name} {.metadata.labels.color}{"\\n"}'
    async with kubectl.stream("get", "pods", "--watch", "-o", f"jsonpath={template}") as lines:
        seen: list[str] = []

        async def until(wanted: str) -> None:
            while wanted not in seen:
                seen.append((await lines.readline()).decode().strip())

        await asyncio.wait_for(until(name), 30)
        await admin.patch(f"/api/v1/namespaces/default/pods/{name}", {"metadata": {"labels": {"color": "blue"}}})
        await asyncio.wait_for(until(f"{name} blue"), 30)


async def test_rollout_undo_restores_the_previous_template(sim: SimCluster, kubectl: Kubectl, admin: KubeClient,
                                                            tmp_path: Path) -> None:
    first = await apply_daemonset(kubectl, admin, tmp_path)
    first_hash = first[0]["metadata"]["labels"]["controller-revision-hash"]
    await kubectl("set", "image", "ds/agent", "agent=example/agent:2")
    await ready_pods(admin, "example/agent:2")
    assert "rolled back" in await kubectl("rollout", "undo", "ds/agent")
    pods = await ready_pods(admin, "example/agent:1")
    assert {p["metadata"]["labels"]["controller-revision-hash"] for p in pods} == {first_hash}
    history = await kubectl("rollout", "history", "ds/agent")
    assert [line.split()[0] for line in history.strip().splitlines()[-2:]] == ["2", "3"]
    assert "successfully rolled out" in await kubectl("rollout", "status", "ds/agent", "--timeout=20s")
