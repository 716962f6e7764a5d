"""The real kubectl against the sim on what a real cluster shows and the sim did not (issue 22 items 12-17):
`kubectl describe pod` with the server's pod defaults and the pod's history, `kubectl explain` from real
schemas, and `kubectl apply -f deploy/k8s-1.30/`."""

from __future__ import annotations

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

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def kubectl(sim: SimCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.admin_kubeconfig, tmp_path / "kube-cache")


async def _running_pod(admin: KubeClient, name: str, image: str = "nginx:1.19.4", node: str = "edge-1") -> JSON:
    await admin.create(PODS, {"metadata": {"name": name},
                              "spec": {"nodeName": node, "containers": [{"name": "web", "image": image}]}})

    async def running() -> JSON | None:
        pod = await admin.get(f"{PODS}/{name}")
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    return await eventually(running, what=f"pod {name} Running")


def _field(text: str, label: str) -> str:
    """The value kubectl describe prints after `Label:` (first occurrence)."""
    match = re.search(rf"^\s*{re.escape(label)}:[ \t]*(.*)$", text, re.MULTILINE)
    assert match is not None, f"no {label!r} in:\n{text}"
    return match.group(1).strip()


async def test_describe_pod_shows_priority_service_account_mounts_and_volumes(
        admin: KubeClient, kubectl: Kubectl) -> None:
    pod = await _running_pod(admin, "web")
    volume = pod["spec"]["volumes"][0]["name"]
    out = await kubectl("describe", "pod", "web")
    assert _field(out, "Priority") == "0"
    assert _field(out, "Service Account") == "default"
    assert f"/var/run/secrets/kubernetes.io/serviceaccount from {volume} (ro)" in out
    volumes = out.split("\nVolumes:", 1)[1]
    assert f"{volume}:" in volumes and "Projected (a volume that contains injected data from multiple sources)" \
        in volumes, volumes
    assert _field(volumes, "TokenExpirationSeconds") == "3607"
    assert _field(volumes, "ConfigMapName") == "kube-root-ca.crt"


DS = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {
    "selector": {"matchLabels": {"app": "agent"}},
    "template": {"metadata": {"labels": {"app": "agent"}},
                 "spec": {"containers": [{"name": "agent", "image": "example/agent:1"}]}}}}


def _event_rows(describe: str) -> list[list[str]]:
    """The rows of the Events table at the end of `kubectl describe` (Type, Reason, Age, From, Message)."""
    tail = describe.split("\nEvents:", 1)[1]
    return [re.split(r"\s{2,}", line.strip()) for line in tail.splitlines()[3:] if line.strip()]


async def test_describe_pod_shows_its_history_from_scheduler_and_node_controller(
        sim: SimCluster, admin: KubeClient, kubectl: Kubectl) -> None:
    await admin.create("/apis/apps/v1/namespaces/default/daemonsets", DS)

    async def pod_on_edge_2() -> JSON | None:
        pods = (await admin.get(PODS, query={"fieldSelector": "spec.nodeName=edge-2"}))["items"]
        return pods[0] if pods and pods[0].get("status", {}).get("phase") == "Running" else None

    pod = await eventually(pod_on_edge_2, what="the DaemonSet's pod on edge-2 Running")
    name = pod["metadata"]["name"]
    await sim.disconnect("edge-2")

    async def history() -> list[list[str]] | None:
        rows = _event_rows(await kubectl("describe", "pod", name))
        return rows if {r[1] for r in rows} >= {"Scheduled", "NodeNotReady"} else None

    rows = await eventually(history, timeout=20, interval=0.5, what="Scheduled and NodeNotReady in describe pod")
    scheduled = next(r for r in rows if r[1] == "Scheduled")
    assert (scheduled[0], scheduled[3], scheduled[4]) == (
        "Normal", "default-scheduler", f"Successfully assigned default/{name} to edge-2")
    not_ready = next(r for r in rows if r[1] == "NodeNotReady")
    assert (not_ready[0], not_ready[3], not_ready[4]) == ("Warning", "node-controller", "Node is not ready")
    node_rows = _event_rows(await kubectl("describe", "node", "edge-2"))
    assert node_rows[0][:2] == ["Normal", "RegisteredNode"], node_rows
    assert any(r[1] == "NodeNotReady" and r[4] == "Node edge-2 status is now: NodeNotReady" for r in node_rows)


ROOT = Path(__file__).resolve().parents[2]


async def test_kubectl_applies_deploy_and_the_1_30_admission_policy(kubectl: Kubectl) -> None:
    """The sim says 1.32, so `kubectl apply -f deploy/k8s-1.30/` must work as on a real 1.32 server."""
    await kubectl("apply", "-f", str(ROOT / "deploy"))
    out = await kubectl("apply", "-f", str(ROOT / "deploy" / "k8s-1.30"))
    assert out.splitlines() == [
        "validatingadmissionpolicy.admissionregistration.k8s.io/edgeagent-agent-own-node-pods created",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/edgeagent-agent-own-node-pods created"]
    names = await kubectl("get", "validatingadmissionpolicies,validatingadmissionpolicybindings", "-o", "name")
    assert names.split() == [
        "validatingadmissionpolicy.admissionregistration.k8s.io/edgeagent-agent-own-node-pods",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/edgeagent-agent-own-node-pods"]
    header, rows = table(await kubectl("get", "validatingadmissionpolicies"))
    assert header == ["NAME", "VALIDATIONS", "PARAMKIND", "AGE"]
    assert rows[0][:3] == ["edgeagent-agent-own-node-pods", "1", "<unset>"]
    header, rows = table(await kubectl("get", "validatingadmissionpolicybindings"))
    assert header == ["NAME", "POLICYNAME", "PARAMREF", "AGE"]
    assert rows[0][:3] == ["edgeagent-agent-own-node-pods", "edgeagent-agent-own-node-pods", "<unset>"]
    # Applying again: the binding is unchanged, the policy "configured", as on a real server (1.36 too): the server
    # fills in `resourceRules[].scope`, which the manifest leaves out, so kubectl's three-way diff finds a change.
    assert (await kubectl("apply", "-f", str(ROOT / "deploy" / "k8s-1.30"))).splitlines() == [
        "validatingadmissionpolicy.admissionregistration.k8s.io/edgeagent-agent-own-node-pods configured",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/edgeagent-agent-own-node-pods unchanged"]


async def test_explain_shows_real_descriptions_required_markers_and_enums(kubectl: Kubectl) -> None:
    out = await kubectl("explain", "pod.spec")
    assert "PodSpec is a description of a pod." in out
    assert "containers\t<[]Container> -required-" in out
    assert "affinity\t<Affinity>\n    If specified, the pod's scheduling constraints" in out  # an object field
    assert "restartPolicy\t<string>\n  enum: Always, Never, OnFailure" in out
    out = await kubectl("explain", "pod.spec.containers.imagePullPolicy")
    assert "ENUM:\n    Always\n    IfNotPresent\n    Never\n" in out
    out = await kubectl("explain", "daemonsets")
    assert "DESCRIPTION:\n    DaemonSet represents the configuration of a daemon set." in out
    out = await kubectl("explain", "daemonsets.spec")
    assert "selector\t<LabelSelector> -required-" in out and "template\t<PodTemplateSpec> -required-" in out
    out = await kubectl("explain", "validatingadmissionpolicy.spec.failurePolicy")
    assert "ENUM:\n    Fail\n    Ignore\n" in out
