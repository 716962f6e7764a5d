"""A rollback's template restore, kept pending in the plan's status until the DaemonSet shows it done.

A rollback is two writes: the plan's status first (phase RolledBack: a decision whose write is refused moves
nothing), then the DaemonSet's template back to the last completed revision. When the second never happens --
the controller lost its leadership or was killed between the two, the API server answered the patch with a
5xx or not at all -- the plan said RolledBack over a template still on the bad revision, and every later pass
read that as an operator setting the bad revision again: held, never restored, the fleet left on it.

So the status write that decides a rollback (or a `rollout undo`) carries a `TemplateRestored=False` condition
naming the DaemonSet generation it was decided for. While the DaemonSet is still at that generation, its
template is the one to replace and the restore is due again; any template change bumps the generation, so a
later generation means the restore was done, or an operator changed the template first (their edit wins, as
the restore's own test of the template already says). Either way the condition is then dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from edgeagent.kube.timeutil import format_time
from edgeagent.rollout.state import PHASE_ABORTED, RolloutState

CONDITION_TEMPLATE_RESTORED = "TemplateRestored"
REASON_RESTORE_PENDING = "Pending"


def pending_condition(state: RolloutState, now: float) -> tuple[tuple[str, str], ...]:
    """The condition of a restore pending from `state.revision` (still the template, at `state.generation`) to
    `state.stable_revision`."""
    return (("lastTransitionTime", format_time(float(int(now)))),
            ("message", f"the DaemonSet's template is to be restored from revision {state.revision} to revision "
                        f"{state.stable_revision}"),
            ("observedGeneration", str(state.generation)),
            ("reason", REASON_RESTORE_PENDING), ("status", "False"), ("type", CONDITION_TEMPLATE_RESTORED))


def mark_pending(state: RolloutState, now: float) -> RolloutState:
    """The rollback's state with its restore pending."""
    return replace(state, conditions=(*_without(state), pending_condition(state, now)))


def pending_generation(state: RolloutState | None) -> int | None:
    """The DaemonSet generation a pending restore was decided for, or None when none is pending."""
    found = state.condition(CONDITION_TEMPLATE_RESTORED) if state is not None else None
    if found is None or found.get("status") != "False":
        return None
    value = found.get("observedGeneration", "")
    return int(value) if value.isdigit() else -1  # unreadable: pending, never due (settled by the next pass)


def pending_in_status(status: Mapping[str, Any]) -> bool:
    """A plan's `status` (as the API has it) carries a restore still pending: what `rollout status` says."""
    return any(isinstance(c, Mapping) and c.get("type") == CONDITION_TEMPLATE_RESTORED and c.get("status") == "False"
               for c in status.get("conditions") or [])


def restore_due(state: RolloutState | None, revision: str, generation: int | None) -> bool:
    """The template is still the one the rollback replaces: same generation, same revision."""
    at = pending_generation(state)
    return (state is not None and at is not None and generation is not None and at == generation
            and revision == state.revision)


@dataclass(frozen=True)
class Settled:
    """A pending restore that is over: the state to write (the condition dropped), and a Warning to say when the
    template was not restored."""

    state: RolloutState
    warning: str | None


def settle(state: RolloutState | None, revision: str, generation: int | None) -> Settled | None:
    """None while nothing is pending or the restore is still due; else the outcome, read from the template."""
    if state is None or pending_generation(state) is None or restore_due(state, revision, generation):
        return None
    cleared = replace(state, conditions=_without(state))
    if revision == state.stable_revision:
        return Settled(cleared, None)
    # Restored and then changed again, or changed before the restore: the DaemonSet cannot say which, this can.
    return Settled(cleared, f"template not on revision {state.stable_revision}: the DaemonSet's template changed "
                            f"since the rollback was decided (now revision {revision}); revision {state.revision} "
                            "stays marked RolledBack in the plan's history")


def abandon(state: RolloutState, why: str) -> Settled:
    """A due restore that cannot be done (the completed revision's template is gone): the condition dropped,
    the rollout Aborted on the revision it stopped, and why."""
    return Settled(replace(state, phase=PHASE_ABORTED, conditions=_without(state)),
                   f"cannot roll back to revision {state.stable_revision}: {why}; revision {state.revision} stays "
                   "the template, Aborted")


def _without(state: RolloutState) -> tuple[tuple[tuple[str, str], ...], ...]:
    return tuple(c for c in state.conditions if dict(c).get("type") != CONDITION_TEMPLATE_RESTORED)
