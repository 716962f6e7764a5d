"""OTA: every pod of the DaemonSet tells its node agent whether an update is available.

The condition is written with a strategic-merge patch of that one condition on `pods/status`: the pod's
other conditions belong to the kubelet, and a full status update (what OpenYurt does) races with it and
can undo a readiness change. The patch carries the pod's UID, so it never lands on a same-named successor.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

from edgeagent.contract import (
    CONDITION_POD_NEED_UPGRADE,
    REASON_WAITING_FOR_WAVE,
    REASON_WAVE_REACHED,
    version_message,
)
from edgeagent.controller.pod_index import Digest, Tracker, revision_keys
from edgeagent.controller.pods import node_of
from edgeagent.controller.revisions import is_pod_updated, template_generation, updated_test
from edgeagent.kube.objects import get_condition, name_of, uid_of
from edgeagent.kube.timeutil import format_time
from edgeagent.rollout.machine import Gate

JSON = dict[str, Any]


class ConditionChange(NamedTuple):
    """One pod's PodNeedUpgrade to write. A tuple, and the patch body built only when it is sent (`patch`): a
    wave change at 100,000 nodes lists 40,000-50,000 of these in one planning pass, where a frozen dataclass and
    its patch each cost more than the rest of that list (3 -> 4: ~410 ms, now ~150 ms in a scratch script)."""

    pod: JSON
    status: str
    message: str
    reason: str = ""
    # The transition time a status flip writes: epoch seconds, or already formatted (`condition_patch`).
    now: float | str = 0.0

    @property
    def patch(self) -> JSON:
        """The strategic-merge patch, from the pod as it was when the change was listed."""
        return condition_patch(self.pod, self.status, self.message, self.now, self.reason)


def desired_condition(ds: JSON, pod: JSON, current_hash: str,
                      may_move: Callable[[str], bool] | None = None) -> tuple[str, str, str]:
    """(`True` when outdated / `False` when up to date, reason, `controllerrevision: <hash>`).

    With a rollout plan, an outdated pod on a node whose wave is not reached yet is `False` with reason
    `WaitingForWave`: its agent refuses the upgrade (403) until the wave reaches it; once reached, `True` with
    reason `WaveReached`, which makes the agent check the plan's state is current before it deletes the pod."""
    if is_pod_updated(ds, pod, current_hash):
        return "False", "", version_message(current_hash)
    if may_move is not None and not may_move(node_of(pod)):
        return "False", REASON_WAITING_FOR_WAVE, version_message(current_hash)
    return "True", REASON_WAVE_REACHED if may_move is not None else "", version_message(current_hash)


def condition_patch(pod: JSON, status: str, message: str, now: float | str, reason: str = "") -> JSON:
    """Strategic merge on `status.conditions` merges by `type`: only this condition is touched. `now`: epoch
    seconds, or already formatted (a pass writing 9,000 conditions formats its time once)."""
    current = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
    condition: JSON = {"type": CONDITION_POD_NEED_UPGRADE, "status": status, "message": message}
    if reason:
        condition["reason"] = reason
    elif current is not None and current.get("reason"):
        condition["reason"] = None  # a strategic-merge null removes the field (WaitingForWave no longer applies)
    if current is None or current.get("status") != status:
        # Transition time moves only when the status flips (a new hash alone is not a transition).
        condition["lastTransitionTime"] = now if isinstance(now, str) else format_time(now)
    return {"metadata": {"uid": uid_of(pod)}, "status": {"conditions": [condition]}}


def condition_changes(ds: JSON, pods: Iterable[JSON], current_hash: str, now: float,
                      may_move: Callable[[str], bool] | None = None) -> list[ConditionChange]:
    """Pods whose condition differs in status, reason or message, in name order; pods being deleted are left
    alone."""
    return scan(ds, pods, current_hash, now, may_move)[0]


def progress(ds: JSON, pods: Iterable[JSON], current_hash: str, now: float) -> dict[str, int]:
    """Node counts for `edgeagent_controller_rollout_nodes`, the same states an AdvancedRollingUpdate reports,
    so one dashboard panel shows the progress of both models."""
    return scan(ds, pods, current_hash, now)[1]


def _desired(labels: JSON, pod: JSON, updated: Callable[[JSON], bool],
             may_move: Callable[[str], bool] | None) -> tuple[bool, str, str]:
    """(on the current revision, status, reason) of one pod's PodNeedUpgrade."""
    if updated(labels):
        return True, "False", ""
    if may_move is None:
        return False, "True", ""
    if not may_move((pod.get("spec") or {}).get("nodeName") or node_of(pod)):
        return False, "False", REASON_WAITING_FOR_WAVE
    return False, "True", REASON_WAVE_REACHED


def _read(pod: JSON) -> tuple[bool, JSON | None]:
    """(Ready, the PodNeedUpgrade condition) in one walk over the pod's conditions."""
    ready = False
    current = None
    for cond in (pod.get("status") or {}).get("conditions") or ():
        kind = cond.get("type")
        if kind == "Ready":
            ready = cond.get("status") == "True"
        elif kind == CONDITION_POD_NEED_UPGRADE:
            current = cond
    return ready, current


def _right(current: JSON | None, status: str, message: str, reason: str) -> bool:
    return (current is not None and current.get("status") == status and current.get("message") == message
            and (current.get("reason") or "") == reason)


def scan(ds: JSON, pods: Iterable[JSON], current_hash: str, now: float,
         may_move: Callable[[str], bool] | None = None) -> tuple[list[ConditionChange], dict[str, int]]:
    """`condition_changes` and `progress` in one pass: a reconcile reads each pod once. A pass where nothing
    changed (every pass but a few) sorts nothing and builds nothing; at 100,000 pods it is plain dict reads."""
    changes: list[ConditionChange] = []
    updated = updated_test(ds, current_hash)
    message = version_message(current_hash)
    total = updated_count = unavailable = 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        total += 1
        ready, current = _read(pod)
        unavailable += not ready
        is_updated, status, reason = _desired(meta.get("labels") or {}, pod, updated, may_move)
        updated_count += is_updated
        if _right(current, status, message, reason):
            continue
        changes.append(ConditionChange(pod, status, message, reason, now))
    changes.sort(key=lambda change: name_of(change.pod))
    counts = {"total": total, "updated": updated_count, "outdated": total - updated_count,
              "unavailable": unavailable}
    return changes, counts




class OtaFacts(Tracker[Digest]):
    """`scan` kept current from the pods that changed: per pod whether it counts (not being deleted), runs the
    current revision, is not Ready, and has a PodNeedUpgrade to write; the sums for `progress`; and the keys of
    the pods to write. It reads the pods' digests (`OwnerPods.digests`). Its context is the revision: a new one
    makes it look at every pod again.

    The plan's gate (which nodes may move) is not part of that context. A wave change moves only the nodes of
    the waves between the two (`Gate.moved_since`), and only the outdated pods on them can answer differently,
    so just those are looked at again: at 100,000 nodes a wave change re-derived every pod (~360 ms) though
    at most the next wave's (1-50 % of them) could change. A gate change that cannot list its nodes (a freeze,
    a new ranking, a plan that appears or goes) starts over, as a new revision does."""

    __slots__ = ("_cut", "_cut_beyond", "_frozen", "_gate", "_gated", "_generation", "_hash", "_message", "_ranked",
                 "more", "total", "unavailable", "updated", "wrong")
    _adds_in_one_call = True  # a pod's facts depend on that pod alone (`Tracker.refresh`)

    def __init__(self) -> None:
        super().__init__()
        # Pod key -> the (status, message, reason) to write, for the pods whose PodNeedUpgrade is not that: worked
        # out where the pod is derived (or moved by a wave change), so a listing of 50,000 reads it. One of four
        # shared tuples (`_rights`): nothing is allocated per pod, which at 100,000 pods brings full collections
        # of the whole cache sooner.
        self.wrong: dict[str, tuple[str, str, str]] = {}
        self.total = self.updated = self.unavailable = 0
        self.more = False  # the last `scan` left changes out (its `limit`)
        # A pod is updated when its hash label is `_hash` or its generation label `_generation`
        # (`pod_index.revision_keys`).
        self._hash, self._generation = revision_keys("", None)
        self._gated = False  # under a plan's gate: an outdated pod's answer depends on its node's wave
        self._gate: Gate | None = None
        self._message = ""
        # `Gate.allows` as data: no node may move when `_frozen`; else a node beyond the gate's wave may not (a
        # node the ranking does not know may): one in `_cut` when `_cut_beyond`, else one in `_ranked` and not in
        # `_cut` (`Ranking.cut`, the smaller side: in wave 1 of 100,000 nodes a set of 1,000, not of 99,000), sets,
        # not the ranking's map of every node to its wave, which the first pass after a restart would make only
        # for this.
        self._frozen = False
        self._cut: AbstractSet[str] = frozenset()
        self._cut_beyond = True
        self._ranked: AbstractSet[str] = frozenset()

    def _rights(self) -> tuple[tuple[str, str, str], ...]:
        """The right (status, message, reason) of a pod on the current revision, of an outdated one without a
        plan, of one whose wave is reached, and of one whose wave is not: a condition is right when it equals
        one of these."""
        message = self._message
        return (("False", message, ""), ("True", message, ""), ("True", message, REASON_WAVE_REACHED),
                ("False", message, REASON_WAITING_FOR_WAVE))

    def _reset(self) -> None:
        self.wrong.clear()
        self.total = self.updated = self.unavailable = 0

    def _add(self, key: str, digest: Digest) -> None:
        self._add_all(((key, digest),))

    def _add_all(self, items: Iterable[tuple[str, Digest]]) -> None:
        # The first pass after a restart or a new revision runs this over every pod (100,000 at the scale issue
        # 19 names) in one call: `_desired`, `_right` and `Gate.allows` are inlined and the sums kept in locals
        # (calls and attribute writes were a third of it); a condition is right when it equals one of four.
        wrong, frozen, cut, beyond, ranked = self.wrong, self._frozen, self._cut, self._cut_beyond, self._ranked
        hash_, generation = self._hash, self._generation
        plan = self._gated
        current_right, open_right, reached_right, waiting_right = self._rights()
        total = updated = unavailable = 0
        for key, (_, node, deleting, revision, its_generation, ready, current, _) in items:
            if deleting:
                continue
            total += 1
            if revision == hash_ or its_generation == generation:
                updated += 1
                right = current_right
            elif not plan:
                right = open_right
            elif frozen:
                right = waiting_right
            elif beyond:
                right = waiting_right if node in cut else reached_right
            else:
                right = reached_right if node in cut or node not in ranked else waiting_right
            if not ready:
                unavailable += 1
            if current != right:
                wrong[key] = right
        self.total += total
        self.updated += updated
        self.unavailable += unavailable

    def _remove(self, key: str, before: Digest) -> None:
        _, _, deleting, revision, generation, ready, _, _ = before
        if deleting:
            return
        self.total -= 1
        # Under the context of the last refresh (a new one starts over instead): what `_add` counted.
        self.updated -= revision == self._hash or generation == self._generation
        self.unavailable -= not ready
        self.wrong.pop(key, None)

    def _waits(self, node: str) -> bool:
        """Whether the node lies beyond the gate's wave (the loop of `_add_all` asks the same inline)."""
        if self._cut_beyond:
            return node in self._cut
        return node not in self._cut and node in self._ranked

    def _follow(self, gate: Gate | None, context: tuple[str, str | None], digests: Mapping[str, Digest]) -> None:
        """Mark the pods whose answer the change from the last gate to `gate` can change (or start over)."""
        before, self._gate = self._gate, gate
        if before is gate or not self._started or context != self._context:
            return
        moved = None if before is None or gate is None else gate.moved_since(before)
        if moved is None:
            self.start_over()
        elif moved:
            self._move(moved, digests)

    def _move(self, moved: Sequence[str], digests: Mapping[str, Digest]) -> None:
        """Under the new gate, whether the condition of each outdated pod on the `moved` nodes is right. Only that
        can differ for a pod unchanged since the last refresh (what it counts for does not depend on the gate), so
        it is worked out here, not taken back and derived again: the wave change 2 -> 3 at 100,000 nodes moves
        40,000 pods. The pods changed since are marked, and `refresh` derives them whole.

        The moved nodes all answer alike (`Gate.moved_since`: a slice of one ranking's order, all let through now
        or all held back), so the right condition is worked out once."""
        dirty, wrong = self._dirty, self.wrong
        hash_, generation = self._hash, self._generation
        _, _, reached_right, waiting_right = self._rights()
        right = waiting_right if self._frozen or self._waits(moved[0]) else reached_right
        nodes = set(moved)
        count = 0
        # The pods whose condition depends on the gate: the outdated ones not being deleted, on a moved node.
        # Every pod not marked since the last refresh was derived from the digest it has now (under this context:
        # `_follow` starts over on a new one), so they are found among the digests, not in a map of their own
        # filled by every start over (100,000 entries at 100,000 nodes, for a wave change now and then).
        for key, (_, node, deleting, revision, its_generation, _, current, _) in digests.items():
            if (node in nodes and not deleting and revision != hash_ and its_generation != generation
                    and key not in dirty):
                count += 1
                if current == right:
                    wrong.pop(key, None)
                else:
                    wrong[key] = right
        self.derived += count

    def scan(self, ds: JSON, digests: Mapping[str, Digest], current_hash: str, now: float, gate: Gate | None = None,
             skip: AbstractSet[str] = frozenset(), limit: int | None = None,
             ) -> tuple[list[ConditionChange], dict[str, int]]:
        """What `scan` answers for the pods of `digests` (the DaemonSet's pods' digests by key,
        `OwnerPods.digests`, those this tracker is marked for) with `gate.allows` as `may_move` (no plan: None).
        `skip`: the keys of pods to leave out of the changes this time (a write of ours not seen yet,
        `OwnerPods.unobserved`): while 100,000 conditions are being written, a pass lists only the pods not written
        yet. The patches are built when they are sent (`ConditionChange.patch`). `limit`: list at most that many
        (the first to have become wrong, in name order among themselves); `more` says whether some were left
        out."""
        generation = template_generation(ds)
        self._hash, self._generation = revision_keys(current_hash, generation)
        self._gated = gate is not None
        # (A wave below 0 holds back even the nodes the ranking does not know, as the wave map read here did.)
        self._frozen = gate is not None and (gate.frozen or (gate.ranking is not None and gate.wave < 0))
        self._cut, self._cut_beyond, self._ranked = frozenset(), True, frozenset()
        if gate is not None and not self._frozen and gate.ranking is not None:
            self._cut, self._cut_beyond = gate.ranking.cut(gate.wave)
            self._ranked = gate.ranking.members
        self._message = version_message(current_hash)
        context = (current_hash, generation)
        self._follow(gate, context, digests)
        self.refresh(digests, context)
        stamp = format_time(now)
        wrong = self.wrong
        # In name order, as `scan` lists them: the keys sorted (a key is `namespace/name`, and a DaemonSet's pods
        # share its namespace) instead of the changes by a name read from each pod (a late wave change lists
        # 40,000-50,000 pods at 100,000 nodes).
        if limit is None or len(wrong) <= limit:
            keys = sorted(wrong.keys() - skip if skip else wrong)
            self.more = False
        else:
            # A batch: the first `limit` in the order they became wrong, in name order among themselves, without
            # sorting the 100,000 keys of a new revision in each of its passes.
            keys = list(itertools.islice((key for key in wrong if key not in skip), limit + 1))
            self.more = len(keys) > limit
            del keys[limit:]
            keys.sort()
        changes = [ConditionChange(digests[key][0], *wrong[key], stamp) for key in keys]
        counts = {"total": self.total, "updated": self.updated, "outdated": self.total - self.updated,
                  "unavailable": self.unavailable}
        return changes, counts
