"""The safety rules of a rollout plan (issue 35), each on the pure state machine (edgeagent/rollout/machine.py)
and plan arithmetic (edgeagent/rollout/plan.py): never an empty first wave, the documented order, the per-wave
failure threshold, NotReady deferred and never failed, failures that never go down, a refused write that moves
nothing, the rollback target only ever a completed revision, images named, a rolled-back revision held."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from edgeagent.contract import (
    CONDITION_UPGRADE_FAILED,
    EVENT_ROLLOUT_ABORTED,
    EVENT_ROLLOUT_HELD,
    EVENT_WAVE_STARTED,
    failure_message,
)
from edgeagent.controller.waves import observe, previous_revision
from edgeagent.kube.selectors import parse_label_selector
from edgeagent.kube.timeutil import format_time
from edgeagent.rollout.machine import Decision, Steering, decide, outcome, settled_gate
from edgeagent.rollout.plan import Amount, Plan, Ranking, Step, rank
from edgeagent.rollout.state import (
    ACTIVE_PHASES,
    CONDITION_HELD,
    PHASE_ABORTED,
    PHASE_COMPLETE,
    PHASE_PROGRESSING,
    PHASE_ROLLED_BACK,
    STATUS_PHASES,
    HistoryEntry,
    RolloutState,
    state_from_status,
)
from tests.support.rollout_model import FAILED, PENDING, UPGRADED, ModelObservation

JSON = dict[str, Any]
T0 = 1_800_000_000.0
NAMES = [f"edge-{i}" for i in range(10)]
PLAN = Plan(steps=(Step(1, False), Step(50, True), Step(100, True)))  # waves of 1, 4 and 5 nodes
RANKING = rank(PLAN, {key: {} for key in NAMES})
IMAGES = {"a": ["nginx:1.25"], "b": ["nginx:1.26"], "c": ["nginx:1.27-bad"], "d": ["nginx:1.28"]}


def images(revision: str) -> list[str]:
    return IMAGES.get(revision, [])


def sha(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def run(state: RolloutState | None, obs: ModelObservation, *, revision: str = "c", plan: Plan = PLAN,
        ranking: Ranking = RANKING, steering: Steering | None = None, max_failed: int = 1,
        previous: str | None = "b") -> Decision:
    return decide(plan=plan, state=state, revision=revision, ranking=ranking, obs=obs,
                  steering=steering or Steering(), max_failed=max_failed, now=T0, previous=lambda: previous,
                  images=images)


def pods(upgraded: set[str] = frozenset(), failed: set[str] = frozenset(),  # type: ignore[assignment]
         names: list[str] = NAMES) -> dict[str, str]:
    return {n: FAILED if n in failed else UPGRADED if n in upgraded else PENDING for n in names}


def at_wave(k: int, phase: str = PHASE_PROGRESSING, **extra: Any) -> RolloutState:
    return RolloutState(revision="c", stable_revision="b", waves=3, wave=k, phase=phase,
                        wave_started_at=T0, history=(HistoryEntry("c", ("nginx:1.27-bad",)),
                                                     HistoryEntry("b", ("nginx:1.26",), PHASE_COMPLETE, T0 - 60)),
                        **extra)


# ------------------------------------------------------------------------------------------ the first wave


def test_one_percent_of_twenty_nodes_is_a_canary_of_one() -> None:
    names = [f"n{i}" for i in range(20)]
    plan = Plan(steps=(Step(1, True), Step(100, True)))
    ranking = rank(plan, {key: {} for key in names})
    assert len(ranking.nodes_of_wave(1)) == 1
    d = run(None, ModelObservation(pods(names=names)), plan=plan, ranking=ranking)
    assert d.events[0][1] == EVENT_WAVE_STARTED and "1 node(s)" in d.events[0][2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 100), st.booleans()), min_size=1, max_size=5), st.integers(1, 300))
def test_a_first_wave_is_never_empty(raw: list[tuple[int, bool]], n: int) -> None:
    plan = Plan(steps=tuple(Step(v, p) for v, p in raw))
    ranking = rank(plan, {f"n{i}": {} for i in range(n)})
    assert ranking.nodes_of_wave(1), ranking.targets


# ------------------------------------------------------------------------------------------ the order


def test_without_canary_or_groups_the_order_is_the_sha256_of_the_names() -> None:
    assert RANKING.order == sorted(NAMES, key=sha)


def test_canary_nodes_first_then_the_rest_by_sha256_of_the_name() -> None:
    labels = {n: ({"canary": "yes"} if n in ("edge-7", "edge-2") else {}) for n in NAMES}
    plan = Plan(steps=PLAN.steps, canary=parse_label_selector("canary=yes"))
    order = rank(plan, labels).order
    assert order == [*sorted(["edge-7", "edge-2"], key=sha), *sorted(set(NAMES) - {"edge-7", "edge-2"}, key=sha)]


def test_canary_then_groups_by_sha256_of_the_value_then_names_by_sha256() -> None:
    zone = {n: {"zone": "z" + str(int(n.split("-")[1]) % 3)} for n in NAMES}
    zone["edge-4"]["canary"] = "yes"
    plan = Plan(steps=PLAN.steps, group_label="zone", canary=parse_label_selector("canary=yes"))
    rest = [n for n in NAMES if n != "edge-4"]
    expected = ["edge-4", *sorted(rest, key=lambda n: (sha(zone[n]["zone"]), sha(n)))]
    assert rank(plan, zone).order == expected


# ------------------------------------------------------------------------------------------ failures


def test_a_canary_that_fails_entirely_stops_whatever_max_failed_allows() -> None:
    canary = RANKING.nodes_of_wave(1)
    d = run(at_wave(1), ModelObservation(pods(failed=set(canary))), max_failed=5)
    assert d.state is not None and d.state.phase == PHASE_ABORTED and d.aborted
    assert "every node of wave 1 failed" in d.events[0][2]
    assert not d.gate.allows(RANKING.nodes_of_wave(2)[0])


def test_max_failed_per_wave_stops_the_rollout_in_that_wave() -> None:
    plan = Plan(steps=PLAN.steps, max_failed_per_wave=Amount(50, True))  # 2 of wave 2's 4 nodes
    wave2 = RANKING.nodes_of_wave(2)
    done = set(RANKING.nodes_in_waves(2))
    one = run(at_wave(2), ModelObservation(pods(upgraded=done, failed={wave2[0]})), plan=plan, max_failed=5)
    assert one.state is not None and one.state.phase != PHASE_ABORTED
    two = run(at_wave(2), ModelObservation(pods(upgraded=done, failed=set(wave2[:2]))), plan=plan, max_failed=5)
    assert two.state is not None and two.state.phase == PHASE_ABORTED
    assert "maxFailedPerWave is 50%" in two.events[0][2]


def test_a_not_ready_node_is_deferred_never_failed_whatever_its_pod_shows() -> None:
    canary = RANKING.nodes_of_wave(1)[0]
    obs = ModelObservation(pods(failed={canary}), not_ready={canary})
    d = run(at_wave(1), obs)
    assert d.state is not None and d.state.failed == 0 and d.state.phase != PHASE_ABORTED
    assert d.state.deferred == 1


def test_observe_counts_no_agent_failure_of_a_not_ready_node() -> None:
    """The node's own report on its pod's status counts; the same report of a NotReady node does not (deferred)."""
    def node(name: str, ready: bool) -> JSON:
        return {"metadata": {"name": name}, "status": {"conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": format_time(T0)}]}}

    reported = {"type": CONDITION_UPGRADE_FAILED, "status": "True", "reason": "CrashLoopBackOff",
                "message": failure_message("c", "upgrade request r-1: not Ready within 30s")}
    pod = {"metadata": {"name": "app-x", "namespace": "default", "uid": "u", "creationTimestamp": format_time(T0),
                        "labels": {"controller-revision-hash": "c"}},
           "spec": {"nodeName": "edge-1"}, "status": {"conditions": [{"type": "Ready", "status": "False"}, reported]}}
    ds = {"metadata": {"name": "app", "namespace": "default"}}
    seen = observe(ds, [pod], {"edge-1": node("edge-1", True)}, "c", 600, T0)
    assert seen.failures["edge-1"][0] == "default/app-x" and "CrashLoopBackOff" in seen.failures["edge-1"][1]
    cut = observe(ds, [pod], {"edge-1": node("edge-1", False)}, "c", 600, T0)
    assert cut.failures == {}


def test_observe_counts_no_report_naming_another_revision_than_the_pods() -> None:
    """A condition naming a revision the pod does not run says nothing about this pod, whoever wrote it."""
    other = {"type": CONDITION_UPGRADE_FAILED, "status": "True", "reason": "CrashLoopBackOff",
             "message": failure_message("d", "upgrade request r-1: not Ready within 30s")}
    pod = {"metadata": {"name": "app-x", "namespace": "default", "uid": "u", "creationTimestamp": format_time(T0),
                        "labels": {"controller-revision-hash": "c"}},
           "spec": {"nodeName": "edge-1"}, "status": {"conditions": [{"type": "Ready", "status": "False"}, other]}}
    ready = {"metadata": {"name": "edge-1"}, "status": {"conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": format_time(T0)}]}}
    seen = observe({"metadata": {"name": "app", "namespace": "default"}}, [pod], {"edge-1": ready}, "c", 600, T0)
    assert seen.failures == {}


def test_failures_never_go_down_within_a_revision_past_the_twenty_listed() -> None:
    listed = [{"node": f"gone-{i}", "pod": f"default/p{i}", "reason": "x"} for i in range(20)]
    state = at_wave(2, failed=25, failures=listed)
    d = run(state, ModelObservation(pods(upgraded=set(RANKING.nodes_in_waves(2)))), max_failed=100)
    assert d.state is None or d.state.failed == 25
    more = run(state, ModelObservation(pods(upgraded=set(RANKING.nodes_in_waves(2)),
                                            failed={RANKING.nodes_of_wave(2)[0]})), max_failed=100)
    assert more.state is not None and more.state.failed >= 25 and len(more.state.failures) == 20


# ------------------------------------------------------------------------------------------ writes


def test_a_refused_write_moves_nothing_and_records_nothing() -> None:
    d = run(at_wave(1), ModelObservation(pods(upgraded=set(RANKING.nodes_of_wave(1)))))
    assert d.state is not None and d.state.wave == 2 and d.events  # no bake: wave 2 starts
    second = RANKING.nodes_of_wave(2)[0]
    assert outcome(d, written=True).gate.allows(second) and outcome(d, written=True).events
    refused = outcome(d, written=False)
    assert refused.events == () and refused.state is None
    assert not any(refused.gate.allows(n) for n in NAMES)


def test_a_decision_with_nothing_to_write_acts_at_once() -> None:
    d = run(at_wave(2), ModelObservation(pods(upgraded=set(RANKING.nodes_of_wave(1)))))
    assert not d.writes
    assert outcome(d, written=False).gate.allows(RANKING.nodes_of_wave(2)[0])


# ------------------------------------------------------------------------------------------ rollback


def test_the_stable_revision_is_the_newest_completed_one_never_an_aborted_or_unfinished_one() -> None:
    # b aborted, then c started and was replaced unfinished by d: the rollback target stays a.
    history = (HistoryEntry("c", (), PHASE_PROGRESSING), HistoryEntry("b", (), PHASE_ABORTED, T0),
               HistoryEntry("a", (), PHASE_COMPLETE, T0 - 100))
    state = RolloutState(revision="c", stable_revision="a", waves=3, wave=2, phase=PHASE_PROGRESSING,
                         history=history)
    d = run(state, ModelObservation(pods()), revision="d")
    assert d.state is not None and d.state.stable_revision == "a"
    assert [h.revision for h in d.state.history] == ["d", "c", "b", "a"]
    # Even when an older state names an aborted revision as stable, history decides.
    wrong = RolloutState(revision="c", stable_revision="b", waves=3, wave=2, phase=PHASE_PROGRESSING,
                         history=history)
    assert run(wrong, ModelObservation(pods()), revision="d").state.stable_revision == "a"  # type: ignore[union-attr]


def test_without_a_state_only_a_revision_every_old_pod_runs_is_stable() -> None:
    def pod(revision: str) -> JSON:
        return {"metadata": {"labels": {"controller-revision-hash": revision}}}

    assert previous_revision([pod("a"), pod("a"), pod("c")], "c") == "a"
    assert previous_revision([pod("a"), pod("b"), pod("b"), pod("c")], "c") is None  # a roll in the middle


def test_a_rollback_names_the_images_of_the_bad_and_the_restored_revision() -> None:
    plan = Plan(steps=PLAN.steps, on_failure="rollback")
    canary = RANKING.nodes_of_wave(1)
    d = run(at_wave(1), ModelObservation(pods(failed=set(canary))), plan=plan)
    assert d.rollback and d.state is not None and d.state.phase == PHASE_ROLLED_BACK
    message = next(m for _, reason, m in d.events if reason == EVENT_ROLLOUT_ABORTED)
    assert "nginx:1.27-bad" in message and "nginx:1.26" in message and "revision b" in message
    assert d.state.history[0].images == ("nginx:1.27-bad",) and d.state.history[0].phase == PHASE_ROLLED_BACK


def test_a_new_revision_is_recorded_in_the_history_with_its_images() -> None:
    d = run(None, ModelObservation(pods()))
    assert d.state is not None and d.state.history[0] == HistoryEntry("c", ("nginx:1.27-bad",), PHASE_PROGRESSING)
    assert "nginx:1.27-bad" in d.events[0][2]
    assert d.state.to_status()["history"][0]["images"] == ["nginx:1.27-bad"]


def test_a_rolled_back_revision_re_applied_is_held_until_the_template_changes_or_retry() -> None:
    rolled = RolloutState(revision="c", stable_revision="b", waves=3, wave=1, phase=PHASE_ROLLED_BACK,
                          history=(HistoryEntry("c", ("nginx:1.27-bad",), PHASE_ROLLED_BACK, T0),
                                   HistoryEntry("b", ("nginx:1.26",), PHASE_COMPLETE, T0 - 60)))
    # The template is back on b (the rollback): rolled as the last good one, no waves.
    assert run(rolled, ModelObservation(pods()), revision="b").gate.allows(NAMES[-1])
    # A GitOps tool sets c again: nothing moves, a condition and one Warning Event say so.
    held = run(rolled, ModelObservation(pods()), revision="c")
    assert not any(held.gate.allows(n) for n in NAMES)
    assert [r for _, r, _ in held.events] == [EVENT_ROLLOUT_HELD] and "nginx:1.27-bad" in held.events[0][2]
    assert held.state is not None and held.state.condition(CONDITION_HELD) is not None
    assert held.state.to_status()["conditions"][0]["type"] == CONDITION_HELD
    # Once written, the hold is settled: no second Event.
    assert settled_gate(held.state, "c", Steering()) is not None
    assert run(held.state, ModelObservation(pods()), revision="c").events == []
    # A new template rolls (the hold is gone); so does a retry of c, from wave 1.
    new = run(held.state, ModelObservation(pods()), revision="d")
    assert new.state is not None and new.state.revision == "d" and new.state.condition(CONDITION_HELD) is None
    retried = run(held.state, ModelObservation(pods()), revision="c", steering=Steering(retry="c"))
    assert retried.state is not None and (retried.state.wave, retried.state.phase) == (1, PHASE_PROGRESSING)
    assert retried.gate.allows(RANKING.nodes_of_wave(1)[0])


def test_retry_after_an_abort_clears_the_failures_and_goes_on_from_the_same_wave() -> None:
    listed = [{"node": "edge-1", "pod": "p", "reason": "x"}, {"node": "edge-2", "pod": "p", "reason": "x"}]
    aborted = at_wave(2, PHASE_ABORTED, failed=2, failures=listed)
    d = run(aborted, ModelObservation(pods(upgraded=set(RANKING.nodes_of_wave(1)))), steering=Steering(retry="c"))
    assert d.state is not None and d.state.wave == 2 and d.state.failed == 0 and d.state.phase == PHASE_PROGRESSING
    assert d.gate.allows(RANKING.nodes_of_wave(2)[0]) and not d.gate.allows(RANKING.nodes_of_wave(3)[0])


def test_going_back_to_a_revision_that_completed_once_its_rollback_target_is_the_one_before_it() -> None:
    """c was aborted; GitOps reverts to b, which completed before c: rolling b again, its stable revision must not
    be b itself (a rollback would restore the revision that is failing) but a."""
    history = (HistoryEntry("c", (), PHASE_ABORTED, T0), HistoryEntry("b", (), PHASE_COMPLETE, T0 - 100),
               HistoryEntry("a", (), PHASE_COMPLETE, T0 - 200))
    state = RolloutState(revision="c", stable_revision="b", waves=3, wave=1, phase=PHASE_ABORTED, history=history)
    d = run(state, ModelObservation(pods()), revision="b")
    assert d.state is not None and d.state.stable_revision == "a"
    assert [h.revision for h in d.state.history] == ["b", "c", "a"]


# ------------------------------------------------------------------------------------------ status


_phase = st.sampled_from([PHASE_PROGRESSING, PHASE_ABORTED, PHASE_COMPLETE, PHASE_ROLLED_BACK, "baking", "paused"])


@settings(max_examples=150, deadline=None)
@given(wave=st.integers(1, 5), phase=_phase, failed=st.integers(0, 30), waiting=st.integers(0, 9),
       history=st.lists(st.tuples(st.sampled_from("abcdef"), _phase, st.booleans()), max_size=4),
       held=st.booleans(), generation=st.one_of(st.none(), st.integers(1, 9)))
def test_a_state_survives_the_rolloutplan_status(wave: int, phase: str, failed: int, waiting: int,
                                                 history: list[tuple[str, str, bool]], held: bool,
                                                 generation: int | None) -> None:
    """The machine's state is the RolloutPlan status (§7 shape, CamelCase phases) and reads back the same. An entry
    of the history is Progressing until it ends (as the machine makes them); the current revision's unfinished
    one shows the rollout's phase (Baking, Paused), as `rollout status` does."""
    state = RolloutState(
        revision="c", stable_revision="b", waves=5, wave=wave, phase=phase, wave_started_at=T0,
        bake_started_at=T0 + 60 if phase == "baking" else None, nodes=10, upgraded=1, deferred=1, failed=failed,
        waiting=waiting, generation=generation,
        failures=[{"node": f"edge-{i}", "pod": f"default/p{i}", "reason": "x"} for i in range(min(failed, 20))],
        history=tuple(HistoryEntry(r, (f"app:{r}",), p if done else PHASE_PROGRESSING, T0 if done else None)
                      for r, p, done in history),
        conditions=((("message", "m"), ("reason", "RolledBackRevision"), ("status", "True"), ("type", "Held")),)
        if held else ())
    status = state.to_status()
    assert status["phase"][0].isupper() and set(status) <= {
        "observedGeneration", "revision", "stableRevision", "phase", "wave", "waves", "waveStartedAt",
        "bakeStartedAt", "counts", "failures", "history", "conditions"}
    for entry, shown in zip(state.history, status["history"], strict=True):
        current = entry.revision == state.revision and entry.finished_at is None and phase in ACTIVE_PHASES
        assert shown["phase"] == STATUS_PHASES[phase if current else entry.phase], (entry, shown)
    back, problem = state_from_status(json.loads(json.dumps(status)))
    assert problem is None and back == state


def test_an_unreadable_status_is_a_problem_not_a_crash() -> None:
    assert state_from_status(None) == (None, None)
    assert state_from_status({"phase": "Sideways"})[1] == "status has an unknown phase 'Sideways'"
    assert state_from_status({"phase": "Baking", "wave": 9, "waves": 3, "revision": "c"})[1] is not None
