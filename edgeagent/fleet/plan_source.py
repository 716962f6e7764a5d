"""Where the fleet views read a DaemonSet's rollout plan from: the one module that knows.

The state rules (`fleet.state`) take the plan's status as a plain mapping shaped like a RolloutPlan's
`status` (phase, wave, waves, revision, stableRevision, waveStartedAt, bakeStartedAt, counts, failures).
Today the controller keeps that state in the DaemonSet's round-3 `edgeagent.io/rollout-state` annotation
and the plan itself in `edgeagent.io/rollout-*` annotations; this adapter turns them into that shape. When
plans become RolloutPlan objects, only this module changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgeagent.kube.timeutil import format_time, parse_time
from edgeagent.rollout import plan as plans
from edgeagent.rollout import state as states

JSON = dict[str, Any]
Plan = plans.Plan
Ranking = plans.Ranking


def status_of(ds: JSON) -> JSON | None:
    """The DaemonSet's plan status in a RolloutPlan's `status` shape; None when absent or unreadable."""
    state = states.state_of(ds)[0]
    if state is None:
        return None
    return {
        "phase": state.phase, "wave": state.wave, "waves": state.waves, "revision": state.revision,
        "stableRevision": state.stable_revision,
        "waveStartedAt": format_time(state.wave_started_at) if state.wave_started_at is not None else None,
        "bakeStartedAt": format_time(state.bake_started_at) if state.bake_started_at is not None else None,
        "counts": {"nodes": state.nodes, "upgraded": state.upgraded, "deferred": state.deferred,
                   "failed": state.failed},
        "failures": [dict(f) for f in state.failures],
    }


def plan_of(ds: JSON) -> Plan | None:
    """The DaemonSet's plan (steps, bake, group label); None without one, or one the controller ignores."""
    plan, problems = plans.parse_plan(ds)
    return None if problems else plan


def ranking(plan: Plan | None, status: Mapping[str, Any] | None,
            members: Mapping[str, Mapping[str, str]]) -> Ranking | None:
    """The planner's waves over the DaemonSet's nodes (name -> labels), while the plan is rolling."""
    if plan is None or status is None or str(status.get("phase") or "").lower() not in ("progressing", "baking",
                                                                                       "paused"):
        return None
    return plans.rank(plan, members)


def bake_left(plan: Plan | None, status: Mapping[str, Any] | None, now: float) -> float | None:
    if plan is None or status is None or str(status.get("phase") or "").lower() != "baking":
        return None
    started = parse_time(status.get("bakeStartedAt"))
    return None if started is None else max(0.0, started + plan.bake_seconds - now)
