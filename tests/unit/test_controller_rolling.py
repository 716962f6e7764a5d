from __future__ import annotations

from typing import Any

import pytest

from edgeagent.controller.rolling import NodeState, Plan, node_state, node_views, plan_rolling_update
from edgeagent.controller.settings import roll_settings
from tests.unit.test_controller_objects import T0, daemonset, node, pod, ts

JSON = dict[str, Any]
OLD, NEW = "old", "new"


def cluster(n: int, *, not_ready: tuple[int, ...] = ()) -> dict[str, JSON]:
    return {f"n{i:02d}": node(f"n{i:02d}", ready=i not in not_ready) for i in range(n)}


def old_pods(nodes: dict[str, JSON], **kw: Any) -> list[JSON]:
    return [pod(f"p-{name}", name, OLD, **kw) for name in nodes]


def plan(
    pods: list[JSON],
    nodes: dict[str, JSON],
    annotations: dict[str, str] | None = None,
    *,
    now: float = T0,
    min_ready: int = 0,
) -> Plan:
    ds = daemonset(min_ready=min_ready, annotations=dict(annotations or {}))
    settings, problems = roll_settings(ds)
    assert problems == []
    return plan_rolling_update(ds, pods, nodes, NEW, settings, now)


def deleted(p: Plan) -> list[str]:
    return [d["metadata"]["name"] for d in p.delete]


MU = "apps.openyurt.io/max-unavailable"


def test_default_budget_is_ten_percent_rounded_up_in_node_order() -> None:
    nodes = cluster(12)
    p = plan(old_pods(nodes), nodes)
    assert p.max_unavailable == 2
    assert deleted(p) == ["p-n00", "p-n01"]


def test_not_ready_nodes_are_skipped() -> None:
    nodes = cluster(4, not_ready=(1, 2))
    p = plan(old_pods(nodes), nodes, {MU: "2"})
    assert deleted(p) == ["p-n00", "p-n03"]
    assert p.not_ready == 2


def test_old_unavailable_pods_are_replaced_at_once_but_use_up_the_budget() -> None:
    """Replacing a broken old pod costs no availability, so all are replaced, beyond max-unavailable; but their
    nodes are unavailable, so no available pod is deleted on top of them (after a rollback, deleting max-unavailable
    good pods as well took twice the budget down; found by the soak, issue 23)."""
    nodes = cluster(5)
    pods = old_pods(nodes)
    pods[3] = pod("p-n03", "n03", OLD, ready=False)
    pods[4] = pod("p-n04", "n04", OLD, ready=False)
    p = plan(pods, nodes, {MU: "1"})
    assert deleted(p) == ["p-n03", "p-n04"]
    assert p.replacing_unavailable == 2
    assert p.unavailable == 2
    p = plan(pods, nodes, {MU: "3"})
    assert deleted(p) == ["p-n03", "p-n04", "p-n00"]


def test_nodes_that_should_run_a_pod_but_show_none_use_the_budget() -> None:
    """desiredNumberScheduled 5, pods on 3 nodes: two nodes lost their pod and have no replacement yet (a
    predecessor's deletions, unknown to this controller): they are unavailable, and so is the whole budget."""
    nodes = cluster(5)
    pods = old_pods(nodes)[:3]
    ds = daemonset(annotations={MU: "2"})
    ds["status"] = {"desiredNumberScheduled": 5}
    settings, _ = roll_settings(ds)
    p = plan_rolling_update(ds, pods, nodes, NEW, settings, T0)
    assert (p.total, p.unavailable, deleted(p)) == (5, 2, [])
    ds["status"] = {"desiredNumberScheduled": 4}
    p = plan_rolling_update(ds, pods, nodes, NEW, settings, T0)
    assert (p.total, p.unavailable, deleted(p)) == (4, 1, ["p-n00"])
    # A NotReady node is left out of desiredNumberScheduled (its NoSchedule taint) but still shows its pod: it
    # must not hide a Ready node that lacks one (the soak: 199 nodes seen, 199 desired, one of them pod-less).
    nodes["n02"] = node("n02", ready=False)
    p = plan_rolling_update(ds, pods, nodes, NEW, settings, T0)
    assert (p.unavailable, deleted(p)) == (2, [])


def test_nodes_whose_pod_the_cache_saw_go_use_the_budget_even_when_desired_lags() -> None:
    """Seed-29 soak: a node back from a partition (Ready in the cache) that desiredNumberScheduled does not count
    again yet hid a node whose pod had gone: `vacated` (the cache saw its last pod leave) counts it whatever
    desiredNumberScheduled says, once, and only while it shows no pod, is known and Ready."""
    nodes = cluster(5)
    pods = old_pods(nodes)[1:]  # n00's pod is gone, no replacement yet
    ds = daemonset(annotations={MU: "1"})
    ds["status"] = {"desiredNumberScheduled": 4}  # lags: n04 just came back
    settings, _ = roll_settings(ds)
    assert deleted(plan_rolling_update(ds, pods, nodes, NEW, settings, T0)) == ["p-n01"]
    p = plan_rolling_update(ds, pods, nodes, NEW, settings, T0, vacated={"n00"})
    assert (p.total, p.unavailable, deleted(p)) == (5, 1, [])
    ds["status"] = {"desiredNumberScheduled": 5}  # caught up: still one node, not two
    p = plan_rolling_update(ds, pods, nodes, NEW, settings, T0, vacated={"n00"})
    assert (p.total, p.unavailable) == (5, 1)
    # A node showing a pod again, one of our own deletions (in flight), an unknown or NotReady node: not counted.
    ds["status"] = {"desiredNumberScheduled": 4}
    for vacated in ({"n01"}, {"gone"}):
        assert deleted(plan_rolling_update(ds, pods, nodes, NEW, settings, T0, vacated=vacated)) == ["p-n01"]
    p = plan_rolling_update(ds, pods, nodes, NEW, settings, T0, in_flight={"n00"}, vacated={"n00"})
    assert (p.total, p.unavailable) == (5, 1)
    nodes["n00"] = node("n00", ready=False)
    ds["status"] = {"desiredNumberScheduled": 4}
    p = plan_rolling_update(ds, pods, nodes, NEW, settings, T0, vacated={"n00"})
    assert (p.total, p.unavailable) == (4, 0)


def test_in_flight_replacements_use_the_budget() -> None:
    nodes = cluster(5)
    pods = old_pods(nodes)
    pods[0] = pod("p-n00", "n00", OLD, terminating=True)       # deleted, not yet gone
    pods[1] = pod("q-n01", "n01", NEW, ready=False)            # replacement starting
    p = plan(pods, nodes, {MU: "3"})
    assert p.unavailable == 2
    assert deleted(p) == ["p-n02"]


def test_budget_exhausted_deletes_nothing() -> None:
    nodes = cluster(3)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, ready=False)
    p = plan(pods, nodes, {MU: "1"})
    assert p.delete == [] and p.unavailable == 1


def test_excess_pods_on_a_node_count_as_unavailable() -> None:
    nodes = cluster(3)
    pods = [*old_pods(nodes), pod("x-n00", "n00", OLD)]
    p = plan(pods, nodes, {MU: "1"})
    assert p.unavailable == 1 and p.delete == []


def test_min_ready_seconds_holds_the_next_batch_and_asks_for_a_wake_up() -> None:
    nodes = cluster(3)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, ready_since=T0 - 2)
    p = plan(pods, nodes, {MU: "1"}, min_ready=10)
    assert p.delete == []
    assert p.requeue_after == pytest.approx(8.05)
    later = plan(pods, nodes, {MU: "1"}, now=T0 + 8.05, min_ready=10)
    assert deleted(later) == ["p-n01"]


def test_partition_keeps_pods_on_the_old_revision() -> None:
    nodes = cluster(4)
    p = plan(old_pods(nodes), nodes, {MU: "100%", "edgeagent.io/partition": "1"})
    assert deleted(p) == ["p-n00", "p-n01", "p-n02"]
    assert p.held_by_partition == 1
    # Once three are updated, the fourth stays.
    pods = [pod(f"q-{n}", n, NEW) for n in ["n00", "n01", "n02"]] + [pod("p-n03", "n03", OLD)]
    assert plan(pods, nodes, {MU: "100%", "edgeagent.io/partition": "1"}).delete == []


def test_partition_counts_old_pods_on_not_ready_nodes() -> None:
    nodes = cluster(4, not_ready=(3,))
    p = plan(old_pods(nodes), nodes, {MU: "100%", "edgeagent.io/partition": "2"})
    assert deleted(p) == ["p-n00", "p-n01"]


def test_node_selector_limits_the_roll_to_matching_nodes() -> None:
    nodes = cluster(4)
    nodes["n02"]["metadata"]["labels"]["canary"] = "true"
    p = plan(old_pods(nodes), nodes, {MU: "100%", "edgeagent.io/node-selector": "canary=true"})
    assert deleted(p) == ["p-n02"]
    assert p.not_selected == 3


def test_paused_deletes_nothing_not_even_unavailable_pods() -> None:
    nodes = cluster(3)
    pods = old_pods(nodes)
    pods[1] = pod("p-n01", "n01", OLD, ready=False)
    p = plan(pods, nodes, {"edgeagent.io/paused": "true"})
    assert p.delete == [] and p.paused
    assert p.unavailable == 1


def test_node_that_went_down_after_receiving_the_new_version_keeps_using_budget() -> None:
    nodes = cluster(4)
    nodes["n00"] = node("n00", ready=False, changed=T0 - 10)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 20, ready=False)
    p = plan(pods, nodes, {MU: "1"})
    assert p.unavailable == 1 and p.delete == []
    # A node that was already down when its pod was created (e.g. a new DaemonSet) does not block the roll.
    nodes["n00"] = node("n00", ready=False, changed=T0 - 30)
    assert deleted(plan(pods, nodes, {MU: "1"})) == ["p-n01"]


def test_deletion_in_flight_on_a_node_that_went_down_keeps_using_budget() -> None:
    nodes = cluster(3, not_ready=(0,))
    pods = old_pods(nodes)
    pods[0] = pod("p-n00", "n00", OLD, terminating=True)
    p = plan(pods, nodes, {MU: "1"})
    assert p.unavailable == 1 and p.delete == []


def test_missing_node_object_is_treated_as_not_ready() -> None:
    nodes = cluster(3)
    pods = old_pods(nodes)
    del nodes["n00"]
    assert deleted(plan(pods, nodes, {MU: "1"})) == ["p-n01"]


def test_pods_of_other_revisions_are_old() -> None:
    nodes = cluster(2)
    pods = [pod("p-n00", "n00", "older"), pod("p-n01", "n01", NEW)]
    p = plan(pods, nodes, {MU: "1"})
    assert deleted(p) == ["p-n00"] and p.updated == 1 and p.outdated == 1


def test_complete_when_every_node_runs_the_new_revision() -> None:
    nodes = cluster(2)
    p = plan([pod(f"q-{n}", n, NEW) for n in nodes], nodes)
    assert p.complete and p.delete == []


FAIL = {"edgeagent.io/max-failed": "1", "edgeagent.io/progress-deadline-seconds": "60", MU: "1"}


def test_new_pods_not_available_by_the_deadline_pause_the_roll() -> None:
    nodes = cluster(4)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 61, ready=False)
    p = plan(pods, nodes, FAIL)
    assert p.failed == ["q-n00"] and p.auto_pause and p.delete == []


def test_before_the_deadline_the_roll_waits_and_schedules_the_check() -> None:
    nodes = cluster(4)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 30, ready=False)
    p = plan(pods, nodes, FAIL)
    assert not p.auto_pause and p.failed == []
    assert p.requeue_after == pytest.approx(30.05)


def test_a_node_taken_down_by_the_new_version_counts_as_failed() -> None:
    """The node went away 10 s after receiving the pod, which never came up (no ContainersReady)."""
    nodes = cluster(4)
    nodes["n00"] = node("n00", ready=False, changed=T0 - 100)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 110, ready=False, ready_since=T0 - 110)
    p = plan(pods, nodes, FAIL)
    assert p.failed == ["q-n00"] and p.auto_pause


def test_a_pod_that_came_up_before_its_node_went_away_is_not_a_failure_without_memory() -> None:
    """A new leader never saw the pod available, but the kubelet's last report (ContainersReady, which the node
    lifecycle controller leaves alone when it marks a lost node's pods unready) says it was, within its deadline
    and before its node went away: a cut link, not the version (found by the soak, issue 23)."""
    nodes = cluster(4)
    nodes["n00"] = node("n00", ready=False, changed=T0 - 100)
    pods = old_pods(nodes)
    up = [{"type": "ContainersReady", "status": "True", "lastTransitionTime": ts(T0 - 105)}]
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 110, ready=False, ready_since=T0 - 100, extra_conditions=up)
    p = plan(pods, nodes, FAIL)
    assert p.failed == [] and not p.auto_pause
    # Containers ready only after the node went away (a report that cannot be), or after the deadline: failed.
    late = [{"type": "ContainersReady", "status": "True", "lastTransitionTime": ts(T0 - 99)}]
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 110, ready=False, ready_since=T0 - 100, extra_conditions=late)
    assert plan(pods, nodes, FAIL).failed == ["q-n00"]
    nodes["n00"] = node("n00", changed=T0 - 100)
    late = [{"type": "ContainersReady", "status": "True", "lastTransitionTime": ts(T0 - 30)}]
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 110, ready=False, ready_since=T0 - 30, extra_conditions=late)
    assert plan(pods, nodes, FAIL, now=T0 + 100).failed == ["q-n00"]


def test_a_node_going_down_long_after_its_upgrade_is_not_a_failure() -> None:
    nodes = cluster(4)
    nodes["n00"] = node("n00", ready=False, changed=T0 - 100)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 10_000)
    assert not plan(pods, nodes, FAIL).auto_pause


def test_max_failed_percent_threshold() -> None:
    nodes = cluster(10)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 100, ready=False)
    settings = {**FAIL, "edgeagent.io/max-failed": "20%", MU: "3"}
    p = plan(pods, nodes, settings)
    assert p.max_failed == 2 and not p.auto_pause and p.failed == ["q-n00"]
    pods[1] = pod("q-n01", "n01", NEW, created=T0 - 100, ready=False)
    assert plan(pods, nodes, settings).auto_pause


def test_no_auto_pause_once_nothing_is_left_to_roll() -> None:
    nodes = cluster(2)
    pods = [pod("q-n00", "n00", NEW, created=T0 - 100, ready=False), pod("q-n01", "n01", NEW)]
    assert not plan(pods, nodes, FAIL).auto_pause


def test_node_states_for_rollout_status() -> None:
    nodes = cluster(5, not_ready=(4,))
    pods = [
        pod("a", "n00", NEW),
        pod("b", "n01", OLD),
        pod("c", "n02", NEW, ready=False),
        pod("d", "n03", OLD, terminating=True),
        pod("e", "n04", OLD),
    ]
    views = node_views(daemonset(), pods, nodes, NEW)
    assert [node_state(v, 0, T0) for v in views] == [
        NodeState.UP_TO_DATE, NodeState.OUTDATED, NodeState.UNAVAILABLE, NodeState.UNAVAILABLE, NodeState.NOT_READY,
    ]


def test_pods_marked_unready_while_their_node_was_away_are_replaced_within_budget() -> None:
    nodes = cluster(4)
    nodes["n00"] = node("n00", changed=T0 - 5)
    nodes["n01"] = node("n01", changed=T0 - 5)
    pods = old_pods(nodes)
    pods[0] = pod("p-n00", "n00", OLD, ready=False, ready_since=T0 - 50)
    pods[1] = pod("p-n01", "n01", OLD, ready=False, ready_since=T0 - 50)
    p = plan(pods, nodes, {MU: "1"})
    assert deleted(p) == ["p-n00"]
    assert p.replacing_unavailable == 0


def test_a_pod_whose_kubelet_said_its_containers_fail_is_broken_whatever_the_times() -> None:
    """Whole-second times: a pod created and crash-looping in the second its node turned Ready looked marked by
    the node lifecycle (which sets only Ready), stayed within the budget it already filled, and was never
    replaced. ContainersReady False is the kubelet's word: broken, replaced at once."""
    nodes = cluster(4)
    for name in ("n00", "n01"):
        nodes[name] = node(name, changed=T0 - 5)

    def unready(name: str, since: float, containers: str | None) -> JSON:
        extra = [] if containers is None else [
            {"type": "ContainersReady", "status": containers, "lastTransitionTime": ts(since)}]
        return pod(f"p-{name}", name, OLD, ready=False, ready_since=since, created=T0 - 5, extra_conditions=extra)

    pods = old_pods(nodes)
    for since in (T0 - 5, T0 - 6):
        pods[0], pods[1] = unready("n00", since, "False"), unready("n01", since, "False")
        p = plan(pods, nodes, {MU: "2"})
        assert sorted(deleted(p)) == ["p-n00", "p-n01"] and p.replacing_unavailable == 2, since
    # The kubelet's last word was that the containers worked (or there is none): marked while the node was away
    # (its Ready changed no later than the node's return, the same second included): within the budget.
    for containers in ("True", None):
        pods[0], pods[1] = unready("n00", T0 - 5, containers), unready("n01", T0 - 5, containers)
        p = plan(pods, nodes, {MU: "2"})
        assert sorted(deleted(p)) == ["p-n00", "p-n01"] and p.replacing_unavailable == 0, containers
    # After the node's return it is the kubelet's own report: broken.
    pods[0] = unready("n00", T0 - 4, "True")
    assert plan(pods, nodes, {MU: "2"}).replacing_unavailable == 1


def test_one_pass_deletes_at_most_a_burst() -> None:
    nodes = cluster(10)
    ds = daemonset(annotations={MU: "100%"})
    settings, _ = roll_settings(ds)
    p = plan_rolling_update(ds, old_pods(nodes), nodes, NEW, settings, T0, burst=3)
    assert deleted(p) == ["p-n00", "p-n01", "p-n02"]


def test_young_ready_old_pods_are_replaced_within_budget_not_for_free() -> None:
    nodes = cluster(3)
    pods = [pod(f"p-{n}", n, OLD, ready_since=T0 - 1) for n in nodes]
    p = plan(pods, nodes, {MU: "1"}, min_ready=10)
    assert deleted(p) == ["p-n00"]
    assert p.replacing_unavailable == 0


# Issue 14.2: a node's return does not make its new-version pod a failure of the version.


def test_a_pod_unready_since_its_node_returned_gets_a_fresh_deadline_from_the_return() -> None:
    """The controller restarted (no memory): the pod was created long ago, its node came back 10 s ago and the
    kubelet has not re-reported it yet. Counting it failed would pause the roll for a node's blip."""
    nodes = cluster(4)
    nodes["n00"] = node("n00", changed=T0 - 10)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 1000, ready=False, ready_since=T0 - 300)
    p = plan(pods, nodes, FAIL)
    assert p.failed == [] and not p.auto_pause
    assert p.requeue_after == pytest.approx(50.05)  # checked again when the fresh deadline passes
    # Still not Ready a progress deadline after the node's return: now it is the version's failure.
    assert plan(pods, nodes, FAIL, now=T0 + 51).failed == ["q-n00"]


def test_a_pod_seen_available_within_its_deadline_never_fails_later() -> None:
    ds = daemonset(annotations=dict(FAIL))
    settings, _ = roll_settings(ds)
    nodes = cluster(4)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 100, ready_since=T0 - 90)
    seen = plan_rolling_update(ds, pods, nodes, NEW, settings, T0)
    assert seen.proven == {"uid-q-n00"}
    # Later it turns unready on a Ready node (node never went away): not the version's failure.
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 100, ready=False, ready_since=T0 + 5)
    later = plan_rolling_update(ds, pods, nodes, NEW, settings, T0 + 10, proven=seen.proven)
    assert later.failed == [] and not later.auto_pause
    # Without that memory the same state is a failure (created 110 s ago, deadline 60 s).
    assert plan_rolling_update(ds, pods, nodes, NEW, settings, T0 + 10).failed == ["q-n00"]


def test_a_pod_available_only_after_its_deadline_is_not_proven() -> None:
    ds = daemonset(annotations=dict(FAIL))
    settings, _ = roll_settings(ds)
    nodes = cluster(4)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 100, ready_since=T0 - 5)
    assert plan_rolling_update(ds, pods, nodes, NEW, settings, T0).proven == set()


def test_a_node_going_down_in_the_same_second_its_new_pod_was_created_counts() -> None:
    """Timestamps have second precision: `changed == created` must count as going down after receiving it."""
    nodes = cluster(4)
    nodes["n00"] = node("n00", ready=False, changed=T0 - 100)
    pods = old_pods(nodes)
    pods[0] = pod("q-n00", "n00", NEW, created=T0 - 100, ready=False, ready_since=T0 - 100)
    p = plan(pods, nodes, {MU: "1"})
    assert p.unavailable == 1 and p.delete == []  # its budget is used up by n00
    assert plan(pods, nodes, FAIL).failed == ["q-n00"]


def test_a_node_restarting_in_place_uses_the_budget_whatever_its_cached_pod_shows() -> None:
    """Issue 37: right after the in-place PATCH the cache may still show the pod Ready (the old container's
    report), with the old revision or already the new one; the node is unavailable until the kubelet reports the
    new containers, and its pod is not chosen again."""
    nodes = cluster(3)
    ds = daemonset(annotations={MU: "1"})
    settings, _ = roll_settings(ds)
    for cached in (pod("p-n00", "n00", OLD), pod("p-n00", "n00", NEW)):
        pods = [cached, *old_pods(nodes)[1:]]
        free = plan_rolling_update(ds, pods, nodes, NEW, settings, T0)
        assert free.unavailable == 0 and len(free.delete) == 1  # what the cache alone would allow
        held = plan_rolling_update(ds, pods, nodes, NEW, settings, T0, restarting={"n00"})
        assert held.unavailable == 1
        assert deleted(held) == []
    two = daemonset(annotations={MU: "2"})
    settings, _ = roll_settings(two)
    pods = old_pods(nodes)  # the cache still shows n00's pod as it was before the PATCH
    assert deleted(plan_rolling_update(two, pods, nodes, NEW, settings, T0, restarting={"n00"})) == ["p-n01"]
