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
from tests.support.kubectl import KUBECTL, Kubectl
from tests.waiting import eventually

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
