"""The fleet kept current from informer events, answering "what changed?" in a few bytes.

The dashboard's page holds one cell per node; at 10,000 nodes, recomputing the whole picture on every pod
change would cost far more than the change itself. So each informer event recomputes only the cells it
can affect (a pod: one node of one DaemonSet; a node: that node across DaemonSets; a DaemonSet or its
revision: that DaemonSet), with the same pure rules as `fleet` (model.pod_view), and tells listeners only
when a node's overall state really changed. DaemonSet summaries are marked dirty and sent by the caller at
its own pace (they count every node, so they are batched).
"""

from __future__ import annotations

import bisect
import heapq
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edgeagent.contract import (
    ANNOTATION_TEMPLATE_GENERATION,
    CONDITION_POD_NEED_UPGRADE,
    LABEL_REVISION_HASH,
    LABEL_TEMPLATE_GENERATION,
)
from edgeagent.kube.informer import DELETED
from edgeagent.kube.objects import (
    controller_owner,
    daemonset_owner,
    get_condition,
    is_terminating,
    key_of,
    meta,
    name_of,
    namespace_of,
    node_name_of,
    uid_of,
)
from edgeagent.rollout import model, placement, plan_source
from edgeagent.rollout import node_state as rules

JSON = dict[str, Any]

# One letter per state on the wire: a node change is `["edge-17","o"]`.
CODES = {
    model.State.UP_TO_DATE: "u",
    model.State.UPGRADING: "g",
    model.State.WAITING: "w",
    model.State.HELD: "h",
    model.State.STOPPED: "s",
    model.State.OFFLINE: "o",
    model.State.FAILED: "f",
}
assert list(CODES) == list(model.State), "one code per state, in the enum's order (the page's counts use it)"
OUTCOMES_PER_NODE = 20
RECENT_EVENTS = 50
MESSAGE_LIMIT = 300
SHOWN_FAILURES = 3  # failed nodes named on a rollout card (with their count)

NodeListener = Callable[[str, str | None], None]  # (node, state code or None when the node is gone)
LabelListener = Callable[[str, dict[str, str]], None]  # (node, its labels as the page filters on them)
EventListener = Callable[[JSON], None]

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[Any, ...]:
    """edge-2 before edge-10, as a person counts."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(name))


# ------------------------------------------------------------------------------------------ transforms
# Informer transforms: the cache keeps only what the rules read, so 10,000 pods and nodes stay small.

_POD_CONDITIONS = frozenset({"Ready", model.CONDITION_UPGRADE_HELD, CONDITION_POD_NEED_UPGRADE,
                             rules.FAILURE_CONDITION})


def slim_pod(pod: JSON) -> JSON:
    m = meta(pod)
    labels = m.get("labels") or {}
    owner = controller_owner(pod)
    status = pod.get("status") or {}
    return {
        "metadata": {
            "name": m.get("name"), "namespace": m.get("namespace"), "uid": m.get("uid"),
            "resourceVersion": m.get("resourceVersion"),
            "labels": {k: labels[k] for k in (LABEL_REVISION_HASH, LABEL_TEMPLATE_GENERATION) if k in labels},
            "ownerReferences": [owner] if owner else [],
            **({"deletionTimestamp": m["deletionTimestamp"]} if m.get("deletionTimestamp") else {}),
        },
        "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")},
        "status": {
            "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
                           for c in status.get("conditions") or [] if c.get("type") in _POD_CONDITIONS],
            "containerStatuses": [{"state": {"waiting": {"reason": ((s.get("state") or {}).get("waiting") or {})
                                                         .get("reason")}}}
                                  for s in status.get("containerStatuses") or []
                                  if (s.get("state") or {}).get("waiting")],
        },
    }


def slim_node(node: JSON) -> JSON:
    """Ready (without its heartbeat time, which changes every beat and decides nothing), labels and taints."""
    m = meta(node)
    ready = get_condition(node, "Ready")
    taints = (node.get("spec") or {}).get("taints")
    return {
        "metadata": {"name": m.get("name"), "resourceVersion": m.get("resourceVersion"),
                     "labels": m.get("labels") or {}},
        "spec": {"taints": taints} if taints else {},
        "status": {"conditions": [{k: ready.get(k) for k in ("type", "status", "reason", "message")}]
                   if ready else []},
    }


def slim_daemonset(ds: JSON) -> JSON:
    m = meta(ds)
    spec = ds.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    return {"metadata": {k: m.get(k) for k in ("name", "namespace", "uid", "resourceVersion", "annotations",
                                                 "creationTimestamp")},
            "spec": {"minReadySeconds": spec.get("minReadySeconds"),
                     "template": {"spec": {k: pod_spec[k] for k in ("nodeSelector", "affinity", "tolerations")
                                           if k in pod_spec}}},
            "status": {"desiredNumberScheduled": (ds.get("status") or {}).get("desiredNumberScheduled")}}


def slim_revision(rev: JSON) -> JSON:
    """A ControllerRevision as the page uses it: its hash, number, owner and its template's images."""
    m = meta(rev)
    owner = controller_owner(rev)
    containers = [{"image": image} for image in revision_images(rev)]
    return {"metadata": {"name": m.get("name"), "namespace": m.get("namespace"),
                         "creationTimestamp": m.get("creationTimestamp"),
                         "labels": {k: v for k, v in (m.get("labels") or {}).items() if k == LABEL_REVISION_HASH},
                         "ownerReferences": [owner] if owner else []},
            "revision": rev.get("revision"),
            "data": {"spec": {"template": {"spec": {"containers": containers}}}}}


def revision_images(rev: JSON) -> list[str]:
    """The images of a DaemonSet ControllerRevision's template (its `data` is the template as a patch), in
    container order: what an operator knows a version by, where the hash says nothing."""
    data = rev.get("data") if isinstance(rev.get("data"), dict) else {}
    template = ((data.get("spec") or {}).get("template") or {}) if isinstance(data, dict) else {}
    containers = ((template.get("spec") or {}).get("containers") or []) if isinstance(template, dict) else []
    return [str(c["image"]) for c in containers if isinstance(c, dict) and c.get("image")]


def shown_labels(node: JSON) -> dict[str, str]:
    """The node's labels the page filters and groups on: all but those repeating its name (the hostname
    label), which would make every node's label set unique and say nothing the name does not."""
    name = name_of(node)
    return {str(k): str(v) for k, v in (meta(node).get("labels") or {}).items() if v != name}


def slim_event(event: JSON) -> JSON:
    """An Event as the page uses it: at 10,000 nodes the agents' outcome Events outnumber the pods."""
    m = meta(event)
    involved = event.get("involvedObject") or {}
    return {
        "metadata": {"name": m.get("name"), "namespace": m.get("namespace"),
                     "resourceVersion": m.get("resourceVersion"), "creationTimestamp": m.get("creationTimestamp")},
        "involvedObject": {k: involved.get(k) for k in ("kind", "namespace", "name")},
        "reason": event.get("reason"), "message": str(event.get("message") or "")[:MESSAGE_LIMIT + 1],
        "type": event.get("type"), "source": event.get("source") or {},
        **{k: event[k] for k in ("lastTimestamp", "eventTime", "firstTimestamp") if event.get(k)},
    }


def event_summary(event: JSON) -> JSON:
    """What the page shows of an Event; messages are cut so one chatty Event cannot flood the page."""
    involved = event.get("involvedObject") or {}
    source = event.get("source") or {}
    message = str(event.get("message") or "")
    return {
        "time": model.event_time(event), "type": str(event.get("type") or ""), "reason": str(event.get("reason") or ""),
        "object": f"{involved.get('kind', '')}/{involved.get('namespace') or namespace_of(event)}/"
                  f"{involved.get('name', '')}",
        "component": str(source.get("component") or ""), "node": str(source.get("host") or ""),
        "message": message[:MESSAGE_LIMIT] + ("…" if len(message) > MESSAGE_LIMIT else ""),
    }


@dataclass
class _DaemonSet:
    obj: JSON
    view: model.DaemonSetView
    revision: str = ""
    spec: plan_source.Plan | None = None
    plan: rules.PlanStatus | None = None  # its status, when about the current revision (rules.relevant)
    # Nodes that ever ran one of its pods (a pod being replaced must not reshuffle the waves), and the
    # planner's ranking over them, computed when first needed after a node joins.
    members: set[str] = field(default_factory=set)
    ranking: plan_source.Ranking | None = None
    ranking_version: int = 0  # bumped when the ranking is rebuilt: the page's wave groups are resent


class LiveFleet:
    """Caches fed by informer handlers (`on_daemonset`, `on_pod`, `on_node`, `on_event`, `on_revision`)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.daemonsets: dict[str, _DaemonSet] = {}  # by uid, managed only
        self._pods: dict[str, dict[str, dict[str, JSON]]] = {}  # ds uid -> node -> pod key -> pod
        self._pod_owner: dict[str, tuple[str, str]] = {}  # pod key -> (ds uid, node)
        self._revisions: dict[str, dict[str, JSON]] = {}  # ds uid -> revision key -> revision
        self._plans: dict[str, JSON] = {}  # RolloutPlan key (namespace/name) -> plan
        self.nodes: dict[str, JSON] = {}
        self.outcomes: dict[str, deque[model.Outcome]] = {}
        self.events: list[JSON] = []  # the RECENT_EVENTS newest by time, newest first
        self.states: dict[str, str] = {}  # node -> code
        self.dirty: set[str] = set()  # ds uids whose summary changed
        self._keys: dict[str, str] = {}  # ds uid -> namespace/name, also after it is gone
        self._node_listeners: list[NodeListener] = []
        self._label_listeners: list[LabelListener] = []
        # (when, ds uid, node): a Ready pod becomes available minReadySeconds after it turned Ready, and no
        # event says so; `tick` recomputes its cell then. `_due_at` keeps one entry per cell.
        self._due: list[tuple[float, str, str]] = []
        self._due_at: dict[tuple[str, str], float] = {}
        self._event_listeners: list[EventListener] = []
        self.node_changes = 0  # node state changes told to listeners (for the benchmark)
        # While the informers' first lists arrive, objects are only stored: one full pass at the end
        # (`finish_batch`) instead of recomputing 10,000 cells (and the ranking) once per object.
        self.batching = True
        self._quiet = False

    def finish_batch(self) -> None:
        """Compute every cell once (listeners are not told: the caller sends a fresh snapshot)."""
        self.batching = False
        self._quiet = True
        try:
            for uid in list(self.daemonsets):
                self._refresh_daemonset(uid)
            for node in self.nodes:
                self._refresh_node(node)
        finally:
            self._quiet = False

    def add_node_listener(self, fn: NodeListener) -> None:
        self._node_listeners.append(fn)

    def add_event_listener(self, fn: EventListener) -> None:
        self._event_listeners.append(fn)

    def add_label_listener(self, fn: LabelListener) -> None:
        self._label_listeners.append(fn)

    def tick(self) -> None:
        """Recompute the cells whose pods have become available since (minReadySeconds elapsed)."""
        now = self._clock()
        while self._due and self._due[0][0] <= now:
            at, uid, node = heapq.heappop(self._due)
            if self._due_at.get((uid, node)) != at:
                continue  # superseded by a later refresh of the cell
            del self._due_at[(uid, node)]
            if uid in self.daemonsets:
                self._refresh_cell(uid, node)
                self._refresh_node(node)

    # ------------------------------------------------------------------------------ informer handlers

    def on_daemonset(self, etype: str, ds: JSON, old: JSON | None) -> None:
        uid = uid_of(ds)
        if etype == DELETED or not model.is_managed(ds):
            gone = self.daemonsets.pop(uid, None)
            if gone is not None:
                self.dirty.add(uid)
                for node in list(gone.view.pods):
                    self._refresh_node(node)
            return
        entry = self.daemonsets.get(uid)
        if entry is None:
            view = model.DaemonSetView(namespace=namespace_of(ds), name=name_of(ds), model="", revision="",
                                       desired=0, wave=None, waves=None, phase="", bake_left=None, paused=False)
            entry = self.daemonsets[uid] = _DaemonSet(obj=ds, view=view)
            self._keys[uid] = view.key
        entry.obj = ds
        if not self.batching:
            self._refresh_daemonset(uid)

    def on_revision(self, etype: str, rev: JSON, old: JSON | None) -> None:
        owner = (controller_owner(rev) or {}).get("uid")
        if not owner:
            return
        revisions = self._revisions.setdefault(str(owner), {})
        if etype == DELETED:
            revisions.pop(key_of(rev), None)
        else:
            revisions[key_of(rev)] = rev
        if owner in self.daemonsets and not self.batching:
            self._refresh_daemonset(str(owner))

    def on_plan(self, etype: str, plan: JSON, old: JSON | None) -> None:
        """A RolloutPlan: the DaemonSets it names (before and after the change) are computed again."""
        before = self._plans.pop(key_of(plan), None)
        if etype != DELETED:
            self._plans[key_of(plan)] = plan
        named = {(namespace_of(p), str((p.get("spec") or {}).get("daemonSet") or ""))
                 for p in (before, plan) if p is not None}
        if self.batching:
            return
        for uid, entry in list(self.daemonsets.items()):
            if (entry.view.namespace, entry.view.name) in named:
                self._refresh_daemonset(uid)

    def on_pod(self, etype: str, pod: JSON, old: JSON | None) -> None:
        key = key_of(pod)
        before = self._pod_owner.pop(key, None)
        if before is not None:
            self._pods.get(before[0], {}).get(before[1], {}).pop(key, None)
        owner = daemonset_owner(pod)
        node = node_name_of(pod)
        now_at: tuple[str, str] | None = None
        if etype != DELETED and owner is not None and node:
            now_at = (str(owner.get("uid")), node)
            self._pods.setdefault(now_at[0], {}).setdefault(node, {})[key] = pod
            self._pod_owner[key] = now_at
            entry = self.daemonsets.get(now_at[0])
            if entry is not None and node not in entry.members:
                entry.members.add(node)
                entry.ranking = None
        if self.batching:
            return
        for place in {p for p in (before, now_at) if p is not None}:
            uid, node_name = place
            entry = self.daemonsets.get(uid)
            if entry is None:
                continue
            if self._revision_moved(entry, pod):
                self._refresh_daemonset(uid)
            else:
                self._refresh_cell(uid, node_name)
                self._refresh_node(node_name)

    def on_node(self, etype: str, node: JSON, old: JSON | None) -> None:
        name = name_of(node)
        if etype == DELETED:
            self.nodes.pop(name, None)
            for entry in self.daemonsets.values():
                if name in entry.members:
                    entry.members.discard(name)
                    entry.ranking = None
        else:
            self.nodes[name] = node
            if not self.batching and (old is None or (meta(old).get("labels") or {}) != (meta(node).get("labels")
                                                                                       or {})):
                labels = shown_labels(node)
                for fn in self._label_listeners:
                    fn(name, labels)
            # A heartbeat changes nothing the page shows: only Ready, labels (waves, placement) and taints do.
            if old is not None and old.get("status") == node.get("status") and old.get("spec") == node.get("spec") \
                    and (meta(old).get("labels") or {}) == (meta(node).get("labels") or {}):
                return
            if old is not None and (meta(old).get("labels") or {}) != (meta(node).get("labels") or {}):
                for entry in self.daemonsets.values():
                    entry.ranking = None
                if not self.batching:
                    for uid in list(self.daemonsets):
                        self._refresh_daemonset(uid)
        if self.batching:
            return
        # Every DaemonSet: a node that appears may need a pod, one that goes leaves its pods offline.
        for uid in list(self.daemonsets):
            self._refresh_cell(uid, name)
        self._refresh_node(name)

    def on_event(self, etype: str, event: JSON, old: JSON | None) -> None:
        if etype == DELETED:
            return
        outcome = model.outcome_of(event)
        if outcome is not None and outcome.node:
            outcomes = self.outcomes.setdefault(outcome.node, deque(maxlen=OUTCOMES_PER_NODE))
            outcomes.appendleft(outcome)
            if len(outcomes) > 1 and outcomes[1].time > outcome.time:  # arrived late (relist): keep newest first
                ordered = sorted(outcomes, key=lambda o: o.time, reverse=True)
                outcomes.clear()
                outcomes.extend(ordered)
            if not self.batching:
                for uid in self._daemonsets_on(outcome.node):
                    self._refresh_cell(uid, outcome.node)
                self._refresh_node(outcome.node)
        summary = event_summary(event)
        # Newest first by the Event's own time, not by arrival: a relist delivers old ones after new ones.
        if len(self.events) >= RECENT_EVENTS and summary["time"] <= self.events[-1]["time"]:
            return
        bisect.insort(self.events, summary, key=lambda e: -float(e["time"]))
        del self.events[RECENT_EVENTS:]
        for fn in self._event_listeners:
            fn(summary)

    # ------------------------------------------------------------------------------ recomputation

    def _daemonsets_on(self, node: str) -> list[str]:
        return [uid for uid, entry in self.daemonsets.items() if node in entry.view.pods
                or node in self._pods.get(uid, {})]

    def _revision_moved(self, entry: _DaemonSet, pod: JSON) -> bool:
        """A pod of a template generation whose hash differs from the one we hold: the revision changed."""
        labels = (meta(pod).get("labels") or {})
        generation = str((meta(entry.obj).get("annotations") or {}).get(ANNOTATION_TEMPLATE_GENERATION)
                         or "")
        return bool(generation) and labels.get(LABEL_TEMPLATE_GENERATION) == generation \
            and bool(labels.get(LABEL_REVISION_HASH)) and labels.get(LABEL_REVISION_HASH) != entry.revision

    def _refresh_daemonset(self, uid: str) -> None:
        entry = self.daemonsets[uid]
        ds = entry.obj
        pods = [p for by_key in self._pods.get(uid, {}).values() for p in by_key.values() if not is_terminating(p)]
        plans = plan_source.index(self._plans.values())
        entry.revision = model.current_revision(ds, pods, self._revisions.get(uid, {}).values(), plans)
        entry.plan = rules.relevant(plan_source.status_of(ds, plans), entry.revision)
        spec = plan_source.plan_of(ds, plans)
        if spec is None or entry.spec is None or spec.fingerprint() != entry.spec.fingerprint():
            entry.ranking = None
        entry.spec = spec
        entry.members |= set(self._pods.get(uid, {}))
        view = entry.view
        view.model = model.strategy_of(ds) or "unknown"
        view.revision = entry.revision
        view.wave = view.waves = view.reached = None
        if entry.plan is not None:
            view.wave = model.int_or_none(entry.plan.get("wave"))
            view.waves = model.int_or_none(entry.plan.get("waves"))
            waves = self._ranking(entry)
            if waves is not None and view.wave is not None:
                view.reached = len(waves.nodes_in_waves(view.wave))
        nodes = set(view.pods) | set(self._pods.get(uid, {})) \
            | {name for name, node in self.nodes.items() if placement.runs_on(ds, node)}
        for node in nodes:
            self._refresh_cell(uid, node)
        for node in nodes:
            self._refresh_node(node)
        self.dirty.add(uid)

    def _ranking(self, entry: _DaemonSet) -> plan_source.Ranking | None:
        if entry.ranking is None:
            entry.ranking = plan_source.ranking(entry.spec, entry.plan,
                                                {n: meta(self.nodes.get(n) or {}).get("labels") or {}
                                                 for n in entry.members})
            entry.ranking_version += 1
        return entry.ranking

    def _refresh_cell(self, uid: str, node: str) -> None:
        """The node's cell for the DaemonSet, through the one state rule (model.pod_view -> rules.node_state):
        a cell for each node running one of its pods, and for each node it should run one on."""
        entry = self.daemonsets[uid]
        by_key = self._pods.get(uid, {}).get(node) or {}
        node_obj = self.nodes.get(node)
        if not by_key and (node_obj is None or not placement.runs_on(entry.obj, node_obj)):
            if entry.view.pods.pop(node, None) is not None:
                self.dirty.add(uid)
            return
        pod = model.pick_pod(by_key.values())
        last = model.last_outcome_for(self.outcomes.get(node, ()), entry.view.namespace, entry.view.name)
        waves = self._ranking(entry) if entry.plan is not None else None
        view = model.pod_view(entry.obj, entry.plan, entry.revision, node, pod, node_obj, last, self._clock(),
                              waves.wave_of(node) if waves is not None else None)
        previous = entry.view.pods.get(node)
        entry.view.pods[node] = view
        if previous != view:
            self.dirty.add(uid)
        if view.state is model.State.UPGRADING and pod is not None:
            at = rules.available_at(pod, entry.obj)
            if at is not None and at > self._clock() and self._due_at.get((uid, node)) != at:
                self._due_at[(uid, node)] = at
                heapq.heappush(self._due, (at, uid, node))

    def node_state(self, node: str) -> model.State | None:
        """The node's worst state over its DaemonSets (a node missing from the node list but still running a
        pod is offline); None for a node neither listed nor running one."""
        states = [e.view.pods[node].state for e in self.daemonsets.values() if node in e.view.pods]
        found = model.worst(states)
        if found is None:
            if node not in self.nodes:
                return None
            found = model.State.OFFLINE if rules.offline_why(self.nodes[node]) else model.State.UP_TO_DATE
        return found

    def _refresh_node(self, node: str) -> None:
        state = self.node_state(node)
        code = CODES[state] if state is not None else None
        if self.states.get(node) == code:
            return
        if code is None:
            self.states.pop(node, None)
        else:
            self.states[node] = code
        if self._quiet:
            return
        self.node_changes += 1
        for fn in self._node_listeners:
            fn(node, code)

    # ------------------------------------------------------------------------------ views for the page

    def summaries(self, uids: set[str] | None = None) -> list[JSON]:
        """DaemonSet summaries (all, or those in `uids`) as sent to the page, with phase and bake left as of now.

        Compact on purpose (one-letter keys, counts as a list in `CODES` order): every node change that
        moves a count resends its DaemonSet's summary, and the page's budget is a few hundred bytes per change.
        The numbers are `model.summarize`'s and the cells' states, as `fleet -o json` counts them.
        """
        now = self._clock()
        out = []
        for uid, entry in sorted(self.daemonsets.items(), key=lambda kv: (kv[1].view.namespace, kv[1].view.name)):
            if uids is not None and uid not in uids:
                continue
            view = entry.view
            model.summarize(view, entry.obj, entry.plan, entry.spec, now)
            counts = view.counts()
            out.append({
                "k": view.key, "m": view.model, "r": view.revision, "u": view.up_to_date, "d": view.desired,
                "w": view.wave, "n": view.waves, "p": view.phase,
                "b": round(view.bake_left) if view.bake_left is not None else None, "z": int(view.paused),
                "a": view.reached, "s": [counts[state.value] for state in CODES], **self._versions(uid, entry),
            })
        return out

    def _versions(self, uid: str, entry: _DaemonSet) -> JSON:
        """The revisions a person asks about, each with its images: `i` hash -> images (current, the plan's,
        the stable one), `pr` the plan's revision, `sr` its stable revision, `fc` the nodes the rollout
        counted failed and `f` the first few of them ([node, reason]), `g` the plan's group label, `pl` 1 when
        the DaemonSet has a RolloutPlan (the page's action buttons steer it); each left out when empty."""
        images = self._images(uid)
        plan = entry.plan or {}
        wanted = [entry.revision, str(plan.get("revision") or ""), str(plan.get("stableRevision") or "")]
        failures = sorted(rules.plan_failures(entry.plan).items(), key=lambda kv: natural_key(kv[0]))
        found = {"i": {h: images[h] for h in wanted if h and h in images},
                 "pr": plan.get("revision"), "sr": plan.get("stableRevision"),
                 "fc": len(failures), "f": [list(kv) for kv in failures[:SHOWN_FAILURES]],
                 "g": entry.spec.group_label if entry.spec is not None else None,
                 "pl": int(entry.spec is not None)}
        # Only what is there: each summary is resent with every count it moves (a few hundred bytes a change).
        return {k: v for k, v in found.items() if v}

    def _images(self, uid: str) -> dict[str, str]:
        """Revision hash -> its template's images, for the DaemonSet `uid`."""
        images: dict[str, str] = {}
        for rev in self._revisions.get(uid, {}).values():
            label = (meta(rev).get("labels") or {}).get(LABEL_REVISION_HASH)
            if label:
                images[str(label)] = ", ".join(revision_images(rev))
        return images

    def waves(self) -> dict[str, list[list[str]]]:
        """namespace/name -> the nodes of each wave (1, 2, ...) of the DaemonSets whose plan is rolling: the
        planner's own ranking (`plan_source.ranking`, as the cells' WAITING state uses it)."""
        out = {}
        for entry in self.daemonsets.values():
            ranking = self._ranking(entry) if entry.plan is not None else None
            if ranking is not None:
                out[entry.view.key] = [ranking.nodes_of_wave(k) for k in range(1, ranking.waves + 1)]
        return out

    def waves_version(self) -> tuple[tuple[str, int, bool], ...]:
        """Changes whenever `waves()` may: a ranking rebuilt, a plan starting or ending."""
        return tuple((uid, e.ranking_version, e.plan is not None) for uid, e in sorted(self.daemonsets.items()))

    def labelled_grid(self) -> tuple[list[list[Any]], list[dict[str, str]]]:
        """The grid with each node's labels: rows [node, code, label set index] and the distinct label sets
        (at 10,000 nodes most share a few sets: sent once each)."""
        sets: list[dict[str, str]] = []
        index: dict[tuple[tuple[str, str], ...], int] = {}
        rows: list[list[Any]] = []
        for name, code in self.grid():
            labels = shown_labels(self.nodes[name]) if name in self.nodes else {}
            key = tuple(sorted(labels.items()))
            if key not in index:
                index[key] = len(sets)
                sets.append(labels)
            rows.append([name, code, index[key]])
        return rows, sets

    def removed(self, uids: set[str]) -> list[str]:
        """Keys (`namespace/name`) of the DaemonSets among `uids` that are no longer managed."""
        return [self._keys[uid] for uid in uids if uid not in self.daemonsets and uid in self._keys]

    def counts(self) -> dict[str, dict[str, int]]:
        """namespace/name -> nodes per state: what `/metrics` exports (the cells' states, as everywhere)."""
        return {e.view.key: e.view.counts() for e in self.daemonsets.values()}

    def grid(self) -> list[list[str]]:
        return [[name, self.states[name]] for name in sorted(self.states, key=natural_key)]

    def node_details(self, name: str) -> JSON | None:
        node = self.nodes.get(name)
        views = [e.view for e in self.daemonsets.values()]
        if node is None and not any(name in v.pods for v in views):
            return None
        detail = model.node_view(name, node, views, list(self.outcomes.get(name, ()))).to_json()
        detail["outcomes"] = [o.to_json() for o in self.outcomes.get(name, ())]
        for uid, entry in self.daemonsets.items():  # each pod's revision with its images, as on the cards
            shown = (detail.get("daemonsets") or {}).get(entry.view.key)
            if isinstance(shown, dict) and shown.get("revision"):
                shown["images"] = self._images(uid).get(str(shown["revision"]))
        return detail
