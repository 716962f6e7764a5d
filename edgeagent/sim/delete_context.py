"""What a deleted (or in place patched) pod looked like at the instant of its DELETE (or PATCH), for the audit log.

"Was this delete allowed?" can only be answered against the state the API server held when the DELETE
arrived: the pod's conditions (`PodNeedUpgrade`, `UpgradeHeld`, `Ready`), its node's readiness, its
DaemonSet's annotations (paused, rollout plan and state, budget) and the availability of the DaemonSet's
other pods. A history checker reading the audit log afterwards cannot rebuild that reliably from watch
events, so the store captures it synchronously, inside the delete, before the pod changes. Data only: no
judgement is made here.
"""

from __future__ import annotations

import json
from typing import Any

from edgeagent.contract import (
    CONDITION_POD_IMAGE_READY,
    CONDITION_POD_NEED_UPGRADE,
    CONDITION_UPGRADE_HELD,
    LABEL_REVISION_HASH,
    LABEL_TEMPLATE_GENERATION,
)
from edgeagent.kube.objects import (
    annotations_of,
    daemonset_owner,
    get_condition,
    is_node_ready,
    is_pod_ready,
    is_terminating,
    labels_of,
    meta,
    node_name_of,
)
from edgeagent.sim.daemonsets import template_hash
from edgeagent.sim.resources import DAEMONSETS, NODES, PODS
from edgeagent.sim.store import Store

JSON = dict[str, Any]

CONDITIONS = ("Ready", CONDITION_POD_NEED_UPGRADE, CONDITION_UPGRADE_HELD, CONDITION_POD_IMAGE_READY)
_ANNOTATION_PREFIXES = ("edgeagent.io/", "apps.openyurt.io/", "deprecated.daemonset.template.generation")
_LABELS = (LABEL_REVISION_HASH, LABEL_TEMPLATE_GENERATION)


def _conditions(pod: JSON) -> JSON:
    found: JSON = {}
    for kind in CONDITIONS:
        cond = get_condition(pod, kind)
        if cond is not None:
            found[kind] = {k: cond.get(k) for k in ("status", "reason", "message")}
    return found


def _node_ready(store: Store, name: str, cache: dict[str, bool | None]) -> bool | None:
    if name not in cache:
        try:
            cache[name] = is_node_ready(store.entry(NODES, None, name).obj)
        except Exception:
            cache[name] = None
    return cache[name]


def _held(pod: JSON) -> bool:
    cond = get_condition(pod, CONDITION_UPGRADE_HELD)
    return cond is not None and cond.get("status") == "True"


def pod_state(store: Store, pod: JSON) -> JSON:
    """The deleted pod, its node and its DaemonSet (with every sibling pod's availability) at this instant."""
    node_cache: dict[str, bool | None] = {}
    node = node_name_of(pod)
    labels = labels_of(pod)
    state: JSON = {
        "node": node,
        "labels": {k: labels[k] for k in _LABELS if k in labels},
        "terminating": is_terminating(pod),
        "ready": is_pod_ready(pod),
        "conditions": _conditions(pod),
        "nodeReady": _node_ready(store, node, node_cache) if node else None,
    }
    owner = daemonset_owner(pod)
    if owner is None:
        return state
    namespace = str(meta(pod).get("namespace") or "")
    try:
        ds = store.entry(DAEMONSETS, namespace, str(owner.get("name"))).obj
    except Exception:
        state["daemonset"] = {"name": owner.get("name"), "uid": owner.get("uid"), "gone": True}
        return state
    ds_meta = meta(ds)
    if ds_meta.get("uid") != owner.get("uid"):
        state["daemonset"] = {"name": owner.get("name"), "uid": owner.get("uid"), "gone": True}
        return state
    annotations = {k: v for k, v in annotations_of(ds).items() if k.startswith(_ANNOTATION_PREFIXES)}
    spec = ds.get("spec") or {}
    siblings: list[JSON] = []
    for item in store.list_page(PODS, namespace).items:
        other = item.obj
        other_owner = daemonset_owner(other)
        if other_owner is None or other_owner.get("uid") != owner.get("uid"):
            continue
        other_node = node_name_of(other)
        siblings.append({
            "uid": meta(other).get("uid"),
            "node": other_node,
            "hash": labels_of(other).get(LABEL_REVISION_HASH),
            "ready": is_pod_ready(other),
            "terminating": is_terminating(other),
            "held": _held(other),
            "nodeReady": _node_ready(store, other_node, node_cache) if other_node else None,
        })
    state["daemonset"] = {
        "name": ds_meta.get("name"),
        "uid": ds_meta.get("uid"),
        "generation": ds_meta.get("generation"),
        "annotations": annotations,
        "updateStrategy": (spec.get("updateStrategy") or {}).get("type"),
        "minReadySeconds": spec.get("minReadySeconds", 0),
        # The revision the DaemonSet controller creates pods of now (as sim/daemonsets.py names it).
        "currentHash": template_hash(spec.get("template") or {},
                                     int((ds.get("status") or {}).get("collisionCount") or 0)),
        "siblings": siblings,
        # Every node and whether it is Ready: a node whose pod is gone (not yet recreated) has no sibling entry.
        "nodes": {str(meta(n.obj).get("name")): is_node_ready(n.obj) for n in store.list_page(NODES, None).items},
    }
    plan = _rollout_plan(store, namespace, str(ds_meta.get("name")))
    if plan is not None:
        # The RolloutPlan rolling this DaemonSet, as it stands at this instant (its spec and the controller's
        # status): what a checker compares a deletion with (the wave it had reached).
        state["daemonset"]["rolloutPlan"] = plan
    if plan is not None or any(k.startswith("edgeagent.io/rollout-") for k in annotations):
        # A rollout plan ranks nodes by their labels (canary selector, group label): keep them for the checker.
        state["nodeLabels"] = {
            str(meta(n.obj).get("name")): labels_of(n.obj) for n in store.list_page(NODES, None).items
        }
    return state


def _rollout_plan(store: Store, namespace: str, daemonset: str) -> JSON | None:
    """{name, spec, status} of the RolloutPlan naming `daemonset` (the oldest, as the controller picks), or None
    (no such plan, or the CRD not installed)."""
    res = store.registry.resource_for("edgeagent.io", "v1alpha1", "rolloutplans")
    if res is None:
        return None
    found = [item.obj for item in store.list_page(res, namespace).items
             if (item.obj.get("spec") or {}).get("daemonSet") == daemonset]
    if not found:
        return None
    found.sort(key=lambda p: (str(meta(p).get("creationTimestamp") or ""), str(meta(p).get("name") or "")))
    first = found[0]
    return {"name": meta(first).get("name"), "spec": first.get("spec") or {}, "status": first.get("status") or {}}


def touches_spec(body: bytes) -> bool:
    """Whether a pod PATCH body writes the pod's spec (an in-place image change: the only spec fields the API
    server lets change are images, activeDeadlineSeconds, tolerations and the grace period). A merge or
    strategic patch names `spec` at its top; a JSON patch has an operation on `/spec`."""
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        return False
    if isinstance(parsed, dict):
        return "spec" in parsed
    if isinstance(parsed, list):
        return any(isinstance(op, dict) and str(op.get("path") or "").startswith("/spec") for op in parsed)
    return False


def patch_record(namespace: str | None, name: str, old: JSON, state: JSON, outcome: str, code: int,
                 at: float) -> JSON:
    """An in-place PATCH's record for the audit log, shaped as a DELETE's (`resource`, `uid`, `outcome`, the pod's
    `state` before the PATCH), so that a history checker judges it as it judges a deletion (the wave reached, the
    budget). `outcome`: "patched" when it took effect, else what refused it ("conflict", "invalid", "error")."""
    return {"resource": "pods", "namespace": namespace, "name": name, "uid": meta(old).get("uid"),
            "precondition_uid": None, "outcome": outcome, "code": code, "time": at, "state": state}
