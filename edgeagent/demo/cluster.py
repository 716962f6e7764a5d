"""What `edgeagent demo` checks in the cluster: the manifests it applies and the pods and nodes it reads.

All access goes over the API server's REST interface with the admin kubeconfig, as `kubectl` would,
so the demo's checks see exactly what a user of the cluster sees. (What the demo prints comes from
the commands it runs, not from here.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeagent.contract import (
    ANNOTATION_MAX_UNAVAILABLE,
    ANNOTATION_UPDATE_STRATEGY,
    CONDITION_POD_NEED_UPGRADE,
)
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import (
    get_condition,
    is_node_ready,
    is_pod_ready,
    is_terminating,
    meta,
    name_of,
    uid_of,
)

JSON = dict[str, Any]

NAMESPACE = "default"
CONTAINER = "nginx"


def daemonset(name: str, strategy: str, image: str, *, max_unavailable: str | None = None) -> JSON:
    """OpenYurt's example manifest: the annotation picks the model, OnDelete hands deletions to us."""
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


def summary(pods: list[PodView]) -> str:
    return "; ".join(p.short() for p in pods) or "no pods"


def by_node(pods: list[PodView]) -> dict[str, list[PodView]]:
    out: dict[str, list[PodView]] = {}
    for pod in pods:
        out.setdefault(pod.node, []).append(pod)
    return out


class Cluster:
    """The demo's admin view of the cluster."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def nodes(self) -> list[JSON]:
        items = (await self.client.get("/api/v1/nodes")).get("items") or []
        return sorted(items, key=name_of)

    async def node_states(self) -> dict[str, bool]:
        return {name_of(n): is_node_ready(n) for n in await self.nodes()}

    async def daemonset(self, name: str) -> JSON:
        return await self.client.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{name}")

    async def pods(self, app: str) -> list[PodView]:
        body = await self.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods", query={"labelSelector": f"app={app}"})
        views = [PodView.of(p) for p in body.get("items") or []]
        return sorted(views, key=lambda p: (p.node, p.name))
