"""Where `rollout status` and the fleet views read a DaemonSet's rollout plan from: the one module that knows.

The state rules (`node_state`) take the plan's status as a plain mapping shaped like a RolloutPlan's
`status` (phase, wave, waves, revision, stableRevision, waveStartedAt, bakeStartedAt, counts, failures).
A plan is a RolloutPlan object (`edgeagent.io/v1alpha1`) whose `spec.daemonSet` names the DaemonSet in its
namespace: its `status` is that mapping and its `spec` the steps, bake and group label. `index` finds each
DaemonSet's plan in a list of them. Nothing else is a plan: the round-3 annotations on a DaemonSet are not read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from edgeagent.contract import ANNOTATION_NODE_SELECTOR
from edgeagent.kube.objects import annotations_of, meta
from edgeagent.kube.selectors import parse_label_selector
from edgeagent.kube.timeutil import parse_time
from edgeagent.rollout import api
from edgeagent.rollout import plan as plans
from edgeagent.rollout import state as states

JSON = dict[str, Any]
Plan = plans.Plan
Ranking = plans.Ranking


# The list the views read plans with (list and watch rights on rolloutplans are enough).
RESOURCE = f"{api.PLURAL}.{api.GROUP}"
GROUP_PATH = f"/apis/{api.API_VERSION}"
PLURAL = api.PLURAL

# No plan given for a DaemonSet (None in `index`'s result means: two plans name it, so no plan applies).
Plans = Mapping[tuple[str, str], JSON | None]


def index(objects: Iterable[JSON]) -> dict[tuple[str, str], JSON | None]:
    """(namespace, DaemonSet name) -> its RolloutPlan; None when two plans name one DaemonSet (the controller
    moves neither)."""
    found: dict[tuple[str, str], JSON | None] = {}
    for obj in objects:
        name = (obj.get("spec") or {}).get("daemonSet")
        if not isinstance(name, str) or not name:
            continue
        key = (str(meta(obj).get("namespace") or ""), name)
        found[key] = None if key in found else obj
    return found


def plan_object(ds: JSON, plans_by_ds: Plans) -> JSON | None:
    return plans_by_ds.get((str(meta(ds).get("namespace") or ""), str(meta(ds).get("name") or "")))


def status_of(ds: JSON, plans_by_ds: Plans) -> JSON | None:
    """The `status` of the DaemonSet's RolloutPlan; None without a plan, or one the controller has not written
    (or that cannot be read)."""
    status = (plan_object(ds, plans_by_ds) or {}).get("status")
    if not isinstance(status, dict) or states.state_from_status(status)[0] is None:
        return None
    return status


def plan_of(ds: JSON, plans_by_ds: Plans) -> Plan | None:
    """The DaemonSet's plan (steps, bake, group label; its canary the DaemonSet's `edgeagent.io/node-selector`);
    None without one, or one the controller ignores."""
    spec, _ = api.parse_spec((plan_object(ds, plans_by_ds) or {}).get("spec"))
    if spec is None:
        return None
    selector = annotations_of(ds).get(ANNOTATION_NODE_SELECTOR)
    canary = None
    if selector:
        try:
            canary = parse_label_selector(str(selector))
        except ValueError:
            canary = None
    return spec.plan(canary)


def ranking(plan: Plan | None, status: Mapping[str, Any] | None,
            members: Mapping[str, Mapping[str, str]]) -> Ranking | None:
    """The planner's waves over the DaemonSet's nodes (name -> labels), while the plan is rolling."""
    if plan is None or status is None or status.get("phase") not in states.STATUS_ACTIVE_PHASES:
        return None
    return plans.rank(plan, members)


def bake_left(plan: Plan | None, status: Mapping[str, Any] | None, now: float) -> int | None:
    """Whole seconds of bake left, rounded up: every view prints the same number, and 0 only once it is over. Never
    more than the bake: the controller starts a bake at the next whole second (`bakeStartedAt` has no fraction),
    so in the second before it a view would read `10m1s` of a `10m` bake."""
    if plan is None or status is None or status.get("phase") != states.STATUS_PHASES[states.PHASE_BAKING]:
        return None
    started = parse_time(status.get("bakeStartedAt"))
    if started is None:
        return None
    return max(0, min(math.ceil(plan.bake_seconds), math.ceil(started + plan.bake_seconds - now)))
