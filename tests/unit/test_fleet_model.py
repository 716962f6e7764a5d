"""The fleet's rules, pure: which state a node is in for a DaemonSet, and how tables are laid out."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from edgeagent.fleet import live, table
from edgeagent.fleet.live import CODES, LiveFleet
from edgeagent.kube.selectors import parse_field_selector
from edgeagent.rollout import model, plan_source
from edgeagent.rollout import plan as plans

JSON = dict[str, Any]
DS_UID = "ds-uid"


def ds(**annotations: str) -> JSON:
    return {"metadata": {"name": "web", "namespace": "default", "uid": DS_UID,
                         "annotations": {"apps.openyurt.io/update-strategy": "OTA",
                                         "deprecated.daemonset.template.generation": "2", **annotations}},
            "status": {"desiredNumberScheduled": 1}}


def rollout_plan(status: JSON, steps: list[object] | None = None, bake: str = "0s") -> JSON:
    """The RolloutPlan of `ds()`, with the status the controller wrote."""
    return {"apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"daemonSet": "web", "steps": steps or [1, "100%"], "bake": bake}, "status": status}


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
REPORTED = {"type": "edgeagent.io/UpgradeFailed", "status": "True", "reason": "CrashLoopBackOff",
            "message": "revision new: did not become Ready"}
OPEN = {"type": "UpgradeHeld", "status": "False", "reason": "Open", "message": ""}
WAITING = {"type": "PodNeedUpgrade", "status": "False", "reason": "WaitingForWave",
           "message": "controllerrevision: new"}


def test_each_state_from_what_the_cluster_shows() -> None:
    assert state_of(pod(generation="2", revision="new")) is model.State.UP_TO_DATE
    assert state_of(pod()) is model.State.UPGRADING
    assert state_of(pod(conditions=[HELD])) is model.State.HELD
    assert state_of(pod(conditions=[WAITING])) is model.State.WAITING
    assert state_of(pod(), node(ready="Unknown")) is model.State.OFFLINE
    assert state_of(pod(generation="2", revision="new", ready=False, waiting="CrashLoopBackOff")) is model.State.FAILED
    assert state_of(pod(revision="new", conditions=[REPORTED])) is model.State.FAILED


def test_an_event_alone_never_makes_a_node_failed_it_only_explains() -> None:
    """Any credential can create an Event naming any node; only the pod (its containers, the condition its
    node wrote on its status) or the controller's count says failed."""
    the_pod = pod()
    fleet = model.build([ds()], [the_pod], [node()], [event("UpgradeFailed")], now=0.0)
    cell = fleet.daemonsets[0].pods["n1"]
    assert cell.state is model.State.UPGRADING
    assert cell.why == "its agent's last attempt failed: UpgradeFailed message"


def test_a_crash_looping_new_pod_is_failed_and_not_also_up_to_date() -> None:
    crashing = pod(generation="2", revision="new", ready=True, waiting="CrashLoopBackOff")
    view = model.build([ds()], [crashing], [node()], [], now=0.0).daemonsets[0]
    assert (view.up_to_date, view.count(model.State.FAILED)) == (0, 1)
    assert view.to_json()["upToDate"] == view.to_json()["states"]["up to date"] == 0
    # The failure the node wrote on a Ready pod of the current revision wins too.
    reported = pod(generation="2", revision="new", conditions=[REPORTED])
    assert state_of(reported) is model.State.FAILED
    assert model.build([ds()], [reported], [node()], [], now=0.0).daemonsets[0].pods["n1"].why == \
        "CrashLoopBackOff: did not become Ready"


def test_a_reported_failure_naming_another_revision_than_the_pod_runs_is_ignored() -> None:
    """The fleet view reads the node's report through `contract.reported_failure`: about the pod's own
    revision only (a stale or forged condition naming another one decides nothing)."""
    assert state_of(pod(generation="2", revision="new", conditions=[REPORTED])) is model.State.FAILED
    assert state_of(pod(generation="2", revision="other", conditions=[REPORTED])) is model.State.UP_TO_DATE
    legacy = {**REPORTED, "type": "UpgradeFailed"}  # the pre-contract name is no report at all
    assert state_of(pod(generation="2", revision="new", conditions=[legacy])) is model.State.UP_TO_DATE


@pytest.mark.parametrize("the_node", [
    {"metadata": {"name": "n1"}, "status": {"conditions": []}},  # no Ready condition
    {"metadata": {"name": "n1"}, "status": {}},
    node(ready="False"), node(ready="Unknown"),
])
def test_a_node_without_ready_true_is_offline_even_with_an_up_to_date_pod(the_node: JSON) -> None:
    assert state_of(pod(generation="2", revision="new"), the_node) is model.State.OFFLINE


def test_a_node_missing_from_the_node_list_is_offline_and_still_counted() -> None:
    fleet = model.build([ds()], [pod(generation="2", revision="new")], [], [], now=0.0)
    view = fleet.daemonsets[0]
    assert view.pods["n1"].state is model.State.OFFLINE
    assert view.pods["n1"].why == "not in the node list"
    assert [(n.name, n.state) for n in fleet.nodes] == [("n1", model.State.OFFLINE)]
    assert view.phase == "Progressing"


def test_not_complete_while_a_node_it_should_run_on_has_no_pod() -> None:
    """Two nodes, one pod (up to date): the second node has none yet, so the rollout is not complete."""
    the_ds = ds()
    the_ds["status"]["desiredNumberScheduled"] = 1  # a stale count must not hide the node
    fleet = model.build([the_ds], [pod(generation="2", revision="new")], [node(), node("n2")], [], now=0.0)
    view = fleet.daemonsets[0]
    assert view.pods["n2"].state is model.State.UPGRADING and view.pods["n2"].pod == ""
    assert (view.phase, view.desired, view.up_to_date) == ("Progressing", 2, 1)
    alone = model.build([the_ds], [pod(generation="2", revision="new")], [node()], [], now=0.0).daemonsets[0]
    assert alone.phase == "Complete"


def test_a_node_the_daemonset_does_not_target_gets_no_cell() -> None:
    the_ds = ds()
    the_ds["spec"] = {"template": {"spec": {"nodeSelector": {"zone": "north"}}}}
    tainted = node("n3")
    tainted["spec"] = {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}
    north = node("n2")
    north["metadata"]["labels"] = {"zone": "north"}
    tainted["metadata"]["labels"] = {"zone": "north"}
    view = model.build([the_ds], [pod(generation="2", revision="new")], [node(), north, tainted], [],
                       now=0.0).daemonsets[0]
    assert sorted(view.pods) == ["n1", "n2"]  # n1 runs a pod; n2 should; n3's taint is not tolerated
    the_ds["spec"]["template"]["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    view = model.build([the_ds], [], [node(), north, tainted], [], now=0.0).daemonsets[0]
    assert sorted(view.pods) == ["n2", "n3"]


def test_held_counts_nodes_in_the_held_state_only() -> None:
    """An offline node whose pod is held is offline: `held` and `states.held` are the same number."""
    fleet = model.build([ds()], [pod(conditions=[HELD])], [node(ready="False")], [], now=0.0)
    doc = fleet.daemonsets[0].to_json()
    assert doc["held"] == doc["states"]["held"] == 0
    assert sum(doc["states"].values()) == doc["nodes"] == 1


def test_policy_is_unknown_without_an_agent_and_why_comes_from_the_state_giving_daemonset() -> None:
    other = ds()
    other["metadata"].update(name="db", uid="db-uid")
    db_pod = pod(conditions=[OPEN])
    db_pod["metadata"].update(name="db-fghij", uid="db-pod")
    db_pod["metadata"]["ownerReferences"][0].update(name="db", uid="db-uid")
    web_pod = pod(generation="2", revision="new", ready=False, waiting="ImagePullBackOff")
    fleet = model.build([ds(), other], [web_pod, db_pod], [node()], [], now=0.0)
    (n1,) = fleet.nodes
    assert (n1.state, n1.why) == (model.State.FAILED, "ImagePullBackOff")
    assert n1.policy == "open"  # db's agent reported one
    alone = model.build([ds()], [pod()], [node()], [], now=0.0).nodes[0]
    assert (alone.policy, alone.held, alone.next_window) == ("unknown", None, "")


def test_after_an_abort_nothing_waits_or_upgrades_that_nothing_will_move() -> None:
    aborted = rollout_plan({"revision": "new", "wave": 1, "waves": 2, "phase": "Aborted"})
    rev = {"metadata": {"name": "web-new", "labels": {"controller-revision-hash": "new"},
                        "ownerReferences": [{"uid": DS_UID, "controller": True}]}, "revision": 2}
    pods = [pod(), pod("n2", conditions=[WAITING])]
    pods[1]["metadata"]["name"] = "web-fghij"
    view = model.build([ds()], pods, [node(), node("n2")], [], now=0.0, revisions=[rev],
                       plans=[aborted]).daemonsets[0]
    assert {n: c.state for n, c in view.pods.items()} == {"n1": model.State.STOPPED, "n2": model.State.STOPPED}


def test_lease_renew_time_is_last_seen_not_the_ready_heartbeat() -> None:
    the_node = node()
    the_node["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:00:00Z"
    lease = {"metadata": {"name": "n1", "namespace": "kube-node-lease"},
             "spec": {"renewTime": "2026-01-01T00:05:00.123456Z"}}
    fleet = model.build([ds()], [pod()], [the_node], [], now=0.0, leases=[lease])
    assert fleet.nodes[0].to_json()["lastSeen"] == "2026-01-01T00:05:00Z"
    assert model.build([ds()], [pod()], [the_node], [], now=0.0).nodes[0].last_seen is None


def test_offline_wins_and_a_later_success_or_another_daemonsets_failure_is_not_a_failure() -> None:
    assert state_of(pod(conditions=[HELD]), node(ready="False"), [event("UpgradeFailed")]) is model.State.OFFLINE
    later = [event("UpgradeFailed"), event("UpgradeSucceeded", at="2026-01-01T00:01:00Z")]
    assert state_of(pod(), events=later) is model.State.UPGRADING
    assert state_of(pod(), events=[event("UpgradeFailed", pod_name="other-abcde")]) is model.State.UPGRADING
    assert state_of(pod(), events=[event("UpgradeFailed", component="kubelet")]) is model.State.UPGRADING
    # Up to date beats an old failure: the upgrade went through in the end.
    assert state_of(pod(generation="2", revision="new"), events=[event("UpgradeFailed")]) is model.State.UP_TO_DATE


def test_rollout_state_failures_count_for_the_revision_they_name() -> None:
    failing = rollout_plan({"revision": "new", "wave": 1, "waves": 2, "phase": "Aborted",
                            "failures": [{"node": "n1", "pod": "default/web-abcde", "reason": "x"}]})
    up_to_date_elsewhere = pod("n2", generation="2", revision="new")
    rev = {"metadata": {"name": "web-new", "labels": {"controller-revision-hash": "new"},
                        "ownerReferences": [{"uid": DS_UID, "controller": True}]}, "revision": 2}
    fleet = model.build([ds()], [pod(), up_to_date_elsewhere], [node(), node("n2")], [], now=0.0, revisions=[rev],
                        plans=[failing])
    view = fleet.daemonsets[0]
    assert view.pods["n1"].state is model.State.FAILED
    assert (view.wave, view.waves, view.phase) == (1, 2, "Aborted")


def test_after_a_rollback_the_phase_and_the_failed_nodes_stay_visible() -> None:
    """The template is back on the good revision ("new" here is the restored one); the state names the bad one."""
    rolled = rollout_plan({"revision": "bad", "stableRevision": "new", "wave": 1, "waves": 2, "phase": "RolledBack",
                           "failures": [{"node": "n1", "pod": "default/web-abcde", "reason": "CrashLoopBackOff"}]})
    rev = {"metadata": {"name": "web-new", "labels": {"controller-revision-hash": "new"},
                        "ownerReferences": [{"uid": DS_UID, "controller": True}]}, "revision": 3}
    on_bad = pod(revision="bad")
    view = model.build([ds()], [on_bad], [node()], [], now=0.0, revisions=[rev], plans=[rolled]).daemonsets[0]
    assert (view.phase, view.pods["n1"].state) == ("RolledBack", model.State.FAILED)
    other = rollout_plan({"revision": "older", "stableRevision": "x", "wave": 1, "waves": 2, "phase": "Aborted"})
    view = model.build([ds()], [on_bad], [node()], [], now=0.0, revisions=[rev], plans=[other]).daemonsets[0]
    assert (view.phase, view.wave) == ("Progressing", None)  # about another revision: not shown


def test_worst_state_orders_offline_first() -> None:
    assert model.worst([model.State.UP_TO_DATE, model.State.HELD, model.State.WAITING]) is model.State.HELD
    assert model.worst([model.State.FAILED, model.State.OFFLINE]) is model.State.OFFLINE
    assert model.worst([]) is None


def test_bake_left_and_garbage_state_are_never_fatal() -> None:
    baking = rollout_plan({"revision": "new", "wave": 1, "waves": 3, "phase": "Baking",
                           "bakeStartedAt": "2026-01-01T00:00:00Z"}, [1, "50%", "100%"], "10m")
    fleet = model.build([ds()], [pod(generation="2", revision="new")], [node()], [], now=1767225600.0 + 60,
                        plans=[baking])
    assert fleet.daemonsets[0].bake_left == 540.0
    for garbage in ({"phase": "baking", "revision": "new", "wave": 1, "waves": 3}, {"phase": "Baking"}, "{not json"):
        fleet = model.build([ds()], [pod()], [node()], [], now=0.0, plans=[{**baking, "status": garbage}])
        assert (fleet.daemonsets[0].wave, fleet.daemonsets[0].phase) == (None, "Progressing"), garbage


def test_bake_left_is_whole_seconds_rounded_up() -> None:
    """`-o json` printed 592.1079123020172: every view shows the same whole number, 0 only when over, and never more
    than the bake (`rollout status` printed `bake left 10m1s` of a `10m` bake)."""
    baking = rollout_plan({"revision": "new", "wave": 1, "waves": 3, "phase": "Baking",
                           "bakeStartedAt": "2026-01-01T00:00:00Z"}, [1, "50%", "100%"], "10m")
    # Read in the second before the bake starts (the controller starts it at the next whole second): the bake.
    for elapsed, left in ((-0.7, 600), (-0.0001, 600), (0.0, 600), (59.2, 541), (599.01, 1), (600.0, 0), (900.0, 0)):
        fleet = model.build([ds()], [pod(generation="2", revision="new")], [node()], [],
                            now=1767225600.0 + elapsed, plans=[baking])
        assert fleet.daemonsets[0].bake_left == left
        assert isinstance(fleet.daemonsets[0].bake_left, int)


def test_the_round_3_annotations_are_no_plan() -> None:
    """A DaemonSet still carrying `edgeagent.io/rollout-state` and `rollout-steps` rolls as if it had no plan: no
    view reads them (the controller ignores them too, with one Warning Event)."""
    state = json.dumps({"revision": "new", "wave": 1, "waves": 2, "phase": "aborted"})
    the_ds = ds(**{"edgeagent.io/rollout-state": state, "edgeagent.io/rollout-steps": "1,100%"})
    view = model.build([the_ds], [pod()], [node()], [], now=0.0).daemonsets[0]
    assert (view.phase, view.wave, view.pods["n1"].state) == ("Progressing", None, model.State.UPGRADING)


def test_nodes_beyond_the_reached_wave_wait_in_the_planners_order() -> None:
    """Ten nodes, steps 1,50%: wave 1 is one node, so nine wait while a DaemonSet without conditions rolls."""
    names = [f"n{i}" for i in range(10)]
    the_plan = rollout_plan({"revision": "new", "wave": 1, "waves": 2, "phase": "Baking"})
    the_ds = ds()
    pods = [pod(n) for n in names]
    for p in pods:
        p["metadata"]["labels"]["controller-revision-hash"] = "old"
    rev = {"metadata": {"name": "web-new", "labels": {"controller-revision-hash": "new"},
                        "ownerReferences": [{"uid": DS_UID, "controller": True}]}, "revision": 2}
    view = model.build([the_ds], pods, [node(n) for n in names], [], now=0.0, revisions=[rev],
                       plans=[the_plan]).daemonsets[0]
    states = {n: p.state for n, p in view.pods.items()}
    spec = plan_source.plan_of(the_ds, plan_source.index([the_plan]))
    assert spec is not None
    first = plans.rank(spec, {n: {} for n in names}).order[0]
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


_NODE_KINDS = ("ready", "not-ready", "no-ready-condition", "missing")
_POD_KINDS = ("none", "old", "new", "new-unready", "crash", "held", "held-open", "waiting", "reported")


def _object_fleet(spec: list[tuple[str, str]]) -> tuple[list[JSON], list[JSON]]:
    nodes, pods = [], []
    for i, (node_kind, pod_kind) in enumerate(spec):
        name = f"n{i}"
        if node_kind != "missing":
            the_node = node(name, ready="False" if node_kind == "not-ready" else "True")
            if node_kind == "no-ready-condition":
                the_node["status"]["conditions"] = []
            nodes.append(the_node)
        if pod_kind == "none":
            continue
        conditions = {"held": [HELD], "held-open": [OPEN], "waiting": [WAITING], "reported": [REPORTED]}
        new = pod_kind in ("new", "new-unready", "crash")
        made = pod(name, generation="2" if new else "1", revision="new" if new else "old",
                   ready=pod_kind not in ("new-unready", "crash"), conditions=conditions.get(pod_kind),
                   waiting="CrashLoopBackOff" if pod_kind == "crash" else "")
        made["metadata"]["name"] = f"web-{i:05d}"
        pods.append(made)
    return nodes, pods


@settings(max_examples=60, deadline=None)
@given(spec=hs.lists(hs.tuples(hs.sampled_from(_NODE_KINDS), hs.sampled_from(_POD_KINDS)), max_size=8))
def test_counts_add_up_to_the_nodes_and_the_dashboards_live_fleet_agrees(spec: list[tuple[str, str]]) -> None:
    """Whatever the cluster shows, each node of the DaemonSet is in one state, and the dashboard's incremental
    LiveFleet (fed the same objects in any order) counts exactly what `fleet` counts."""
    nodes, pods = _object_fleet(spec)
    fleet = model.build([ds()], pods, nodes, [], now=0.0)
    view = fleet.daemonsets[0]
    expected_nodes = {f"n{i}" for i, (nk, pk) in enumerate(spec) if pk != "none" or nk != "missing"}
    assert set(view.pods) == expected_nodes
    doc = view.to_json()
    assert sum(doc["states"].values()) == doc["nodes"] == len(expected_nodes)
    assert doc["upToDate"] == doc["states"]["up to date"]
    assert doc["phase"] == ("Complete" if expected_nodes and doc["upToDate"] == len(expected_nodes)
                            else "Progressing")

    fed = LiveFleet(clock=lambda: 0.0)
    fed.on_daemonset("ADDED", ds(), None)
    for the_node in nodes:
        fed.on_node("ADDED", the_node, None)
    for the_pod in pods:
        fed.on_pod("ADDED", the_pod, None)
    fed.finish_batch()
    assert fed.counts() == {view.key: view.counts()}
    (summary,) = fed.summaries()
    assert (summary["u"], summary["d"], summary["p"]) == (view.up_to_date, view.desired, view.phase)
    assert dict(fed.grid()) == {n.name: CODES[n.state] for n in fleet.nodes}
    # Live changes after the first sync reach the same place as a fresh build.
    fresh = LiveFleet(clock=lambda: 0.0)
    fresh.on_daemonset("ADDED", ds(), None)
    fresh.finish_batch()
    for the_pod in pods:
        fresh.on_pod("ADDED", the_pod, None)
    for the_node in nodes:
        fresh.on_node("ADDED", the_node, None)
    assert fresh.counts() == fed.counts()


@settings(max_examples=30, deadline=None)
@given(order=hs.permutations(list(range(80))))
def test_the_dashboards_events_are_the_newest_fifty_newest_first_whatever_the_arrival_order(order: list[int]) -> None:
    fed = LiveFleet(clock=lambda: 0.0)
    told: list[JSON] = []
    fed.add_event_listener(told.append)
    for i in order:
        fed.on_event("ADDED", event("UpgradeSucceeded", pod_name=f"web-{i:05d}",
                                    at=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"), None)
    times = [e["time"] for e in fed.events]
    assert len(times) == live.RECENT_EVENTS
    assert times == sorted(times, reverse=True)
    assert [e["object"] for e in fed.events] == [f"Pod/default/web-{i:05d}" for i in range(79, 29, -1)]
    late = event("UpgradeSucceeded", pod_name="web-old00", at="2025-01-01T00:00:00Z")
    fed.on_event("ADDED", late, None)  # older than the fifty kept: neither kept nor sent to the page
    assert told[-1]["object"] != "Pod/default/web-old00" and len(fed.events) == live.RECENT_EVENTS
