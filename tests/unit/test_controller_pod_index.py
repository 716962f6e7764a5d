"""controller/pod_index.py and its trackers: after any sequence of pod events, revisions and gates, a tracker
that re-derives only the pods marked by the informer handler answers exactly what a pass over every pod
answers (ota.scan, waves.pods_by_node, the pods with an unfinished PodImageReady). A tracker that missed a
change (a stale cache) would answer from an old pod and fail here."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from edgeagent.controller.ota import OtaFacts, scan
from edgeagent.controller.pod_index import ImagePending, OwnerPods, Same
from edgeagent.controller.waves import Gate, NodePods, pods_by_node
from edgeagent.kube.timeutil import format_time
from edgeagent.rollout_plan import Plan, Step, rank

JSON = dict[str, Any]
T0 = 1_800_000_000.0
NODES = [f"n{i}" for i in range(4)]
REVISIONS = ["r1", "r2"]
PLAN = Plan(steps=(Step(1, False), Step(50, True), Step(100, True)), bake_seconds=0)
RANKING = rank(PLAN, {n: {} for n in NODES})
FROZEN = Gate(None, 0, frozen=True)
GATES = [None, Gate(RANKING, 1), Gate(RANKING, 2), FROZEN]


def make_pod(index: int, node: str, revision: str, ready: bool, need: str | None, image: str | None,
             terminating: bool, version: int, said: str = "r1") -> JSON:
    conditions: list[JSON] = [{"type": "Ready", "status": "True" if ready else "False",
                               "lastTransitionTime": format_time(T0)}]
    if need is not None:
        status, _, reason = need.partition("/")
        conditions.append({"type": "PodNeedUpgrade", "status": status, "reason": reason,
                           "message": f"controllerrevision: {said}"})
    if image is not None:
        conditions.append({"type": "PodImageReady", "status": image})
    meta: JSON = {"name": f"app-{index}", "namespace": "default", "uid": f"u{index}-{version}",
                  "resourceVersion": str(version), "labels": {"controller-revision-hash": revision}}
    if terminating:
        meta["deletionTimestamp"] = format_time(T0)
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"conditions": conditions}}


pod_strategy = st.builds(
    make_pod,
    index=st.integers(0, 4),
    node=st.sampled_from(NODES),
    revision=st.sampled_from(REVISIONS),
    ready=st.booleans(),
    need=st.sampled_from([None, "True/", "False/", "False/WaitingForWave"]),
    image=st.sampled_from([None, "True", "False"]),
    terminating=st.booleans(),
    version=st.integers(0, 3),
    said=st.sampled_from(REVISIONS),
)
# An event on a pod (put: added or changed, drop: deleted), or a pass of the controller under a context.
step_strategy = st.one_of(
    st.tuples(st.just("put"), pod_strategy),
    st.tuples(st.just("drop"), st.integers(0, 4)),
    st.tuples(st.just("pass"), st.sampled_from(REVISIONS), st.integers(0, len(GATES) - 1)),
)


def ds(revision: str) -> JSON:
    return {"metadata": {"name": "app", "namespace": "default", "uid": "ds", "generation": 1},
            "spec": {"template": {"spec": {"containers": [{"name": "main", "image": f"app:{revision}"}]}}}}


def check(owned: OwnerPods, revision: str, gate: Gate | None) -> None:
    daemonset = ds(revision)
    may_move = gate.allows if gate is not None else None
    token = None if gate is None else (Same(gate.ranking), gate.wave, gate.frozen)

    changes, counts = owned.tracker(OtaFacts).scan(daemonset, owned.pods, revision, T0, may_move, token)
    want_changes, want_counts = scan(daemonset, owned.pods.values(), revision, T0, may_move)
    assert counts == want_counts
    assert [(c.pod["metadata"]["name"], c.status, c.reason, c.patch) for c in changes] == [
        (c.pod["metadata"]["name"], c.status, c.reason, c.patch) for c in want_changes]

    tracked = owned.tracker(NodePods)
    view = tracked.update(daemonset, owned.pods, revision)
    want = pods_by_node(daemonset, owned.pods.values(), revision)
    assert (view.new.keys(), view.old.keys(), view.excess, view.all_updated) == (
        want.new.keys(), want.old.keys(), want.excess, want.all_updated)
    for node in view.new.keys() - view.excess:  # one pod of its kind there: the very same object
        assert view.new[node] is want.new[node]
    for node in view.old.keys() - view.excess:
        assert view.old[node] is want.old[node]
    assert view.unready - view.excess == want.unready - want.excess

    pending = owned.tracker(ImagePending)
    pending.refresh(owned.pods)
    assert pending.keys == {key for key, p in owned.pods.items() if any(
        c["type"] == "PodImageReady" and c["status"] != "True" for c in p["status"]["conditions"])}


@settings(max_examples=500, deadline=None)
@given(st.lists(step_strategy, max_size=40))
def test_trackers_answer_what_a_pass_over_every_pod_answers(steps: list[tuple[Any, ...]]) -> None:
    owned = OwnerPods()
    known: set[str] = set()  # nodes with a live pod when the ranking last looked, plus those it was told joined
    for step in steps:
        if step[0] == "put":
            pod = step[1]
            owned.put(f"default/{pod['metadata']['name']}", pod)
        elif step[0] == "drop":
            owned.drop(f"default/app-{step[1]}")
        else:
            check(owned, step[1], GATES[step[2]])
            tracked = owned.tracker(NodePods)
            joined = tracked.take_joined()
            names = tracked.view.names()
            if joined is None:
                known = set(names)
            else:
                # Every node with a pod now was known before, or is reported as joined.
                assert names <= known | joined
                known |= joined


def test_a_change_between_passes_is_seen_and_nothing_else_is_read() -> None:
    owned = OwnerPods()
    for index, node in enumerate(NODES):
        owned.put(f"default/app-{index}", make_pod(index, node, "r1", True, "False/", None, False, 1))
    tracker = owned.tracker(OtaFacts)
    changes, counts = tracker.scan(ds("r1"), owned.pods, "r1", T0)
    assert changes == [] and counts["total"] == len(NODES)
    # Someone else writes the condition on one pod: the next pass writes it back, and only it.
    owned.put("default/app-2", make_pod(2, "n2", "r1", True, "True/", None, False, 1))
    changes, _ = tracker.scan(ds("r1"), owned.pods, "r1", T0)
    assert [(c.pod["metadata"]["name"], c.status) for c in changes] == [("app-2", "False")]
    # A pod the tracker was not told about is not read: the pass costs the changed pods only.
    owned.pods["default/app-3"] = make_pod(3, "n3", "r1", True, "True/", None, False, 1)
    changes, _ = tracker.scan(ds("r1"), owned.pods, "r1", T0)
    assert [c.pod["metadata"]["name"] for c in changes] == ["app-2"]
    # A new revision is a new context: every pod is looked at again (app-3 too).
    changes, _ = tracker.scan(ds("r2"), owned.pods, "r2", T0)
    assert {(c.pod["metadata"]["name"], c.status) for c in changes} == {(f"app-{i}", "True") for i in range(4)}
    for index, node in enumerate(NODES):  # written
        owned.put(f"default/app-{index}", make_pod(index, node, "r1", True, "True/", None, False, 3, said="r2"))
    changes, _ = tracker.scan(ds("r2"), owned.pods, "r2", T0)
    assert changes == []
    # So is a gate that lets fewer nodes move, though no pod changed.
    changes, _ = tracker.scan(ds("r2"), owned.pods, "r2", T0, FROZEN.allows, (Same(None), 0, True))
    assert {(c.status, c.reason) for c in changes} == {("False", "WaitingForWave")} and len(changes) == 4

def test_a_node_with_two_pods_of_a_kind_is_excess_until_one_goes() -> None:
    owned = OwnerPods()
    tracked = owned.tracker(NodePods)
    owned.put("default/app-0", make_pod(0, "n0", "r2", True, None, None, False, 1))
    tracked.update(ds("r2"), owned.pods, "r2")
    owned.put("default/app-1", make_pod(1, "n0", "r2", False, None, None, False, 1))
    assert tracked.update(ds("r2"), owned.pods, "r2").excess == {"n0"}
    owned.put("default/app-1", make_pod(1, "n0", "r2", False, None, None, True, 2))  # being deleted
    view = tracked.update(ds("r2"), owned.pods, "r2")
    assert view.excess == set() and view.new["n0"] is owned.pods["default/app-0"] and view.unready == set()


def test_a_node_is_vacated_when_its_last_pod_leaves_and_until_a_pod_shows_up_there_again() -> None:
    """`OwnerPods.vacated`: what the roll counts as a node lacking a pod that nobody of ours deleted (seed-29)."""
    now = [T0]
    owned = OwnerPods(clock=lambda: now[0])
    a, b = make_pod(1, "n0", "r1", True, None, None, False, 1), make_pod(2, "n0", "r2", False, None, None, False, 1)
    owned.put("default/app-1", a)
    owned.put("default/app-2", b)
    owned.put("default/app-2", b)  # an update: still two pods there
    owned.drop("default/app-1")
    assert owned.vacated_nodes() == set()  # one pod left on n0
    owned.drop("default/app-2")
    assert owned.vacated_nodes() == {"n0"}
    now[0] += 59
    assert owned.vacated_nodes() == {"n0"}
    owned.put("default/app-3", make_pod(3, "n0", "r2", False, None, None, False, 1))
    assert owned.vacated_nodes() == set()
    owned.drop("default/app-3")
    now[0] += 61  # never recreated (placement changed): forgotten, desiredNumberScheduled judges again
    assert owned.vacated_nodes() == set() and owned.vacated == {}
