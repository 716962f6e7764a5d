"""Rollout plans: a DaemonSet's new revision reaches its nodes in waves, each proving itself before the next.

Pure (no I/O, no clock of its own) and in the contract layer, because three parts of the project must agree
on exactly the same reading of a plan: the controller that moves pods, `edgeagent rollout status` that
explains it, and the fleet pages that draw it. If each parsed the annotations or ranked the nodes itself,
they would disagree about which node is in which wave the first time one of them changed.

What lives here:

- `parse_plan(ds)`: the plan annotations, or the problems that make them unusable. A DaemonSet with any
  problem is rolled as if it had no plan: a typo must never half-apply a plan (waves but no bake, ...).
- `rank_nodes(plan, nodes)`: the order nodes receive a revision (documented in `rank_key`); `rank_in_order` and
  `rank_names` make the same ranking from names already in hash order.
- `wave_targets(plan, n, block_ends)`: cumulative wave sizes; with a group label, waves take whole groups.
- `Ranking`: the two together, with `wave_of(node)` and `nodes_in_waves(k)`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from edgeagent import durations
from edgeagent.contract import (
    ANNOTATION_NODE_SELECTOR,
    ANNOTATION_ON_FAILURE,
    ANNOTATION_ROLLOUT_BAKE,
    ANNOTATION_ROLLOUT_GROUP_LABEL,
    ANNOTATION_ROLLOUT_STEPS,
)
from edgeagent.kube.objects import annotations_of
from edgeagent.kube.selectors import LabelSelector, parse_label_selector

JSON = dict[str, Any]

PLAN_ANNOTATIONS = (ANNOTATION_ROLLOUT_STEPS, ANNOTATION_ROLLOUT_BAKE, ANNOTATION_ROLLOUT_GROUP_LABEL,
                    ANNOTATION_ON_FAILURE)

ON_FAILURE_PAUSE = "pause"
ON_FAILURE_ROLLBACK = "rollback"

# More steps than this is a typo, not a plan (each wave is at least one Event pair and a bake).
MAX_STEPS = 100

_STEP = re.compile(r"^(\d+)(%?)$")
# A label key: optional DNS-subdomain prefix and a name (what the API server accepts as a label key).
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")

STEPS_ACCEPTS = ("comma-separated cumulative targets, each a positive count or a percentage up to 100%, "
                 "increasing, e.g. '1,5%,25%,100%'")
BAKE_ACCEPTS = "a duration like '30s', '10m', '2h' or '1h30m' ('0s' for none)"
GROUP_LABEL_ACCEPTS = "a node label key, e.g. 'topology.kubernetes.io/zone'"
ON_FAILURE_ACCEPTS = f"'{ON_FAILURE_PAUSE}' or '{ON_FAILURE_ROLLBACK}'"


@dataclass(frozen=True)
class Step:
    """One cumulative target: `value` nodes, or `value` percent of the DaemonSet's nodes."""

    value: int
    percent: bool

    def count(self, n_nodes: int) -> int:
        if not self.percent:
            return min(self.value, n_nodes)
        # Rounded up: "1%" of 20 nodes is one node, never an empty canary.
        return min(n_nodes, math.ceil(self.value * n_nodes / 100))

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


@dataclass(frozen=True)
class Amount:
    """A count (`2`) or a percentage (`"5%"`) of some total: `maxFailed` of the nodes, `maxFailedPerWave` of a
    wave."""

    value: int
    percent: bool

    def of(self, total: int) -> int:
        """The count for `total`, a percentage rounded up (5% of 10 nodes is 1 node, not 0: a threshold of 0 would
        stop at once); never less than 1, since a rollout stops *at* this many failures."""
        count = math.ceil(self.value * total / 100) if self.percent else self.value
        return max(1, count)

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    bake_seconds: float = 0.0
    group_label: str | None = None
    on_failure: str = ON_FAILURE_PAUSE
    # `edgeagent.io/node-selector`: its nodes are the canary, ranked first.
    canary: LabelSelector | None = None
    # Failures in the current wave at which the rollout stops (None: only a wave failing entirely stops it).
    max_failed_per_wave: Amount | None = None

    @property
    def rollback(self) -> bool:
        return self.on_failure == ON_FAILURE_ROLLBACK

    @property
    def uses_labels(self) -> bool:
        """Whether the order reads the nodes' labels (a canary selector or a group label)."""
        return self.canary is not None or self.group_label is not None

    def fingerprint(self) -> tuple[object, ...]:
        """What the ranking and the wave sizes depend on (a cache key)."""
        return (self.steps, self.group_label, str(self.canary) if self.canary is not None else None)


@dataclass(frozen=True)
class PlanProblem:
    """One unusable annotation: which, its value, and a message saying what it accepts."""

    annotation: str
    value: str
    message: str


def parse_steps(raw: str) -> tuple[Step, ...]:
    """`1,5%,25%,100%`; raises ValueError saying why. Counts and percentages are each increasing (a count and
    a percentage cannot be compared before the node count is known; `wave_targets` keeps them monotone)."""
    parts = [p.strip() for p in raw.split(",")]
    if not parts or any(not p for p in parts):
        raise ValueError("empty step")
    if len(parts) > MAX_STEPS:
        raise ValueError(f"more than {MAX_STEPS} steps")
    steps: list[Step] = []
    last: dict[bool, int] = {}
    for part in parts:
        match = _STEP.match(part)
        if not match:
            raise ValueError(f"{part!r} is not a count or a percentage")
        value, percent = int(match.group(1)), bool(match.group(2))
        if value == 0:
            raise ValueError(f"{part!r} is zero")
        if percent and value > 100:
            raise ValueError(f"{part!r} is more than 100%")
        previous = last.get(percent)
        if previous is not None and value <= previous:
            raise ValueError(f"{part!r} is not larger than the step before it ({previous}{'%' if percent else ''})")
        last[percent] = value
        steps.append(Step(value, percent))
    return tuple(steps)


def parse_duration(raw: str) -> float:
    """Seconds of a bake: the one duration form of edgeagent (`edgeagent.durations`: `30s`, `1h30m`, `1d`, `0`);
    raises ValueError (a DurationError saying what a duration is)."""
    return float(durations.parse_duration(raw))


format_duration = durations.format_duration


def parse_plan(ds: JSON) -> tuple[Plan | None, list[PlanProblem]]:
    """The DaemonSet's plan, or None: None with no problems when it has none, None with problems when any plan
    annotation is unusable (then the DaemonSet is rolled as if it had no plan, and each problem is reported).

    A plan exists when `edgeagent.io/rollout-steps` is set; the other plan annotations without it are a
    problem too (someone meant a plan and would otherwise get none without a word).
    """
    annotations = annotations_of(ds)
    problems: list[PlanProblem] = []

    def bad(annotation: str, value: str, why: str, accepts: str) -> None:
        problems.append(PlanProblem(annotation, value,
                                    f"annotation {annotation}={value!r} is invalid ({why}): it accepts {accepts}; "
                                    "the DaemonSet is rolled as if it had no rollout plan"))

    raw_steps = annotations.get(ANNOTATION_ROLLOUT_STEPS)
    if raw_steps is None or not str(raw_steps).strip():
        for annotation in PLAN_ANNOTATIONS[1:]:
            value = annotations.get(annotation)
            if value is not None and str(value).strip():
                problems.append(PlanProblem(
                    annotation, str(value),
                    f"annotation {annotation}={str(value)!r} has no effect without {ANNOTATION_ROLLOUT_STEPS} "
                    f"({STEPS_ACCEPTS}); the DaemonSet is rolled as if it had no rollout plan"))
        return None, problems

    steps: tuple[Step, ...] = ()
    try:
        steps = parse_steps(str(raw_steps))
    except ValueError as exc:
        bad(ANNOTATION_ROLLOUT_STEPS, str(raw_steps), str(exc), STEPS_ACCEPTS)

    bake = 0.0
    raw = annotations.get(ANNOTATION_ROLLOUT_BAKE)
    if raw is not None and str(raw).strip():
        try:
            bake = parse_duration(str(raw))
        except ValueError as exc:
            bad(ANNOTATION_ROLLOUT_BAKE, str(raw), str(exc), BAKE_ACCEPTS)

    group_label: str | None = None
    raw = annotations.get(ANNOTATION_ROLLOUT_GROUP_LABEL)
    if raw is not None and str(raw).strip():
        key = str(raw).strip()
        name = key.rsplit("/", 1)[-1]
        if _LABEL_KEY.match(key) and len(name) <= 63 and len(key) <= 253 + 1 + 63:
            group_label = key
        else:
            bad(ANNOTATION_ROLLOUT_GROUP_LABEL, str(raw), "not a label key", GROUP_LABEL_ACCEPTS)

    on_failure = ON_FAILURE_PAUSE
    raw = annotations.get(ANNOTATION_ON_FAILURE)
    if raw is not None and str(raw).strip():
        lowered = str(raw).strip().lower()
        if lowered in (ON_FAILURE_PAUSE, ON_FAILURE_ROLLBACK):
            on_failure = lowered
        else:
            bad(ANNOTATION_ON_FAILURE, str(raw), "unknown value", ON_FAILURE_ACCEPTS)

    canary = canary_of(ds)
    if problems:
        return None, problems
    return Plan(steps=steps, bake_seconds=bake, group_label=group_label, on_failure=on_failure,
                canary=canary), []


def canary_of(ds: JSON) -> LabelSelector | None:
    """The DaemonSet's canary nodes (`edgeagent.io/node-selector`), ranked first; None without one, or when it does
    not parse (reported by the roll settings already: the roll itself stops on it)."""
    raw = annotations_of(ds).get(ANNOTATION_NODE_SELECTOR)
    if raw is None or not str(raw).strip():
        return None
    try:
        return parse_label_selector(str(raw))
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------------ ranking


@functools.lru_cache(maxsize=1 << 18)
def stable_hash(text: str) -> bytes:
    """sha256, the same on every machine and run (Python's hash() is salted per process). Remembered: node
    names and group values repeat in every ranking of a large fleet."""
    return hashlib.sha256(text.encode()).digest()


_CANARY, _OTHERS = b"\x00", b"\x01"
_LABELLED, _UNLABELLED = b"\x00", b"\x01"
# How many leading bytes of a rank key name its group (canary flag, labelled flag, 32-byte group hash).
_GROUP_PREFIX = 34


def rank_key(plan: Plan, name: str, labels: Mapping[str, str]) -> bytes:
    """The documented order, smallest first:

    1. canary nodes (matching `edgeagent.io/node-selector`) before the others;
    2. with a group label (a RolloutPlan's `spec.groupLabel`): nodes with the label before nodes without it,
       groups ordered by sha256 of the label value (so the first site is an arbitrary but fixed one, not the
       alphabetically first); nodes without the label each form a group of their own;
    3. sha256 of the node name (spreads consecutive names, e.g. edge-1..edge-9, over the waves), then the name.

    One bytes value of fixed-width fields, so that sorting 100,000 nodes compares flat bytes, not tuples.
    """
    canary = _CANARY if plan.canary is not None and plan.canary.matches(labels) else _OTHERS
    name_hash = stable_hash(name)
    if plan.group_label is None:
        return canary + _LABELLED + name_hash + name.encode()
    group = labels.get(plan.group_label)
    if group is None:
        return canary + _UNLABELLED + name_hash + name_hash + name.encode()
    return canary + _LABELLED + stable_hash(group) + name_hash + name.encode()


def rank_nodes(plan: Plan, nodes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Node names (the keys of `nodes`, each mapped to its labels) in the order they receive the revision."""
    return rank(plan, nodes).order


def wave_targets(plan: Plan, n_nodes: int, block_ends: Sequence[int] | None = None) -> list[int]:
    """Cumulative node counts per wave: strictly increasing, the last is `n_nodes` (the last step is always
    taken as 100%). Steps that add no node are dropped, so a plan has fewer waves than steps on a small
    DaemonSet. `block_ends` (sorted cumulative ends of the groups in rank order) extends each target to the
    end of the group it falls in, so waves take whole groups."""
    targets: list[int] = []
    ends = list(block_ends) if block_ends is not None else None
    cursor = 0
    for index, step in enumerate(plan.steps):
        target = n_nodes if index == len(plan.steps) - 1 else step.count(n_nodes)
        if ends is not None:
            while cursor < len(ends) and ends[cursor] < target:
                cursor += 1
            if cursor < len(ends):
                target = ends[cursor]
        if not targets or target > targets[-1]:
            targets.append(target)
    if not targets or targets[-1] != n_nodes:
        targets.append(n_nodes)
    return targets


@dataclass
class Ranking:
    """The order and the waves of one revision over one set of nodes; built once and reused (see `rank`).

    Its maps by node are made when first asked for, not with it: the first pass after a restart or a new revision
    ranks every node, and the wave map (a dict of 100,000 entries at 100,000 nodes, ~40 ms of that pass) is not
    needed there: the OTA conditions ask only whether a node is beyond the reached waves (`cut`, the smaller of
    two sets), the counts only whether it is ranked (`members`)."""

    order: list[str]
    targets: list[int]
    _wave: dict[str, int] | None = field(default=None, repr=False, compare=False)
    # Every ranked node, when whoever ranked them had that set already (`rank_names`): not made again.
    _members: AbstractSet[str] | None = field(default=None, repr=False, compare=False)
    _beyond: dict[int, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)
    _within: dict[int, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)

    def _waves(self) -> dict[str, int]:
        found = self._wave
        if found is None:
            found = self._wave = {}
            start = 0
            for wave, end in enumerate(self.targets, start=1):
                found.update(zip(self.order[start:end], itertools.repeat(wave)))  # no Python loop per node
                start = end
        return found

    @property
    def waves(self) -> int:
        return len(self.targets)

    @property
    def waves_by_node(self) -> Mapping[str, int]:
        """node -> its 1-based wave (read-only; for callers asking about every node of a large fleet)."""
        return self._waves()

    @property
    def members(self) -> AbstractSet[str]:
        """Every ranked node (the keys of `waves_by_node`, without making that map)."""
        found = self._members
        if found is None:
            found = self._members = frozenset(self.order)
        return found

    def beyond(self, k: int) -> AbstractSet[str]:
        """The nodes of the waves after wave k (all of them for k <= 0, none once k reaches the last wave): those
        whose `wave_of` is above k. Remembered per k: a wave's passes ask it for every outdated pod's node."""
        k = max(0, min(k, len(self.targets)))
        found = self._beyond.get(k)
        if found is None:
            found = self._beyond[k] = frozenset(self.order[self.targets[k - 1] if k > 0 else 0:])
        return found

    def cut(self, k: int) -> tuple[AbstractSet[str], bool]:
        """The smaller side of the cut after wave k, and which side it is: `(beyond(k), True)`, or the nodes of
        waves 1..k and False. A node beyond wave k is in the first or, with False, a ranked node (`members`) not
        in it. Remembered per k. In wave 1 of 100,000 nodes, a set of the 1,000 reached nodes instead of the
        99,000 beyond them (~10 ms of the first pass after a restart)."""
        k = max(0, min(k, len(self.targets)))
        end = self.targets[k - 1] if k > 0 else 0
        if len(self.order) - end <= end:
            return self.beyond(k), True
        found = self._within.get(k)
        if found is None:
            found = self._within[k] = frozenset(self.order[:end])
        return found, False

    def wave_of(self, node: str) -> int | None:
        """1-based wave of the node, None for a node the ranking does not know."""
        return self._waves().get(node)

    def nodes_in_waves(self, k: int) -> list[str]:
        """Nodes of waves 1..k (k clamped to the plan)."""
        if k <= 0:
            return []
        return self.order[: self.targets[min(k, len(self.targets)) - 1]]

    def nodes_of_wave(self, k: int) -> list[str]:
        if k <= 0 or k > len(self.targets):
            return []
        start = self.targets[k - 2] if k >= 2 else 0
        return self.order[start: self.targets[k - 1]]

    def reached(self, node: str, k: int) -> bool:
        wave = self._waves().get(node)
        return wave is not None and wave <= k


def rank(plan: Plan, nodes: Mapping[str, Mapping[str, str]]) -> Ranking:
    """Order the nodes and cut them into waves (whole groups when the plan has a group label)."""
    if not plan.uses_labels:
        # Without a canary or groups every `rank_key` starts alike and the names' hashes decide (two names never
        # share a sha256), so the names are sorted on their remembered hashes: no key built, no Python call per
        # name in the first ranking after a restart (100,000 nodes: ~85 -> ~40 ms).
        return Ranking(sorted(nodes, key=stable_hash), wave_targets(plan, len(nodes)))
    keys = {name: rank_key(plan, name, labels) for name, labels in nodes.items()}
    order = sorted(keys, key=keys.__getitem__)
    block_ends: list[int] | None = None
    if plan.group_label is not None:
        block_ends = []
        previous = b""
        for index, name in enumerate(order):
            group = keys[name][:_GROUP_PREFIX]
            if index and group != previous:
                block_ends.append(index)
            previous = group
        if order:
            block_ends.append(len(order))
    return Ranking(order, wave_targets(plan, len(order), block_ends))


def rank_names(plan: Plan, names: AbstractSet[str], by_hash: Sequence[str]) -> Ranking | None:
    """`rank_in_order` for a plan that orders by name alone (None for any other plan, or when `by_hash` lacks one
    of `names`), from the names as a set, which the ranking keeps as its `members` (so it must not change after):
    the first pass after a restart builds that set anyway, and neither a map of names to labels nor a second set
    of 100,000 names is made."""
    if plan.uses_labels:
        return None
    order = list(filter(names.__contains__, by_hash))  # no Python frame per name
    if len(order) != len(names):
        return None
    return Ranking(order, wave_targets(plan, len(order)), _members=names)


def rank_in_order(plan: Plan, nodes: Mapping[str, Mapping[str, str]], by_hash: Sequence[str]) -> Ranking:
    """`rank`, given names already sorted by `stable_hash`, each once, among them every one of `nodes`: for a plan
    that orders by name alone the ranking is then a filter of them, not a sort (the controller keeps every cached
    node in that order). Anything else is ranked by `rank`."""
    if plan.uses_labels:
        return rank(plan, nodes)
    order = list(filter(nodes.__contains__, by_hash))  # no Python frame per name
    if len(order) != len(nodes):  # a name the order does not know (a pod on a node not cached)
        return rank(plan, nodes)
    return Ranking(order, wave_targets(plan, len(order)))
