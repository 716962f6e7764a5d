"""controller/pod_index.py and its trackers: after any sequence of pod events, revisions and gates, a tracker
that re-derives only the pods marked by the informer handler answers exactly what a pass over every pod
answers (ota.scan, waves.pods_by_node, the pods with an unfinished PodImageReady). A tracker that missed a
change (a stale cache) would answer from an old pod and fail here."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from edgeagent.controller.inplace_exec import declares_gate
from edgeagent.controller.ota import ConditionChange, OtaFacts, scan
from edgeagent.controller.pod_index import OwnerPods, digest_of
from edgeagent.controller.waves import NodePods, pods_by_node
from edgeagent.kube.timeutil import format_time
from edgeagent.rollout.machine import OPEN_GATE, Gate
from edgeagent.rollout.plan import Plan, Step, rank

JSON = dict[str, Any]
T0 = 1_800_000_000.0
NODES = [f"n{i}" for i in range(4)]
REVISIONS = ["r1", "r2"]
PLAN = Plan(steps=(Step(1, False), Step(50, True), Step(100, True)), bake_seconds=0)
RANKING = rank(PLAN, {n: {} for n in NODES})  # waves of 1, 1 and 2 nodes
# Another ranking, made after n3 left: n3 is a node it does not know (let through by any gate not frozen).
OTHER = rank(PLAN, {n: {} for n in NODES[:3]})
FROZEN = Gate(None, 0, frozen=True)
GATES = [None, Gate(RANKING, 1), Gate(RANKING, 2), FROZEN, Gate(RANKING, 0), Gate(RANKING, 3), OPEN_GATE,
         Gate(OTHER, 1), Gate(RANKING, 2, frozen=True), Gate(RANKING, 1)]


def make_pod(index: int, node: str, revision: str, ready: bool, need: str | None, image: str | None,
             terminating: bool, version: int, said: str = "r1", generation: str | None = None,
             held: str | None = None, gated: bool = False) -> JSON:
    conditions: list[JSON] = [{"type": "Ready", "status": "True" if ready else "False",
                               "lastTransitionTime": format_time(T0)}]
    if need is not None:
        status, _, reason = need.partition("/")
        conditions.append({"type": "PodNeedUpgrade", "status": status, "reason": reason,
                           "message": f"controllerrevision: {said}"})
    if image is not None:
        conditions.append({"type": "PodImageReady", "status": image})
    if held is not None:
        conditions.append({"type": "UpgradeHeld", "status": held, "reason": "HeldByOperator"})
    meta: JSON = {"name": f"app-{index}", "namespace": "default", "uid": f"u{index}-{version}",
                  "resourceVersion": str(version), "labels": {"controller-revision-hash": revision}}
    if generation is not None:
        meta["labels"]["pod-template-generation"] = generation
    if terminating:
        meta["deletionTimestamp"] = format_time(T0)
    spec: JSON = {"nodeName": node}
    if gated:
        spec["readinessGates"] = [{"conditionType": "edgeagent.io/InPlaceUpdateReady"}]
    return {"metadata": meta, "spec": spec, "status": {"conditions": conditions}}


pod_strategy = st.builds(
    make_pod,
    index=st.integers(0, 4),
    node=st.sampled_from(NODES),
    revision=st.sampled_from(REVISIONS),
    ready=st.booleans(),
    need=st.sampled_from([None, "True/", "False/", "False/WaitingForWave", "True/WaveReached"]),
    image=st.sampled_from([None, "True", "False"]),
    terminating=st.booleans(),
    version=st.integers(0, 3),
    said=st.sampled_from(REVISIONS),
    generation=st.sampled_from([None, "1", "2"]),
    held=st.sampled_from([None, "True", "False"]),
    gated=st.booleans(),
)
# An event on a pod (put: added or changed, drop: deleted), or a pass of the controller under a context.
step_strategy = st.one_of(
    st.tuples(st.just("put"), pod_strategy),
    st.tuples(st.just("drop"), st.integers(0, 4)),
    # The DaemonSet's template generation (None: not annotated): a pod whose generation label matches it is on the
    # current revision whatever its hash label says.
    st.tuples(st.just("pass"), st.sampled_from(REVISIONS), st.integers(0, len(GATES) - 1), st.booleans(),
              st.sampled_from([None, "1", "2"])),
)


def ds(revision: str, generation: str | None = None) -> JSON:
    meta: JSON = {"name": "app", "namespace": "default", "uid": "ds", "generation": 1}
    if generation is not None:
        meta["annotations"] = {"deprecated.daemonset.template.generation": generation}
    return {"metadata": meta,
            "spec": {"template": {"spec": {"containers": [{"name": "main", "image": f"app:{revision}"}]}}}}


def check(owned: OwnerPods, revision: str, gate: Gate | None, generation: str | None = None) -> list[ConditionChange]:
    daemonset = ds(revision, generation)
    may_move = gate.allows if gate is not None else None

    changes, counts = owned.tracker(OtaFacts).scan(daemonset, owned.digests, revision, T0, gate)
    want_changes, want_counts = scan(daemonset, owned.pods.values(), revision, T0, may_move)
    assert counts == want_counts
    assert [(c.pod["metadata"]["name"], c.status, c.reason, c.patch) for c in changes] == [
        (c.pod["metadata"]["name"], c.status, c.reason, c.patch) for c in want_changes]

    tracked = owned.tracker(NodePods)
    view = tracked.update(daemonset, owned.digests, revision)
    want = pods_by_node(daemonset, owned.pods.values(), revision)
    assert (view.new.keys(), view.old.keys(), view.excess, view.all_updated) == (
        want.new.keys(), want.old.keys(), want.excess, want.all_updated)
    for node in view.new.keys() - view.excess:  # one pod of its kind there: the very same object
        assert view.new[node] is want.new[node]
    for node in view.old.keys() - view.excess:
        assert view.old[node] is want.old[node]
    assert view.unready - view.excess == want.unready - want.excess
    assert view.held - view.excess == want.held - want.excess
    # The nodes of pods being deleted (kept in every ranking made now): as a pass over every pod finds them.
    assert tracked.dying() == {p["spec"]["nodeName"] for p in owned.pods.values()
                               if p["metadata"].get("deletionTimestamp")}

    assert owned.image_pending == {key for key, p in owned.pods.items() if any(
        c["type"] == "PodImageReady" and c["status"] != "True" for c in p["status"]["conditions"])}
    # The pods whose in-place readiness gate a pass may open: those that declare it, and only those.
    assert owned.gated == {key for key, p in owned.pods.items() if declares_gate(p)}
    return changes


def written(pod: JSON, change: ConditionChange) -> JSON:
    """The pod once the controller's condition patch has landed (a new object, as the informer hands over)."""
    out = copy.deepcopy(pod)
    conditions = [c for c in out["status"]["conditions"] if c["type"] != "PodNeedUpgrade"]
    conditions.append({"type": "PodNeedUpgrade", "status": change.status, "reason": change.reason,
                       "message": change.message})
    out["status"]["conditions"] = conditions
    out["metadata"]["resourceVersion"] = str(int(out["metadata"]["resourceVersion"]) + 10)
    return out


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
            changes = check(owned, step[1], GATES[step[2]], step[4])
            if step[3]:  # the writes land and the next pass sees them: now right, under this gate only
                for change in changes:
                    owned.put(f"default/{change.pod['metadata']['name']}", written(change.pod, change))
                assert check(owned, step[1], GATES[step[2]], step[4]) == []
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
    changes, counts = tracker.scan(ds("r1"), owned.digests, "r1", T0)
    assert changes == [] and counts["total"] == len(NODES)
    # Someone else writes the condition on one pod: the next pass writes it back, and only it.
    owned.put("default/app-2", make_pod(2, "n2", "r1", True, "True/", None, False, 1))
    changes, _ = tracker.scan(ds("r1"), owned.digests, "r1", T0)
    assert [(c.pod["metadata"]["name"], c.status) for c in changes] == [("app-2", "False")]
    # A pod the tracker was not told about is not read: the pass costs the changed pods only.
    sneaked = make_pod(3, "n3", "r1", True, "True/", None, False, 1)
    owned.pods["default/app-3"], owned.digests["default/app-3"] = sneaked, digest_of(sneaked)[0]
    changes, _ = tracker.scan(ds("r1"), owned.digests, "r1", T0)
    assert [c.pod["metadata"]["name"] for c in changes] == ["app-2"]
    # A new revision is a new context: every pod is looked at again (app-3 too).
    changes, _ = tracker.scan(ds("r2"), owned.digests, "r2", T0)
    assert {(c.pod["metadata"]["name"], c.status) for c in changes} == {(f"app-{i}", "True") for i in range(4)}
    for index, node in enumerate(NODES):  # written
        owned.put(f"default/app-{index}", make_pod(index, node, "r1", True, "True/", None, False, 3, said="r2"))
    changes, _ = tracker.scan(ds("r2"), owned.digests, "r2", T0)
    assert changes == []
    # So is a gate that lets fewer nodes move, though no pod changed.
    changes, _ = tracker.scan(ds("r2"), owned.digests, "r2", T0, FROZEN)
    assert {(c.status, c.reason) for c in changes} == {("False", "WaitingForWave")} and len(changes) == 4


def test_moved_since_lists_the_nodes_whose_answer_changed_or_none() -> None:
    """`Gate.moved_since` against `allows` asked of every node (known to the ranking or not)."""
    everyone = [*NODES, "joined-later"]
    for before in GATES[1:]:
        for after in GATES[1:]:
            assert before is not None and after is not None
            moved = after.moved_since(before)
            differ = {n for n in everyone if before.allows(n) != after.allows(n)}
            if moved is None:
                # Only a freeze or thaw, or two rankings, may refuse to list them.
                assert before.frozen != after.frozen or (
                    before.ranking is not after.ranking and None not in (before.ranking, after.ranking))
            else:
                assert set(moved) == differ, (before, after)
    assert Gate(RANKING, 2).moved_since(Gate(RANKING, 1)) == RANKING.nodes_of_wave(2)


def test_a_wave_change_re_derives_only_the_pods_of_the_nodes_it_moves() -> None:
    """At 100,000 nodes the pass that starts wave 2 re-derived every pod (~360 ms); only the pods of the nodes
    whose wave was reached (or left, going back) can answer differently. A freeze (abort, rollback) starts
    over: its gate refuses nodes the ranking does not know, which cannot be listed from the ranking."""
    owned = OwnerPods()
    for index, node in enumerate(NODES):
        owned.put(f"default/app-{index}", make_pod(index, node, "r1", True, None, None, False, 1))
    tracker = owned.tracker(OtaFacts)

    def derived(gate: Gate) -> tuple[int, set[tuple[str, str, str]]]:
        before = tracker.derived
        changes, _ = tracker.scan(ds("r2"), owned.digests, "r2", T0, gate)
        want, _ = scan(ds("r2"), owned.pods.values(), "r2", T0, gate.allows)
        assert [c.patch for c in changes] == [c.patch for c in want]
        for change in changes:  # written, as the controller does
            key = f"default/{change.pod['metadata']['name']}"
            pod = owned.pods[key]
            index = int(pod["metadata"]["name"].split("-")[1])
            need = f"{change.status}/{change.reason}"
            owned.put(key, make_pod(index, pod["spec"]["nodeName"], "r1", True, need, None, False, 2, said="r2"))
        tracker.scan(ds("r2"), owned.digests, "r2", T0, gate)
        return tracker.derived - before, {(c.pod["spec"]["nodeName"], c.status, c.reason) for c in changes}

    first = RANKING.order[0]
    assert derived(Gate(RANKING, 1))[1] == {(n, "False", "WaitingForWave") for n in NODES if n != first} | {
        (first, "True", "WaveReached")}
    second = RANKING.nodes_of_wave(2)[0]
    # Wave 2: only its node's pod is derived again (and once more when its written condition comes back).
    assert derived(Gate(RANKING, 2)) == (1 + 1, {(second, "True", "WaveReached")})
    last = set(RANKING.nodes_of_wave(3))
    assert derived(Gate(RANKING, 3)) == (2 + 2, {(n, "True", "WaveReached") for n in last})
    assert derived(OPEN_GATE) == (0, set())  # complete: the same nodes may move
    count, changes = derived(Gate(RANKING, 3, frozen=True))  # aborted: every pod again
    assert count == len(NODES) + len(NODES) and changes == {(n, "False", "WaitingForWave") for n in NODES}

def test_a_pod_changed_twice_between_two_passes_is_taken_back_as_it_was_derived() -> None:
    """A tracker takes back a changed pod's facts from the digest it derived them from (`Tracker.mark`'s
    `before`), not from a later one it never saw: here the pod moves n0 -> n1 -> n2 and Ready -> not -> Ready."""
    owned = OwnerPods()
    owned.put("default/app-0", make_pod(0, "n0", "r1", True, "True/", None, False, 1))
    owned.put("default/app-1", make_pod(1, "n3", "r1", True, "True/", None, False, 1))
    check(owned, "r2", Gate(RANKING, 1))
    owned.put("default/app-0", make_pod(0, "n1", "r2", False, "False/", None, False, 2))
    owned.put("default/app-0", make_pod(0, "n2", "r1", True, "True/", None, False, 3))
    check(owned, "r2", Gate(RANKING, 1))
    owned.drop("default/app-0")
    owned.put("default/app-0", make_pod(0, "n1", "r2", False, None, None, False, 4))
    check(owned, "r2", Gate(RANKING, 1))


def test_a_node_with_two_pods_of_a_kind_is_excess_until_one_goes() -> None:
    owned = OwnerPods()
    tracked = owned.tracker(NodePods)
    owned.put("default/app-0", make_pod(0, "n0", "r2", True, None, None, False, 1))
    tracked.update(ds("r2"), owned.digests, "r2")
    owned.put("default/app-1", make_pod(1, "n0", "r2", False, None, None, False, 1))
    assert tracked.update(ds("r2"), owned.digests, "r2").excess == {"n0"}
    owned.put("default/app-1", make_pod(1, "n0", "r2", False, None, None, True, 2))  # being deleted
    view = tracked.update(ds("r2"), owned.digests, "r2")
    assert view.excess == set() and view.new["n0"] is owned.pods["default/app-0"] and view.unready == set()


def test_a_node_is_held_while_its_old_pod_is_and_after_the_other_old_pod_goes() -> None:
    """`PodsByNode.held` follows the node's `old` pod: when one of two old pods goes, the one left says."""
    owned = OwnerPods()
    tracked = owned.tracker(NodePods)
    owned.put("default/app-0", make_pod(0, "n0", "r1", True, None, None, False, 1, held="True"))
    assert tracked.update(ds("r2"), owned.digests, "r2").held == {"n0"}
    owned.put("default/app-1", make_pod(1, "n0", "r1", True, None, None, False, 1))
    assert tracked.update(ds("r2"), owned.digests, "r2").held == set()
    owned.drop("default/app-1")
    view = tracked.update(ds("r2"), owned.digests, "r2")
    assert view.excess == set() and view.held == {"n0"}
    owned.put("default/app-0", make_pod(0, "n0", "r1", True, None, None, False, 2, held="False"))
    assert tracked.update(ds("r2"), owned.digests, "r2").held == set()


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


def test_a_written_pod_is_left_out_until_any_later_version_of_it_arrives() -> None:
    """The answer to the controller's condition patch can come before the patch's own watch event: a pass in
    between decides on the cached pod as it was, and would write it again. From the answer (`wrote`) until any later
    version of the pod arrives, its key is `unobserved` and `scan` leaves it out. An answer that comes after the later
    version keeps nothing (that version is what the next pass decides on)."""
    owned = OwnerPods()
    for index, node in enumerate(NODES[:3]):
        owned.put(f"default/app-{index}", make_pod(index, node, "r1", True, None, None, False, 1))
    tracker = owned.tracker(OtaFacts)

    def listed() -> list[str]:
        changes, _ = tracker.scan(ds("r2"), owned.digests, "r2", T0, None, skip=owned.unobserved.keys())
        return [c.pod["metadata"]["name"] for c in changes]

    first = check(owned, "r2", None)
    assert [c.pod["metadata"]["name"] for c in first] == ["app-0", "app-1", "app-2"]
    owned.wrote("default/app-0", first[0].pod)
    owned.wrote("default/app-1", first[1].pod)
    assert owned.unobserved.keys() == {"default/app-0", "default/app-1"}
    assert listed() == ["app-2"]
    owned.put("default/app-0", written(first[0].pod, first[0]))  # its event: the cache shows the write
    assert owned.unobserved.keys() == {"default/app-1"}
    assert listed() == ["app-2"]
    owned.drop("default/app-1")  # deleted before its event came
    assert owned.unobserved == {}
    owned.put("default/app-2", written(first[2].pod, first[2]))  # the event first, then the answer
    owned.wrote("default/app-2", first[2].pod)
    assert owned.unobserved == {}
    assert listed() == []


def test_a_wave_change_judges_the_moved_pods_where_they_stand() -> None:
    """A wave change works out again only whether each moved pod's condition is right (`OtaFacts._move`): one the
    earlier gate made wrong is right again when its wave is reached again, with nothing written in between. A
    moved pod changed or deleted since the last pass is left to `refresh`, which derives it whole."""
    owned = OwnerPods()
    second, third = RANKING.nodes_of_wave(2)[0], RANKING.nodes_of_wave(3)[0]
    for node in (second, third):
        index = NODES.index(node)
        owned.put(f"default/app-{index}", make_pod(index, node, "r1", True, "True/WaveReached", None, False, 1,
                                                   said="r2"))

    def listed(gate: Gate) -> list[tuple[str, str, str]]:
        return [(c.pod["spec"]["nodeName"], c.status, c.reason) for c in check(owned, "r2", gate)]

    assert listed(Gate(RANKING, 3)) == []
    assert sorted(listed(Gate(RANKING, 1))) == sorted([(second, "False", "WaitingForWave"),
                                                       (third, "False", "WaitingForWave")])
    assert listed(Gate(RANKING, 3)) == []  # back where the conditions are right
    owned.drop(f"default/app-{NODES.index(third)}")
    owned.put(f"default/app-{NODES.index(second)}", make_pod(NODES.index(second), second, "r1", False,
                                                             "True/WaveReached", None, False, 2, said="r2"))
    assert listed(Gate(RANKING, 1)) == [(second, "False", "WaitingForWave")]


def test_a_scan_with_a_limit_lists_a_batch_in_name_order_and_says_more_are_left() -> None:
    """With more changes than `limit`, a batch: the first to have become wrong (not those first by name, which
    would sort every key in each pass), in name order among themselves, leaving out `skip`."""
    owned = OwnerPods()
    for index, node in reversed(list(enumerate(NODES))):
        owned.put(f"default/app-{index}", make_pod(index, node, "r1", True, None, None, False, 1))
    tracker = owned.tracker(OtaFacts)
    changes, _ = tracker.scan(ds("r2"), owned.digests, "r2", T0, None, skip={"default/app-3"}, limit=2)
    assert [c.pod["metadata"]["name"] for c in changes] == ["app-1", "app-2"] and tracker.more
    changes, _ = tracker.scan(ds("r2"), owned.digests, "r2", T0, None, skip={"default/app-3"}, limit=3)
    assert [c.pod["metadata"]["name"] for c in changes] == ["app-0", "app-1", "app-2"] and not tracker.more
    changes, _ = tracker.scan(ds("r2"), owned.digests, "r2", T0, None, limit=4)
    assert [c.pod["metadata"]["name"] for c in changes] == ["app-0", "app-1", "app-2", "app-3"]
    assert not tracker.more


def test_a_pod_changed_only_in_its_condition_takes_its_old_version_s_place() -> None:
    """A written PodNeedUpgrade changes nothing the pods-by-node view derives, so the new version only takes the old
    one's place (`NodePods._replaced`), also among two pods of a kind on one node: when the other one goes, the node's
    pod is the new version, not the old one."""
    owned = OwnerPods()
    owned.put("default/app-0", make_pod(0, "n0", "r1", True, None, None, False, 1))
    owned.put("default/app-1", make_pod(1, "n0", "r1", True, None, None, False, 1))
    owned.put("default/app-2", make_pod(2, "n1", "r1", True, None, None, False, 1))
    check(owned, "r2", None)
    tracker = owned.tracker(NodePods)
    assert tracker.take_joined() is None  # (a start over)
    owned.put("default/app-0", make_pod(0, "n0", "r1", True, "True/", None, False, 2, said="r2"))
    owned.put("default/app-2", make_pod(2, "n1", "r1", True, "True/", None, False, 2, said="r2"))
    check(owned, "r2", None)
    assert tracker.take_joined() == set()  # replaced in place: no node left and came back
    owned.drop("default/app-1")
    check(owned, "r2", None)
    assert tracker.view.old["n0"] is owned.pods["default/app-0"]


def test_a_pod_whose_ready_or_hold_changed_is_derived_again_not_replaced() -> None:
    """Only a change the pods-by-node view does not derive is taken in place: a new pod turning not Ready, an old
    pod turning held, or a pod relabelled to the current revision (hash or template generation) changes the node's
    `unready`, `held` or side."""
    owned = OwnerPods()
    owned.put("default/app-0", make_pod(0, "n0", "r2", True, None, None, False, 1))
    owned.put("default/app-1", make_pod(1, "n1", "r1", True, None, None, False, 1))
    owned.put("default/app-2", make_pod(2, "n2", "r1", True, None, None, False, 1))
    owned.put("default/app-3", make_pod(3, "n3", "r1", True, None, None, False, 1))
    check(owned, "r2", None, generation="2")
    owned.put("default/app-3", make_pod(3, "n3", "r1", True, None, None, False, 2, generation="2"))
    check(owned, "r2", None, generation="2")
    assert "n3" in owned.tracker(NodePods).view.new  # its generation label says the current template
    owned.put("default/app-0", make_pod(0, "n0", "r2", False, None, None, False, 2))
    owned.put("default/app-1", make_pod(1, "n1", "r1", True, None, None, False, 2, held="True"))
    owned.put("default/app-2", make_pod(2, "n2", "r2", True, None, None, False, 2))
    check(owned, "r2", None, generation="2")
    view = owned.tracker(NodePods).view
    assert (view.unready, view.held, set(view.new), set(view.old)) == ({"n0"}, {"n1"}, {"n0", "n2", "n3"}, {"n1"})
