"""The `scale` subresource of a custom kind whose CRD turns it on: an `autoscaling/v1` Scale read from and written
to the paths the CRD names (`specReplicasPath`, `statusReplicasPath`, `labelSelectorPath`), as kube-apiserver's
apiextensions server serves it (what `kubectl scale` and autoscalers use).

Pure functions over plain JSON; the HTTP layer reads and writes the object through the Store.
"""

from __future__ import annotations

from typing import Any

from edgeagent.sim import errors
from edgeagent.sim.resources import Resource

JSON = dict[str, Any]

GROUP = "autoscaling"
VERSION = "v1"
KIND = "Scale"


def _paths(res: Resource) -> JSON:
    assert res.custom is not None and res.custom.scale is not None
    return res.custom.scale


def _steps(path: str) -> list[str]:
    """`.spec.replicas` → ["spec", "replicas"] (the real server accepts only such simple paths here)."""
    return [step for step in path.split(".") if step]


def _read(obj: JSON, path: str) -> Any:
    value: Any = obj
    for step in _steps(path):
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value


def scale_of(res: Resource, obj: JSON) -> JSON:
    """The object's Scale: spec.replicas from specReplicasPath, status from statusReplicasPath (0 if unset) and the
    selector from labelSelectorPath (when the CRD names one)."""
    paths = _paths(res)
    meta = obj.get("metadata") or {}
    scale_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta}
    spec_replicas = _read(obj, str(paths.get("specReplicasPath") or ""))
    status: JSON = {"replicas": _read(obj, str(paths.get("statusReplicasPath") or "")) or 0}
    selector_path = paths.get("labelSelectorPath")
    if selector_path:
        selector = _read(obj, str(selector_path))
        if isinstance(selector, str) and selector:
            status["selector"] = selector
    spec: JSON = {"replicas": spec_replicas} if isinstance(spec_replicas, int) else {}
    return {"kind": KIND, "apiVersion": f"{GROUP}/{VERSION}", "metadata": scale_meta, "spec": spec, "status": status}


def apply_scale(res: Resource, obj: JSON, scale: JSON) -> JSON:
    """`obj` with the Scale's spec.replicas written at specReplicasPath (a new object; `obj` is left alone)."""
    replicas = (scale.get("spec") or {}).get("replicas") if isinstance(scale.get("spec"), dict) else None
    name = str((obj.get("metadata") or {}).get("name") or "")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        cause = errors.field_invalid("spec.replicas", replicas, "must be greater than or equal to 0")
        raise errors.invalid(KIND, name, [cause], GROUP)
    out: JSON = {k: v for k, v in obj.items()}
    out["apiVersion"] = res.api_version  # written through the version the scale was reached by
    node = out
    steps = _steps(str(_paths(res).get("specReplicasPath") or ""))
    for step in steps[:-1]:
        child = node.get(step)
        child = dict(child) if isinstance(child, dict) else {}
        node[step] = child
        node = child
    node[steps[-1]] = replicas
    meta = dict(out.get("metadata") or {})
    rv = (scale.get("metadata") or {}).get("resourceVersion") if isinstance(scale.get("metadata"), dict) else None
    if rv:
        meta["resourceVersion"] = rv  # a Scale that names a resourceVersion is a precondition, as on the object
    else:
        meta.pop("resourceVersion", None)
    out["metadata"] = meta
    return out
