"""OTA: every pod of the DaemonSet tells its node agent whether an update is available.

The condition is written with a strategic-merge patch of that one condition on `pods/status`: the pod's
other conditions belong to the kubelet, and a full status update (what OpenYurt does) races with it and
can undo a readiness change. The patch carries the pod's UID, so it never lands on a same-named successor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from edgeagent.contract import CONDITION_POD_NEED_UPGRADE, REASON_WAITING_FOR_WAVE, version_message
from edgeagent.controller.pods import is_available, node_of
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
    reason: str = ""


def desired_condition(ds: JSON, pod: JSON, current_hash: str,
                      may_move: Callable[[str], bool] | None = None) -> tuple[str, str, str]:
    """(`True` when outdated / `False` when up to date, reason, `controllerrevision: <hash>`).

    With a rollout plan, an outdated pod on a node whose wave is not reached yet is `False` with reason
    `WaitingForWave`: its agent refuses the upgrade (403) until the wave reaches it."""
    if is_pod_updated(ds, pod, current_hash):
        return "False", "", version_message(current_hash)
    if may_move is not None and not may_move(node_of(pod)):
        return "False", REASON_WAITING_FOR_WAVE, version_message(current_hash)
    return "True", "", version_message(current_hash)


def condition_patch(pod: JSON, status: str, message: str, now: float, reason: str = "") -> JSON:
    """Strategic merge on `status.conditions` merges by `type`: only this condition is touched."""
    current = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
    condition: JSON = {"type": CONDITION_POD_NEED_UPGRADE, "status": status, "message": message}
    if reason:
        condition["reason"] = reason
    elif current is not None and current.get("reason"):
        condition["reason"] = None  # a strategic-merge null removes the field (WaitingForWave no longer applies)
    if current is None or current.get("status") != status:
        # Transition time moves only when the status flips (a new hash alone is not a transition).
        condition["lastTransitionTime"] = format_time(now)
    return {"metadata": {"uid": uid_of(pod)}, "status": {"conditions": [condition]}}


def condition_changes(ds: JSON, pods: Iterable[JSON], current_hash: str, now: float,
                      may_move: Callable[[str], bool] | None = None) -> list[ConditionChange]:
    """Pods whose condition differs in status, reason or message; pods being deleted are left alone."""
    changes: list[ConditionChange] = []
    for pod in sorted(pods, key=name_of):
        if is_terminating(pod):
            continue
        status, reason, message = desired_condition(ds, pod, current_hash, may_move)
        current = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
        if (current is not None and current.get("status") == status and current.get("message") == message
                and str(current.get("reason") or "") == reason):
            continue
        changes.append(ConditionChange(pod, status, message, condition_patch(pod, status, message, now, reason),
                                       reason))
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
