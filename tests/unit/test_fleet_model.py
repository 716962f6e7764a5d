"""The fleet's rules, pure: which state a node is in for a DaemonSet, and how tables are laid out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from edgeagent.fleet import model, table
from edgeagent.kube.selectors import parse_field_selector
from edgeagent.rollout import plan as plans

JSON = dict[str, Any]
DS_UID = "ds-uid"


def ds(**annotations: str) -> JSON:
    return {"metadata": {"name": "web", "namespace": "default", "uid": DS_UID,
                         "annotations": {"apps.openyurt.io/update-strategy": "OTA",
                                         "deprecated.daemonset.template.generation": "2", **annotations}},
            "status": {"desiredNumberScheduled": 1}}


def pod(node: str = "n1", *, generation: str = "1", revision: str = "old", ready: bool = True,
        conditions: list[JSON] | None = None, waiting: str = "") -> JSON:
    return {
        "metadata": {"name": "web-abcde", "namespace": "default", "uid": f"pod-{node}",
                     "labels": {"pod-template-generation": generation, "controller-revision-hash": revision},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "web",
                                          "uid": DS_UID, "controller": True}]},
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}, *(conditions or [])],
                   "containerStatuses": [{"state": {"waiting": {"reason": waiting}}}] if waiting else []},
    }


def node(name: str = "n1", ready: str = "True") -> JSON:
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def event(reason: str, node_name: str = "n1", pod_name: str = "web-abcde", at: str = "2026-01-01T00:00:00Z",
          component: str = "edgeagent") -> JSON:
    return {"involvedObject": {"kind": "Pod", "namespace": "default", "name": pod_name}, "reason": reason,
            "message": f"{reason} message", "source": {"component": component, "host": node_name},
            "lastTimestamp": at}


def state_of(the_pod: JSON, the_node: JSON | None = None, events: list[JSON] | None = None,
             the_ds: JSON | None = None) -> model.State:
    fleet = model.build([the_ds or ds()], [the_pod], [the_node or node()], events or [], now=0.0)
    return fleet.daemonsets[0].pods["n1"].state


HELD = {"type": "UpgradeHeld", "status": "True", "reason": "OutsideMaintenanceWindow",
        "message": "outside the maintenance windows (Sat 02:00-04:00); next opens Sat 02:00"}
WAITING = {"type": "PodNeedUpgrade", "status": "False", "reason": "WaitingForWave",
           "message": "controllerrevision: new"}


def test_each_state_from_what_the_cluster_shows() -> None:
    assert state_of(pod(generation="2", revision="new")) is model.State.UP_TO_DATE
    assert state_of(pod()) is model.State.UPGRADING
    assert state_of(pod(conditions=[HELD])) is model.State.HELD
    assert state_of(pod(conditions=[WAITING])) is model.State.WAITING
    assert state_of(pod(), node(ready="Unknown")) is model.State.OFFLINE
    assert state_of(pod(), events=[event("UpgradeFailed")]) is model.State.FAILED
    assert state_of(pod(generation="2", revision="new", ready=False, waiting="CrashLoopBackOff")) is model.State.FAILED


def test_offline_wins_and_a_later_success_or_another_daemonsets_failure_is_not_a_failure() -> None:
    assert state_of(pod(conditions=[HELD]), node(ready="False"), [event("UpgradeFailed")]) is model.State.OFFLINE
    later = [event("UpgradeFailed"), event("UpgradeSucceeded", at="2026-01-01T00:01:00Z")]
    assert state_of(pod(), events=later) is model.State.UPGRADING
    assert state_of(pod(), events=[event("UpgradeFailed", pod_name="other-abcde")]) is model.State.UPGRADING
    assert state_of(pod(), events=[event("UpgradeFailed", component="kubelet")]) is model.State.UPGRADING
    # Up to date beats an old failure: the upgrade went through in the end.
    assert state_of(pod(generation="2", revision="new"), events=[event("UpgradeFailed")]) is model.State.UP_TO_DATE


def test_rollout_state_failures_count_for_the_revision_they_name() -> None:
    failing = json.dumps({"revision": "new", "wave": 1, "waves": 2, "phase": "aborted",
                          "failures": [{"node": "n1", "pod": "default/web-abcde", "reason": "x"}]})
    up_to_date_elsewhere = pod("n2", generation="2", revision="new")
    rev = {"metadata": {"name": "web-new", "labels": {"controller-revision-hash": "new"},
                        "ownerReferences": [{"uid": DS_UID, "controller": True}]}, "revision": 2}
    fleet = model.build([ds(**{"edgeagent.io/rollout-state": failing})], [pod(), up_to_date_elsewhere],
                        [node(), node("n2")], [], now=0.0, revisions=[rev])
    view = fleet.daemonsets[0]
    assert view.pods["n1"].state is model.State.FAILED
    assert (view.wave, view.waves, view.phase) == (1, 2, "aborted")


def test_after_a_rollback_the_phase_and_the_failed_nodes_stay_visible() -> None:
    """The template is back on the good revision ("new" here is the restored one); the state names the bad one."""
    rolled = json.dumps({"revision": "bad", "stableRevision": "new", "wave": 1, "waves": 2, "phase": "rolledBack",
                         "failures": [{"node": "n1", "pod": "default/web-abcde", "reason": "CrashLoopBackOff"}]})
    rev = {"metadata": {"name": "web-new", "labels": {"controller-revision-hash": "new"},
                        "ownerReferences": [{"uid": DS_UID, "controller": True}]}, "revision": 3}
    on_bad = pod(revision="bad")
    view = model.build([ds(**{"edgeagent.io/rollout-state": rolled})], [on_bad], [node()], [], now=0.0,
                       revisions=[rev]).daemonsets[0]
    assert (view.phase, view.pods["n1"].state) == ("rolledBack", model.State.FAILED)
    other = json.dumps({"revision": "older", "stableRevision": "x", "wave": 1, "waves": 2, "phase": "aborted"})
    view = model.build([ds(**{"edgeagent.io/rollout-state": other})], [on_bad], [node()], [], now=0.0,
                       revisions=[rev]).daemonsets[0]
    assert (view.phase, view.wave) == ("progressing", None)  # about another revision: not shown


def test_worst_state_orders_offline_first() -> None:
    assert model.worst([model.State.UP_TO_DATE, model.State.HELD, model.State.WAITING]) is model.State.HELD
    assert model.worst([model.State.FAILED, model.State.OFFLINE]) is model.State.OFFLINE
    assert model.worst([]) is None


def test_bake_left_and_garbage_state_are_never_fatal() -> None:
    baking = json.dumps({"revision": "new", "wave": 1, "waves": 3, "phase": "baking",
                         "bakeStartedAt": "2026-01-01T00:00:00Z"})
    the_ds = ds(**{"edgeagent.io/rollout-state": baking, "edgeagent.io/rollout-bake": "10m",
                   "edgeagent.io/rollout-steps": "1,50%,100%"})
    fleet = model.build([the_ds], [pod(generation="2", revision="new")], [node()], [], now=1767225600.0 + 60)
    assert fleet.daemonsets[0].bake_left == 540.0
    fleet = model.build([ds(**{"edgeagent.io/rollout-state": "{not json"})], [pod()], [node()], [], now=0.0)
    assert (fleet.daemonsets[0].wave, fleet.daemonsets[0].phase) == (None, "progressing")


def test_nodes_beyond_the_reached_wave_wait_in_the_planners_order() -> None:
    """Ten nodes, steps 1,50%: wave 1 is one node, so nine wait while a DaemonSet without conditions rolls."""
    names = [f"n{i}" for i in range(10)]
    state = json.dumps({"revision": "new", "wave": 1, "waves": 2, "phase": "baking"})
    the_ds = ds(**{"edgeagent.io/rollout-state": state, "edgeagent.io/rollout-steps": "1,100%"})
    the_ds["metadata"]["annotations"]["deprecated.daemonset.template.generation"] = "2"
    pods = [pod(n) for n in names]
    for p in pods:
        p["metadata"]["labels"]["controller-revision-hash"] = "old"
    rev = {"metadata": {"name": "web-new", "labels": {"controller-revision-hash": "new"},
                        "ownerReferences": [{"uid": DS_UID, "controller": True}]}, "revision": 2}
    view = model.build([the_ds], pods, [node(n) for n in names], [], now=0.0, revisions=[rev]).daemonsets[0]
    states = {n: p.state for n, p in view.pods.items()}
    first = plans.rank(plans.parse_plan(the_ds)[0], {n: {} for n in names}).order[0]  # type: ignore[arg-type]
    assert states[first] is model.State.UPGRADING
    assert [n for n, s in states.items() if s is model.State.WAITING] == sorted(set(names) - {first})
    assert view.reached == 1


@pytest.mark.parametrize(("message", "expected"), [
    (HELD["message"], "Sat 02:00"),
    ("outside the maintenance windows (22:00-02:00); next opens never", "never"),
])
def test_next_window_is_read_from_the_agents_message(message: str, expected: str) -> None:
    assert model.next_window(("OutsideMaintenanceWindow", message)) == expected
    assert model.next_window(("HeldByOperator", message)) == ""


def test_unmanaged_daemonsets_are_left_out() -> None:
    plain = ds()
    del plain["metadata"]["annotations"]["apps.openyurt.io/update-strategy"]
    assert model.build([plain], [pod()], [node()], [], now=0.0).daemonsets == []


def test_table_pads_like_kubectl() -> None:
    text = table.render(["NAME", "AGE"], [["a", "5m"], ["longer-name", "1d"]])
    assert text == "NAME          AGE\na             5m\nlonger-name   1d\n"
    # Columns are at least six wide (tabwriter's minwidth), the last one unpadded.
    assert table.render(["A", "B"], [["x", "y"]]) == "A     B\nx     y\n"


def test_event_source_field_selector_matches_the_component() -> None:
    selector = parse_field_selector("source=edgeagent", allowed=None)
    assert selector.matches(event("UpgradeFailed"))
    assert not selector.matches(event("UpgradeFailed", component="edgeagent-controller"))
