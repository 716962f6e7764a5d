"""controller/waves.py: the rollout state machine, decided from raw pods and nodes with an injected clock."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from edgeagent.controller.waves import (
    DEFERRED,
    FAILED,
    PENDING,
    UPGRADED,
    Observation,
    RankCache,
    failure_deadline,
    observe,
)
from edgeagent.kube.timeutil import format_time
from edgeagent.rollout.machine import Decision, Steering, decide, settled_gate
from edgeagent.rollout.plan import Plan, Step, rank, stable_hash
from edgeagent.rollout.state import RolloutState

JSON = dict[str, Any]
T0 = 1_800_000_000.0
NEW, OLD = "new", "old"
NAMES = [f"n{i}" for i in range(10)]
PLAN = Plan(steps=(Step(1, False), Step(50, True), Step(100, True)), bake_seconds=60)
RANKING = rank(PLAN, {n: {} for n in NAMES})  # targets 1, 5, 10


def node(name: str, ready: bool = True) -> JSON:
    return {"metadata": {"name": name}, "status": {"conditions": [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": format_time(T0 - 3600)}]}}


def pod(name: str, revision: str, *, ready: bool = True, held: bool = False, created: float = T0) -> JSON:
    conditions = [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": format_time(created)}]
    if held:
        conditions.append({"type": "UpgradeHeld", "status": "True", "reason": "HeldByOperator"})
    return {"metadata": {"name": f"app-{name}", "namespace": "default", "uid": f"{name}-{revision}",
                         "labels": {"controller-revision-hash": revision}, "creationTimestamp": format_time(created)},
            "spec": {"nodeName": name}, "status": {"conditions": conditions}}


def world(upgraded: set[str], *, not_ready: set[str] = frozenset(), held: set[str] = frozenset(),  # type: ignore[assignment]
          unready_new: set[str] = frozenset(), now: float = T0,  # type: ignore[assignment]
          ) -> Observation:
    pods = [pod(n, NEW if n in upgraded else OLD, held=n in held, ready=n not in unready_new) for n in NAMES]
    nodes = {n: node(n, ready=n not in not_ready) for n in NAMES}
    ds = {"metadata": {"name": "app", "namespace": "default"}}
    return observe(ds, pods, nodes, NEW, 600, now)


def state(wave: int, phase: str, **extra: Any) -> RolloutState:
    return RolloutState(revision=NEW, stable_revision=OLD, waves=3, wave=wave, phase=phase,
                        wave_started_at=T0, **extra)


def run(st_: RolloutState | None, obs: Observation, *, now: float = T0, steering: Steering | None = None,
        max_failed: int = 1, plan: Plan = PLAN) -> Decision:
    return decide(plan=plan, state=st_, revision=NEW, ranking=RANKING, obs=obs, steering=steering or Steering(),
                  max_failed=max_failed, now=now, previous=lambda: OLD)


def wave(k: int) -> set[str]:
    return set(RANKING.nodes_in_waves(k))


def test_a_new_revision_starts_wave_one_and_remembers_the_previous_as_stable() -> None:
    d = run(None, world(set()))
    assert d.state is not None and (d.state.wave, d.state.phase, d.state.stable_revision) == (1, "progressing", OLD)
    assert [e[1] for e in d.events] == ["WaveStarted"]
    assert d.gate.allows(RANKING.order[0]) and not d.gate.allows(RANKING.order[1])


def test_already_everywhere_is_complete_without_events() -> None:
    d = run(None, world(set(NAMES)))
    assert d.state is not None and d.state.phase == "complete" and d.events == []


def test_finished_wave_bakes_then_the_next_starts_at_the_bake_end_never_before() -> None:
    d = run(state(1, "progressing"), world(wave(1)), now=T0 + 0.4)
    assert d.state is not None and d.state.phase == "baking"
    assert d.state.bake_started_at == T0 + 1  # whole seconds, rounded up: never a shorter bake
    assert d.requeue_after is not None and abs(d.requeue_after - 60.6) < 1e-3
    baking = d.state
    assert run(baking, world(wave(1)), now=T0 + 60.9).state is None  # not yet, nothing to write
    d = run(baking, world(wave(1)), now=T0 + 61)
    assert d.state is not None and (d.state.wave, d.state.phase) == (2, "progressing")
    assert [e[1] for e in d.events] == ["WaveStarted"]


def test_a_wave_is_finished_only_when_the_earlier_waves_still_are() -> None:
    """wave_finished reads wave k first (cheap while it runs) but must still read waves 1..k-1."""
    broken = set(wave(1))
    d = run(state(2, "progressing"), world(wave(2), unready_new=broken), now=T0 + 10)
    assert not any(e[1] == "WaveFinished" for e in d.events) and (d.state is None or d.state.phase == "progressing")
    d = run(state(2, "progressing"), world(wave(2)), now=T0 + 10)
    assert [e[1] for e in d.events] == ["WaveFinished"]


def test_a_node_that_breaks_during_the_bake_restarts_it() -> None:
    baking = state(1, "baking", bake_started_at=T0)
    d = run(baking, world(wave(1), unready_new=wave(1)), now=T0 + 10)
    assert d.state is not None and d.state.phase == "progressing" and d.state.bake_started_at is None


def test_not_ready_and_held_nodes_are_deferred_and_do_not_block() -> None:
    first = RANKING.order[0]
    assert world(set(), not_ready={first}).status(first) == DEFERRED
    assert world(set(), held={first}).status(first) == DEFERRED
    assert world(set()).status(first) == PENDING
    assert world({first}).status(first) == UPGRADED
    d = run(state(1, "progressing"), world(set(), held={first}))
    assert d.state is not None and d.state.phase == "baking" and d.state.deferred == 1


def test_failures_stop_the_rollout_and_rollback_when_asked() -> None:
    first = RANKING.order[0]
    obs = world({first}, unready_new={first}, now=T0 + 601)
    assert obs.status(first) == FAILED
    d = run(state(1, "progressing"), obs, now=T0 + 601)
    assert d.state is not None and d.state.phase == "aborted" and not d.rollback and d.aborted
    assert [e[1] for e in d.events] == ["RolloutAborted"] and d.gate.frozen
    d = run(state(1, "progressing"), obs, now=T0 + 601, plan=Plan(steps=PLAN.steps, on_failure="rollback"))
    assert d.state is not None and d.state.phase == "rolledBack" and d.rollback


def test_failures_below_max_failed_are_listed_once_and_do_not_block() -> None:
    # One node of wave 2 (four nodes of its own) fails: below max-failed, and not the whole wave.
    broken = RANKING.nodes_of_wave(2)[0]
    obs = world(wave(2), unready_new={broken}, now=T0 + 601)
    d = run(state(2, "progressing"), obs, now=T0 + 601, max_failed=2)
    assert d.state is not None and d.state.failed == 1 and d.state.phase == "baking"
    again = run(d.state, obs, now=T0 + 602, max_failed=2)
    assert again.state is None or again.state.failed == 1


def test_steering() -> None:
    baking = state(1, "baking", bake_started_at=T0)
    promoted = run(baking, world(wave(1)), now=T0 + 5, steering=Steering(promote=f"{NEW}/1"))
    assert promoted.state is not None and promoted.state.wave == 2
    assert promoted.remove == ["promote"]
    stale = run(baking, world(wave(1)), now=T0 + 5, steering=Steering(promote=f"{NEW}/2"))
    assert stale.state is not None and stale.state.wave == 1 and stale.remove == ["promote"]
    # Promoting a wave that is not finished yet waits for it (and skips its bake then).
    waiting = run(state(1, "progressing"), world(set()), steering=Steering(promote=f"{NEW}/1"))
    assert waiting.state is None and waiting.remove == []
    aborted = run(baking, world(wave(1)), steering=Steering(abort=NEW))
    assert aborted.state is not None and aborted.state.phase == "aborted"
    assert aborted.remove == ["abort"]
    paused = run(baking, world(wave(1)), now=T0 + 120, steering=Steering(paused=True))
    assert paused.state is not None and paused.state.phase == "paused" and paused.state.wave == 1
    resumed = run(paused.state, world(wave(1)), now=T0 + 121)
    assert resumed.state is not None and resumed.state.wave == 2  # the bake (kept) is long over


def test_settled_states_need_no_observation() -> None:
    assert settled_gate(state(3, "complete"), NEW, Steering()) is not None
    assert settled_gate(state(1, "aborted"), NEW, Steering()).frozen  # type: ignore[union-attr]
    assert settled_gate(state(1, "progressing"), NEW, Steering()) is None
    # A rolled-back revision re-applied: decided once (the hold is written), frozen from then on.
    assert settled_gate(state(3, "complete"), NEW, Steering(rolled_back_from=NEW)) is None
    held = run(state(3, "complete"), world(set()), steering=Steering(rolled_back_from=NEW)).state
    assert held is not None
    assert settled_gate(held, NEW, Steering(rolled_back_from=NEW)).frozen  # type: ignore[union-attr]
    assert settled_gate(state(3, "complete"), NEW, Steering(abort=NEW)) is None


def test_rank_cache_keeps_a_ranking_while_nodes_only_leave() -> None:
    cache = RankCache()
    nodes = {n: node(n) for n in NAMES}
    first = cache.get("uid", NEW, PLAN, set(NAMES), nodes)
    assert cache.get("uid", NEW, PLAN, set(NAMES[1:]), nodes) is first  # a pod being replaced
    grown = cache.get("uid", NEW, PLAN, {*NAMES, "n99"}, {**nodes, "n99": node("n99")})
    assert grown is not first and set(grown.order) == {*NAMES, "n99"}
    assert cache.get("uid", "other", PLAN, set(NAMES), nodes).order == first.order


def test_a_new_revision_over_the_same_nodes_keeps_a_ranking_by_name_alone() -> None:
    """rank() of a plan without groups or canary depends on the node names only: a new revision over the same names
    keeps the ranking (what it would make again); other names, or a plan ordering by labels, make a new one."""
    nodes = {n: node(n) for n in NAMES}
    cache = RankCache()
    first = cache.get("uid", NEW, PLAN, set(NAMES), nodes)
    again = cache.get("uid", "r3", PLAN, set(NAMES), nodes)
    assert again is first and (again.order, again.targets) == (rank(PLAN, {n: {} for n in NAMES}).order,
                                                               rank(PLAN, {n: {} for n in NAMES}).targets)
    fewer = cache.get("uid", "r4", PLAN, set(NAMES[1:]), nodes)
    assert fewer is not first and fewer.order == rank(PLAN, {n: {} for n in NAMES[1:]}).order
    grouped = Plan(steps=PLAN.steps, bake_seconds=PLAN.bake_seconds, group_label="site")
    by_group = cache.get("uid", "r5", grouped, set(NAMES), nodes)
    assert cache.get("uid", "r6", grouped, set(NAMES), nodes) is not by_group


def test_a_cached_ranking_keeps_its_own_names() -> None:
    """A ranking by name alone keeps the names it ranked as its members: a copy of a set the caller passed (the
    caller may change it later), and an order lacking a name (a node not cached) is ranked by sorting."""
    nodes = {n: node(n) for n in NAMES}
    names = set(NAMES)
    for by_hash in (None, lambda: sorted(NAMES, key=stable_hash), lambda: sorted(NAMES[1:], key=stable_hash)):
        cache = RankCache(by_hash)
        ranking = cache.get("uid", NEW, PLAN, names, nodes)
        names.add("later")
        assert ranking.members == set(NAMES) and ranking.order == rank(PLAN, {n: {} for n in NAMES}).order
        assert cache.get("uid", NEW, PLAN, set(NAMES), nodes) is ranking
        names.discard("later")


def test_rank_cache_ranks_by_name_from_the_node_order_it_is_given() -> None:
    """After a restart every ranking is made anew: for a plan ordering by name alone it filters the controller's
    node order (every cached node by hash) instead of sorting the names, and answers what rank() does."""
    nodes = {n: node(n) for n in NAMES}
    asked: list[int] = []

    def by_hash() -> list[str]:
        asked.append(1)
        return sorted([*NAMES, "elsewhere"], key=stable_hash)

    ranking = RankCache(by_hash).get("uid", NEW, PLAN, set(NAMES), nodes)
    assert asked and (ranking.order, ranking.targets) == (rank(PLAN, {n: {} for n in NAMES}).order,
                                                          rank(PLAN, {n: {} for n in NAMES}).targets)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10), st.floats(0, 200), st.booleans()), min_size=1, max_size=25))
def test_waves_never_skip_or_go_back(steps: list[tuple[int, float, bool]]) -> None:
    """Whatever the pods do and whenever reconciles run, the wave moves one at a time, only after its
    predecessor was finished for the whole bake, and never back."""
    current: RolloutState | None = None
    now = T0
    for upgraded_count, advance, promote in steps:
        now += advance
        upgraded = set(RANKING.order[:upgraded_count])
        steering = Steering(promote=f"{NEW}/{current.wave}" if promote and current else None)
        d = run(current, world(upgraded, now=now), now=now, steering=steering)
        if d.state is None:
            continue
        if current is not None and d.state.wave != current.wave:
            assert d.state.wave == current.wave + 1
            finished = all(n in upgraded for n in RANKING.nodes_in_waves(current.wave))
            assert finished
            if not promote:
                assert current.bake_started_at is not None and now >= current.bake_started_at + PLAN.bake_seconds
        if current is not None:
            assert d.state.wave >= current.wave
        current = d.state


def test_min_ready_seconds_a_new_pod_counts_once_it_has_been_ready_that_long() -> None:
    first = RANKING.order[0]
    pods = [pod(n, NEW if n == first else OLD) for n in NAMES]
    nodes = {n: node(n) for n in NAMES}
    ds = {"metadata": {"name": "app", "namespace": "default"}}
    early = observe(ds, pods, nodes, NEW, 600, T0 + 10, min_ready_seconds=30)
    assert early.status(first) == PENDING and early.next_deadline == T0 + 30
    d = run(state(1, "progressing"), early, now=T0 + 10)
    assert d.state is None and d.requeue_after is not None and abs(d.requeue_after - 20) < 1e-3
    later = observe(ds, pods, nodes, NEW, 600, T0 + 31, min_ready_seconds=30)
    assert later.status(first) == UPGRADED


def test_a_crashed_pod_gets_no_fresh_deadline_when_it_turns_not_ready() -> None:
    """A pod that turned not Ready 20 s after it came, deadline 30 s: without a crash (its node went away and back)
    it has until 50 s; with a restarted container, or one waiting in CrashLoopBackOff, it keeps 30 s."""
    base = pod("p", NEW, ready=False, created=T0)
    base["status"]["conditions"][0]["lastTransitionTime"] = format_time(T0 + 20)
    assert failure_deadline(base, node("n0"), 30) == T0 + 50
    restarted = {**base, "status": {**base["status"], "containerStatuses": [{"name": "main", "restartCount": 3}]}}
    assert failure_deadline(restarted, node("n0"), 30) == T0 + 30
    waiting = {**base, "status": {**base["status"], "containerStatuses": [
        {"name": "main", "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
    assert failure_deadline(waiting, node("n0"), 30) == T0 + 30


def test_a_wave_change_reads_the_reached_nodes_and_those_with_a_new_pod_not_every_node() -> None:
    """The state's counts: only a node with a pod of the revision can be upgraded and only a reached one counts as
    deferred. At 100,000 nodes the pass that started wave 2 asked every node's status (~550 ms); now it asks those
    of waves 1-2 and of the nodes with a new pod, and counts the same."""
    names = [f"m{i:03d}" for i in range(200)]
    plan = Plan(steps=(Step(1, True), Step(10, True), Step(100, True)), bake_seconds=0)
    ranking = rank(plan, {n: {} for n in names})
    assert ranking.targets == [2, 20, 200]
    late = ranking.order[-1]  # a node of the last wave already on the new revision (its pod was recreated)
    upgraded = set(ranking.nodes_of_wave(1)) | {late}
    not_ready = {ranking.order[5], ranking.order[-2]}  # deferred in wave 2; the other in a wave not reached
    pods = [pod(n, NEW if n in upgraded else OLD) for n in names]
    pods.append(pod("joined", NEW))  # a node the ranking does not know: not one of its nodes, not counted
    nodes = {n: node(n, ready=n not in not_ready) for n in [*names, "joined"]}
    obs = observe({"metadata": {"name": "app", "namespace": "default"}}, pods, nodes, NEW, 600, T0)
    started = RolloutState(revision=NEW, stable_revision=OLD, waves=3, wave=1, phase="progressing",
                           wave_started_at=T0)
    d = decide(plan=plan, state=started, revision=NEW, ranking=ranking, obs=obs, steering=Steering(),
               max_failed=1, now=T0, previous=lambda: OLD)
    assert d.state is not None and (d.state.wave, d.state.phase) == (2, "progressing")
    assert (d.state.nodes, d.state.upgraded, d.state.deferred) == (200, 3, 1)
    asked = obs._status.keys()
    assert asked <= set(ranking.nodes_in_waves(2)) | upgraded | {"joined"}, sorted(asked)


def test_rank_cache_reads_the_node_labels_a_plan_orders_by_and_no_others() -> None:
    """A plan with groups (or a canary) is ranked on the nodes' labels; one without is ranked without reading
    them, in the same order as with them."""
    labels = {f"n{i}": {"site": "a" if i % 3 else "b"} for i in range(12)}
    nodes: dict[str, JSON] = {name: {"metadata": {"name": name, "labels": site}} for name, site in labels.items()}
    for plan in (PLAN, Plan(steps=PLAN.steps, bake_seconds=60, group_label="site")):
        got = RankCache().get("uid", "r", plan, set(nodes), nodes)
        want = rank(plan, labels)
        assert (got.order, got.targets) == (want.order, want.targets)
