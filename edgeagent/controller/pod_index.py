"""Per-DaemonSet facts about its pods, kept current from the pod informer's events, so that a reconcile in
which nothing changed reads the pods that changed, not every pod of the DaemonSet.

At 100,000 nodes a pass that reads every pod costs about a second of CPU, and a DaemonSet is reconciled on
every event of any of its pods; during a rollout that is most of the controller's time. Each consumer (the
OTA conditions, the rollout plan's view by node, the roll's views) keeps a `Tracker`: the facts it derives from
each pod, the sums it needs, and the pod keys marked dirty by the informer handler since its last look. A
tracker's facts also depend on a context (the current revision): when that differs from the one they were
derived under, the tracker starts over from every pod (once per revision, not per pass). The OTA tracker also
depends on the plan's gate; a wave change marks only the pods of the nodes it moves (`ota.OtaFacts`).

What the trackers need of a pod does not depend on any context, so the informer handler reads it once per event
(`Digest`, in `OwnerPods.put`) and a tracker that starts over works from those, not from the pods: the first pass
after a restart or a new revision read every pod's JSON once per tracker (three times, ~1 µs each, at 100,000
pods ~400 ms of the 640 ms that pass cost), and the pods whose image pre-pull is unfinished need no tracker at
all (`OwnerPods.image_pending`).

The informer calls its handlers for every change, including the differences a relist finds, so a pod whose
change matters is always marked; the trackers never read a pod the handler did not hand over.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from edgeagent.contract import (
    CONDITION_POD_IMAGE_READY,
    CONDITION_POD_NEED_UPGRADE,
    CONDITION_UPGRADE_HELD,
    LABEL_REVISION_HASH,
    LABEL_TEMPLATE_GENERATION,
)
from edgeagent.controller.inplace_exec import declares_gate
from edgeagent.controller.pods import node_of
from edgeagent.kube.objects import includes_write, meta

JSON = dict[str, Any]
V = TypeVar("V")
T = TypeVar("T", bound="Tracker[Any]")

# What the trackers read of one pod, as a plain tuple (no object with attributes: 100,000 of them are built while
# the informer lists a fleet, and a tracker that starts over unpacks every one):
#   (the pod, its node (`node_of`; "" when none), being deleted, its `controller-revision-hash` label, its
#    `pod-template-generation` label, Ready, its PodNeedUpgrade as (status, message, reason or "") or None,
#    its UpgradeHeld is True: its node's agent said no upgrade now)
Digest = tuple[JSON, str, bool, Any, Any, bool, "tuple[Any, Any, Any] | None", bool]


# Equal to no label value: what a revision test compares with when the DaemonSet has no hash or generation.
_NO_LABEL = object()


def revision_keys(revision: str, generation: str | None) -> tuple[object, object]:
    """`revisions.updated_test` as data for the trackers' loops over digests: a pod is on the current revision when
    its hash label equals the first value or its generation label the second; a missing hash or generation
    matches no label."""
    return (revision if revision else _NO_LABEL, _NO_LABEL if generation is None else generation)


def digest_of(pod: JSON) -> tuple[Digest, bool]:
    """The pod's `Digest`, and whether its `PodImageReady` is there and not True (a pre-pull requested, running
    or failed), in one walk over its conditions. Ready and held are the first such condition's status, as
    `ready_now` and `contract.held_by` read them. The node's name is interned (so is the node order's,
    `reconciler._on_node`): at 100,000 nodes a pass that starts over looks every pod's node up in maps keyed by the
    names of the rankings and views, and one string per name makes each lookup an identity check, not a compare
    of two copies read from memory (~20 % of such a pass)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    ready: bool | None = None
    held: bool | None = None
    need = None
    image_pending = False
    for cond in (pod.get("status") or {}).get("conditions") or ():
        kind = cond.get("type")
        if kind == "Ready":
            if ready is None:
                ready = cond.get("status") == "True"
        elif kind == CONDITION_POD_NEED_UPGRADE:
            need = (cond.get("status"), cond.get("message"), cond.get("reason") or "")
        elif kind == CONDITION_POD_IMAGE_READY:
            image_pending = cond.get("status") != "True"
        elif kind == CONDITION_UPGRADE_HELD and held is None:
            held = cond.get("status") == "True"
    return ((pod, sys.intern(node_of(pod)), bool(meta.get("deletionTimestamp")), labels.get(LABEL_REVISION_HASH),
             labels.get(LABEL_TEMPLATE_GENERATION), bool(ready), need, bool(held)), image_pending)


class Tracker(Generic[V]):
    """Facts derived from one DaemonSet's pods (`V`: each pod's JSON, or its `Digest`) under a context; `refresh`
    brings them up to date.

    A marked pod comes with the digest it had when the tracker last derived it (`before`), so a tracker takes back
    what that pod added from the digest itself, not from a per-pod record of its own: at 100,000 pods, filling
    such records (key -> facts, key -> node) was a third of a start over."""

    __slots__ = ("_context", "_dirty", "_started", "derived", "starts")

    def __init__(self) -> None:
        self._context: Hashable = None
        self._dirty: dict[str, Digest | None] = {}  # pod key -> its digest when last derived (None: not there)
        self._started = False
        # Pods derived (`_add` asked, or a wave change judged them again: `OtaFacts._move`) and start-overs since
        # this tracker was made: how tests tell a pass that read the changed pods from one that started over.
        self.derived = self.starts = 0

    def mark(self, key: str, before: Digest | None) -> None:
        """The pod with this key was added, changed or removed (called by the informer handler); `before`: its
        digest until now (None: it was not there). A pod marked twice between two refreshes keeps the first."""
        if self._started and key not in self._dirty:
            self._dirty[key] = before

    def refresh(self, pods: Mapping[str, V], context: Hashable = None) -> bool:
        """Re-derive the facts of the pods marked since the last call (all of them when `context` differs from
        the last one, or on the first call); True when it started over."""
        if not self._started or context != self._context:
            self._reset()
            self._context = context
            self._started = True
            self._dirty.clear()
            self.derived += len(pods)
            self.starts += 1
            self._add_all(pods.items())
            return True
        if self._dirty:
            dirty, self._dirty = self._dirty, {}
            self.derived += len(dirty)
            if self._adds_in_one_call:
                self._add_all(self._taken_back(dirty, pods))
                return False
            for key, before in dirty.items():
                found = pods.get(key)
                if before is not None:
                    if found is not None and self._replaced(key, before, found):
                        continue
                    self._remove(key, before)
                if found is not None:
                    self._add(key, found)
        return False

    def _taken_back(self, dirty: dict[str, Digest | None], pods: Mapping[str, V]) -> Iterator[tuple[str, V]]:
        """Each changed pod taken back, then handed over to be added (a generator, so no list of 10,000 pairs is
        held: at 100,000 pods every object kept alive brings a full collection of the whole cache closer)."""
        for key, before in dirty.items():
            if before is not None:
                self._remove(key, before)
            found = pods.get(key)
            if found is not None:
                yield key, found

    # A tracker whose facts of a pod depend on that pod alone (no other pod's) can take every changed pod back
    # first and add them again in one `_add_all`: after a wave change at 100,000 nodes the next passes see 10,000
    # written conditions come back each, and a call of `_add_all` per pod set its loop up 10,000 times.
    _adds_in_one_call = False

    def _replaced(self, key: str, before: Digest, after: V) -> bool:
        """Take the pod's new version in place of `before` when nothing this tracker derives from it changed (True),
        instead of taking it back and deriving it again; False: derive it again."""
        return False

    def start_over(self) -> None:
        """The next `refresh` derives every pod again, whatever its context."""
        self._started = False

    def _reset(self) -> None:
        raise NotImplementedError

    def _add(self, key: str, item: V) -> None:
        raise NotImplementedError

    def _add_all(self, items: Iterable[tuple[str, V]]) -> None:
        """`_add` of each; a tracker whose start over is hot does it in one loop."""
        for key, item in items:
            self._add(key, item)

    def _remove(self, key: str, before: Digest) -> None:
        """Take back what `_add` derived from the pod with this key when its digest was `before`."""
        raise NotImplementedError


# How long a node whose last pod left the cache counts as lacking one (`OwnerPods.vacated`). The DaemonSet
# controller recreates a pod within seconds; this only bounds the memory of a node it will never recreate one on
# (its labels or the DaemonSet's placement changed), where `desiredNumberScheduled` is the judge again.
VACATED_TTL = 60.0


class OwnerPods:
    """One DaemonSet's pods by key (the informer's own objects) and the trackers fed by their changes.

    It also remembers the nodes whose last pod of the DaemonSet left the cache (`vacated`) until a pod shows up on
    them again. Between the old pod's removal and the replacement's creation, a node runs no pod and is invisible
    to a roll that groups pods by node. A deletion of this process's own is in its expectations; one made by a
    predecessor, an agent or an operator is not, and `desiredNumberScheduled` (the DaemonSet controller's count)
    misses it while it lags behind the node cache: in the seed-29 soak a node back from a partition was counted
    Ready before that count included it again, which hid another node whose pod (deleted by the previous leader)
    had just gone, and one available pod was deleted beyond max-unavailable. The removal and the replacement come
    through the same watch as the pods the roll counts, so this memory never disagrees with them."""

    __slots__ = ("_clock", "_per_node", "_trackers", "digests", "gated", "image_pending", "pods", "unobserved",
                 "vacated")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.pods: dict[str, JSON] = {}
        self.digests: dict[str, Digest] = {}  # pod key -> `digest_of` the pod in `pods`
        # The keys of the pods whose `PodImageReady` is there and not True: the only pods the pre-puller has
        # anything to do for.
        self.image_pending: set[str] = set()
        # The keys of the pods that declare the in-place readiness gate (`inplace_exec.declares_gate`): the only
        # pods whose gate condition a pass may have to open. Every pass of every DaemonSet asks, and reading
        # each pod's spec for it was ~1 us a pod: ~100 ms of a pass in which nothing changed at 100,000 nodes.
        self.gated: set[str] = set()
        # The keys of the pods written by this process (`wrote`), to the resourceVersion the write was answered
        # with, while the cached object does not include the write yet: its own watch event has not arrived (the
        # cache holds the object the write was decided on, or another writer's change that landed just before
        # ours). A pass deciding on that object would repeat the write, so it leaves these pods out. A version that
        # includes the write ends it (`includes_write`).
        self.unobserved: dict[str, str] = {}
        self._trackers: dict[type[Tracker[Any]], Tracker[Any]] = {}
        self._clock = clock
        self._per_node: dict[str, int] = {}
        self.vacated: dict[str, float] = {}  # node -> when its last pod left the cache

    def put(self, key: str, pod: JSON) -> None:
        before = self.digests.get(key)
        if before is not None:
            self._left(before[1])
        self.pods[key] = pod
        written = self.unobserved.get(key)
        if written is not None and includes_write(str(meta(pod).get("resourceVersion") or ""), written):
            del self.unobserved[key]
        digest, image_pending = digest_of(pod)
        self.digests[key] = digest
        if image_pending:
            self.image_pending.add(key)
        else:
            self.image_pending.discard(key)
        if declares_gate(pod):
            self.gated.add(key)
        else:
            self.gated.discard(key)
        node = digest[1]
        if node:
            self._per_node[node] = self._per_node.get(node, 0) + 1
            self.vacated.pop(node, None)
        for tracker in self._trackers.values():
            tracker.mark(key, before)

    def drop(self, key: str, *, updating: bool = False) -> None:
        """`updating`: a newer version of the pod is `put` next; whether it includes a write of ours is for `put`
        to judge, so its `unobserved` mark stays."""
        self.pods.pop(key, None)
        before = self.digests.pop(key, None)
        if before is not None:
            self._left(before[1])
        self.image_pending.discard(key)
        self.gated.discard(key)
        if not updating:
            self.unobserved.pop(key, None)
        for tracker in self._trackers.values():
            tracker.mark(key, before)

    def wrote(self, key: str, pod: JSON, written_rv: str = "") -> None:
        """A write of ours decided on `pod` (the cached object) went through, answered with `written_rv`: the pod
        is `unobserved` until the informer brings a version that includes the write. Nothing is kept when the cache
        has one already (its event came before the write's answer). Kept by key, not read from each pod: a pass
        checks every pod it would write (40,000 at a late wave change at 100,000 nodes) against this, usually
        empty. Without `written_rv`, any later version ends it."""
        cached = self.pods.get(key)
        if cached is None:
            return
        behind = bool(written_rv) and not includes_write(str(meta(cached).get("resourceVersion") or ""), written_rv)
        if cached is pod or behind:
            self.unobserved[key] = written_rv

    def _left(self, node: str) -> None:
        if not node:
            return
        left = self._per_node.get(node, 0) - 1
        if left > 0:
            self._per_node[node] = left
        else:
            self._per_node.pop(node, None)
            self.vacated[node] = self._clock()

    def vacated_nodes(self, ttl: float = VACATED_TTL) -> set[str]:
        """Nodes whose last pod left the cache less than `ttl` ago and that show none since (older ones are
        forgotten)."""
        if not self.vacated:
            return set()
        since = self._clock() - ttl
        for node in [n for n, at in self.vacated.items() if at < since]:
            del self.vacated[node]
        return set(self.vacated)

    def tracker(self, kind: type[T]) -> T:
        found = self._trackers.get(kind)
        if found is None:
            found = self._trackers[kind] = kind()
        assert isinstance(found, kind)
        return found

    def forget_facts(self) -> None:
        """Drop every tracker: the next pass derives each pod's facts again, as after a new revision or a restart
        (what `bench/rollout_scale.py` times as a pass that starts over). The digests stay: the informer handler
        made them when each pod last changed, and a restarted controller's handler makes them while the informer
        lists the pods, before any reconcile."""
        self._trackers.clear()

    def __len__(self) -> int:
        return len(self.pods)


def ready_now(pod: JSON) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False
