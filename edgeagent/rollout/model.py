"""Where every node of every managed DaemonSet stands, computed from plain lists of objects.

A pure function of plain lists (DaemonSets, pods, nodes, Leases, edgeagent Events, ControllerRevisions) and
a clock, gathering for each node and DaemonSet what `node_state.node_state` needs and keeping what it says,
so that `rollout status`, the `fleet` tables, the dashboard and its metrics say the same thing and can be
tested without a cluster. No new API object is read or written: the state lives in what the agents and the controller
already publish (pod conditions, the rollout plan's state, the node Leases, the agents' outcome Events).
A node's overall state is the worst over its DaemonSets, in the order of `rules.STATE_ORDER`, and its WHY
is that same DaemonSet's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
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
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    node_name_of,
)
from edgeagent.kube.timeutil import format_time, parse_time
from edgeagent.rollout import node_state as rules
from edgeagent.rollout import placement, plan_source

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

# The agent writes "… outside the maintenance windows (…); next opens <when>" (agent/policy/site.py).
_NEXT_OPENS = re.compile(r"next opens (.+)$")


State = rules.State
STATE_ORDER = rules.STATE_ORDER
worst = rules.worst


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


def held_condition(pod: JSON) -> tuple[str, str] | None:
    return contract.held_by(pod)


def next_window(held: tuple[str, str] | None) -> str:
    """When a held node opens next, as the agent wrote it; "" when it is not waiting for a window."""
    if held is None or held[0] != REASON_OUTSIDE_WINDOW:
        return ""
    match = _NEXT_OPENS.search(held[1])
    return match.group(1) if match else ""


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


def current_revision(ds: JSON, pods: list[JSON], revisions: Iterable[JSON] = (),
                     plans: plan_source.Plans | None = None) -> str:
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
    status = plan_source.status_of(ds, plans or {})
    return str(status.get("revision") or "") if status is not None else ""


@dataclass(frozen=True)
class PodView:
    """One node's cell for one DaemonSet: its state (from `rules.node_state`) and the facts shown beside it."""

    node: str
    state: State
    why: str = ""
    pod: str = ""
    revision: str = ""
    current: bool = False
    policy: str = rules.POLICY_UNKNOWN  # held | open | unknown (no agent reported one)
    held: tuple[str, str] | None = None  # (reason, message) while the agent holds it


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
    pods: dict[str, PodView] = field(default_factory=dict)  # by node: every node of the DaemonSet
    reached: int | None = None  # nodes in the waves reached so far (with a rolling plan)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def count(self, which: State) -> int:
        return sum(1 for p in self.pods.values() if p.state is which)

    @property
    def up_to_date(self) -> int:
        return self.count(State.UP_TO_DATE)

    @property
    def held(self) -> int:
        return self.count(State.HELD)

    def counts(self) -> dict[str, int]:
        return rules.counts(p.state for p in self.pods.values())

    def to_json(self) -> JSON:
        counts = self.counts()
        return {
            "namespace": self.namespace, "name": self.name, "model": self.model, "revision": self.revision,
            "upToDate": self.up_to_date, "desired": self.desired, "nodes": len(self.pods), "wave": self.wave,
            "waves": self.waves, "phase": self.phase, "bakeLeftSeconds": self.bake_left, "paused": self.paused,
            "reached": self.reached, "held": self.held, "offline": counts[State.OFFLINE],
            "failed": counts[State.FAILED], "states": counts,
        }


def node_ready(node: JSON | None) -> str:
    """As kubectl's STATUS column: `Ready`, `NotReady` (False or Unknown), `Unknown` (no Ready condition or
    not in the node list)."""
    cond = get_condition(node, "Ready") if node is not None else None
    if cond is None:
        return "Unknown"
    return "Ready" if cond.get("status") == "True" else "NotReady"


def lease_renewals(leases: Iterable[JSON]) -> dict[str, float]:
    """node -> its Lease's `renewTime` (epoch seconds): the kubelet's heartbeat, every ~10 s.

    Not the Ready condition's `lastHeartbeatTime`: a real kubelet posts node status only every few minutes
    when nothing changes, so that time is the same for nodes online and cut off."""
    found: dict[str, float] = {}
    for lease in leases:
        renewed = parse_time((lease.get("spec") or {}).get("renewTime"))
        if renewed is not None:
            found[name_of(lease)] = renewed
    return found


def pod_view(ds: JSON, plan: rules.PlanStatus | None, revision: str, node_name: str, pod: JSON | None,
             node: JSON | None, last_outcome: Outcome | None, now: float, wave: int | None) -> PodView:
    """The cell of one node for one DaemonSet: `rules.node_state` and the facts shown beside it."""
    outcome = (last_outcome.reason, last_outcome.message) if last_outcome is not None else None
    verdict = rules.node_state(ds, plan, pod, node, revision=revision, now=now, wave=wave, outcome=outcome)
    if pod is None:
        return PodView(node=node_name, state=verdict.state, why=verdict.why)
    kind, reason, message = rules.policy(pod)
    return PodView(node=node_name, state=verdict.state, why=verdict.why, pod=name_of(pod),
                   revision=rules.pod_revision(pod), current=rules.is_current(pod, ds, revision), policy=kind,
                   held=(reason, message) if kind == rules.POLICY_HELD else None)


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


def last_outcome_for(outcomes: Iterable[Outcome], namespace: str, name: str) -> Outcome | None:
    """The newest of a node's outcome Events (newest first) that is about one of this DaemonSet's pods."""
    return next((o for o in outcomes if o.namespace == namespace and pod_belongs_to(o.pod, name)), None)


def pick_pod(pods: Iterable[JSON]) -> JSON | None:
    """A node's live pod wins over one being deleted (the replacement of an upgrade)."""
    found = sorted(pods, key=lambda p: not is_terminating(p))
    return found[-1] if found else None


def is_paused(ds: JSON) -> bool:
    return str(annotations_of(ds).get(ANNOTATION_PAUSED, "")).lower() == "true"


def summarize(view: DaemonSetView, ds: JSON, plan: rules.PlanStatus | None, spec: plan_source.Plan | None,
              now: float) -> None:
    """Fill the DaemonSet's row (desired, phase, bake left) from its cells: one rule for every view."""
    desired = int_or_none((ds.get("status") or {}).get("desiredNumberScheduled"))
    view.desired = max(desired or 0, len(view.pods))
    view.paused = is_paused(ds)
    view.phase = rules.rollout_phase(plan, (p.state for p in view.pods.values()), view.desired, view.paused)
    view.bake_left = plan_source.bake_left(spec, plan, now)


def daemonset_view(ds: JSON, pods: list[JSON], nodes: dict[str, JSON], outcomes: dict[str, list[Outcome]],
                   now: float, revisions: Iterable[JSON] = (), plans: plan_source.Plans | None = None) -> DaemonSetView:
    """The DaemonSet's row and its per-node cells: one per node running one of its pods (even a node missing
    from `nodes`, which is offline) and one per node it should run a pod on but does not (yet). `plans`: the
    RolloutPlans by DaemonSet (`plan_source.index`); None: no plans."""
    uid = meta(ds).get("uid")
    owned = [p for p in pods if (daemonset_owner(p) or {}).get("uid") == uid and node_name_of(p)]
    grouped: dict[str, list[JSON]] = {}
    for pod in owned:
        grouped.setdefault(node_name_of(pod), []).append(pod)
    by_node: dict[str, JSON | None] = {}
    for name, found in grouped.items():
        by_node[name] = pick_pod(found)
    for name, node in nodes.items():
        if name not in by_node and placement.runs_on(ds, node):
            by_node[name] = None
    revision = current_revision(ds, [p for p in owned if not is_terminating(p)], revisions, plans)
    plan = rules.relevant(plan_source.status_of(ds, plans or {}), revision)
    spec = plan_source.plan_of(ds, plans or {})
    view = DaemonSetView(
        namespace=namespace_of(ds), name=name_of(ds), model=strategy_of(ds) or "unknown", revision=revision,
        desired=0, wave=None, waves=None, phase="", bake_left=None, paused=False)
    waves = plan_source.ranking(spec, plan, {n: labels_of(nodes.get(n) or {}) for n in by_node})
    if plan is not None:
        view.wave, view.waves = int_or_none(plan.get("wave")), int_or_none(plan.get("waves"))
    if waves is not None and view.wave is not None:
        view.reached = len(waves.nodes_in_waves(view.wave))
    for node_name, its_pod in sorted(by_node.items()):
        last = last_outcome_for(outcomes.get(node_name, ()), view.namespace, view.name)
        view.pods[node_name] = pod_view(ds, plan, revision, node_name, its_pod, nodes.get(node_name), last, now,
                                        waves.wave_of(node_name) if waves is not None else None)
    summarize(view, ds, plan, spec, now)
    return view


@dataclass
class NodeView:
    name: str
    ready: str
    policy: str
    held: tuple[str, str] | None
    next_window: str
    last_seen: float | None
    state: State
    why: str
    versions: dict[str, PodView]  # by DaemonSet key
    outcomes: list[Outcome]

    def to_json(self) -> JSON:
        return {
            "node": self.name, "ready": self.ready, "state": self.state.value, "why": self.why,
            "policy": self.policy,
            "held": {"reason": self.held[0], "message": self.held[1]} if self.held else None,
            "nextWindow": self.next_window or None,
            "lastSeen": format_time(self.last_seen) if self.last_seen is not None else None,
            "daemonsets": {key: {"pod": p.pod, "revision": p.revision, "upToDate": p.state is State.UP_TO_DATE,
                                 "current": p.current, "state": p.state.value, "why": p.why}
                           for key, p in self.versions.items()},
            "lastOutcome": self.outcomes[0].to_json() if self.outcomes else None,
        }


@dataclass
class Fleet:
    daemonsets: list[DaemonSetView]
    nodes: list[NodeView]


def _policy_over(cells: Iterable[PodView]) -> tuple[str, tuple[str, str] | None]:
    """A node's policy as its agent reported it on any of its pods: held wins, then open, else unknown."""
    found = list(cells)
    held = next((c.held for c in found if c.held is not None), None)
    if held is not None:
        return rules.POLICY_HELD, held
    if any(c.policy == rules.POLICY_OPEN for c in found):
        return rules.POLICY_OPEN, None
    return rules.POLICY_UNKNOWN, None


def node_view(name: str, node: JSON | None, daemonsets: list[DaemonSetView], outcomes: list[Outcome],
              lease_renewed: float | None = None) -> NodeView:
    """A node across its DaemonSets: the worst state, and the WHY of the DaemonSet that gave it."""
    versions = {ds.key: ds.pods[name] for ds in daemonsets if name in ds.pods}
    policy, held = _policy_over(versions.values())
    ready = node_ready(node)
    overall = worst(p.state for p in versions.values())
    if overall is None:
        offline = rules.offline_why(node)
        overall, why = (State.OFFLINE, offline) if offline else (State.UP_TO_DATE, "runs no managed DaemonSet")
    else:
        why = next(p.why for p in versions.values() if p.state is overall)
    return NodeView(name=name, ready=ready, policy=policy, held=held, next_window=next_window(held),
                    last_seen=lease_renewed, state=overall, why=why, versions=versions, outcomes=outcomes)


def build(daemonsets: list[JSON], pods: list[JSON], nodes: list[JSON], events: list[JSON], now: float,
          revisions: list[JSON] | None = None, leases: list[JSON] | None = None,
          plans: list[JSON] | None = None) -> Fleet:
    """The whole picture from one list of each kind: managed DaemonSets only, sorted as kubectl sorts; every
    node listed, and every node a DaemonSet's pod runs on even when it is missing from the list."""
    by_name = {name_of(n): n for n in nodes}
    outcomes = outcomes_by_node(events)
    renewals = lease_renewals(leases or [])
    managed = sorted((ds for ds in daemonsets if is_managed(ds)), key=lambda d: (namespace_of(d), name_of(d)))
    by_ds = plan_source.index(plans or ())
    views = [daemonset_view(ds, pods, by_name, outcomes, now, revisions or (), by_ds) for ds in managed]
    names = set(by_name) | {n for v in views for n in v.pods}
    node_views = [node_view(name, by_name.get(name), views, outcomes.get(name, []), renewals.get(name))
                  for name in sorted(names)]
    return Fleet(daemonsets=views, nodes=node_views)
