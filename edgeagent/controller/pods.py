"""Per-pod and per-node facts the planners need, read from raw objects."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from edgeagent.kube.objects import get_condition, is_terminating, meta
from edgeagent.kube.timeutil import parse_time

JSON = dict[str, Any]


def node_of(pod: JSON) -> str:
    """`spec.nodeName`, else the node a DaemonSet pod is pinned to by its required node affinity.

    A DaemonSet pod that is not yet bound still belongs to exactly one node.
    """
    spec = pod.get("spec") or {}
    name = spec.get("nodeName")
    if name:
        return str(name)
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expr in (term or {}).get("matchFields") or []:
            values = (expr or {}).get("values") or []
            if expr.get("key") == "metadata.name" and expr.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return ""


def group_by_node(pods: Iterable[JSON]) -> dict[str, list[JSON]]:
    groups: dict[str, list[JSON]] = {}
    for pod in pods:
        node = node_of(pod)
        if node:
            groups.setdefault(node, []).append(pod)
    return groups


def ready_since(pod: JSON) -> float | None:
    """When the pod last became Ready (None when not Ready)."""
    cond = get_condition(pod, "Ready")
    if cond is None or cond.get("status") != "True":
        return None
    since = parse_time(cond.get("lastTransitionTime"))
    return since if since is not None else 0.0


def available_from(since: float | None, min_ready_seconds: int) -> float | None:
    """The moment a pod Ready since `since` counts as available (Ready for minReadySeconds); None while not Ready.
    Apart from `available_at` so that a caller keeping `ready_since` (rolling.NodeView) asks without the pod."""
    if since is None:
        return None
    return since + min_ready_seconds if min_ready_seconds > 0 else since


def available_by(since: float | None, min_ready_seconds: int, now: float) -> bool:
    """`is_available` of a pod Ready since `since`."""
    at = available_from(since, min_ready_seconds)
    if at is None:
        return False
    return min_ready_seconds == 0 or at <= now


def available_at(pod: JSON, min_ready_seconds: int) -> float | None:
    """The moment the pod counts as available (Ready for minReadySeconds), None while not Ready."""
    return None if is_terminating(pod) else available_from(ready_since(pod), min_ready_seconds)


def is_available(pod: JSON, min_ready_seconds: int, now: float) -> bool:
    return available_by(None if is_terminating(pod) else ready_since(pod), min_ready_seconds, now)


def created_at(obj: JSON) -> float:
    created = parse_time(meta(obj).get("creationTimestamp"))
    return created if created is not None else 0.0


def node_ready_changed_at(node: JSON) -> float | None:
    cond = get_condition(node, "Ready")
    return parse_time(cond.get("lastTransitionTime")) if cond else None
