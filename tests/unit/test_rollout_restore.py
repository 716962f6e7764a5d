"""The rules of a rollback's pending template restore (edgeagent.rollout.restore): when it is due again, when it
is over and what is said then, and that the condition survives the plan's status (a restarted controller reads it).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edgeagent.rollout.restore import (
    CONDITION_TEMPLATE_RESTORED,
    abandon,
    mark_pending,
    pending_generation,
    restore_due,
    settle,
)
from edgeagent.rollout.state import (
    CONDITION_HELD,
    PHASE_ABORTED,
    PHASE_ROLLED_BACK,
    RolloutState,
    state_from_status,
)

BAD, GOOD, OTHER = "bad0000001", "good000001", "other00001"
NOW = 1_800_000_000.0
generations = st.integers(min_value=1, max_value=10**9)
revisions = st.sampled_from([BAD, GOOD, OTHER])


def rolled_back(generation: int | None) -> RolloutState:
    held = (("message", "x"), ("reason", "RolledBackRevision"), ("status", "True"), ("type", CONDITION_HELD))
    return RolloutState(revision=BAD, stable_revision=GOOD, waves=2, wave=1, phase=PHASE_ROLLED_BACK,
                        generation=generation, conditions=(held,))


@given(generations)
def test_a_pending_restore_is_due_at_its_generation_on_the_bad_revision_only(generation: int) -> None:
    state = mark_pending(rolled_back(generation), NOW)
    assert pending_generation(state) == generation
    assert restore_due(state, BAD, generation)
    assert not restore_due(state, GOOD, generation) and not restore_due(state, OTHER, generation)
    assert not restore_due(state, BAD, None)
    # One generation later is already a changed template: never due, however near.
    assert not restore_due(state, BAD, generation + 1) and not restore_due(state, BAD, generation - 1)
    assert settle(state, BAD, generation) is None


@given(generations, st.integers(min_value=1, max_value=5), revisions)
def test_a_later_generation_settles_it_and_says_so_unless_the_template_is_the_restored_one(
        generation: int, later: int, revision: str) -> None:
    state = mark_pending(rolled_back(generation), NOW)
    settled = settle(state, revision, generation + later)
    assert settled is not None
    assert settled.state.condition(CONDITION_TEMPLATE_RESTORED) is None
    # Everything else is kept: the phase, the revisions, the Held condition.
    assert settled.state.condition(CONDITION_HELD) == state.condition(CONDITION_HELD)
    assert (settled.state.phase, settled.state.revision, settled.state.stable_revision) == (
        PHASE_ROLLED_BACK, BAD, GOOD)
    if revision == GOOD:
        assert settled.warning is None
    else:
        assert settled.warning is not None and revision in settled.warning and GOOD in settled.warning


@given(st.one_of(st.none(), generations), revisions)
def test_nothing_pending_is_never_due_nor_settled(generation: int | None, revision: str) -> None:
    state = rolled_back(generation)
    assert pending_generation(state) is None and pending_generation(None) is None
    assert not restore_due(state, revision, generation) and settle(state, revision, generation) is None


def test_marking_twice_keeps_one_condition() -> None:
    state = mark_pending(mark_pending(rolled_back(3), NOW), NOW + 5)
    assert [dict(c)["type"] for c in state.conditions].count(CONDITION_TEMPLATE_RESTORED) == 1


@given(generations)
def test_the_condition_survives_the_plans_status_with_an_integer_generation(generation: int) -> None:
    status = mark_pending(rolled_back(generation), NOW).to_status()
    cond = next(c for c in status["conditions"] if c["type"] == CONDITION_TEMPLATE_RESTORED)
    assert cond["observedGeneration"] == generation and isinstance(cond["observedGeneration"], int)
    assert cond["status"] == "False" and BAD in cond["message"] and GOOD in cond["message"]
    read, problem = state_from_status(status)
    assert problem is None and read is not None
    assert restore_due(read, BAD, generation) and not restore_due(read, BAD, generation + 1)


def test_an_unreadable_generation_is_pending_but_never_due() -> None:
    state = mark_pending(rolled_back(7), NOW)
    broken = tuple(tuple((k, "seven" if k == "observedGeneration" else v) for k, v in c) for c in state.conditions)
    state = RolloutState(**{**state.__dict__, "conditions": broken})
    assert pending_generation(state) == -1 and not restore_due(state, BAD, 7)
    settled = settle(state, BAD, 7)
    assert settled is not None and settled.state.condition(CONDITION_TEMPLATE_RESTORED) is None


def test_a_restore_that_cannot_be_done_aborts_and_says_why() -> None:
    settled = abandon(mark_pending(rolled_back(4), NOW), "no ControllerRevision of it is left")
    assert settled.state.phase == PHASE_ABORTED and settled.state.condition(CONDITION_TEMPLATE_RESTORED) is None
    assert settled.warning is not None and "no ControllerRevision" in settled.warning and GOOD in settled.warning


def test_only_a_false_condition_is_pending() -> None:
    state = mark_pending(rolled_back(7), NOW)
    done = tuple(tuple((k, "True" if k == "status" else v) for k, v in c) if dict(c)["type"] ==
                 CONDITION_TEMPLATE_RESTORED else c for c in state.conditions)
    state = RolloutState(**{**state.__dict__, "conditions": done})
    assert pending_generation(state) is None and not restore_due(state, BAD, 7) and settle(state, BAD, 7) is None
