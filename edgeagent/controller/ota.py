"""OTA: every pod of the DaemonSet tells its node agent whether an update is available.

The condition is written with a strategic-merge patch of that one condition on `pods/status`: the pod's
other conditions belong to the kubelet, and a full status update (what OpenYurt does) races with it and
can undo a readiness change. The patch carries the pod's UID, so it never lands on a same-named successor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from edgeagent.contract import CONDITION_POD_NEED_UPGRADE, version_message
from edgeagent.controller.pods import is_available
from edgeagent.controller.revisions import is_pod_updated
from edgeagent.kube.objects import get_condition, is_terminating, name_of, uid_of
from edgeagent.kube.timeutil import format_time

JSON = dict[str, Any]


@dataclass(frozen=True)
class ConditionChange:
    pod: JSON
    status: str
    message: str
    patch: JSON


def desired_condition(ds: JSON, pod: JSON, current_hash: str) -> tuple[str, str]:
    """(`True` when outdated / `False` when up to date, `controllerrevision: <hash>`)."""
    status = "False" if is_pod_updated(ds, pod, current_hash) else "True"
    return status, version_message(current_hash)


def condition_patch(pod: JSON, status: str, message: str, now: float) -> JSON:
    """Strategic merge on `status.conditions` merges by `type`: only this condition is touched."""
    current = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
    condition: JSON = {"type": CONDITION_POD_NEED_UPGRADE, "status": status, "message": message}
    if current is None or current.get("status") != status:
        # Transition time moves only when the status flips (a new hash alone is not a transition).
        condition["lastTransitionTime"] = format_time(now)
    return {"metadata": {"uid": uid_of(pod)}, "status": {"conditions": [condition]}}


def condition_changes(ds: JSON, pods: Iterable[JSON], current_hash: str, now: float) -> list[ConditionChange]:
    """Pods whose condition differs in status or message; pods being deleted are left alone."""
    changes: list[ConditionChange] = []
    for pod in sorted(pods, key=name_of):
        if is_terminating(pod):
            continue
        status, message = desired_condition(ds, pod, current_hash)
        current = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
        if current is not None and current.get("status") == status and current.get("message") == message:
            continue
        changes.append(ConditionChange(pod, status, message, condition_patch(pod, status, message, now)))
    return changes


def progress(ds: JSON, pods: Iterable[JSON], current_hash: str, now: float) -> dict[str, int]:
    """Node counts for `edgeagent_controller_rollout_nodes`, the same states an AdvancedRollingUpdate reports,
    so one dashboard panel shows the progress of both models."""
    total = updated = unavailable = 0
    for pod in pods:
        if is_terminating(pod):
            continue
        total += 1
        updated += is_pod_updated(ds, pod, current_hash)
        unavailable += not is_available(pod, 0, now)
    return {"total": total, "updated": updated, "outdated": total - updated, "unavailable": unavailable}
