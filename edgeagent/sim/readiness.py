"""A pod's Ready condition as the kubelet computes it: its containers ready AND every readiness gate True.

A readiness gate (`spec.readinessGates`) lets another component hold a pod out of Services: the kubelet keeps
Ready False, reason `ReadinessGatesNotReady`, until the named condition is True. The in-place upgrade relies on
it (`edgeagent.io/InPlaceUpdateReady` set False before the image patch, True once the new containers run), so
the sim's kubelet must apply it wherever it writes Ready, for any gate, with the real kubelet's messages.
"""

from __future__ import annotations

from typing import Any

from edgeagent.kube.objects import get_condition

JSON = dict[str, Any]

REASON_GATES_NOT_READY = "ReadinessGatesNotReady"


def gate_problems(pod: JSON) -> list[str]:
    """The kubelet's message for each gate that is not True (empty: every gate is satisfied)."""
    problems: list[str] = []
    for gate in (pod.get("spec") or {}).get("readinessGates") or []:
        if not isinstance(gate, dict):
            continue
        name = str(gate.get("conditionType") or "")
        cond = get_condition(pod, name)
        if cond is None:
            problems.append(f'corresponding condition of pod readiness gate "{name}" does not exist.')
        elif cond.get("status") != "True":
            problems.append(f'the status of pod readiness gate "{name}" is not "True", but {cond.get("status")}')
    return problems


def apply_gates(pod: JSON, conditions: list[JSON]) -> list[JSON]:
    """`conditions` (about to be written for `pod`) with Ready held False while a gate is not True.

    Only a Ready that the containers allow is touched: a pod whose containers are not ready keeps the
    kubelet's `ContainersNotReady`, as the real kubelet reports that first."""
    problems = gate_problems(pod)
    if not problems:
        return conditions
    out: list[JSON] = []
    for cond in conditions:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            cond = {**cond, "status": "False", "reason": REASON_GATES_NOT_READY, "message": ", ".join(problems)}
        out.append(cond)
    return out


def wanted_ready(pod: JSON) -> str | None:
    """What Ready should say now for a running pod whose containers are ready (None: no gates to apply)."""
    if not (pod.get("spec") or {}).get("readinessGates"):
        return None
    containers = get_condition(pod, "ContainersReady")
    if containers is None or containers.get("status") != "True":
        return None
    return "False" if gate_problems(pod) else "True"
