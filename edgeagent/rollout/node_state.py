"""One node's state for one DaemonSet: the single rule `rollout status`, every fleet view and the fleet metrics
format.

`rollout status`, `fleet`, `fleet nodes`, the dashboard (its grid, its rollout cards, its node panel) and its
`/metrics` all call `node_state` and `rollout_phase` (through `model`); none of them decides a state by itself.
Two copies of this rule drifted apart before (a card said "344/1000 up to date" beside a legend saying 245), so
there is one.

`node_state` is a pure function of what the cluster shows about one node and one DaemonSet: the DaemonSet,
its rollout plan's status (a mapping shaped like a RolloutPlan's `status`: phase, wave, waves, revision,
stableRevision, counts, failures; see `plan_source` for where it comes from today), the node's pod, the
node, its Lease and the agent's latest outcome Event for that pod. Each node is in exactly one state, so the
counts of a DaemonSet add up to its nodes. The questions are asked in this order:

1. offline:      the node is missing from the node list, has no Ready condition, or is not Ready.
2. failed:       the pod says so: a container that will not start by itself (CrashLoopBackOff,
                 ImagePullBackOff, ErrImagePull, ...), the failure its node wrote on the pod's status
                 (`reported_failure`), or, not on the current revision, a node the rollout counted failed
                 (the controller counts only what the pod showed).
                 Never an Event alone: any credential can create one, naming any node.
3. up to date:   the pod runs the current revision and is available (Ready for minReadySeconds).
4. upgrading:    the current revision's pod is starting, or the node has no pod yet: the DaemonSet
                 controller is creating one.
5. held:         the node's agent holds the upgrade (UpgradeHeld True on the pod).
6. stopped:      on an older revision and nothing will move it: the rollout was aborted.
7. waiting for its wave: the plan has not reached the node's wave yet.
8. upgrading:    anything else on an older revision: allowed to move, or moving.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from edgeagent import contract
from edgeagent.kube.objects import annotations_of, get_condition, is_pod_ready, labels_of, meta
from edgeagent.kube.timeutil import parse_time
from edgeagent.rollout import state as states

JSON = dict[str, Any]
PlanStatus = Mapping[str, Any]


class State(StrEnum):
    UP_TO_DATE = "up to date"
    UPGRADING = "upgrading"
    WAITING = "waiting for its wave"
    HELD = "held"
    STOPPED = "stopped"
    OFFLINE = "offline"
    FAILED = "failed"


# What each state means, as docs/fleet.md prints it (a repository test checks the doc's table against this).
MEANING: dict[State, str] = {
    State.UP_TO_DATE: "runs the current revision, and its pod is available",
    State.UPGRADING: "moving to the current revision (its new pod is starting, or it has no pod yet), or "
                     "allowed to move",
    State.WAITING: "on an older revision; the rollout plan has not reached its wave yet",
    State.HELD: "on an older revision; its agent holds the upgrade (maintenance window, operator hold, ...)",
    State.STOPPED: "on an older revision, and nothing will move it: the rollout was aborted",
    State.OFFLINE: "the node is not Ready, has no Ready condition, or is missing from the node list",
    State.FAILED: "its pod cannot start (CrashLoopBackOff, ImagePullBackOff, ...), its node reported the "
                  "upgrade failed on the pod's status, or the rollout counted it failed",
}

# Best first: a node's overall state (over its DaemonSets) is the last of their states in this order.
STATE_ORDER = (State.UP_TO_DATE, State.WAITING, State.UPGRADING, State.HELD, State.STOPPED, State.FAILED,
               State.OFFLINE)
_RANK = {s: i for i, s in enumerate(STATE_ORDER)}

# A container waiting for one of these will not start by itself.
STUCK_REASONS = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
                           "CreateContainerError", "InvalidImageName", "RunContainerError"})

# The pod condition through which a node reports that the upgrade of its own pod failed (only the pod's node
# may write a pod's status); `contract.reported_failure` is its one reader.
FAILURE_CONDITION = contract.CONDITION_UPGRADE_FAILED

# Phases, as the API spells them (`rollout.state.STATUS_PHASES`): the plan's status is read as written, and a
# DaemonSet without a plan gets the same words.
PHASE_PROGRESSING = states.STATUS_PHASES[states.PHASE_PROGRESSING]
PHASE_PAUSED = states.STATUS_PHASES[states.PHASE_PAUSED]
PHASE_ABORTED = states.STATUS_PHASES[states.PHASE_ABORTED]
PHASE_ROLLED_BACK = states.STATUS_PHASES[states.PHASE_ROLLED_BACK]
PHASE_COMPLETE = states.STATUS_PHASES[states.PHASE_COMPLETE]
ACTIVE_PHASES = states.STATUS_ACTIVE_PHASES

# The policy of a node as its agent reported it on the pod's UpgradeHeld condition.
POLICY_HELD = "held"
POLICY_OPEN = "open"
POLICY_UNKNOWN = "unknown"  # no agent reported one (no UpgradeHeld condition at all)


@dataclass(frozen=True)
class NodeState:
    """Where one node stands for one DaemonSet, and why, in a person's words."""

    state: State
    why: str = ""


def worst(states: Iterable[State]) -> State | None:
    found = list(states)
    return max(found, key=_RANK.__getitem__) if found else None


def phase(plan: PlanStatus | None) -> str:
    return str((plan or {}).get("phase") or "")


def is_stopped(plan: PlanStatus | None) -> bool:
    """The rollout was aborted: nothing moves its nodes until an operator retries or changes the template."""
    return phase(plan) == PHASE_ABORTED


def relevant(plan: PlanStatus | None, revision: str) -> PlanStatus | None:
    """The plan's status when it is about the current revision, or about the bad revision that was rolled
    back to it (its phase and its failed nodes are what a person wants to see while the good one returns);
    None when it is about another revision (it says nothing about the nodes now)."""
    if plan is None:
        return None
    if not revision or plan.get("revision") == revision:
        return plan
    if phase(plan) == PHASE_ROLLED_BACK and plan.get("stableRevision") == revision:
        return plan
    return None


def plan_failures(plan: PlanStatus | None) -> dict[str, str]:
    """node -> reason of the failures the rollout counted (they are about the plan's `revision`)."""
    found: dict[str, str] = {}
    for item in (plan or {}).get("failures") or []:
        if isinstance(item, Mapping) and item.get("node"):
            found[str(item["node"])] = str(item.get("reason") or "counted failed by the rollout")
    return found


def stuck_reason(pod: JSON) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = ((status or {}).get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in STUCK_REASONS:
            return reason
    return ""


def reported_failure(pod: JSON) -> str:
    """The failure the pod's node wrote on its status about the revision the pod runs, as "reason: message"
    ("" when there is none: `contract.reported_failure` ignores a condition naming another revision)."""
    found = contract.reported_failure(pod)
    if found is None:
        return ""
    return ": ".join(text for text in (found.reason, found.message) if text) or FAILURE_CONDITION


def policy(pod: JSON | None) -> tuple[str, str, str]:
    """(held | open | unknown, reason, message) from the agent's UpgradeHeld condition on the pod."""
    cond = get_condition(pod, contract.CONDITION_UPGRADE_HELD) if pod is not None else None
    if cond is None:
        return POLICY_UNKNOWN, "", ""
    kind = POLICY_HELD if cond.get("status") == "True" else POLICY_OPEN
    return kind, str(cond.get("reason") or ""), str(cond.get("message") or "")


def offline_why(node: JSON | None) -> str:
    """Why the node counts as offline, or "" when it is Ready."""
    if node is None:
        return "not in the node list"
    cond = get_condition(node, "Ready")
    if cond is None:
        return "the node has no Ready condition"
    if cond.get("status") == "True":
        return ""
    detail = str(cond.get("message") or cond.get("reason") or "")
    return f"Ready is {cond.get('status') or 'Unknown'}" + (f": {detail}" if detail else "")


def pod_revision(pod: JSON) -> str:
    return str(labels_of(pod).get(contract.LABEL_REVISION_HASH) or "")


def is_current(pod: JSON, ds: JSON, revision: str) -> bool:
    """OpenYurt's rule: current when the hash label equals the current hash, or the template generation does."""
    labels = labels_of(pod)
    generation = str(annotations_of(ds).get(contract.ANNOTATION_TEMPLATE_GENERATION) or "")
    if generation and labels.get(contract.LABEL_TEMPLATE_GENERATION) == generation:
        return True
    return bool(revision) and labels.get(contract.LABEL_REVISION_HASH) == revision


def available_at(pod: JSON, ds: JSON) -> float | None:
    """When a Ready pod is (or was) available: Ready for the DaemonSet's `minReadySeconds`, as the DaemonSet
    controller counts it. -inf for a Ready pod without minReadySeconds (or without a readable Ready time);
    None for a pod that is not Ready. A live view uses it to recompute the cell at that moment, since no
    event marks it."""
    if not is_pod_ready(pod):
        return None
    min_ready = (ds.get("spec") or {}).get("minReadySeconds")
    if not isinstance(min_ready, int) or isinstance(min_ready, bool) or min_ready <= 0:
        return float("-inf")
    since = parse_time((get_condition(pod, "Ready") or {}).get("lastTransitionTime"))
    return float("-inf") if since is None else since + min_ready


def is_available(pod: JSON, ds: JSON, now: float) -> bool:
    """Ready, and for the DaemonSet's `minReadySeconds` (as the DaemonSet controller counts available)."""
    at = available_at(pod, ds)
    return at is not None and now >= at


def _waiting_condition(pod: JSON) -> bool:
    need = get_condition(pod, contract.CONDITION_POD_NEED_UPGRADE)
    return need is not None and need.get("status") == "False" \
        and need.get("reason") == contract.REASON_WAITING_FOR_WAVE


def node_state(ds: JSON, plan: PlanStatus | None, pod: JSON | None, node: JSON | None, *, revision: str,
               now: float, wave: int | None = None, outcome: tuple[str, str] | None = None) -> NodeState:
    """The state of one node for one DaemonSet (the module docstring gives the order of the questions).

    `plan` is the plan's status as `relevant` returns it (None: no plan, or about another revision);
    `revision` the DaemonSet's current revision; `wave` the node's wave in the plan (None: not ranked);
    `outcome` the (reason, message) of the agent's latest outcome Event for this pod: it explains, it never
    decides. The node's Lease does not decide a state either: the node lifecycle controller turns a node
    whose Lease stopped NotReady, and that is what is read here."""
    offline = offline_why(node)
    if offline:
        return NodeState(State.OFFLINE, offline)
    if pod is None:
        return NodeState(State.UPGRADING, "no pod yet: the DaemonSet controller creates it")
    stuck = stuck_reason(pod)
    if stuck:
        return NodeState(State.FAILED, stuck)
    reported = reported_failure(pod)
    if reported:
        return NodeState(State.FAILED, reported)
    current = is_current(pod, ds, revision)
    failures = plan_failures(plan)
    if current:
        if is_available(pod, ds, now):
            return NodeState(State.UP_TO_DATE)
        return NodeState(State.UPGRADING, "its new pod is not available yet")
    name = str(meta(node or {}).get("name") or "")
    if name in failures:
        return NodeState(State.FAILED, failures[name])
    held, reason, message = policy(pod)
    if held == POLICY_HELD:
        return NodeState(State.HELD, message or reason)
    if is_stopped(plan):
        return NodeState(State.STOPPED, "the rollout was aborted: `rollout retry` or a new template moves it")
    active = plan is not None and phase(plan) in ACTIVE_PHASES
    plan_wave = (plan or {}).get("wave")
    if active and wave is not None and isinstance(plan_wave, int) and wave > plan_wave:
        return NodeState(State.WAITING, f"in wave {wave}; the rollout is at wave {plan_wave}")
    if (plan is None or active) and _waiting_condition(pod):
        return NodeState(State.WAITING, contract.REASON_WAITING_FOR_WAVE)
    if outcome is not None and outcome[0] == contract.EVENT_UPGRADE_FAILED:
        return NodeState(State.UPGRADING, f"its agent's last attempt failed: {outcome[1]}")
    return NodeState(State.UPGRADING, "on an older revision, allowed to move")


def rollout_phase(plan: PlanStatus | None, node_states: Iterable[State], desired: int, paused: bool) -> str:
    """The DaemonSet's PHASE: the plan's while it is about the current revision; else `Paused`, `Complete`
    when every one of its `desired` nodes is up to date (a node without a pod is not), else `Progressing`: the
    plan's words, so a DaemonSet reads the same with or without a plan."""
    if plan is not None and plan.get("phase"):
        return str(plan["phase"])
    if paused:
        return PHASE_PAUSED
    found = list(node_states)
    done = bool(found) and len(found) >= desired and all(s is State.UP_TO_DATE for s in found)
    return PHASE_COMPLETE if done else PHASE_PROGRESSING


def counts(states: Iterable[State]) -> dict[str, int]:
    """Nodes per state, every state present (in the enum's order): they add up to the nodes."""
    tally = dict.fromkeys((s.value for s in State), 0)
    for s in states:
        tally[s.value] += 1
    return tally
