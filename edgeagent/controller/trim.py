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

from edgeagent.contract import LABEL_PREPULL
from edgeagent.kube.objects import share_strings

JSON = dict[str, Any]

_POD_STATUS = ("phase", "conditions")
_CONTAINER = ("name", "image")
# Conditions the kubelet and node controller write that the controller never reads. Everything else is
# kept (Ready, and the conditions this project and others publish: PodNeedUpgrade, PodImageReady, ...).
_POD_CONDITIONS_DROPPED = frozenset({"PodReadyToStartContainers", "Initialized", "ContainersReady",
                                     "PodScheduled", "DisruptionTarget"})
_NODE_CONDITIONS_DROPPED = frozenset({"MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"})
def _conditions(status: JSON, dropped: frozenset[str]) -> list[JSON]:
    return [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") not in dropped]


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


def _container_statuses(statuses: Any) -> list[JSON]:
    """Per container: its id and whether it is ready (an in-place upgrade is done when the changed containers
    run again as new containers, ready: controller/inplace_exec.py), and why it waits, if it does. Not its
    restartCount: a restart in place is no crash (waves.has_crashed reads it for the crashes it keeps)."""
    out: list[JSON] = []
    for status in statuses if isinstance(statuses, list) else []:
        if not isinstance(status, dict):
            continue
        entry: JSON = {"name": status.get("name"), "ready": bool(status.get("ready"))}
        if status.get("containerID"):
            entry["containerID"] = status["containerID"]
        waiting = (status.get("state") or {}).get("waiting")
        if isinstance(waiting, dict) and waiting.get("reason"):
            entry["state"] = {"waiting": {"reason": waiting["reason"]}}
        out.append(entry)
    return out


def _is_prepull_pod(obj: JSON) -> bool:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return isinstance(labels, dict) and labels.get(LABEL_PREPULL) == "true"


def pod(obj: JSON) -> JSON:
    """metadata (no managedFields); spec: nodeName (else the node affinity that pins the pod), container
    names and images, readiness gates; status: phase, the conditions other than the kubelet's own bookkeeping
    and each container's id, readiness and waiting reason (a pre-pull Job's pod: its container statuses)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    kept_spec: JSON = {}
    if spec.get("nodeName"):
        kept_spec["nodeName"] = spec["nodeName"]
    else:
        affinity = spec.get("affinity")
        if isinstance(affinity, dict) and "nodeAffinity" in affinity:
            kept_spec["affinity"] = {"nodeAffinity": affinity["nodeAffinity"]}
    for field in ("containers", "initContainers"):
        if field in spec:
            kept_spec[field] = _containers(spec[field])
    if spec.get("readinessGates"):
        kept_spec["readinessGates"] = spec["readinessGates"]  # the in-place upgrade's gate (inplace_exec.py)
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(status, dict)
    kept_status: JSON = {k: status[k] for k in _POD_STATUS if k in status}
    if "conditions" in kept_status:
        conditions = status.get("conditions") or []
        dropped = _POD_CONDITIONS_DROPPED
        if any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") != "True" for c in conditions):
            # A pod not Ready keeps the kubelet's ContainersReady: True there means the node lifecycle controller
            # marked it unready (its node went away), and since when its containers worked (rolling.py reads it
            # to tell a lost node from a failed version). Ready pods, nearly all, do not pay for it.
            dropped = _POD_CONDITIONS_DROPPED - {"ContainersReady"}
        kept_status["conditions"] = _conditions(status, dropped)
    if _is_prepull_pod(obj) and "containerStatuses" in status:
        kept_status["containerStatuses"] = status["containerStatuses"]  # prepull.py reads why a pull waits
    elif "containerStatuses" in status:
        # Why a container waits (CrashLoopBackOff, ImagePullBackOff): a rollout plan names it when the new
        # version fails. The container ids tell an in-place restart done (about 200 bytes a container).
        kept_status["containerStatuses"] = _container_statuses(status["containerStatuses"])
    out: JSON = {"metadata": _metadata(obj), "spec": kept_spec, "status": kept_status}
    for field in ("apiVersion", "kind"):
        if field in obj:
            out[field] = obj[field]
    return dict(share_strings(out))


# A kubelet lists up to 50 images in its node's status (`--node-status-max-images`), each named by a tag and
# a digest reference. Kept per node, that was a dict, a list and a digest string (too long to be interned)
# per image: about 30 KB a node listing 50, 3 GB at 100,000 nodes, against the controller's 1 GiB. The nodes
# of a fleet run the same DaemonSets, so they list the same images: nodes that list the same names share one
# list, and lists share their entries. Forgotten past `_SHARED_IMAGES_MAX` distinct lists (the nodes keep
# theirs), so a fleet whose images keep changing does not grow the tables. Like every cached object, these
# are read, never changed.
_SHARED_IMAGES_MAX = 4096
_image_lists: dict[tuple[tuple[str, ...], ...], list[JSON]] = {}
_image_entries: dict[tuple[str, ...], JSON] = {}


def _images(images: list[Any]) -> list[JSON]:
    key = tuple(tuple(n for n in (i.get("names") or []) if isinstance(n, str)) for i in images if isinstance(i, dict))
    shared = _image_lists.get(key)
    if shared is None:
        if len(_image_lists) >= _SHARED_IMAGES_MAX:
            _image_lists.clear()
            _image_entries.clear()
        shared = []
        for names in key:
            entry = _image_entries.get(names)
            if entry is None:
                entry = _image_entries[names] = {"names": list(names)}
            shared.append(entry)
        _image_lists[key] = shared
    return shared


def node(obj: JSON) -> JSON:
    """metadata (no managedFields); spec without the pod CIDRs (taints, unschedulable); status: the
    conditions other than the resource-pressure ones, and the images' names, shared with every node that
    lists the same (capacity, addresses, nodeInfo, image sizes dropped)."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(status, dict)
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    out: JSON = {"metadata": _metadata(obj),
                 "spec": {k: v for k, v in spec.items() if k not in ("podCIDR", "podCIDRs", "providerID")},
                 "status": {"conditions": _conditions(status, _NODE_CONDITIONS_DROPPED)}}
    for field in ("apiVersion", "kind"):
        if field in obj:
            out[field] = obj[field]
    kept: JSON = dict(share_strings(out))
    images = status.get("images")
    if isinstance(images, list):  # prepull.py judges a pre-pull by the node's own image list
        kept["status"]["images"] = _images(images)
    return kept


def strip_managed_fields(obj: JSON) -> JSON:
    """For the few, small kinds (DaemonSets, ControllerRevisions): everything but managedFields."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": _metadata(obj)}
