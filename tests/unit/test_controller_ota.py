from __future__ import annotations

from edgeagent.controller.ota import condition_changes, condition_patch
from tests.unit.test_controller_objects import T0, daemonset, pod, ts

NEED = "PodNeedUpgrade"


def cond(status: str, message: str, since: float = T0 - 100) -> dict[str, str]:
    return {"type": NEED, "status": status, "message": message, "lastTransitionTime": ts(since)}


def test_every_pod_gets_the_condition_with_the_current_hash() -> None:
    ds = daemonset(generation=2)
    pods = [pod("b", "n2", "new", generation=2), pod("a", "n1", "old", generation=1)]
    changes = condition_changes(ds, pods, "new", T0)
    assert [(c.pod["metadata"]["name"], c.status, c.message) for c in changes] == [
        ("a", "True", "controllerrevision: new"),
        ("b", "False", "controllerrevision: new"),
    ]


def test_patch_touches_only_that_condition_and_guards_the_uid() -> None:
    p = pod("a", "n1", "old")
    patch = condition_patch(p, "True", "controllerrevision: new", T0)
    assert patch == {
        "metadata": {"uid": "uid-a"},
        "status": {"conditions": [{"type": NEED, "status": "True", "message": "controllerrevision: new",
                                   "lastTransitionTime": ts(T0)}]},
    }


def test_unchanged_condition_is_not_written() -> None:
    ds = daemonset(generation=2)
    p = pod("a", "n1", "old", generation=1, extra_conditions=[cond("True", "controllerrevision: new")])
    assert condition_changes(ds, [p], "new", T0) == []


def test_message_change_keeps_the_transition_time() -> None:
    ds = daemonset(generation=3)
    p = pod("a", "n1", "old", generation=1, extra_conditions=[cond("True", "controllerrevision: mid")])
    (change,) = condition_changes(ds, [p], "new", T0)
    assert change.patch["status"]["conditions"][0] == {
        "type": NEED, "status": "True", "message": "controllerrevision: new",
    }


def test_status_flip_sets_the_transition_time() -> None:
    ds = daemonset(generation=2)
    p = pod("a", "n1", "new", generation=2, extra_conditions=[cond("True", "controllerrevision: new")])
    (change,) = condition_changes(ds, [p], "new", T0)
    assert change.status == "False"
    assert change.patch["status"]["conditions"][0]["lastTransitionTime"] == ts(T0)


def test_terminating_pods_are_left_alone() -> None:
    ds = daemonset(generation=2)
    assert condition_changes(ds, [pod("a", "n1", "old", terminating=True)], "new", T0) == []


def test_a_listed_change_builds_the_patch_it_is_sent_with() -> None:
    """The patch is built when the write is sent (`ConditionChange.patch`), not when the change is listed: it is
    the pod's as listed, with the reason and the scan's transition time."""
    ds = daemonset(generation=2)
    p = pod("a", "n1", "old", generation=1, extra_conditions=[cond("True", "controllerrevision: new")])
    (change,) = condition_changes(ds, [p], "new", T0, may_move=lambda node: False)
    assert (change.status, change.reason) == ("False", "WaitingForWave")
    assert change.patch == condition_patch(p, "False", "controllerrevision: new", T0, "WaitingForWave") == {
        "metadata": {"uid": "uid-a"},
        "status": {"conditions": [{"type": NEED, "status": "False", "message": "controllerrevision: new",
                                   "reason": "WaitingForWave", "lastTransitionTime": ts(T0)}]},
    }
