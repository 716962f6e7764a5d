"""AdvancedRollingUpdate and the site's UpgradeHeld: held pods are never deleted and spend no budget."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as hs

from edgeagent.controller.rolling import NodeState, node_state, node_views
from tests.unit.test_controller_objects import T0, pod
from tests.unit.test_controller_rolling import MU, NEW, OLD, cluster, deleted, old_pods, plan

JSON = dict[str, Any]


def hold(p: JSON, reason: str = "OutsideMaintenanceWindow", message: str = "next opens Sat 02:00") -> JSON:
    p["status"]["conditions"].append({"type": "UpgradeHeld", "status": "True", "reason": reason, "message": message})
    return p


def opened(p: JSON) -> JSON:
    p["status"]["conditions"].append({"type": "UpgradeHeld", "status": "False", "reason": "Open", "message": ""})
    return p


def test_a_held_pod_is_skipped_and_the_next_node_takes_the_budget() -> None:
    nodes = cluster(3)
    pods = old_pods(nodes)
    hold(pods[0], "HeldByOperator", "site audit")
    opened(pods[1])
    p = plan(pods, nodes, {MU: "1"})
    assert deleted(p) == ["p-n01"]
    assert p.held == {"n00": ("HeldByOperator", "site audit")}
    assert not p.complete


def test_a_held_unavailable_pod_is_not_replaced_and_does_not_eat_the_budget() -> None:
    nodes = cluster(3)
    pods = old_pods(nodes)
    pods[0] = hold(pod("p-n00", "n00", OLD, ready=False))  # would be replaced "for free" if not held
    p = plan(pods, nodes, {MU: "1"})
    assert deleted(p) == ["p-n01"]
    assert p.unavailable == 0


def test_every_node_held_deletes_nothing() -> None:
    nodes = cluster(4)
    pods = [hold(x) for x in old_pods(nodes)]
    p = plan(pods, nodes, {MU: "100%"})
    assert deleted(p) == [] and set(p.held) == set(nodes)


def test_node_state_says_held_for_an_old_held_pod_only() -> None:
    nodes = cluster(2)
    pods = [hold(pod("p-n00", "n00", OLD)), hold(pod("q-n01", "n01", NEW))]
    from tests.unit.test_controller_objects import daemonset

    views = node_views(daemonset(), pods, nodes, NEW)
    assert [node_state(v, 0, T0) for v in views] == [NodeState.HELD, NodeState.UP_TO_DATE]


@settings(max_examples=200, deadline=None)
@given(states=hs.lists(hs.sampled_from(["held", "held-unready", "old", "old-unready", "new", "new-unready"]),
                       min_size=1, max_size=12),
       budget=hs.integers(1, 5))
def test_held_pods_are_never_chosen_and_never_counted(states: list[str], budget: int) -> None:
    nodes = cluster(len(states))
    pods = []
    for (name, state) in zip(nodes, states, strict=True):
        revision = NEW if state.startswith("new") else OLD
        made = pod(f"p-{name}", name, revision, ready="unready" not in state)
        pods.append(hold(made) if state.startswith("held") else made)
    p = plan(pods, nodes, {MU: str(budget)})
    held = {f"p-{n}" for n, s in zip(nodes, states, strict=True) if s.startswith("held")}
    assert not held & set(deleted(p))
    assert set(p.held) == {n for n, s in zip(nodes, states, strict=True) if s.startswith("held")}
    # The same plan with the held nodes left out entirely: the others are treated exactly the same.
    rest = {n: nodes[n] for n, s in zip(nodes, states, strict=True) if not s.startswith("held")}
    others = plan([x for x in pods if x["metadata"]["name"] not in held], rest, {MU: str(budget)})
    if others.max_unavailable == p.max_unavailable:
        assert deleted(others) == deleted(p)
        assert others.unavailable == p.unavailable
