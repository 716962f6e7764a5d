"""controller/roll_views.py: after any sequence of pod events (added, changed, deleted; moved to another node,
relabelled to another revision, being deleted, several on one node, unbound, UIDs shared), Node objects
replaced or removed, and passes under another revision or template generation, the views the tracker keeps
from the pods that changed are, view for view, what `rolling.node_views` derives from every pod, and the live
UIDs what `plan_step` derives; so the roll's decisions (`plan_rolling_update` on them) are the very same."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from edgeagent.contract import held_by
from edgeagent.controller.pod_index import OwnerPods
from edgeagent.controller.pods import available_at, available_by, available_from, is_available, ready_since
from edgeagent.controller.roll_views import RollViews
from edgeagent.controller.rolling import node_views, plan_rolling_update
from edgeagent.controller.settings import roll_settings
from edgeagent.kube.objects import is_terminating, uid_of
from tests.unit.test_controller_objects import T0, daemonset, node, pod

JSON = dict[str, Any]
NODES = ["n0", "n1", "n2", "n3"]
HASHES = ["h1", "h2"]


def make_pod(index: int, where: str, hash_: str, generation: int, ready: bool, terminating: bool, uid: int,
             bound: bool) -> JSON:
    made = pod(f"app-{index}", where, hash_, ready=ready, terminating=terminating, generation=generation,
               bound=bound)
    made["metadata"]["uid"] = f"u{uid}"  # a few values only: two pods may carry one (a duplicate event)
    if not where:
        made["spec"].pop("nodeName", None)
        made["spec"].pop("affinity", None)
    return made


pod_strategy = st.builds(
    make_pod,
    index=st.integers(0, 4),
    where=st.sampled_from([*NODES, ""]),
    hash_=st.sampled_from(HASHES),
    generation=st.integers(1, 3),
    ready=st.booleans(),
    terminating=st.booleans(),
    uid=st.integers(0, 3),
    bound=st.booleans(),
)
step_strategy = st.one_of(
    st.tuples(st.just("put"), pod_strategy),
    st.tuples(st.just("drop"), st.integers(0, 4)),
    st.tuples(st.just("node"), st.sampled_from(NODES), st.booleans()),  # a new Node object (Ready or not)
    st.tuples(st.just("node_gone"), st.sampled_from(NODES)),
    st.tuples(st.just("pass"), st.sampled_from(HASHES), st.integers(1, 3)),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(step_strategy, max_size=50))
def test_kept_views_are_what_a_pass_over_every_pod_derives(steps: list[tuple[Any, ...]]) -> None:
    owned = OwnerPods()
    nodes: dict[str, JSON] = {name: node(name) for name in NODES}
    for step in [*steps, ("pass", "h2", 2)]:
        if step[0] == "put":
            owned.put(f"default/{step[1]['metadata']['name']}", step[1])
        elif step[0] == "drop":
            owned.drop(f"default/app-{step[1]}")
        elif step[0] == "node":
            nodes[step[1]] = node(step[1], ready=step[2], changed=T0 - 10)
        elif step[0] == "node_gone":
            nodes.pop(step[1], None)
        else:
            hash_, generation = step[1], step[2]
            ds = daemonset(generation=generation, annotations={"apps.openyurt.io/max-unavailable": "1"})
            tracked = owned.tracker(RollViews)
            views = tracked.views(ds, owned.pods, hash_, nodes)
            want = node_views(ds, owned.pods.values(), nodes, hash_)
            assert views == want
            for got, expected in zip(views, want, strict=True):  # the very objects, not equal copies
                assert got.node is expected.node and got.new is expected.new and got.old is expected.old
                assert all(a is b for a, b in zip(got.terminating, expected.terminating, strict=True))
            assert set(tracked.live) == {uid_of(p) for p in owned.pods.values() if not is_terminating(p)}
            roll, problems = roll_settings(ds)
            assert problems == []
            assert plan_rolling_update(ds, owned.pods.values(), nodes, hash_, roll, T0, views=views) == \
                plan_rolling_update(ds, owned.pods.values(), nodes, hash_, roll, T0)


def test_a_pass_regroups_only_the_nodes_whose_pods_changed() -> None:
    """A pod the tracker was not told about is not read, a view whose pods and Node are unchanged is the same
    object as before: the pass costs the changed pods, not a walk over every pod."""
    owned = OwnerPods()
    nodes = {name: node(name) for name in NODES}
    for index, name in enumerate(NODES):
        owned.put(f"default/app-{index}", pod(f"app-{index}", name, "h1"))
    ds = daemonset()
    tracked = owned.tracker(RollViews)
    first = tracked.views(ds, owned.pods, "h2", nodes)
    assert [v.old is not None and v.new is None for v in first] == [True] * 4
    owned.put("default/app-1", pod("app-1", "n1", "h1", terminating=True))
    owned.pods["default/app-3"] = pod("app-3", "n3", "h2")  # not told: not read
    nodes["n2"] = node("n2", ready=False)
    second = tracked.views(ds, owned.pods, "h2", nodes)
    assert second[0] is first[0] and second[3] is first[3]
    assert second[1].old is None and len(second[1].terminating) == 1
    assert not second[2].ready
    # A new revision is a new context: every pod is read again (app-3 too).
    third = tracked.views(ds, owned.pods, "h1", nodes)
    assert third[3].old is owned.pods["default/app-3"]
    assert third == node_views(ds, owned.pods.values(), nodes, "h1")


ready_pod_strategy = st.builds(
    lambda ready, since, garbled, held: (
        pod("p", "n0", "h1", ready=ready, ready_since=T0 - since, extra_conditions=[
            {"type": "UpgradeHeld", "status": held, "reason": "Window", "message": "closed"}]), garbled),
    ready=st.booleans(),
    since=st.sampled_from([0, 1, 4, 5, 6, 1000]),
    garbled=st.sampled_from([None, "", "soon"]),
    held=st.sampled_from(["True", "False"]),
)


@settings(max_examples=300, deadline=None)
@given(ready_pod_strategy, ready_pod_strategy, st.sampled_from([0, 5]), st.sampled_from([T0, T0 + 0.5, T0 + 10]))
def test_the_facts_a_view_keeps_of_its_pods_are_what_the_pods_say(
    new_case: tuple[JSON, str | None], old_case: tuple[JSON, str | None], min_ready: int, now: float,
) -> None:
    """The roll reads `ready_since`, `is_available`, `available_at` and `held_by` of a view's live pods from the
    view (derived once per pod change): the same answers as reading the pods, whatever their Ready condition
    (missing or garbled time included), minReadySeconds and the moment."""
    cases = []
    for (made, garbled), hash_ in ((new_case, "h2"), (old_case, "h1")):
        made["metadata"]["labels"]["controller-revision-hash"] = hash_
        made["metadata"]["name"] = f"p-{hash_}"
        if garbled is not None:
            made["status"]["conditions"][0]["lastTransitionTime"] = garbled
        cases.append(made)
    new, old = cases
    [view] = node_views(daemonset(generation=9), [new, old], {"n0": node("n0")}, "h2")
    assert view.new is new and view.old is old
    for kept, live in ((view.new_since, new), (view.old_since, old)):
        assert kept == ready_since(live)
        assert available_by(kept, min_ready, now) == is_available(live, min_ready, now)
        assert available_from(kept, min_ready) == available_at(live, min_ready)
    assert view.hold == held_by(old)
    assert available_by(None, min_ready, now) is False and available_from(None, min_ready) is None
