"""What `edgeagent demo` reads and writes in the cluster, and how it prints it (kubectl-like rows).

All access goes over the API server's REST interface with the admin kubeconfig, as `kubectl` would,
so the demo sees exactly what a user of the cluster sees.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient
from edgeagent.kube.objects import (
    ANNOTATION_MAX_UNAVAILABLE,
    ANNOTATION_UPDATE_STRATEGY,
    CONDITION_POD_NEED_UPGRADE,
    get_condition,
    is_node_ready,
    is_pod_ready,
    is_terminating,
    labels_of,
    meta,
    name_of,
    uid_of,
)

JSON = dict[str, Any]

NAMESPACE = "default"
CONTAINER = "nginx"
POD_HEADERS = ("NAME", "READY", "STATUS", "AGE", "NODE", "IMAGE")
OTA_POD_HEADERS = (*POD_HEADERS, "PodNeedUpgrade")
NODE_HEADERS = ("NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP")


def daemonset(name: str, strategy: str, image: str, *, max_unavailable: str | None = None) -> JSON:
    """The seed document's manifest: the annotation picks the model, OnDelete hands deletions to us."""
    annotations = {ANNOTATION_UPDATE_STRATEGY: strategy}
    if max_unavailable is not None:
        annotations[ANNOTATION_MAX_UNAVAILABLE] = max_unavailable
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": CONTAINER, "image": image}]},
            },
        },
    }


@dataclass(frozen=True)
class PodView:
    """The parts of a pod the demo reasons about."""

    name: str
    uid: str
    node: str
    image: str
    ready: bool
    terminating: bool
    phase: str
    need_upgrade: str  # "True" / "False" / "" when the condition is absent
    created: str

    @classmethod
    def of(cls, pod: JSON) -> PodView:
        spec = pod.get("spec") or {}
        containers = spec.get("containers") or [{}]
        cond = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
        return cls(
            name=name_of(pod), uid=uid_of(pod), node=str(spec.get("nodeName") or ""),
            image=str(containers[0].get("image") or ""), ready=is_pod_ready(pod),
            terminating=is_terminating(pod), phase=str((pod.get("status") or {}).get("phase") or "Pending"),
            need_upgrade=str(cond.get("status") or "") if cond else "",
            created=str(meta(pod).get("creationTimestamp") or ""),
        )

    @property
    def live(self) -> bool:
        return not self.terminating

    def short(self) -> str:
        state = "Terminating" if self.terminating else ("Ready" if self.ready else self.phase)
        need = f" PodNeedUpgrade={self.need_upgrade}" if self.need_upgrade else ""
        return f"{self.name}@{self.node or '?'} {self.image} {state}{need}"

    def row(self, *, ota: bool = False) -> list[str]:
        status = "Terminating" if self.terminating else self.phase
        cells = [self.name, "1/1" if self.ready else "0/1", status, age(self.created), self.node or "<none>",
                 self.image]
        if ota:
            cells.append(self.need_upgrade or "<unset>")
        return cells


def age(timestamp: str) -> str:
    """kubectl's short age (`5s`, `2m`), from an RFC 3339 timestamp."""
    try:
        created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return "<unknown>"
    seconds = max(0, int(time.time() - created))
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m"


def summary(pods: list[PodView]) -> str:
    return "; ".join(p.short() for p in pods) or "no pods"


def by_node(pods: list[PodView]) -> dict[str, list[PodView]]:
    out: dict[str, list[PodView]] = {}
    for pod in pods:
        out.setdefault(pod.node, []).append(pod)
    return out


def node_row(node: JSON) -> list[str]:
    status = node.get("status") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels_of(node) if k.startswith("node-role.kubernetes.io/"))
    internal = next((a.get("address", "") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"),
                    "<none>")
    version = str((status.get("nodeInfo") or {}).get("kubeletVersion") or "")
    return [name_of(node), node_status(node), ",".join(roles) or "<none>",
            age(str(meta(node).get("creationTimestamp") or "")), version, internal]


def node_status(node: JSON) -> str:
    status = "Ready" if is_node_ready(node) else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


class Cluster:
    """The demo's admin view of the cluster."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def nodes(self) -> list[JSON]:
        items = (await self.client.get("/api/v1/nodes")).get("items") or []
        return sorted(items, key=name_of)

    async def node_states(self) -> dict[str, bool]:
        return {name_of(n): is_node_ready(n) for n in await self.nodes()}

    async def pods(self, app: str) -> list[PodView]:
        body = await self.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods", query={"labelSelector": f"app={app}"})
        views = [PodView.of(p) for p in body.get("items") or []]
        return sorted(views, key=lambda p: (p.node, p.name))

    async def create_daemonset(self, manifest: JSON) -> JSON:
        return await self.client.create(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets", manifest)

    async def set_image(self, daemonset_name: str, image: str) -> JSON:
        """`kubectl set image ds/<name> nginx=<image>`: a strategic merge on the container, keyed by name."""
        patch = {"spec": {"template": {"spec": {"containers": [{"name": CONTAINER, "image": image}]}}}}
        return await self.client.patch(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{daemonset_name}",
                                       patch, CONTENT_STRATEGIC_MERGE_PATCH)

    async def delete_daemonset(self, daemonset_name: str) -> None:
        await self.client.delete(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{daemonset_name}")
