"""The agent's plan check (agent/requests/guarded.py `plan_lag`, `plan_of`): a pod's PodNeedUpgrade is trusted
only when the DaemonSet's RolloutPlan status is about the DaemonSet's generation and the pod's revision, and no
abort of that revision is pending (issue 35: the plan is read from the RolloutPlan, not the DaemonSet)."""

from __future__ import annotations

import json
from typing import Any

from edgeagent.agent.requests.guarded import plan_lag, plan_of
from edgeagent.rollout.steer import ANNOTATION_STEER
from tests.unit.test_controller_objects import daemonset, pod

JSON = dict[str, Any]
NEW = "newhash"


def the_pod() -> JSON:
    return pod("web-1", "edge-1", "old", extra_conditions=[{"type": "PodNeedUpgrade", "status": "True",
                                                            "reason": "WaveReached",
                                                            "message": f"controllerrevision: {NEW}"}])


def plan(status: JSON | None = None, steer: JSON | None = None, **spec: Any) -> JSON:
    annotations = {ANNOTATION_STEER: json.dumps(steer)} if steer else {}
    return {"metadata": {"name": "web-plan", "namespace": "default", "annotations": annotations},
            "spec": {"daemonSet": "web", "steps": ["100%"], **spec}, "status": status or {}}


def status(**extra: Any) -> JSON:
    return {"revision": NEW, "phase": "Progressing", "wave": 1, "waves": 1, "observedGeneration": 2, **extra}


def test_no_plan_or_an_invalid_one_is_not_checked() -> None:
    assert plan_lag(daemonset(), None, the_pod()) is None
    assert plan_lag(daemonset(), plan(steps=["50%"]), the_pod()) is None  # the controller moves nothing for it


def test_a_current_status_lets_the_pod_go() -> None:
    assert plan_lag(daemonset(generation=2), plan(status()), the_pod()) is None


def test_refused_while_the_status_lags() -> None:
    ds = daemonset(generation=2)
    assert "has not caught up (it has no status yet)" in str(plan_lag(ds, plan(), the_pod()))
    assert "generation 3" in str(plan_lag(daemonset(generation=3), plan(status()), the_pod()))
    assert "the rollout is of revision other" in str(plan_lag(ds, plan(status(revision="other")), the_pod()))


def test_refused_once_an_abort_of_its_revision_is_asked_or_done() -> None:
    ds = daemonset(generation=2)
    asked = {"id": "0123456789ab", "verb": "abort", "revision": NEW}
    assert "was aborted" in str(plan_lag(ds, plan(status(), steer=asked), the_pod()))
    handled = {"id": "0123456789ab", "verb": "abort", "result": "Done"}
    assert "was aborted" in str(plan_lag(ds, plan(status(phase="Aborted", steer=handled), steer=asked), the_pod()))
    # A handled abort of another revision, or a pending promote, does not refuse.
    assert plan_lag(ds, plan(status(steer=handled), steer={**asked, "revision": "old"}), the_pod()) is None
    assert plan_lag(ds, plan(status(), steer={**asked, "verb": "promote"}), the_pod()) is None


def test_the_plan_naming_the_daemonset_is_found_by_its_spec() -> None:
    ds = daemonset()
    other = {**plan(), "spec": {"daemonSet": "db", "steps": ["100%"]}}
    assert plan_of([other], ds) == (None, None)
    assert plan_of([other, plan()], ds) == (plan(), None)
    found, why = plan_of([plan(), plan()], ds)
    assert found is None and why == "2 RolloutPlans name it (the controller moves none of them)"
