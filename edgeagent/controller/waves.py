"""Rollout plans in the controller: what the pods and nodes of its caches say about a revision's rollout.

The plan (order, wave sizes: `edgeagent.rollout.plan`) and the state machine that moves the waves on
(`edgeagent.rollout.machine`) are pure and live in `edgeagent/rollout/`. This module adds what needs the
caches and the clock:

- `observe`: one pass over the DaemonSet's pods, per node: upgraded (new revision, available), deferred
  (node NotReady, or its old pod's `UpgradeHeld` is True), failed (a new pod not available within
  `progressDeadlineSeconds`, or its node's agent reported the failure on the pod's status), or pending.
  The `Observation` it returns is what `rollout.machine.decide` asks (`rollout.machine.Observed`).
- `RankCache`: one ranking per DaemonSet and revision, kept while the node set only shrinks.
- `NodePods`: the pods by node, kept current from the pods that changed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from edgeagent.contract import (
    CONDITION_UPGRADE_HELD,
    LABEL_REVISION_HASH,
    LABEL_TEMPLATE_GENERATION,
    reported_failure,
)
from edgeagent.controller.pod_index import Digest, Tracker, ready_now, revision_keys
from edgeagent.controller.pods import available_at, created_at, node_of, node_ready_changed_at
from edgeagent.controller.revisions import template_generation
from edgeagent.kube.objects import (
    get_condition,
    is_terminating,
    key_of,
    labels_of,
    name_of,
    namespace_of,
)
from edgeagent.kube.timeutil import parse_time
from edgeagent.rollout.plan import Plan, Ranking, rank, rank_names

JSON = dict[str, Any]

UPGRADED = "upgraded"
DEFERRED = "deferred"
FAILED = "failed"
PENDING = "pending"


# ------------------------------------------------------------------------------------------------ ranking


class _Ranked(NamedTuple):
    """One `RankCache` entry: the ranking of a revision under a plan, and the labels it was made from when the
    plan orders by labels (None: by name alone)."""

    revision: str
    fingerprint: tuple[object, ...]
    labels: dict[str, dict[str, str]] | None
    ranking: Ranking

    @property
    def known(self) -> AbstractSet[str]:
        """The names ranked: the labels' keys, or the ranking's members (kept from the set it was made of)."""
        return self.ranking.members if self.labels is None else self.labels.keys()


class RankCache:
    """One ranking per DaemonSet and revision, made once and kept while the node set only shrinks: a node
    whose pod is being replaced drops out of the pod cache for a moment, and re-ranking without it would
    shift every later node into an earlier wave. New nodes make a new ranking over old and new together.

    A plan ordering by name alone keeps no map of names to labels: its ranking's `members` are the names."""

    def __init__(self, by_hash: Callable[[], Sequence[str]] | None = None) -> None:
        self._by_uid: dict[str, _Ranked] = {}
        # Every cached node's name in hash order (controller/node_order.py): a ranking by name is a filter of it.
        self._by_hash = by_hash

    def get(self, uid: str, revision: str, plan: Plan, names: Collection[str], nodes: Mapping[str, JSON]) -> Ranking:
        """The ranking of `names` (nodes running a pod of the DaemonSet); their labels are read from `nodes`
        only when a ranking must be made."""
        return self._get(uid, revision, plan, names, nodes, owned=False)

    def _get(self, uid: str, revision: str, plan: Plan, names: Collection[str], nodes: Mapping[str, JSON],
             owned: bool) -> Ranking:
        """`get`; `owned`: `names` is a set made for this call, which a new ranking may keep as it is."""
        cached = self._by_uid.get(uid)
        fingerprint = plan.fingerprint()
        current = cached is not None and cached.revision == revision and cached.fingerprint == fingerprint
        if cached is not None and current:
            known = cached.known
            if len(names) <= len(known) and known >= (
                    names if isinstance(names, AbstractSet) else set(names)):  # C speed: ~60 ms at 100,000
                return cached.ranking
            # Nodes joined: a ranking of old and new together.
            names, owned = set(known).union(names), True
        elif (cached is not None and cached.fingerprint == fingerprint and not plan.uses_labels
              and cached.known == (names if isinstance(names, AbstractSet) else set(names))):
            # A new revision over the same nodes, and a plan that orders by their names alone: the same
            # ranking (rank() of equal arguments), kept instead of sorting 100,000 names again in the pass
            # that starts the revision.
            self._by_uid[uid] = cached._replace(revision=revision)
            return cached.ranking
        if not plan.uses_labels:
            if not owned or not isinstance(names, set):
                names = set(names)
            ranked = None if self._by_hash is None else rank_names(plan, names, self._by_hash())
            if ranked is None:
                ranked = rank(plan, dict.fromkeys(names, _NO_LABELS))
            self._by_uid[uid] = _Ranked(revision, fingerprint, None, ranked)
            return ranked
        labels = cached.labels if cached is not None and current else None
        merged = ({**labels, **node_labels((n for n in names if n not in labels), nodes, plan)} if labels
                  else node_labels(names, nodes, plan))
        ranking = rank(plan, merged)
        self._by_uid[uid] = _Ranked(revision, fingerprint, merged, ranking)
        return ranking

    def get_joined(self, uid: str, revision: str, plan: Plan, joined: Collection[str] | None,
                   names: Callable[[], Sequence[AbstractSet[str]]], nodes: Mapping[str, JSON]) -> Ranking:
        """`get`, when only `joined` (None: unknown) can be nodes the cached ranking lacks: a pass in which no
        node gained a pod checks nothing else. `names()`: the names in parts (sets, or a dict's keys), checked
        against the cached ranking part by part and merged only when a ranking must be made: the pass that starts
        over (a new revision's, a restart's) built their union, a set of 100,000 names, only to find it known.
        When one must be made, that union is the new ranking's `members` (`rank_names`)."""
        cached = self._by_uid.get(uid)
        if cached is not None and cached.revision == revision and cached.fingerprint == plan.fingerprint():
            known = cached.known
            if joined is not None:
                if all(name in known for name in joined):
                    return cached.ranking
            else:
                parts = names()
                if all(known >= part for part in parts):  # C speed, nothing allocated
                    return cached.ranking
                return self._get(uid, revision, plan, set().union(*parts), nodes, owned=True)
        return self._get(uid, revision, plan, set().union(*names()), nodes, owned=True)

    def forget(self, uid: str) -> None:
        self._by_uid.pop(uid, None)


# ------------------------------------------------------------------------------------------------ observe


class PodsByNode:
    """The DaemonSet's live pods by node: the one on the current revision (`new`), the one on an older revision
    (`old`), and the nodes with more than one of either (`excess`, a DaemonSet controller still sorting them out).
    Plain dicts, no object per node: at 100,000 nodes this is built on every reconcile."""

    __slots__ = ("all_updated", "excess", "held", "new", "old", "unready")

    def __init__(self) -> None:
        self.new: dict[str, JSON] = {}
        self.old: dict[str, JSON] = {}
        self.excess: set[str] = set()
        # Nodes whose `new` pod is not Ready now: the only new pods `observe` must look at (without
        # minReadySeconds), so a pass late in a rollout does not read every upgraded pod.
        self.unready: set[str] = set()
        # Nodes whose `old` pod is held (`is_held`): the pass that starts a wave asks it of every old pod of
        # that wave (50,000 at 100,000 nodes, ~125 ms of condition walks), a set lookup with this.
        self.held: set[str] = set()
        self.all_updated = True

    def names(self) -> set[str]:
        return self.new.keys() | self.old.keys()


@dataclass
class Observation:
    """What the pods and nodes say about one revision's rollout. Readiness and statuses are worked out on
    demand and remembered: a reconcile asks about the nodes of the reached waves, and about every node only
    when it writes the counts (a transition); the questions that read most of the fleet (`any_pending`, the
    counts) ask `status` only of the nodes that are not clean (below)."""

    pods: PodsByNode
    # node -> (namespace/pod, reason): failures seen now (deadlines and failures reported on pod status), by node.
    failures: dict[str, tuple[str, str]]
    # When the next not-yet-available new pod reaches its progress deadline (a wake-up), if any.
    next_deadline: float | None
    all_updated: bool
    nodes: Mapping[str, JSON] = field(default_factory=dict)
    # Nodes whose new pod is Ready but not for minReadySeconds yet (not available, not failing either).
    warming: set[str] = field(default_factory=set)
    # The names of the nodes of `nodes` that are not Ready (`node_ready`), when the caller keeps them (the
    # controller, from the node informer's events): readiness is then a set lookup, not a read of the node's
    # conditions, which the pass that starts a late wave did for every node (~100 ms at 100,000).
    not_ready: AbstractSet[str] | None = None
    _ready: dict[str, bool] = field(default_factory=dict, repr=False)
    _status: dict[str, str] = field(default_factory=dict, repr=False)
    _clean: set[str] | None = field(default=None, repr=False)
    _split: tuple[set[str], set[str]] | None = field(default=None, repr=False)
    _deferred_memo: tuple[Ranking, int, list[str]] | None = field(default=None, repr=False)
    _deferred: set[str] | None = field(default=None, repr=False)
    _upgraded_memo: tuple[Ranking, int] | None = field(default=None, repr=False)

    def ready(self, node: str) -> bool:
        if self.not_ready is not None:
            return node in self.nodes and node not in self.not_ready
        found = self._ready.get(node)
        if found is None:
            known = self.nodes.get(node)
            found = self._ready[node] = known is not None and node_ready(known)
        return found

    def status(self, node: str) -> str:
        found = self._status.get(node)
        if found is None:
            found = self._status[node] = self._work_out(node)
        return found

    def _work_out(self, node: str) -> str:
        if node in self.failures:
            return FAILED
        pods = self.pods
        new = pods.new.get(node)
        old = pods.old.get(node)
        if new is None and old is None:
            # No live pod: a Ready node is waiting for its replacement (deleted, not recreated yet), which the
            # wave must wait for; a node that is gone or NotReady is deferred like any other.
            return PENDING if self.ready(node) else DEFERRED
        if not self.ready(node):
            return DEFERRED
        excess = node in pods.excess
        # `unready` holds exactly the nodes whose `new` pod is not Ready (no walk over its conditions here).
        if (new is not None and old is None and not excess and node not in pods.unready
                and node not in self.warming):
            return UPGRADED
        if old is not None and new is None and not excess and node in pods.held:
            return DEFERRED
        return PENDING

    # The later wave changes read most of the fleet: at 100,000 nodes the pass that starts wave 4 asked
    # `status` of every node (the counts) and of half of them twice more (`wave_finished`, the deferred ones),
    # ~480 ms. Most of those nodes are *clean*: their new pod alone is there, Ready (for minReadySeconds) and not
    # one of several. A clean node is never pending whatever else holds: it is failed, else deferred when its
    # node is not Ready, else upgraded. So the questions below ask `status` only of the other nodes, and answer
    # for the clean ones with set operations and one readiness read each.

    def clean(self) -> set[str]:
        """The clean nodes (see above), worked out once per observation."""
        found = self._clean
        if found is None:
            pods = self.pods
            found = pods.new.keys() - pods.old.keys()
            found -= pods.excess
            found -= pods.unready
            found -= self.warming
            self._clean = found
        return found

    def any_pending(self, nodes: Iterable[str]) -> bool:
        """Whether `status` is PENDING for any of `nodes`, asking it only of those not clean, in order (while a
        wave runs the first of its nodes not done answers at once)."""
        pods = self.pods
        new, old, excess, unready, warming = pods.new, pods.old, pods.excess, pods.unready, self.warming
        status = self.status
        for node in nodes:
            if (node in new and node not in old and node not in excess and node not in unready
                    and node not in warming):
                continue  # clean: never pending
            if status(node) == PENDING:
                return True
        return False

    def _not_ready(self, nodes: set[str]) -> set[str]:
        """Those of `nodes` whose node is not Ready (or gone)."""
        if self.not_ready is not None:
            found = nodes.difference(self.nodes)
            found.update(nodes.intersection(self.not_ready))
            return found
        ready = self.ready
        return {node for node in nodes if not ready(node)}

    def _clean_split(self) -> tuple[set[str], set[str]]:
        """(the clean nodes whose `status` is UPGRADED, those whose `status` is DEFERRED): of the clean ones not
        failed, those on a Ready node and the others. Worked out once per observation."""
        found = self._split
        if found is None:
            # Read only, like `clean()`: a set is copied only when something is taken out of it (at a late wave
            # change each holds half the fleet).
            alive = self.clean()
            if self.failures:
                alive = alive - self.failures.keys()
            deferred = self._not_ready(alive)
            found = self._split = (alive - deferred if deferred else alive, deferred)
        return found

    def upgraded_among(self, ranking: Ranking) -> int:
        """How many nodes of `ranking` have `status` UPGRADED (only clean nodes can). Remembered for the last
        ranking: the pass that starts a wave counts twice (the finished wave's message, the new state). Its
        `members` (a set of every ranked node) are read only when some node is upgraded: not in the first
        pass of a new revision."""
        memo = self._upgraded_memo
        if memo is not None and memo[0] is ranking:
            return memo[1]
        upgraded = self._clean_split()[0]
        if not upgraded:
            found = 0
        else:
            ranked = ranking.members
            found = len(upgraded) if ranked >= upgraded else len(upgraded.intersection(ranked))
        self._upgraded_memo = (ranking, found)
        return found

    def deferred_in_waves(self, ranking: Ranking, k: int) -> list[str]:
        """`deferred_among(ranking.nodes_in_waves(k))`, remembered: the pass that starts wave k + 1 asks it for
        waves 1..k twice (the WaveFinished message, the counts) and then for 1..k + 1, so only the new wave's
        nodes are read again."""
        end = ranking.targets[min(k, len(ranking.targets)) - 1] if k > 0 else 0
        memo = self._deferred_memo
        if memo is not None and memo[0] is ranking and memo[1] <= end:
            found = memo[2] if memo[1] == end else memo[2] + self.deferred_among(ranking.order[memo[1]:end])
        else:
            found = self.deferred_among(ranking.order[:end])
        self._deferred_memo = (ranking, end, found)
        return found

    def deferred_among(self, nodes: Sequence[str]) -> list[str]:
        """Those of `nodes` (in their order) whose `status` is DEFERRED.

        With the controller's NotReady set, by definition and without asking `status`: a node not failed is
        deferred when it is not Ready (NotReady or gone from the cache), or when its old pod alone is there, held
        (`_work_out`). Those are a few sets, so each node costs two lookups: the pass that starts wave 4 at
        100,000 nodes asks this of wave 4's 50,000 nodes, old pods all, which `status` worked out one by one
        (~90 ms). Without that set, `status` is asked of the nodes that are not clean."""
        if self.not_ready is not None:
            found = self._deferred_set()
            cached, failures = self.nodes, self.failures
            return [node for node in nodes if node in found or (node not in cached and node not in failures)]
        clean = self.clean()
        deferred = self._clean_split()[1]
        status = self.status
        return [node for node in nodes if (node in deferred if node in clean else status(node) == DEFERRED)]

    def _deferred_set(self) -> set[str]:
        """The deferred nodes among the cached ones (`deferred_among`): NotReady or held with their old pod alone,
        and not failed. Worked out once per observation."""
        found = self._deferred
        if found is None:
            pods = self.pods
            new, excess = pods.new, pods.excess
            # (`held` holds nodes of `old` only.)
            found = {node for node in pods.held if node not in new and node not in excess}
            found.update(self.not_ready or ())
            found.difference_update(self.failures)
            self._deferred = found
        return found


def node_ready(node: JSON) -> bool:
    """`is_node_ready`, inlined (the first `Ready` condition says True): the controller keeps the nodes for which
    it is False (`Observation.not_ready`) and `Observation.ready` asks it otherwise; both must agree."""
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def is_held(pod: JSON) -> bool:
    """The agent publishes `UpgradeHeld` True while its node is held or outside its maintenance windows."""
    # `held_by`, inlined (the pass that starts a wave asks this of every old pod of that wave).
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == CONDITION_UPGRADE_HELD:
            return bool(cond.get("status") == "True")
    return False


def pods_by_node(ds: JSON, pods: Iterable[JSON], revision: str) -> PodsByNode:
    """One pass, no sorting, plain dict reads."""
    out = PodsByNode()
    new, old, excess = out.new, out.old, out.excess
    generation = template_generation(ds)
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        node = (pod.get("spec") or {}).get("nodeName") or node_of(pod)
        if not node:
            continue
        labels = meta.get("labels") or {}
        if labels.get(LABEL_REVISION_HASH) == revision or (
                generation is not None and labels.get(LABEL_TEMPLATE_GENERATION) == generation):
            if node in new:
                excess.add(node)
            new[node] = pod
        else:
            if node in old:
                excess.add(node)
            old[node] = pod
    out.all_updated = not old
    out.unready = {node for node, pod in new.items() if not ready_now(pod)}
    out.held = {node for node, pod in old.items() if is_held(pod)}
    return out


class NodePods(Tracker[Digest]):
    """`pods_by_node` kept current from the pods that changed (its context: the revision and the template
    generation), plus the nodes that gained a live pod since the ranking last looked (`take_joined`). It reads
    the pods' digests (`OwnerPods.digests`)."""

    __slots__ = ("_dying", "_generation", "_hash", "_joined", "_multi", "_rebuilt", "view")

    def __init__(self) -> None:
        super().__init__()
        self.view = PodsByNode()
        # (node, new?) -> pods, only where a node has more than one pod of that kind (rare: `excess`).
        self._multi: dict[tuple[str, bool], dict[str, JSON]] = {}
        self._joined: set[str] = set()
        self._dying: dict[str, str] = {}  # pod key -> node, pods being deleted (`dying`)
        self._rebuilt = True
        # What a digest's labels are compared with (`pod_index.revision_keys`).
        self._hash, self._generation = revision_keys("", None)

    def update(self, ds: JSON, digests: Mapping[str, Digest], revision: str) -> PodsByNode:
        generation = template_generation(ds)
        self._hash, self._generation = revision_keys(revision, generation)
        self.refresh(digests, (revision, generation))
        self.view.all_updated = not self.view.old
        return self.view

    def take_joined(self) -> set[str] | None:
        """Nodes that gained a live pod (had none) since the last call; None after a start over (every node
        may be new to whoever asks)."""
        joined, self._joined = self._joined, set()
        if self._rebuilt:
            self._rebuilt = False
            return None
        return joined

    def dying(self) -> set[str]:
        """Nodes of the DaemonSet's pods being deleted. Such a node is between two pods (its agent or the
        controller is replacing it), not gone: a ranking made without it would move every later node one place
        forward, into an earlier wave. Kept here from the pods that changed: a restart's first pass read every
        pod once more for it (~45 ms at 100,000)."""
        return set(self._dying.values())

    def _reset(self) -> None:
        self.view = PodsByNode()
        self._multi.clear()
        self._joined.clear()
        self._dying.clear()
        self._rebuilt = True

    def _add(self, key: str, digest: Digest) -> None:
        pod, node, deleting, revision, generation, ready, _, held = digest
        if deleting:
            if node:
                self._dying[key] = node
            return
        if not node:
            return
        is_new = revision == self._hash or generation == self._generation
        view = self.view
        # After a start over every node counts as joined anyway (`take_joined` answers None).
        if not self._rebuilt and node not in view.new and node not in view.old:
            self._joined.add(node)
        side = view.new if is_new else view.old
        present = side.get(node)
        side[node] = pod
        if present is not None:
            group = self._multi.get((node, is_new))
            if group is None:
                group = self._multi[(node, is_new)] = {key_of(present): present}
            group[key] = pod
            view.excess.add(node)
        # This pod is the node's `new` (`old`) one now: its readiness (hold) is the node's, read already.
        if is_new:
            if ready:
                view.unready.discard(node)
            else:
                view.unready.add(node)
        elif held:
            view.held.add(node)
        else:
            view.held.discard(node)

    def _add_all(self, items: Iterable[tuple[str, Digest]]) -> None:
        # The start over (the view just reset): every pod in one loop with the view's maps in locals, as OTA's
        # does; at 100,000 pods a call of `_add` per pod was a third of it. A node's second pod of a kind (rare)
        # goes through `_add`, which keeps the extra ones.
        view, dying, add = self.view, self._dying, self._add
        new, old, unready, held_nodes = view.new, view.old, view.unready, view.held
        hash_, generation = self._hash, self._generation
        for key, digest in items:
            pod, node, deleting, revision, its_generation, ready, _, held = digest
            if deleting:
                if node:
                    dying[key] = node
            elif not node:
                continue
            elif revision == hash_ or its_generation == generation:
                if node in new:
                    add(key, digest)
                else:
                    new[node] = pod
                    if not ready:
                        unready.add(node)
            elif node in old:
                add(key, digest)
            else:
                old[node] = pod
                if held:
                    held_nodes.add(node)

    def _replaced(self, key: str, before: Digest, after: Digest) -> bool:
        # A pod whose node, deletion, revision labels, Ready and hold are as they were (a PodNeedUpgrade written:
        # 10,000 of them come back after each batch of a wave change) only takes its old version's place.
        _, node, deleting, revision, generation, ready, _, held = before
        # (Compared field by field: slices would make two tuples per pod.)
        if (node != after[1] or deleting != after[2] or revision != after[3] or generation != after[4]
                or ready != after[5] or held != after[7]):
            return False
        if deleting or not node:
            return True
        is_new = revision == self._hash or generation == self._generation
        side = self.view.new if is_new else self.view.old
        group = self._multi.get((node, is_new))
        if group is not None:
            group[key] = after[0]
        if side.get(node) is before[0]:
            side[node] = after[0]
        return True

    def _remove(self, key: str, before: Digest) -> None:
        _, node, deleting, revision, generation, _, _, _ = before
        if deleting:
            self._dying.pop(key, None)
            return
        if not node:
            return
        # Under the context of the last refresh (a new one starts over instead): the side `_add` put it on.
        is_new = revision == self._hash or generation == self._generation
        view = self.view
        side = view.new if is_new else view.old
        group = self._multi.get((node, is_new))
        if group is None:
            side.pop(node, None)
        else:
            group.pop(key, None)
            side[node] = next(reversed(group.values()))
            if len(group) == 1:
                del self._multi[(node, is_new)]
                if (node, not is_new) not in self._multi:
                    view.excess.discard(node)
        if is_new:
            self._check_ready(node)
        else:
            old = view.old.get(node)
            if old is not None and is_held(old):
                view.held.add(node)
            else:
                view.held.discard(node)

    def _check_ready(self, node: str) -> None:
        pod = self.view.new.get(node)
        if pod is not None and not ready_now(pod):
            self.view.unready.add(node)
        else:
            self.view.unready.discard(node)


def not_ready_reason(pod: JSON) -> str:
    """Why a pod is not available, in the kubelet's words (a container's waiting reason when kept)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = ((status or {}).get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])
    cond = get_condition(pod, "Ready")
    if cond is not None and cond.get("reason"):
        return str(cond["reason"])
    return "not Ready"


def has_crashed(pod: JSON) -> bool:
    """A container of the pod has exited since it started (restarted, or waiting in `CrashLoopBackOff`)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        status = status or {}
        waiting = (status.get("state") or {}).get("waiting") or {}
        if int(status.get("restartCount") or 0) > 0 or waiting.get("reason") == "CrashLoopBackOff":
            return True
    return False


def failure_deadline(pod: JSON, node: JSON | None, progress_deadline: float) -> float:
    """When a new pod that is not available counts as failed: `progress_deadline` after it was created, after
    its node last turned Ready (a returning node's pods are re-reported late), or after it last turned not
    Ready (a pod that worked and then lost Ready without crashing gets the same grace as a new one).

    A pod whose container has crashed gets no such fresh deadline: a crash-looping version is Ready for a moment
    before each crash, and each turn to not Ready slid the deadline, so the failure was only counted once the
    kubelet's back-off outgrew it (~240 s with a 90 s deadline, not 90 s)."""
    deadline = created_at(pod) + progress_deadline
    if node is not None:
        returned = node_ready_changed_at(node)
        if returned is not None:
            deadline = max(deadline, returned + progress_deadline)
    cond = get_condition(pod, "Ready")
    if cond is not None and cond.get("status") != "True" and not has_crashed(pod):
        since = parse_time(cond.get("lastTransitionTime"))
        if since is not None:
            deadline = max(deadline, since + progress_deadline)
    return deadline


def reported(pod: JSON) -> tuple[str, str] | None:
    """(namespace/pod, reason) of the failure the pod's own node reported on its status (`contract.reported_failure`:
    a condition naming the revision the pod runs), or None. The pod's status is the only channel the API server
    authenticates to its node; an `UpgradeFailed` Event, which any credential may create naming any node, never
    counts."""
    found = reported_failure(pod)
    if found is None:
        return None
    return f"{namespace_of(pod)}/{name_of(pod)}", f"agent: {found.reason}: {found.message}"


def observe(ds: JSON, pods: Iterable[JSON], nodes: Mapping[str, JSON], revision: str, progress_deadline: float,
            now: float, min_ready_seconds: int = 0,
            by_node: PodsByNode | None = None, not_ready: AbstractSet[str] | None = None) -> Observation:
    """`min_ready_seconds` (the DaemonSet's `minReadySeconds`): a new pod counts as upgraded only once it has
    been Ready that long; the observation's `next_deadline` then includes that moment (a wake-up).
    `by_node`: the pods already sorted by node (`NodePods`), instead of a pass over `pods`. `not_ready`: the
    nodes of `nodes` that are not Ready (`node_ready`), kept current by the caller."""
    if by_node is None:
        by_node = pods_by_node(ds, pods, revision)
    failures: dict[str, tuple[str, str]] = {}
    next_deadline: float | None = None
    obs = Observation(by_node, failures, None, by_node.all_updated, nodes, not_ready=not_ready)
    excess = by_node.excess
    # Without minReadySeconds a Ready new pod needs nothing here: only the unready ones are looked at.
    looked_at = by_node.new.items() if min_ready_seconds > 0 else (
        (name, by_node.new[name]) for name in by_node.unready)
    for name, pod in looked_at:
        if ready_now(pod):
            if min_ready_seconds > 0:
                at = available_at(pod, min_ready_seconds)
                if at is not None and at > now:
                    obs.warming.add(name)
                    next_deadline = at if next_deadline is None else min(next_deadline, at)
            continue
        if name in excess or not obs.ready(name):
            continue  # a NotReady node is deferred, never failed, whatever its pod shows
        failure = reported(pod)
        if failure is not None:
            failures[name] = failure
            continue
        deadline = failure_deadline(pod, nodes.get(name), progress_deadline)
        if now >= deadline:
            failures[name] = (f"{namespace_of(pod)}/{name_of(pod)}",
                              f"not available within {progress_deadline:g}s: {not_ready_reason(pod)}")
        elif next_deadline is None or deadline < next_deadline:
            next_deadline = deadline
    obs.next_deadline = next_deadline
    return obs


_NO_LABELS: dict[str, str] = {}


def node_labels(names: Iterable[str], nodes: Mapping[str, JSON], plan: Plan | None = None) -> dict[str, dict[str, str]]:
    """name -> labels of the node (none when it is not cached). A `plan` whose order reads no label gets every
    name with no labels (one shared, never written), not 100,000 reads, in the first ranking after a restart."""
    if plan is not None and not plan.uses_labels:
        return dict.fromkeys(names, _NO_LABELS)
    out: dict[str, dict[str, str]] = {}
    for name in names:
        node = nodes.get(name)
        out[name] = labels_of(node) if node is not None else {}
    return out


def previous_revision(pods: Iterable[JSON], revision: str) -> str | None:
    """The revision every pod not on `revision` runs: the one a rollout that has no state yet replaces, and its
    rollback target. None when the older pods run several revisions: a DaemonSet in the middle of another roll
    has no revision known to have completed, and a rollback must never restore one that did not."""
    found = {labels_of(p).get(LABEL_REVISION_HASH) for p in pods if not is_terminating(p)}
    found.discard(revision)
    if len(found) != 1:
        return None
    only = found.pop()
    return str(only) if only else None


