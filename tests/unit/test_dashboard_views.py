"""What the dashboard's LiveFleet gives the page beyond states: label sets, wave groups, the revisions' images
and the failed version, and the cell recomputed when minReadySeconds elapses with no event."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as hs

from edgeagent.fleet.live import LiveFleet, revision_images, shown_labels, slim_revision
from edgeagent.rollout import plan as plans
from edgeagent.rollout import plan_source
from tests.unit.test_fleet_model import DS_UID, ds, node, pod

JSON = dict[str, Any]


def revision(hash_: str, number: int, image: str) -> JSON:
    """A DaemonSet ControllerRevision as the API server stores it: the template as a patch in `data`."""
    return {"metadata": {"name": f"web-{hash_}", "namespace": "default", "labels": {"controller-revision-hash": hash_},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "web",
                                              "uid": DS_UID, "controller": True}]},
            "revision": number,
            "data": {"spec": {"template": {"$patch": "replace", "metadata": {"labels": {"app": "web"}},
                                           "spec": {"containers": [{"name": "main", "image": image},
                                                                   {"name": "side", "image": "proxy:3"}]}}}}}


def rollout_plan(status: JSON, steps: str = "1,100%", group_label: str = "") -> JSON:
    """The RolloutPlan of the test DaemonSet `web`: `steps` as the CLI writes them, `status` as the controller
    writes it (phases as in `status.phase`)."""
    spec: JSON = {"daemonSet": "web", "steps": [s if s.endswith("%") else int(s) for s in steps.split(",")]}
    if group_label:
        spec["groupLabel"] = group_label
    return {"apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan",
            "metadata": {"name": "web", "namespace": "default", "uid": "plan-uid"}, "spec": spec, "status": status}


def labelled(name: str, labels: dict[str, str]) -> JSON:
    the_node = node(name)
    the_node["metadata"]["labels"] = {"kubernetes.io/hostname": name, **labels}
    return the_node


def test_a_revision_keeps_its_images_through_the_informers_transform() -> None:
    rev = slim_revision(revision("new", 2, "nginx:1.20"))
    assert revision_images(rev) == ["nginx:1.20", "proxy:3"]
    assert revision_images({"data": "garbage"}) == [] and revision_images({}) == []


def test_the_card_names_the_rolled_back_revision_with_its_images_and_the_failed_nodes() -> None:
    """After a rollback the DaemonSet is back on the stable revision; the summary still names the revision
    that failed (hash and images) and the nodes the rollout counted failed, the first few by name."""
    failures = [{"node": f"n{i}", "reason": "CrashLoopBackOff"} for i in (12, 3, 7, 1)]
    state = {"revision": "bad", "stableRevision": "good", "wave": 1, "waves": 2, "phase": "RolledBack",
             "failures": failures}
    fed = LiveFleet(clock=lambda: 0.0)
    fed.on_plan("ADDED", rollout_plan(state), None)
    fed.on_daemonset("ADDED", ds(), None)
    fed.on_revision("ADDED", slim_revision(revision("good", 1, "nginx:1.20")), None)
    fed.on_revision("ADDED", slim_revision(revision("bad", 3, "nginx:1.21")), None)
    fed.on_revision("ADDED", slim_revision(revision("good", 4, "nginx:1.20")), None)  # the rollback: newest
    fed.on_node("ADDED", node("n1"), None)
    fed.on_pod("ADDED", pod("n1", generation="2", revision="good"), None)
    fed.finish_batch()
    (summary,) = fed.summaries()
    assert (summary["r"], summary["p"], summary["pr"], summary["sr"]) == ("good", "RolledBack", "bad", "good")
    assert summary["i"] == {"good": "nginx:1.20, proxy:3", "bad": "nginx:1.21, proxy:3"}
    assert summary["fc"] == 4 and summary["f"] == [["n1", "CrashLoopBackOff"], ["n3", "CrashLoopBackOff"],
                                                   ["n7", "CrashLoopBackOff"]]
    details = fed.node_details("n1")
    assert details is not None and details["daemonsets"]["default/web"]["images"] == "nginx:1.20, proxy:3"


def test_without_a_plan_the_card_has_the_current_revisions_images_and_no_failure() -> None:
    fed = LiveFleet(clock=lambda: 0.0)
    fed.on_daemonset("ADDED", ds(), None)
    fed.on_revision("ADDED", slim_revision(revision("new", 2, "nginx:1.20")), None)
    fed.finish_batch()
    (summary,) = fed.summaries()
    assert summary["i"] == {"new": "nginx:1.20, proxy:3"}
    assert not {"pr", "sr", "fc", "f", "g"} & set(summary)  # left out when empty: fewer bytes per change


def test_a_cell_turns_up_to_date_when_min_ready_seconds_elapse_with_no_event() -> None:
    """A new pod Ready at t=100 under minReadySeconds 30 is upgrading until t=130, then up to date: no
    informer event says so, `tick` (called by the dashboard four times a second) does."""
    now = [110.0]
    the_ds = ds()
    the_ds["spec"] = {"minReadySeconds": 30}
    fresh = pod("n1", generation="2", revision="new")
    fresh["status"]["conditions"][0]["lastTransitionTime"] = "1970-01-01T00:01:40Z"  # t=100
    fed = LiveFleet(clock=lambda: now[0])
    told: list[tuple[str, str | None]] = []
    fed.add_node_listener(lambda n, code: told.append((n, code)))
    fed.on_daemonset("ADDED", the_ds, None)
    fed.on_revision("ADDED", slim_revision(revision("new", 2, "nginx:1.20")), None)
    fed.on_node("ADDED", node("n1"), None)
    fed.finish_batch()
    fed.on_pod("ADDED", fresh, None)
    assert fed.states == {"n1": "g"}
    now[0] = 129.0
    fed.tick()
    assert fed.states == {"n1": "g"} and told == []
    now[0] = 130.0
    fed.tick()
    assert fed.states == {"n1": "u"} and told == [("n1", "u")]
    assert fed.summaries()[0]["u"] == 1
    fed.tick()  # nothing left to do
    assert told == [("n1", "u")]


SITES = ["a", "b", "c"]


@settings(max_examples=40, deadline=None)
@given(sites=hs.lists(hs.sampled_from([*SITES, None]), min_size=1, max_size=30),
       steps=hs.sampled_from(["1,100%", "1,50%,100%", "25%,100%", "2,5,100%"]),
       grouped=hs.booleans())
def test_wave_groups_are_the_planners_waves_and_label_sets_are_the_nodes_labels(
        sites: list[str | None], steps: str, grouped: bool) -> None:
    """Each node of a rolling plan is in exactly one wave group, the planner's (`rollout.plan.rank`, as the
    WAITING state uses it); each grid row's label set is the node's labels less its hostname."""
    names = [f"n{i}" for i in range(len(sites))]
    nodes = [labelled(n, {"site": s} if s else {}) for n, s in zip(names, sites, strict=True)]
    the_plan = rollout_plan({"revision": "new", "wave": 1, "waves": 2, "phase": "Progressing"}, steps,
                            "site" if grouped else "")
    the_ds = ds()
    fed = LiveFleet(clock=lambda: 0.0)
    fed.on_plan("ADDED", the_plan, None)
    fed.on_daemonset("ADDED", the_ds, None)
    for the_node in nodes:
        fed.on_node("ADDED", the_node, None)
    for name in names:
        fed.on_pod("ADDED", {**pod(name), "metadata": {**pod(name)["metadata"], "uid": f"pod-{name}",
                                                         "name": f"web-{name}"}}, None)
    fed.finish_batch()
    plan = plan_source.plan_of(the_ds, plan_source.index([the_plan]))
    assert plan is not None and (plan.group_label == "site") == grouped
    ranking = plans.rank(plan, {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes})
    (waves,) = fed.waves().values()
    assert [n for wave in waves for n in wave] == ranking.order  # every node once, in the planner's order
    assert {n: k for k, wave in enumerate(waves, 1) for n in wave} == dict(ranking.waves_by_node)
    assert fed.summaries()[0].get("g") == ("site" if grouped else None)

    rows, sets = fed.labelled_grid()
    assert [r[:2] for r in rows] == fed.grid()
    assert len({json.dumps(s, sort_keys=True) for s in sets}) == len(sets)  # each set sent once
    by_name = {n["metadata"]["name"]: n for n in nodes}
    assert all(sets[index] == shown_labels(by_name[name]) for name, _, index in rows)
    assert all("kubernetes.io/hostname" not in s for s in sets)

    # A node's labels change: the page is told, and the waves are recomputed (and resent).
    before = fed.waves_version()
    told: list[tuple[str, dict[str, str]]] = []
    fed.add_label_listener(lambda n, labels: told.append((n, labels)))
    moved = labelled("n0", {"site": "z"})
    fed.on_node("MODIFIED", moved, nodes[0])
    assert told == [("n0", {"site": "z"})]
    fed.waves()
    assert fed.waves_version() != before
