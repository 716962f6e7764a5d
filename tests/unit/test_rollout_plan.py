"""edgeagent/rollout/plan.py: parsing with problems, the documented node order, waves, the state annotation."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeagent.contract import (
    ANNOTATION_ON_FAILURE,
    ANNOTATION_ROLLOUT_BAKE,
    ANNOTATION_ROLLOUT_GROUP_LABEL,
    ANNOTATION_ROLLOUT_STATE,
    ANNOTATION_ROLLOUT_STEPS,
)
from edgeagent.rollout.plan import (
    Plan,
    Step,
    format_duration,
    parse_duration,
    parse_plan,
    parse_steps,
    rank,
    rank_in_order,
    rank_names,
    rank_nodes,
    stable_hash,
    wave_targets,
)
from edgeagent.rollout.state import PHASE_BAKING, RolloutState

JSON = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"


def ds(**annotations: str) -> JSON:
    return {"metadata": {"name": "app", "namespace": "default", "annotations": annotations}}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------ parsing


def test_no_plan_without_steps() -> None:
    assert parse_plan(ds()) == (None, [])


def test_full_plan() -> None:
    plan, problems = parse_plan(ds(**{
        ANNOTATION_ROLLOUT_STEPS: "1, 5%,25%,100%", ANNOTATION_ROLLOUT_BAKE: "1h30m",
        ANNOTATION_ROLLOUT_GROUP_LABEL: ZONE, ANNOTATION_ON_FAILURE: "Rollback",
        "edgeagent.io/node-selector": "canary=true",
    }))
    assert problems == []
    assert plan is not None
    assert plan.steps == (Step(1, False), Step(5, True), Step(25, True), Step(100, True))
    assert plan.bake_seconds == 5400
    assert plan.group_label == ZONE
    assert plan.rollback
    assert plan.canary is not None and plan.canary.matches({"canary": "true"})


@pytest.mark.parametrize(("annotation", "value", "accepts"), [
    (ANNOTATION_ROLLOUT_STEPS, "50%,10%", "increasing"),
    (ANNOTATION_ROLLOUT_STEPS, "0,10", "positive count"),
    (ANNOTATION_ROLLOUT_STEPS, "1,,5", "e.g. '1,5%,25%,100%'"),
    (ANNOTATION_ROLLOUT_STEPS, "150%", "up to 100%"),
    (ANNOTATION_ROLLOUT_BAKE, "soon", "'30s', '10m', '2h'"),
    (ANNOTATION_ROLLOUT_BAKE, "10 minutes", "'30s', '10m', '2h'"),
    (ANNOTATION_ROLLOUT_GROUP_LABEL, "not a key!", "node label key"),
    (ANNOTATION_ON_FAILURE, "explode", "'pause' or 'rollback'"),
])
def test_invalid_annotation_is_a_problem_naming_it_and_what_it_accepts(annotation: str, value: str,
                                                                      accepts: str) -> None:
    annotations = {ANNOTATION_ROLLOUT_STEPS: "1,100%", annotation: value}
    plan, problems = parse_plan(ds(**annotations))
    assert plan is None  # never half-applied
    assert len(problems) == 1
    problem = problems[0]
    assert problem.annotation == annotation and problem.value == value
    assert annotation in problem.message and repr(value) in problem.message
    assert "accepts" in problem.message and accepts in problem.message
    assert "as if it had no rollout plan" in problem.message


def test_plan_annotations_without_steps_are_a_problem() -> None:
    plan, problems = parse_plan(ds(**{ANNOTATION_ROLLOUT_BAKE: "10m"}))
    assert plan is None
    assert [p.annotation for p in problems] == [ANNOTATION_ROLLOUT_BAKE]
    assert ANNOTATION_ROLLOUT_STEPS in problems[0].message


def test_every_problem_is_reported() -> None:
    _, problems = parse_plan(ds(**{ANNOTATION_ROLLOUT_STEPS: "50%,10%", ANNOTATION_ROLLOUT_BAKE: "soon"}))
    assert {p.annotation for p in problems} == {ANNOTATION_ROLLOUT_STEPS, ANNOTATION_ROLLOUT_BAKE}


@pytest.mark.parametrize(("raw", "seconds"), [("0", 0), ("0s", 0), ("30s", 30), ("10m", 600), ("2h", 7200),
                                              ("1h30m", 5400), (" 3s ", 3)])
def test_durations(raw: str, seconds: float) -> None:
    assert parse_duration(raw) == seconds


@given(st.integers(min_value=0, max_value=10**6))
def test_duration_round_trip(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


def test_mixed_steps_are_accepted() -> None:
    assert parse_steps("10,5%,100%") == (Step(10, False), Step(5, True), Step(100, True))


# ------------------------------------------------------------------------------------------------ ranking


def plan_of(steps: str, **extra: str) -> Plan:
    plan, problems = parse_plan(ds(**{ANNOTATION_ROLLOUT_STEPS: steps, **extra}))
    assert plan is not None, problems
    return plan


def test_documented_order_without_groups_is_sha256_of_the_name() -> None:
    names = [f"edge-{i}" for i in range(20)]
    plan = plan_of("1,25%,100%")
    assert rank_nodes(plan, {n: {} for n in names}) == sorted(names, key=sha)


def test_canary_first_then_groups_by_hash_then_name_hash() -> None:
    nodes = {
        "a1": {ZONE: "a"}, "a2": {ZONE: "a"}, "b1": {ZONE: "b"}, "b2": {ZONE: "b", "canary": "true"},
        "c1": {ZONE: "c"}, "loner": {},
    }
    plan = plan_of("1,100%", **{ANNOTATION_ROLLOUT_GROUP_LABEL: ZONE, "edgeagent.io/node-selector": "canary=true"})
    order = rank_nodes(plan, nodes)
    assert order[0] == "b2"
    groups = sorted(["a", "b", "c"], key=sha)
    expected_rest = [n for g in groups for n in sorted((n for n, lab in nodes.items()
                                                         if lab.get(ZONE) == g and n != "b2"), key=sha)]
    assert order[1:] == [*expected_rest, "loner"]


def test_waves_take_whole_groups() -> None:
    nodes = {f"{z}{i}": {ZONE: z} for z in "abcd" for i in range(5)}
    plan = plan_of("1,50%,100%", **{ANNOTATION_ROLLOUT_GROUP_LABEL: ZONE})
    ranking = rank(plan, nodes)
    assert ranking.targets == [5, 10, 20]
    for k in (1, 2, 3):
        zones = {nodes[n][ZONE] for n in ranking.nodes_of_wave(k)}
        assert all(nodes[n][ZONE] in zones for n in ranking.nodes_of_wave(k))
        # No zone is split over two waves.
        for other in range(1, 4):
            if other != k:
                assert not zones & {nodes[n][ZONE] for n in ranking.nodes_of_wave(other)}


def test_twenty_nodes_one_25pct_100pct() -> None:
    assert wave_targets(plan_of("1,25%,100%"), 20) == [1, 5, 20]


def test_small_daemonset_has_fewer_waves() -> None:
    assert wave_targets(plan_of("1,5%,25%,100%"), 3) == [1, 3]
    assert wave_targets(plan_of("1,100%"), 0) == [0]


def test_last_step_is_always_everything() -> None:
    assert wave_targets(plan_of("1,10"), 50) == [1, 50]


node_names = st.lists(st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=8), unique=True, max_size=60)
step_lists = st.lists(st.tuples(st.integers(min_value=1, max_value=100), st.booleans()), min_size=1, max_size=6)


def plan_from(steps: list[tuple[int, bool]], group: bool) -> Plan:
    return Plan(steps=tuple(Step(v, p) for v, p in steps), group_label=ZONE if group else None)


@given(node_names, node_names, step_lists, st.booleans())
def test_a_ranking_from_names_in_hash_order_is_the_ranking(names: list[str], others: list[str],
                                                          steps: list[tuple[int, bool]], group: bool) -> None:
    """Given every known name in hash order (the controller's node order, a superset of the DaemonSet's nodes),
    `rank_in_order` answers what `rank` does; a name the order lacks, or a plan ordering by labels, is ranked."""
    plan = plan_from(steps, group)
    nodes = {n: ({ZONE: str(len(n) % 3)} if group and len(n) % 4 else {}) for n in names}
    expected = rank(plan, nodes)
    known = sorted({*names, *others}, key=stable_hash)
    for by_hash in (known, known[1:], known[:-1]):
        got = rank_in_order(plan, nodes, by_hash)
        assert (got.order, got.targets) == (expected.order, expected.targets)


@given(node_names, node_names, step_lists, st.booleans())
def test_a_ranking_from_a_set_of_names_is_the_ranking(names: list[str], others: list[str],
                                                     steps: list[tuple[int, bool]], group: bool) -> None:
    """`rank_names` answers what `rank` does for a plan that orders by name alone, keeping the set it was given as
    its members; a plan ordering by labels, or an order lacking a name, is left to `rank` (None)."""
    plan = plan_from(steps, group)
    given_names = set(names)
    known = sorted({*names, *others}, key=stable_hash)
    expected = rank(plan, {name: {} for name in given_names})
    for by_hash in (known, known[1:], known[:-1]):
        got = rank_names(plan, given_names, by_hash)
        if plan.uses_labels or len(set(by_hash) & given_names) != len(given_names):
            assert got is None
            continue
        assert got is not None and (got.order, got.targets) == (expected.order, expected.targets)
        assert got.members is given_names


def reference_wave_map(order: list[str], targets: list[int]) -> dict[str, int]:
    """The wave map as `Ranking` made it with every ranking before it was made on demand."""
    waves: dict[str, int] = {}
    start = 0
    for wave, end in enumerate(targets, start=1):
        waves.update(zip(order[start:end], itertools.repeat(wave)))
        start = end
    return waves


@given(node_names, step_lists, st.booleans(), st.lists(st.text(min_size=1, max_size=4)))
def test_beyond_and_members_answer_what_the_wave_map_does(names: list[str], steps: list[tuple[int, bool]],
                                                          group: bool, strangers: list[str]) -> None:
    """`Ranking.beyond(k)` (what the OTA conditions hold back) and `members` (what the counts read) answer from
    the order what the wave map answers (the reference: a node unknown to the ranking counts as wave 0), for every
    k from below the first wave to past the last (each example asks them all: a boundary one node off shows in
    any example with two waves), in any order of asking; the map, made on demand, is the reference's."""
    plan = plan_from(steps, group)
    nodes = {n: ({ZONE: str(len(n) % 3)} if group and len(n) % 4 else {}) for n in names}
    ranking = rank(plan, nodes)
    reference = reference_wave_map(ranking.order, ranking.targets)
    for k in range(-2, len(ranking.targets) + 2):
        for node in [*names, *strangers]:
            assert (node in ranking.beyond(k)) == (reference.get(node, 0) > max(k, 0)), (node, k)
            assert ranking.reached(node, k) == (node in reference and reference[node] <= k), (node, k)
        assert ranking.beyond(k) == {n for n, wave in reference.items() if wave > max(k, 0)}, k
        side, beyond = ranking.cut(k)
        assert len(side) <= len(ranking.order) - len(side), k  # the smaller side
        for node in [*names, *strangers]:
            waits = node in side if beyond else node not in side and node in ranking.members
            assert waits == (reference.get(node, 0) > max(k, 0)), (node, k)
    for node in [*names, *strangers]:
        assert (node in ranking.members) == (node in reference)
    assert ranking.members == reference.keys()
    assert dict(ranking.waves_by_node) == reference
    assert all(ranking.wave_of(n) == reference.get(n) for n in [*names, *strangers])


@given(node_names, step_lists, st.booleans(), st.randoms(use_true_random=False))
def test_ranking_properties(names: list[str], steps: list[tuple[int, bool]], group: bool, rnd: Any) -> None:
    plan = plan_from(steps, group)
    nodes = {n: ({ZONE: str(len(n) % 3)} if group and len(n) % 4 else {}) for n in names}
    ranking = rank(plan, nodes)
    # Order stable: the same whatever the order the nodes are given in.
    shuffled = list(nodes.items())
    rnd.shuffle(shuffled)
    assert rank(plan, dict(shuffled)).order == ranking.order
    assert sorted(ranking.order) == sorted(names)
    # Waves cumulative, strictly increasing, the last one is everything.
    targets = ranking.targets
    assert targets[-1] == len(names)
    assert all(a < b for a, b in itertools.pairwise(targets))
    assert len(targets) <= len(steps) + 1
    # Every node in exactly one wave; nodes_in_waves is the union of the waves so far.
    seen: list[str] = []
    for k in range(1, ranking.waves + 1):
        wave = ranking.nodes_of_wave(k)
        assert all(ranking.wave_of(n) == k for n in wave)
        seen += wave
        assert ranking.nodes_in_waves(k) == seen
    assert sorted(seen) == sorted(names)
    # Whole groups: a group's nodes share one wave.
    if group:
        waves_of_group: dict[str, set[int | None]] = {}
        for n, labels in nodes.items():
            if ZONE in labels:
                waves_of_group.setdefault(labels[ZONE], set()).add(ranking.wave_of(n))
        assert all(len(w) == 1 for w in waves_of_group.values())


@given(st.integers(min_value=0, max_value=5000), step_lists)
def test_targets_monotone_in_node_count(n: int, steps: list[tuple[int, bool]]) -> None:
    plan = plan_from(steps, False)
    targets = wave_targets(plan, n)
    assert targets[-1] == n
    assert all(a < b for a, b in itertools.pairwise(targets))
    # A target for n nodes is never below the target for fewer nodes (waves grow with the fleet).
    smaller = wave_targets(plan, max(0, n - 1))
    assert smaller[0] <= targets[0]


# ------------------------------------------------------------------------------------------------- state


def test_state_round_trip() -> None:
    state = RolloutState(revision="abc", stable_revision="old", waves=3, wave=2, phase=PHASE_BAKING,
                         wave_started_at=1_800_000_000.0, bake_started_at=1_800_000_060.0, nodes=20, upgraded=5,
                         deferred=1, failed=1, failures=[{"node": "n", "pod": "ns/p", "reason": "CrashLoopBackOff"}])
    text = state.to_json()
    body = json.loads(text)
    assert body["waveStartedAt"] == "2027-01-15T08:00:00Z"
    assert body["counts"] == {"nodes": 20, "upgraded": 5, "waiting": 0, "deferred": 1, "failed": 1}
    again, problem = RolloutState.from_json(text)
    assert problem is None and again == state


def test_state_names_its_generation_and_older_states_without_it_still_read() -> None:
    state = RolloutState(revision="abc", stable_revision=None, waves=2, wave=1, phase=PHASE_BAKING, generation=7)
    assert json.loads(state.to_json())["generation"] == 7
    assert RolloutState.from_json(state.to_json()) == (state, None)
    old = '{"revision": "abc", "stableRevision": null, "waves": 2, "wave": 1, "phase": "baking"}'
    read, problem = RolloutState.from_json(old)
    assert problem is None and read is not None and read.generation is None
    assert "generation" not in json.loads(read.to_json())
    odd, _ = RolloutState.from_json(old[:-1] + ', "generation": "7"}')
    assert odd is not None and odd.generation is None  # not a number: unknown, never a crash


@pytest.mark.parametrize("text", ["{", "[]", '{"revision": "", "phase": "baking", "waves": 1, "wave": 1}',
                                  '{"revision": "a", "phase": "sleeping", "waves": 1, "wave": 1}',
                                  '{"revision": "a", "phase": "baking", "waves": 2, "wave": 3}'])
def test_garbage_state_is_a_problem_not_a_crash(text: str) -> None:
    state, problem = RolloutState.from_json(text)
    assert state is None and problem and ANNOTATION_ROLLOUT_STATE in problem


@given(st.text(max_size=80))
def test_any_text_reads_without_raising(text: str) -> None:
    RolloutState.from_json(text)
