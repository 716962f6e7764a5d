"""Where every node of every managed DaemonSet stands, computed from plain lists of objects.

One pure function of four lists (DaemonSets, pods, nodes, edgeagent Events) and a clock, so that the
`fleet` tables and the dashboard say the same thing and both can be tested without a cluster. No new API
object is read or written: the state lives in what the agents and the controller already publish (pod
conditions, the rollout-state annotation, the agents' outcome Events).

A node's state for one DaemonSet, in the order the questions are asked:
offline (node not Ready) > up to date (pod on the current revision and Ready) > failed (its last
outcome Event is UpgradeFailed, the rollout counted it failed, or the new pod cannot start) > held
(UpgradeHeld True) > waiting for its wave > upgrading (anything else: allowed to move, or moving).
A node's overall state is the worst over its DaemonSets, in the order of `STATE_ORDER`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from edgeagent import contract
from edgeagent.contract import (
    ANNOTATION_PAUSED,
    ANNOTATION_TEMPLATE_GENERATION,
    ANNOTATION_UPDATE_STRATEGY,
    CONDITION_POD_NEED_UPGRADE,
    LABEL_REVISION_HASH,
    LABEL_TEMPLATE_GENERATION,
    STRATEGY_ADVANCED_ROLLING_UPDATE,
    STRATEGY_OTA,
    version_from_message,
)
from edgeagent.kube.objects import (
    annotations_of,
    controller_owner,
    daemonset_owner,
    get_condition,
    is_pod_ready,
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    node_name_of,
)
from edgeagent.kube.timeutil import format_time, parse_time
from edgeagent.rollout import plan as plans
from edgeagent.rollout import state as states

JSON = dict[str, Any]

CONDITION_UPGRADE_HELD = contract.CONDITION_UPGRADE_HELD
REASON_OUTSIDE_WINDOW = contract.OUTSIDE_MAINTENANCE_WINDOW
REASON_WAITING_FOR_WAVE = contract.REASON_WAITING_FOR_WAVE
AGENT_COMPONENT = contract.COMPONENT_AGENT
CONTROLLER_COMPONENT = contract.COMPONENT_CONTROLLER
OUTCOME_REASONS = frozenset({contract.EVENT_UPGRADE_QUEUED, contract.EVENT_UPGRADE_STARTED,
                             contract.EVENT_UPGRADE_SUCCEEDED, contract.EVENT_UPGRADE_FAILED,
                             contract.EVENT_UPGRADE_OBSOLETE, contract.EVENT_UPGRADE_CANCELLED})
REASON_UPGRADE_FAILED = contract.EVENT_UPGRADE_FAILED

# A new pod that waits for one of these will not start by itself: the upgrade failed on that node.
_STUCK_REASONS = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
                            "CreateContainerError", "InvalidImageName", "RunContainerError"})
# The agent writes "… outside the maintenance windows (…); next opens <when>" (agent/policy/site.py).
_NEXT_OPENS = re.compile(r"next opens (.+)$")


class State(StrEnum):
    UP_TO_DATE = "up to date"
    UPGRADING = "upgrading"
    WAITING = "waiting for its wave"
    HELD = "held"
    OFFLINE = "offline"
    FAILED = "failed"


# Best first: a node's overall state is the last of its DaemonSets' states in this order.
STATE_ORDER = (State.UP_TO_DATE, State.WAITING, State.UPGRADING, State.HELD, State.FAILED, State.OFFLINE)
_RANK = {s: i for i, s in enumerate(STATE_ORDER)}


def worst(states: Iterable[State]) -> State | None:
    found = list(states)
    return max(found, key=_RANK.__getitem__) if found else None


def strategy_of(ds: JSON) -> str:
    """The model as a person writes it (`OTA`, `AdvancedRollingUpdate`); "" when not managed by edgeagent."""
    raw = str(annotations_of(ds).get(ANNOTATION_UPDATE_STRATEGY) or "").strip().lower()
    if raw == STRATEGY_OTA:
        return "OTA"
    if raw in (STRATEGY_ADVANCED_ROLLING_UPDATE, "auto"):
        return "AdvancedRollingUpdate"
    return ""


def is_managed(ds: JSON) -> bool:
    return ANNOTATION_UPDATE_STRATEGY in annotations_of(ds)


def rollout_state(ds: JSON) -> states.RolloutState | None:
    """The controller's `edgeagent.io/rollout-state`, or None when absent or unreadable (never fatal)."""
    return states.state_of(ds)[0]


def plan_of(ds: JSON) -> plans.Plan | None:
    """The DaemonSet's rollout plan; None without one, or when the controller would ignore it (a problem)."""
    plan, problems = plans.parse_plan(ds)
    return None if problems else plan


def active_state(ds: JSON, revision: str) -> states.RolloutState | None:
    """The rollout state when it is about the current revision (an older one says nothing about waves now),
    or about the bad revision that was rolled back to the current one (its phase, `rolledBack`, and the nodes
    it failed on are what a person wants to see while the good revision returns)."""
    state = rollout_state(ds)
    if state is None:
        return None
    if not revision or state.revision == revision:
        return state
    if state.phase == states.PHASE_ROLLED_BACK and state.stable_revision == revision:
        return state
    return None


def ranking(plan: plans.Plan | None, state: states.RolloutState | None,
            members: Mapping[str, Mapping[str, str]]) -> plans.Ranking | None:
    """The planner's waves over the DaemonSet's nodes (name -> labels), while a plan is rolling."""
    if plan is None or state is None or state.phase not in states.ACTIVE_PHASES:
        return None
    return plans.rank(plan, members)


def held_condition(pod: JSON) -> tuple[str, str] | None:
    return contract.held_by(pod)


def next_window(held: tuple[str, str] | None) -> str:
    """When a held node opens next, as the agent wrote it; "" when it is not waiting for a window."""
    if held is None or held[0] != REASON_OUTSIDE_WINDOW:
        return ""
    match = _NEXT_OPENS.search(held[1])
    return match.group(1) if match else ""


def _stuck_reason(pod: JSON) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = ((status or {}).get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in _STUCK_REASONS:
            return reason
    return ""


def event_time(event: JSON) -> float:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        found = parse_time(event.get(key))
        if found is not None:
            return found
    return parse_time(meta(event).get("creationTimestamp")) or 0.0


@dataclass(frozen=True)
class Outcome:
    """The latest outcome Event an agent reported for a pod on its node."""

    reason: str
    message: str
    time: float
    namespace: str
    pod: str
    node: str

    def to_json(self) -> JSON:
        return {"reason": self.reason, "message": self.message, "time": format_time(self.time),
                "namespace": self.namespace, "pod": self.pod, "node": self.node}


def outcome_of(event: JSON) -> Outcome | None:
    """An agent's upgrade outcome Event (source.component edgeagent, reason Upgrade*), else None."""
    source = event.get("source") or {}
    if source.get("component") != AGENT_COMPONENT or event.get("reason") not in OUTCOME_REASONS:
        return None
    involved = event.get("involvedObject") or {}
    return Outcome(reason=str(event["reason"]), message=str(event.get("message") or ""), time=event_time(event),
                   namespace=str(involved.get("namespace") or namespace_of(event)),
                   pod=str(involved.get("name") or ""), node=str(source.get("host") or ""))


def pod_belongs_to(pod_name: str, ds_name: str) -> bool:
    """Whether a (possibly deleted) pod was one of the DaemonSet's: its name is `<ds>-<5 characters>`.

    Outcome Events outlive their pod (an upgrade deletes it), so the owner cannot be looked up."""
    prefix, _, suffix = pod_name.rpartition("-")
    return prefix == ds_name and len(suffix) == 5


def _revision_number(rev: JSON) -> int:
    try:
        return int(rev.get("revision") or 0)
    except (TypeError, ValueError):
        return 0


def newest_revision_hash(ds: JSON, revisions: Iterable[JSON]) -> str:
    """The hash of the DaemonSet's newest ControllerRevision (what the controller rolls), "" if none.

    Read, never computed: the real hash is FNV over Go's serialisation of the template."""
    uid = meta(ds).get("uid")
    owned = [r for r in revisions if uid and (controller_owner(r) or {}).get("uid") == uid]
    if not owned:
        return ""
    newest = max(owned, key=lambda r: (_revision_number(r), str(meta(r).get("creationTimestamp") or ""),
                                       name_of(r)))
    label = labels_of(newest).get(LABEL_REVISION_HASH)
    if label:
        return str(label)
    prefix, name = name_of(ds) + "-", name_of(newest)
    return name[len(prefix):] if name.startswith(prefix) else ""


def current_revision(ds: JSON, pods: list[JSON], revisions: Iterable[JSON] = ()) -> str:
    """The hash of the DaemonSet's current revision, from what the cluster already shows.

    The newest ControllerRevision names it; failing that (a client not allowed to read them), pods of the
    current template generation carry it in their hash label; before the first of them exists, OTA's
    PodNeedUpgrade message names it; the rollout state names the revision being rolled."""
    newest = newest_revision_hash(ds, revisions)
    if newest:
        return newest
    generation = str(annotations_of(ds).get(ANNOTATION_TEMPLATE_GENERATION) or "")
    if generation:
        for pod in pods:
            labels = labels_of(pod)
            if labels.get(LABEL_TEMPLATE_GENERATION) == generation and labels.get(LABEL_REVISION_HASH):
                return str(labels[LABEL_REVISION_HASH])
    messages = Counter(version_from_message(str((get_condition(p, CONDITION_POD_NEED_UPGRADE) or {})
                                                .get("message") or "")) for p in pods)
    messages.pop(None, None)
    if messages:
        return str(messages.most_common(1)[0][0])
    state = rollout_state(ds)
    return state.revision if state is not None else ""


def is_current(pod: JSON, ds: JSON, revision: str) -> bool:
    """OpenYurt's rule: up to date when the hash label equals the current hash, or the template generation does."""
    labels = labels_of(pod)
    generation = str(annotations_of(ds).get(ANNOTATION_TEMPLATE_GENERATION) or "")
    if generation and labels.get(LABEL_TEMPLATE_GENERATION) == generation:
        return True
    return bool(revision) and labels.get(LABEL_REVISION_HASH) == revision


@dataclass
class PodView:
    """One node's pod of one DaemonSet, as the fleet sees it."""

    node: str
    state: State
    pod: str = ""
    revision: str = ""
    current: bool = False
    held: tuple[str, str] | None = None
    why: str = ""  # failed: why; waiting: the reason the controller gave


@dataclass
class DaemonSetView:
    namespace: str
    name: str
    model: str
    revision: str
    desired: int
    wave: int | None
    waves: int | None
    phase: str
    bake_left: float | None
    paused: bool
    pods: dict[str, PodView] = field(default_factory=dict)  # by node
    reached: int | None = None  # nodes in the waves reached so far (with a rolling plan)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def count(self, state: State) -> int:
        return sum(1 for p in self.pods.values() if p.state is state)

    @property
    def up_to_date(self) -> int:
        return sum(1 for p in self.pods.values() if p.current)

    @property
    def held(self) -> int:
        return sum(1 for p in self.pods.values() if p.held is not None)

    def to_json(self) -> JSON:
        counts = {s.value: self.count(s) for s in State}
        return {
            "namespace": self.namespace, "name": self.name, "model": self.model, "revision": self.revision,
            "upToDate": self.up_to_date, "desired": self.desired, "wave": self.wave, "waves": self.waves,
            "phase": self.phase, "bakeLeftSeconds": self.bake_left, "paused": self.paused, "reached": self.reached,
            "held": self.held, "offline": counts[State.OFFLINE], "failed": counts[State.FAILED],
            "states": counts,
        }


def node_ready(node: JSON | None) -> str:
    """As kubectl's STATUS column: `Ready`, `NotReady` (False or Unknown), `Unknown` (no Ready condition)."""
    cond = get_condition(node, "Ready") if node is not None else None
    if cond is None:
        return "Unknown"
    return "Ready" if cond.get("status") == "True" else "NotReady"


def last_seen(node: JSON | None) -> float | None:
    """When the node's kubelet last reported (its Ready condition's heartbeat)."""
    cond = get_condition(node, "Ready") if node is not None else None
    return parse_time((cond or {}).get("lastHeartbeatTime")) if cond else None


def pod_view(ds: JSON, revision: str, node_name: str, pod: JSON | None, node: JSON | None,
             last_outcome: Outcome | None, failures: set[str], waiting: bool) -> PodView:
    """The state of one node for one DaemonSet (see the module docstring for the order)."""
    view = PodView(node=node_name, state=State.UPGRADING)
    if pod is not None:
        view.pod = name_of(pod)
        view.revision = str(labels_of(pod).get(LABEL_REVISION_HASH) or "")
        view.current = is_current(pod, ds, revision)
        view.held = held_condition(pod)
    if node_ready(node) != "Ready":
        view.state = State.OFFLINE
        return view
    if view.current and pod is not None and is_pod_ready(pod):
        view.state = State.UP_TO_DATE
        return view
    stuck = _stuck_reason(pod) if pod is not None and view.current else ""
    if stuck:
        view.state, view.why = State.FAILED, stuck
        return view
    if not view.current and last_outcome is not None and last_outcome.reason == REASON_UPGRADE_FAILED:
        view.state, view.why = State.FAILED, last_outcome.message
        return view
    if node_name in failures and not view.current:
        view.state, view.why = State.FAILED, "counted failed by the rollout"
        return view
    if view.held is not None:
        view.state, view.why = State.HELD, view.held[0]
        return view
    need = get_condition(pod, CONDITION_POD_NEED_UPGRADE) if pod is not None else None
    if waiting or (need is not None and need.get("status") == "False"
                   and need.get("reason") == REASON_WAITING_FOR_WAVE):
        view.state, view.why = State.WAITING, REASON_WAITING_FOR_WAVE
        return view
    return view


def phase_of(state: states.RolloutState | None, all_current: bool, paused: bool) -> str:
    """The controller's phase while a plan rolls the current revision; else what the pods say."""
    if state is not None:
        return state.phase
    if paused:
        return "paused"
    return "complete" if all_current else "progressing"


def bake_left_of(plan: plans.Plan | None, state: states.RolloutState | None, now: float) -> float | None:
    if plan is None or state is None or state.phase != states.PHASE_BAKING:
        return None
    ends = state.bake_ends_at(plan)
    return None if ends is None else max(0.0, ends - now)


def int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def outcomes_by_node(events: Iterable[JSON]) -> dict[str, list[Outcome]]:
    """Each node's outcome Events, newest first."""
    found: dict[str, list[Outcome]] = {}
    for event in events:
        outcome = outcome_of(event)
        if outcome is not None and outcome.node:
            found.setdefault(outcome.node, []).append(outcome)
    for outcomes in found.values():
        outcomes.sort(key=lambda o: o.time, reverse=True)
    return found


def daemonset_view(ds: JSON, pods: list[JSON], nodes: dict[str, JSON], outcomes: dict[str, list[Outcome]],
                   now: float, revisions: Iterable[JSON] = ()) -> DaemonSetView:
    """The DaemonSet's row and its per-node states; `pods` may hold any pods (others are ignored)."""
    uid = meta(ds).get("uid")
    owned = [p for p in pods if (daemonset_owner(p) or {}).get("uid") == uid and node_name_of(p)]
    # A node's live pod wins over one being deleted (the replacement of an upgrade).
    by_node: dict[str, JSON] = {}
    for pod in sorted(owned, key=lambda p: not is_terminating(p)):
        by_node[node_name_of(pod)] = pod
    revision = current_revision(ds, [p for p in owned if not is_terminating(p)], revisions)
    state = active_state(ds, revision)
    failures = failed_nodes(state)
    paused = str(annotations_of(ds).get(ANNOTATION_PAUSED, "")).lower() == "true"
    view = DaemonSetView(
        namespace=namespace_of(ds), name=name_of(ds), model=strategy_of(ds) or "unknown", revision=revision,
        desired=0, wave=None, waves=None, phase="", bake_left=None, paused=paused)
    plan = plan_of(ds)
    waves = ranking(plan, state, {n: labels_of(nodes.get(n) or {}) for n in by_node})
    if state is not None:
        view.wave, view.waves = state.wave, state.waves
    if waves is not None and state is not None:
        view.reached = len(waves.nodes_in_waves(state.wave))
    for node_name, pod in sorted(by_node.items()):
        last = next((o for o in outcomes.get(node_name, ()) if o.namespace == view.namespace
                     and pod_belongs_to(o.pod, view.name)), None)
        waiting = waves is not None and state is not None and not waves.reached(node_name, state.wave)
        view.pods[node_name] = pod_view(ds, revision, node_name, pod, nodes.get(node_name), last, failures,
                                        waiting=waiting)
    desired = int_or_none((ds.get("status") or {}).get("desiredNumberScheduled"))
    view.desired = max(desired or 0, len(view.pods))
    all_current = bool(view.pods) and all(p.current for p in view.pods.values()) and view.desired == len(view.pods)
    view.phase = phase_of(state, all_current, paused)
    view.bake_left = bake_left_of(plan, state, now)
    return view


def failed_nodes(state: states.RolloutState | None) -> set[str]:
    return {node for node, _, _ in states.iter_failures(state)} if state is not None else set()


@dataclass
class NodeView:
    name: str
    ready: str
    held: tuple[str, str] | None
    next_window: str
    last_seen: float | None
    state: State
    versions: dict[str, PodView]  # by DaemonSet key
    outcomes: list[Outcome]

    def to_json(self) -> JSON:
        return {
            "node": self.name, "ready": self.ready, "state": self.state.value,
            "held": {"reason": self.held[0], "message": self.held[1]} if self.held else None,
            "nextWindow": self.next_window or None,
            "lastSeen": format_time(self.last_seen) if self.last_seen is not None else None,
            "daemonsets": {key: {"pod": p.pod, "revision": p.revision, "upToDate": p.current,
                                 "state": p.state.value, "why": p.why}
                           for key, p in self.versions.items()},
            "lastOutcome": self.outcomes[0].to_json() if self.outcomes else None,
        }


@dataclass
class Fleet:
    daemonsets: list[DaemonSetView]
    nodes: list[NodeView]


def node_view(name: str, node: JSON | None, daemonsets: list[DaemonSetView], outcomes: list[Outcome]) -> NodeView:
    versions = {ds.key: ds.pods[name] for ds in daemonsets if name in ds.pods}
    held = next((p.held for p in versions.values() if p.held is not None), None)
    ready = node_ready(node)
    state = worst(p.state for p in versions.values())
    if state is None:
        state = State.OFFLINE if ready != "Ready" else State.UP_TO_DATE
    return NodeView(name=name, ready=ready, held=held, next_window=next_window(held), last_seen=last_seen(node),
                    state=state, versions=versions, outcomes=outcomes)


def build(daemonsets: list[JSON], pods: list[JSON], nodes: list[JSON], events: list[JSON], now: float,
          revisions: list[JSON] | None = None) -> Fleet:
    """The whole picture from one list of each kind: managed DaemonSets only, sorted as kubectl sorts."""
    by_name = {name_of(n): n for n in nodes}
    outcomes = outcomes_by_node(events)
    managed = sorted((ds for ds in daemonsets if is_managed(ds)), key=lambda d: (namespace_of(d), name_of(d)))
    views = [daemonset_view(ds, pods, by_name, outcomes, now, revisions or ()) for ds in managed]
    node_views = [node_view(name, by_name[name], views, outcomes.get(name, [])) for name in sorted(by_name)]
    return Fleet(daemonsets=views, nodes=node_views)
