"""Which nodes a DaemonSet should run a pod on, so that a node without its pod is counted, not forgotten.

A fleet view that only looks at pods cannot see a node whose pod is missing (deleted by an upgrade and not
yet replaced, or never created), and would call the rollout complete. The DaemonSet controller places a pod
on every node that matches the template's nodeSelector and required node affinity and whose NoSchedule /
NoExecute taints the pod tolerates (with the tolerations it adds to every daemon pod). This is that
predicate, on plain objects; `desiredNumberScheduled` remains the floor of the count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgeagent.kube.objects import labels_of, name_of

JSON = dict[str, Any]

# Tolerations the DaemonSet controller adds to every daemon pod (pkg/controller/daemon/util).
_DAEMON_TOLERATIONS: list[JSON] = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"},
]


def _pod_spec(ds: JSON) -> JSON:
    return ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}


def _tolerates(toleration: JSON, taint: JSON) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return bool(key) and str(toleration.get("value") or "") == str(taint.get("value") or "")


def _expression(expr: JSON, labels: Mapping[str, str]) -> bool:
    key, op = str(expr.get("key") or ""), expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _affinity(spec: JSON, labels: Mapping[str, str], name: str) -> bool:
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    # Terms are ORed, a term's expressions ANDed; matchFields only knows metadata.name.
    return any(all(_expression(e, labels) for e in term.get("matchExpressions") or [])
               and all(_expression(e, {"metadata.name": name})
                       for e in term.get("matchFields") or [])
               for term in terms)


def runs_on(ds: JSON, node: JSON) -> bool:
    """Whether the DaemonSet controller would place one of `ds`'s pods on `node`."""
    spec = _pod_spec(ds)
    labels = {str(k): str(v) for k, v in labels_of(node).items()}
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(str(k)) != str(v) for k, v in selector.items()):
        return False
    if not _affinity(spec, labels, name_of(node)):
        return False
    tolerations = [*(spec.get("tolerations") or []), *_DAEMON_TOLERATIONS]
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") \
                and not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True
