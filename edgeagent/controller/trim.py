"""What the controller keeps of each cached object: the fields it reads, nothing else.

At 10,000 nodes the informers hold 30,000 pods and 10,000 nodes. A pod as the API server sends it is
2-3 KB of JSON (managedFields alone can be half of that on a real cluster) and several times that as
Python dicts; the controller reads its metadata, where it runs, and its conditions. So the informers
apply these functions to every object before caching it, as client-go's informer transform functions
(`SetTransform`) are used to strip managedFields. A change to a dropped field still arrives as a watch
event but compares equal in the cache, so it wakes no reconcile.

Whoever makes the controller read another field adds it here (tests/unit/test_controller_trim.py checks
the reconciler's decisions against untrimmed objects).
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

_POD_STATUS = ("phase", "conditions")
_CONTAINER = ("name", "image")


def _metadata(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return {}
    if "managedFields" not in meta:
        return meta
    return {k: v for k, v in meta.items() if k != "managedFields"}


def _containers(items: Any) -> list[JSON]:
    if not isinstance(items, list):
        return []
    return [{k: c[k] for k in _CONTAINER if k in c} for c in items if isinstance(c, dict)]


def pod(obj: JSON) -> JSON:
    """metadata (no managedFields); spec: nodeName, node affinity, container names and images;
    status: phase and conditions."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    kept_spec: JSON = {}
    if "nodeName" in spec:
        kept_spec["nodeName"] = spec["nodeName"]
    affinity = spec.get("affinity")
    if isinstance(affinity, dict) and "nodeAffinity" in affinity:
        kept_spec["affinity"] = {"nodeAffinity": affinity["nodeAffinity"]}
    for field in ("containers", "initContainers"):
        if field in spec:
            kept_spec[field] = _containers(spec[field])
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(status, dict)
    out: JSON = {"metadata": _metadata(obj), "spec": kept_spec,
                 "status": {k: status[k] for k in _POD_STATUS if k in status}}
    for field in ("apiVersion", "kind"):
        if field in obj:
            out[field] = obj[field]
    return out


def node(obj: JSON) -> JSON:
    """metadata (no managedFields), spec (taints, unschedulable: small), and only the Ready condition."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(status, dict)
    ready = [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"]
    out: JSON = {"metadata": _metadata(obj), "spec": obj.get("spec") or {}, "status": {"conditions": ready}}
    for field in ("apiVersion", "kind"):
        if field in obj:
            out[field] = obj[field]
    return out


def strip_managed_fields(obj: JSON) -> JSON:
    """For the few, small kinds (DaemonSets, ControllerRevisions): everything but managedFields."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": _metadata(obj)}
