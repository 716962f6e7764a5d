from __future__ import annotations

from edgeagent.controller.rolling import NodeState
from edgeagent.rollout_cli import build_status
from tests.unit.test_controller_objects import T0, daemonset, node, pod, revision

ARU = {"apps.openyurt.io/update-strategy": "AdvancedRollingUpdate"}


def test_rows_follow_the_planners_classification_and_render_a_table() -> None:
    ds = daemonset(annotations=ARU)
    nodes = [node("n1"), node("n2"), node("n3", ready=False), node("n4")]
    pods = [pod("a", "n1", "new"), pod("b", "n2", "old"), pod("c", "n3", "old"),
            pod("d", "n4", "new", ready=False), pod("x", "n1", "old", ds_uid="someone-else")]
    status = build_status(ds, pods, nodes, [revision(ds, "new", 2)], T0)
    assert [(r.node, r.state, r.pod, r.revision) for r in status.rows] == [
        ("n1", NodeState.UP_TO_DATE, "a", "new"),
        ("n2", NodeState.OUTDATED, "b", "old"),
        ("n3", NodeState.NOT_READY, "c", "old"),
        ("n4", NodeState.UNAVAILABLE, "d", "new"),
    ]
    assert not status.complete
    text = status.render()
    assert text.splitlines()[0] == "DaemonSet default/web: AdvancedRollingUpdate, revision new"
    assert text.splitlines()[1].split() == ["NODE", "STATE", "POD", "REVISION"]
    assert "4 node(s): 1 up to date, 1 outdated, 1 unavailable, 1 NotReady" in text
    assert text.endswith("rollout in progress")


def test_complete_when_every_node_is_up_to_date() -> None:
    ds = daemonset(annotations={**ARU, "edgeagent.io/paused": "true"})
    status = build_status(ds, [pod("a", "n1", "new")], [node("n1")], [revision(ds, "new", 2)], T0)
    assert status.complete and status.paused
    assert status.render().endswith("rollout complete")


def test_not_complete_while_the_new_revision_is_pending() -> None:
    ds = daemonset(annotations=ARU)
    stale = revision(ds, "old", 1, template={"metadata": {}, "spec": {"containers": []}})
    status = build_status(ds, [pod("a", "n1", "old")], [node("n1")], [stale], T0)
    assert not status.complete
    assert "(new revision pending)" in status.render()


def test_unmanaged_daemonset_says_why() -> None:
    ds = daemonset(annotations={"apps.openyurt.io/update-strategy": "OTA"}, update_type="RollingUpdate")
    status = build_status(ds, [], [], [revision(ds, "new", 2)], T0)
    assert status.strategy.startswith("ignored (")
    assert status.complete  # no pods, nothing to roll
