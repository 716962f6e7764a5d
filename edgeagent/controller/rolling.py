"""AdvancedRollingUpdate planning: given a DaemonSet, its pods and the nodes, which pods to delete now.

Pure (no I/O, clock injected) so that the budget rules can be checked exhaustively by property tests.
It follows OpenYurt's daemonPodUpdater:

- pods are grouped by node; nodes that are not Ready are skipped, so a cut link does not block the roll;
- the budget is `apps.openyurt.io/max-unavailable` scaled against the nodes running the DaemonSet,
  rounded up; a Ready node counts against it while its pod is missing, terminating, duplicated or an
  up-to-date pod that is not yet available (Ready for `minReadySeconds`);
- old pods that are not available are replaced first, all at once (that costs no availability), and
  their nodes count against the budget like any other unavailable node (Kubernetes' DaemonSet controller
  counts them too); old available pods are deleted only within what is left.

and fixes what OpenYurt leaves open:

- nodes are visited in name order, so a roll is reproducible and `rollout status` predictable;
- only old pods that are really not Ready are replaced "for free"; one that is Ready but younger than
  `minReadySeconds`, or was marked unready while its node was away (and is not re-reported yet), is
  replaced within the budget: otherwise a fresh DaemonSet, or every node returning from a partition,
  would be replaced all at once;
- a Ready node whose last pod the cache saw leave (deleted by anyone: a previous leader, an agent) counts
  against the budget until a pod shows up there again (`vacated`), not only while `desiredNumberScheduled`,
  which lags behind the node cache, says so;
- a node that went NotReady *after* receiving the new version, or whose pod deletion is still in
  flight, keeps counting against the budget (OpenYurt forgets it and starts more deletions: a version
  that takes nodes down would spread at full speed);
- `edgeagent.io/partition`, `node-selector`, `paused` and `max-failed` + `progress-deadline-seconds`
  (pods of the new version that are not available in time stop the roll instead of being skipped);
- the site decides when (docs/contract.md): an old pod whose `UpgradeHeld` condition is `True` (its node's
  agent is held or outside its maintenance window) is never deleted and spends no budget, so one closed
  site neither blocks nor slows the others; it is upgraded once its agent publishes `False`;
- a node whose pod is being upgraded in place (`restarting`, controller/inplace_exec.py) counts against the
  budget until the kubelet reports the new containers, whatever the cache shows of the pod meanwhile, and its
  pod is not chosen again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from edgeagent.contract import held_by
from edgeagent.controller.expectations import Expectations
from edgeagent.controller.pods import (
    available_by,
    available_from,
    created_at,
    group_by_node,
    node_of,
    node_ready_changed_at,
    ready_since,
)
from edgeagent.controller.revisions import updated_test
from edgeagent.controller.settings import RollSettings
from edgeagent.kube.objects import get_condition, is_node_ready, is_terminating, labels_of, name_of, uid_of
from edgeagent.kube.timeutil import parse_time

JSON = dict[str, Any]

# At most this many deletions per pass (OpenYurt's BurstReplicas): a 10% roll of 10,000 nodes must not
# fire 1,000 DELETEs at once at the API server.
BURST = 250
# Wake-ups are scheduled slightly after the moment a pod becomes available, so the reconcile sees it so.
_REQUEUE_SLACK = 0.05


class NodeState(StrEnum):
    UP_TO_DATE = "up to date"
    OUTDATED = "outdated"
    UNAVAILABLE = "unavailable"
    NOT_READY = "NotReady"
    HELD = "held"


@dataclass(frozen=True)
class NodeView:
    """One node as the roll sees it: at most one old and one new live pod, plus pods being deleted; and what
    the roll reads of those two pods on every pass (`pods.ready_since` of each, `held_by` of the old one),
    derived once with the view: the reconciler keeps views while their pods are unchanged."""

    name: str
    node: JSON | None
    ready: bool
    new: JSON | None
    old: JSON | None
    terminating: tuple[JSON, ...]
    excess: bool
    new_since: float | None
    old_since: float | None
    hold: tuple[str, str] | None

    @property
    def labels(self) -> dict[str, str]:
        return labels_of(self.node) if self.node else {}


def node_views(ds: JSON, pods: Iterable[JSON], nodes: Mapping[str, JSON], current_hash: str) -> list[NodeView]:
    """Nodes running a pod of the DaemonSet, sorted by name (the roll's deterministic order).

    The reconciler keeps these views current from the pods that changed (`roll_views.RollViews`); this pass
    over every pod serves `rollout status` and is what the tracker must always agree with."""
    updated = updated_test(ds, current_hash)
    groups = group_by_node(pods)
    return [view_of(name, groups[name], nodes.get(name), updated) for name in sorted(groups)]


def view_of(name: str, group: list[JSON], node: JSON | None, updated: Callable[[JSON], bool]) -> NodeView:
    """One node's view from its pods (sorted here by name, so the view does not depend on their order) and its
    Node object; `updated` is `revisions.updated_test` of the DaemonSet and revision."""
    if len(group) > 1:
        group.sort(key=name_of)
    new: JSON | None = None
    old: JSON | None = None
    excess = False
    terminating: list[JSON] = []
    for pod in group:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            terminating.append(pod)
            continue
        labels = meta.get("labels") or {}
        if updated(labels):
            excess = excess or new is not None
            new = pod
        else:
            excess = excess or old is not None
            old = pod
    return NodeView(
        name=name,
        node=node,
        # A node we cannot see (deleted, not yet listed) is treated as not Ready: never act on a guess.
        ready=node is not None and is_node_ready(node),
        new=new,
        old=old,
        terminating=tuple(terminating),
        excess=excess,
        new_since=ready_since(new) if new is not None else None,
        old_since=ready_since(old) if old is not None else None,
        hold=held_by(old) if old is not None else None,
    )


def desired_nodes(ds: JSON) -> int:
    """`status.desiredNumberScheduled`: how many nodes the DaemonSet controller says should run a pod (0 if
    unknown). It moves only when nodes or the placement change, so a status that lags is still a good count."""
    value = (ds.get("status") or {}).get("desiredNumberScheduled")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def held_reason(view: NodeView) -> tuple[str, str] | None:
    """(reason, message) when the node still runs only its old pod and that pod's UpgradeHeld is True."""
    if not view.ready or view.excess or view.old is None or view.new is not None:
        return None
    return view.hold


def node_state(view: NodeView, min_ready_seconds: int, now: float) -> NodeState:
    """What `rollout status` prints for a node."""
    if not view.ready:
        return NodeState.NOT_READY
    if held_reason(view) is not None:
        return NodeState.HELD
    if view.excess or view.new is None:
        return NodeState.OUTDATED if view.old is not None and not view.excess else NodeState.UNAVAILABLE
    if view.old is not None or not available_by(view.new_since, min_ready_seconds, now):
        return NodeState.UNAVAILABLE
    return NodeState.UP_TO_DATE


def _went_down_after(view: NodeView, pod: JSON) -> bool:
    """The node's Ready condition changed (to not Ready) at or after the pod was created."""
    changed = node_ready_changed_at(view.node) if view.node else None
    return changed is not None and changed >= created_at(pod)


def _counts_unavailable(view: NodeView, settings: RollSettings, now: float) -> bool:
    """Whether the node uses up budget (old pods that are candidates are handled by the caller)."""
    if view.ready:
        if view.excess or (view.new is None and view.old is None):
            return True
        if view.new is not None and view.old is not None:
            return True
        if view.new is not None:
            return not available_by(view.new_since, settings.min_ready_seconds, now)
        # Old pod only, not eligible for replacement: its unavailability is real, count it.
        return False
    # Not Ready: OpenYurt ignores these nodes. We still count replacements in flight on them.
    if view.old is not None or view.excess:
        return False
    if view.new is None:
        return bool(view.terminating)
    return _went_down_after(view, view.new)


def progress_deadline_of(view: NodeView, pod: JSON, progress_deadline: float) -> float:
    """When a new-version pod that is not available counts as failed.

    From its creation; but a Ready node whose Ready changed after the pod was created went away and came back,
    and a returning kubelet re-reports its pods' readiness seconds after the node's own Ready (the node
    lifecycle controller had marked them unready): the pod gets a fresh deadline from the node's return. Its
    unavailability until then is the node's, not the version's.
    """
    deadline = created_at(pod) + progress_deadline
    if view.ready and view.node is not None:
        returned = node_ready_changed_at(view.node)
        if returned is not None and returned > created_at(pod):
            deadline = max(deadline, returned + progress_deadline)
    return deadline


def _status_predates_node_ready(view: NodeView, pod: JSON) -> bool:
    """The pod's readiness last changed no later than its node last turned Ready.

    The node lifecycle controller marks every pod of an unreachable node unready; when the node comes
    back, its kubelet restores them a moment later. Treating such a pod as failed would replace all
    returning nodes at once, outside the budget (OpenYurt does); its state is merely not re-reported yet.

    The node lifecycle controller marks only `Ready`: a pod whose `ContainersReady` is False has the kubelet's
    own word that its containers do not work, and is broken whatever the times say. The times have whole
    seconds, so a pod created and crash-looping in the second its node turned Ready (a node that just joined)
    looked marked: kept within the budget it already used up, with no room left it was never replaced.
    """
    containers = get_condition(pod, "ContainersReady")
    if containers is not None and containers.get("status") == "False":
        return False
    cond = get_condition(pod, "Ready")
    pod_changed = parse_time(cond.get("lastTransitionTime")) if cond else None
    node_changed = node_ready_changed_at(view.node) if view.node else None
    return pod_changed is not None and node_changed is not None and pod_changed <= node_changed


def _worked_in_time(view: NodeView, pod: JSON, min_ready_seconds: int, deadline: float) -> bool:
    """The kubelet's last report says the pod's containers were ready early enough for the pod to be available
    by its deadline, and, if its node is away now, before the node went away.

    This is what `proven` remembers, read from the pod itself, so that it survives a controller restart or a
    change of leader: the node lifecycle controller marks a lost node's pods unready by their `Ready` condition
    only, and `ContainersReady` keeps the kubelet's word (for a pod still Ready, the time it became so serves).
    Without it a new leader took a good pod whose node was cut off after it had come up for a failure of the
    version, and paused the roll (found by the soak).
    """
    ready = get_condition(pod, "Ready")
    cond = ready if ready is not None and ready.get("status") == "True" else get_condition(pod, "ContainersReady")
    since = parse_time(cond.get("lastTransitionTime")) if cond and cond.get("status") == "True" else None
    if since is None or since + min_ready_seconds > deadline:
        return False
    if view.ready:
        return True
    went_away = node_ready_changed_at(view.node) if view.node else None
    return went_away is not None and since + min_ready_seconds <= went_away


@dataclass
class Plan:
    """What to do now, and the numbers behind it (logged, exported as metrics, put in Events)."""

    total: int = 0
    updated: int = 0
    outdated: int = 0
    max_unavailable: int = 0
    unavailable: int = 0
    delete: list[JSON] = field(default_factory=list)
    # How many of `delete` were old pods that were not available anyway (deleted beyond the budget, since
    # that costs no availability, but counted in `unavailable`).
    replacing_unavailable: int = 0
    held_by_partition: int = 0
    not_selected: int = 0
    # Outdated pods on nodes whose rollout-plan wave is not reached yet.
    waiting_for_wave: int = 0
    not_ready: int = 0
    # Nodes whose old pod is UpgradeHeld True: node -> (reason, message); never deleted, no budget spent.
    held: dict[str, tuple[str, str]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    # UIDs of new-version pods available now that became available within their progress deadline.
    proven: set[str] = field(default_factory=set)
    # Nodes of `in_flight` that have an available pod again (or no longer exist): replacement done.
    settled: set[str] = field(default_factory=set)
    max_failed: int | None = None
    # With `edgeagent.io/pre-pull`: old pods, in deletion order, whose new images are not on their node yet.
    pull_wanted: list[JSON] = field(default_factory=list)
    auto_pause: bool = False
    paused: bool = False
    requeue_after: float | None = None

    @property
    def complete(self) -> bool:
        return self.outdated == 0 and self.updated == self.total


def _soonest(current: float | None, candidate: float) -> float:
    return candidate if current is None else min(current, candidate)


def plan_rolling_update(
    ds: JSON,
    pods: Iterable[JSON],
    nodes: Mapping[str, JSON],
    current_hash: str,
    settings: RollSettings,
    now: float,
    in_flight: Collection[str] = frozenset(),
    burst: int = BURST,
    proven: Collection[str] = frozenset(),
    pulled: Callable[[JSON], bool] | None = None,
    may_move: Callable[[str], bool] | None = None,
    vacated: Collection[str] = frozenset(),
    views: list[NodeView] | None = None,
    restarting: Collection[str] = frozenset(),
) -> Plan:
    """`may_move(node)` (a rollout plan's gate): whether the node's wave is reached; outdated pods of other
    nodes are left alone like pods the node-selector excludes.

    `pulled` (with `edgeagent.io/pre-pull`): whether an old pod's node already has the new images; others
    are not deleted (they are listed in `pull_wanted`), and the budget goes to the next pulled one.
    `in_flight`: nodes where this controller deleted a pod and has not yet seen an available pod
    again (see expectations.py); they count as unavailable whatever the cache shows. `proven`: UIDs of
    new-version pods seen available within their progress deadline (a pod that did has not failed, whatever
    its node does later). `vacated`: nodes whose last pod of the DaemonSet left the cache and that show none
    since (whoever deleted it: a Ready one among them lacks a pod, as a node of `in_flight` does). `views`: what
    `node_views` answers for these pods and nodes, when the caller keeps it current (`roll_views.RollViews`).
    `restarting`: nodes whose pod this controller patched in place and whose new containers the kubelet has not
    reported yet: unavailable, and not chosen again."""
    if views is None:
        views = node_views(ds, pods, nodes, current_hash)
    plan = Plan(total=len(views), paused=settings.paused)
    min_ready = settings.min_ready_seconds
    seen = {view.name for view in views}
    accounted = sum(1 for view in views if view.ready)
    for name in in_flight:
        if name in seen:
            continue
        if name in nodes:
            # Old pod gone, replacement not created yet: the node still needs (and lacks) a pod.
            plan.total += 1
            plan.unavailable += 1
            accounted += is_node_ready(nodes[name])
        else:
            plan.settled.add(name)
    for name in vacated:
        node = nodes.get(name)
        if name not in seen and name not in in_flight and node is not None and is_node_ready(node):
            plan.total += 1
            plan.unavailable += 1
            accounted += 1
    # Nodes that should run a pod but show none: the old pod is gone and its replacement not created yet. Our
    # own deletions are `in_flight` above, but a new leader or a restarted controller has no memory of its
    # predecessor's, and a node without a pod is invisible to grouping pods by node. The DaemonSet controller's
    # count of the nodes that should run a pod reveals how many there are (Kubernetes' DaemonSet controller
    # counts a node with neither an old nor a new pod as unavailable too). That count leaves out nodes that are
    # not Ready (their not-ready/unreachable NoSchedule taints, which daemon pods do not tolerate), so it is
    # compared with the Ready nodes seen.
    missing = max(0, desired_nodes(ds) - accounted)
    plan.total += missing
    plan.unavailable += missing
    plan.max_unavailable = settings.max_unavailable.scaled(plan.total, round_up=True)

    replacements: list[JSON] = []
    stale: list[JSON] = []
    candidates: list[JSON] = []
    already_counted: set[str] = set()
    wake: float | None = None
    for view in views:
        if view.new is not None and view.old is None and not view.excess:
            plan.updated += 1
        if view.old is not None and view.new is None and not view.excess:
            plan.outdated += 1
        if not view.ready and view.old is not None:
            plan.not_ready += 1
        counted = _counts_unavailable(view, settings, now) or view.name in restarting
        if view.name in in_flight:
            if not view.excess and (available_by(view.new_since, min_ready, now)
                                    or available_by(view.old_since, min_ready, now)):
                plan.settled.add(view.name)
            else:
                counted = True
        if counted:
            plan.unavailable += 1

        # Wake up when a Ready-but-not-yet-available pod turns available: no event marks that moment.
        for since in (view.new_since, view.old_since):
            if view.ready and min_ready > 0:
                at = available_from(since, min_ready)
                if at is not None and at > now:
                    wake = _soonest(wake, at - now)

        if settings.max_failed is not None and view.new is not None and not view.excess:
            deadline = progress_deadline_of(view, view.new, settings.progress_deadline)
            became = available_from(view.new_since, min_ready)
            if view.ready and available_by(view.new_since, min_ready, now) and became is not None and \
                    became <= deadline:
                plan.proven.add(uid_of(view.new))
            if uid_of(view.new) in proven or uid_of(view.new) in plan.proven or \
                    _worked_in_time(view, view.new, min_ready, deadline):
                failing = False
            elif view.ready:
                failing = not available_by(view.new_since, min_ready, now)
            else:
                changed = node_ready_changed_at(view.node) if view.node else None
                failing = _went_down_after(view, view.new) and changed is not None and changed <= deadline
            if failing:
                if now >= deadline:
                    plan.failed.append(name_of(view.new))
                else:
                    wake = _soonest(wake, deadline - now)

        if not view.ready or view.excess or view.old is None or view.new is not None or view.name in restarting:
            continue
        hold = view.hold
        if hold is not None:
            plan.held[view.name] = hold
            continue
        selector = settings.node_selector
        if selector is not None and not selector.matches(view.labels):
            plan.not_selected += 1
            if not available_by(view.old_since, min_ready, now):
                plan.unavailable += 1
            continue
        if may_move is not None and not may_move(view.name):
            plan.waiting_for_wave += 1
            if not available_by(view.old_since, min_ready, now):
                plan.unavailable += 1
            continue
        if available_by(view.old_since, min_ready, now):
            candidates.append(view.old)
        elif view.old_since is not None or _status_predates_node_ready(view, view.old):
            # Ready but younger than minReadySeconds, or marked unready while its node was away: not
            # broken, so not replaced "for free" — within the budget, like an available pod.
            stale.append(view.old)
        else:
            replacements.append(view.old)
            if counted:
                # Already counted (in flight): not a second time if it is held back.
                already_counted.add(name_of(view.old))

    if settings.max_failed is not None:
        plan.max_failed = max(1, settings.max_failed.scaled(plan.total, round_up=True))
        plan.auto_pause = not settings.paused and plan.outdated > 0 and len(plan.failed) >= plan.max_failed

    keep = min(plan.total, settings.partition.scaled(plan.total, round_up=True)) if settings.partition else 0
    allowance = max(0, plan.outdated - keep)
    plan.held_by_partition = max(0, len(replacements) + len(stale) + len(candidates) - allowance)

    acting = not settings.paused and not plan.auto_pause
    ok = pulled or (lambda _pod: True)
    if acting and pulled is not None:
        plan.pull_wanted = [p for p in (replacements + stale + candidates)[:allowance] if not pulled(p)]
    chosen = [p for p in replacements if ok(p)][:allowance] if acting else []
    plan.replacing_unavailable = len(chosen)
    # An old pod that is not available is an unavailable node, whether it is replaced now or stays (paused,
    # partition, pulling): it uses up budget like any other (Kubernetes' DaemonSet controller counts it too),
    # so available pods are deleted only within what is left. Replacing it is free; adding to it is not.
    plan.unavailable += sum(1 for p in replacements if name_of(p) not in already_counted)
    if acting:
        allowance -= len(chosen)
        room = max(0, plan.max_unavailable - plan.unavailable)
        chosen += [p for p in stale + candidates if ok(p)][:min(room, allowance)]
        plan.delete = chosen[:burst]

    if wake is not None:
        plan.requeue_after = wake + _REQUEUE_SLACK
    return plan


def plan_step(
    key: str,
    ds: JSON,
    pods: Collection[JSON],
    nodes: Mapping[str, JSON],
    current_hash: str,
    settings: RollSettings,
    now: float,
    expectations: Expectations,
    pulled: Callable[[JSON], bool] | None = None,
    may_move: Callable[[str], bool] | None = None,
    vacated: Collection[str] = frozenset(),
    views: list[NodeView] | None = None,
    live: Container[str] | None = None,
    restarting: Collection[str] = frozenset(),
) -> Plan | None:
    """One reconcile's decision, guarded by the DaemonSet's expectations (None: still waiting to see our
    previous deletions in the cache). The chosen deletions are recorded as expected before returning,
    so the caller must either delete them or report each failure to `expectations`. `views` and `live` (the
    UIDs of the pods not being deleted), when given, are what this function would derive from `pods`; the
    reconciler keeps both current from the pods that changed (`roll_views.RollViews`)."""
    if live is None:
        live = {uid_of(p) for p in pods if not is_terminating(p)}
    if not expectations.satisfied(key, live):
        return None
    plan = plan_rolling_update(ds, pods, nodes, current_hash, settings, now, expectations.in_flight(key),
                               proven=expectations.proven(key), pulled=pulled, may_move=may_move,
                               vacated=vacated, views=views, restarting=restarting)
    expectations.settle(key, plan.settled)
    expectations.remember_proven(key, plan.proven, live)
    if plan.delete:
        expectations.expect_deletions(key, [(uid_of(p), node_of(p)) for p in plan.delete])
    return plan
