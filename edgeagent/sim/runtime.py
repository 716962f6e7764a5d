"""What a simulated node's container runtime really runs, as its kubelet sees it.

The API's view of a pod (its status) is what the kubelet last managed to report; while the node's link is
cut it freezes, though the kubelet goes on acting on what it knows: it may have killed a container and be
pulling the new image. Tests of in-place upgrades must see the node's truth through a cut (a node is without
its daemon only for a container's restart, never for the outage), so each kubelet records here every status
it reports or would report, and `GET /sim/v1/nodes/{node}/containers` serves it.

A pod the kubelet has not reported on since this process started (a sim restarted on its state directory)
is read from its stored status instead, which is what the node ran when the sim stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeagent.kube.objects import name_of, namespace_of, uid_of

JSON = dict[str, Any]


@dataclass(frozen=True)
class RuntimeContainer:
    """One container of a pod on the node: the image it runs (as the runtime names it) and its state."""

    name: str
    image: str
    state: str  # running | waiting | terminated
    container_id: str
    image_id: str
    restart_count: int


def _state(entry: JSON) -> str:
    state = entry.get("state") or {}
    for name in ("running", "terminated", "waiting"):
        if name in state:
            return name
    return "waiting"


def containers_from_status(status: JSON) -> list[RuntimeContainer]:
    return [RuntimeContainer(str(e.get("name") or ""), str(e.get("image") or ""), _state(e),
                             str(e.get("containerID") or ""), str(e.get("imageID") or ""),
                             int(e.get("restartCount") or 0))
            for e in status.get("containerStatuses") or [] if isinstance(e, dict)]


class NodeRuntime:
    """Per pod UID: its namespace/name, its containers and the last status the kubelet wanted reported."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[str, str, list[RuntimeContainer], JSON]] = {}

    def observe(self, namespace: str, name: str, uid: str, status: JSON) -> None:
        """The kubelet reports (or, with its link cut, would report) `status`: its containers are the truth."""
        if "containerStatuses" not in status:
            return
        self._pods[uid] = (namespace, name, containers_from_status(status), status)

    def forget(self, uid: str) -> None:
        """The pod's containers are gone (it was removed from the node)."""
        self._pods.pop(uid, None)

    def containers(self, pod: JSON) -> list[RuntimeContainer]:
        known = self._pods.get(uid_of(pod))
        if known is not None:
            return known[2]
        return containers_from_status(pod.get("status") or {})

    def last_status(self, uid: str) -> JSON | None:
        known = self._pods.get(uid)
        return known[3] if known is not None else None

    def items(self, pods: list[JSON]) -> list[JSON]:
        """The `GET /sim/v1/nodes/{node}/containers` items: the pods bound here, plus any the kubelet still runs."""
        out: list[JSON] = []
        seen: set[str] = set()
        for pod in pods:
            seen.add(uid_of(pod))
            out += _rows(namespace_of(pod), name_of(pod), uid_of(pod), self.containers(pod))
        for uid, (namespace, name, containers, _) in self._pods.items():
            if uid not in seen:
                out += _rows(namespace, name, uid, containers)
        return out


def _rows(namespace: str, name: str, uid: str, containers: list[RuntimeContainer]) -> list[JSON]:
    return [{"pod": f"{namespace}/{name}", "uid": uid, "container": c.name, "image": c.image, "state": c.state,
             "containerID": c.container_id, "restartCount": c.restart_count} for c in containers]
