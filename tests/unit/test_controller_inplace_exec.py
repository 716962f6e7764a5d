"""The in-place executor's pure parts (controller/inplace_exec.py): when a restart is done, when a pod read
again may still be patched, which gates open, and what each chosen pod becomes (issue 37)."""

from __future__ import annotations

import copy
from typing import Any

from edgeagent.contract import CONDITION_IN_PLACE_UPDATE_READY, CONDITION_UPGRADE_HELD, LABEL_REVISION_HASH
from edgeagent.controller.expectations import UnobservedWrites
from edgeagent.controller.inplace_exec import (
    REASON_UPDATING,
    InPlaceRestarts,
    choose,
    gate_updates,
    restart_done,
    still_movable,
)

JSON = dict[str, Any]
TEMPLATES: dict[str, JSON] = {
    "old": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "main", "image": "app:1"}]}},
    "new": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "main", "image": "app:2"}]}},
    "env": {"metadata": {"labels": {"app": "a"}},
            "spec": {"containers": [{"name": "main", "image": "app:2", "env": [{"name": "A", "value": "1"}]}]}},
}


def pod(revision: str = "old", image: str = "app:1", cid: str = "containerd://1", ready: bool = True,
        gate: str | None = None, declared: bool = True) -> JSON:
    conditions: list[JSON] = [{"type": "ContainersReady", "status": "True" if ready else "False"}]
    if gate is not None:
        conditions.append({"type": CONDITION_IN_PLACE_UPDATE_READY, "status": gate, "reason": REASON_UPDATING})
    spec: JSON = {"nodeName": "n1", "containers": [{"name": "main", "image": image}]}
    if declared:
        spec["readinessGates"] = [{"conditionType": CONDITION_IN_PLACE_UPDATE_READY}]
    return {"metadata": {"name": "p", "uid": "u1", "resourceVersion": "5", "labels": {LABEL_REVISION_HASH: revision}},
            "spec": spec,
            "status": {"conditions": conditions,
                       "containerStatuses": [{"name": "main", "containerID": cid, "ready": ready}]}}


def test_a_restart_is_done_when_the_changed_containers_run_again_as_new_ones() -> None:
    before = {"main": "containerd://1"}
    assert not restart_done(pod("old"), "new", before)  # the patch is not in the cache yet
    assert not restart_done(pod("new"), "new", before)  # patched, the old container still runs
    assert not restart_done(pod("new", cid="containerd://2", ready=False), "new", before)  # new one not ready
    assert not restart_done(pod("new", cid=""), "new", before)
    assert restart_done(pod("new", cid="containerd://2"), "new", before)


def test_restarts_are_forgotten_when_done_gone_or_too_old() -> None:
    clock = [0.0]
    restarts = InPlaceRestarts(ttl=10, clock=lambda: clock[0])
    restarts.record("ds", "n1", "u1", "new", {"main": "containerd://1"})
    assert restarts.nodes("ds", {"u1": pod("new")}) == {"n1"}
    assert restarts.nodes("ds", {"u1": pod("new", cid="containerd://2")}) == set()
    restarts.record("ds", "n1", "u1", "new", {"main": "containerd://1"})
    assert restarts.nodes("ds", {}) == set()  # the pod is gone
    restarts.record("ds", "n1", "u1", "new", {"main": "containerd://1"})
    clock[0] = 11
    assert restarts.nodes("ds", {"u1": pod("new")}) == set()


def test_an_unconfirmed_patch_holds_its_node_briefly_unless_the_cache_shows_it_carried_out() -> None:
    """A PATCH answered 5xx (or timed out) may not have happened: its node is held `unconfirmed_ttl`, not the full
    ttl (the soak: two such patches filled a budget of two for 300 s); seen patched in the cache, the full ttl."""
    clock = [0.0]
    restarts = InPlaceRestarts(ttl=300, unconfirmed_ttl=30, clock=lambda: clock[0])
    restarts.record("ds", "n1", "u1", "new", {"main": "containerd://1"}, confirmed=False)
    clock[0] = 29
    assert restarts.nodes("ds", {"u1": pod("old")}) == {"n1"}
    clock[0] = 31
    assert restarts.nodes("ds", {"u1": pod("old")}) == set()  # never carried out: the node is free again
    restarts.record("ds", "n1", "u1", "new", {"main": "containerd://1"}, confirmed=False)
    clock[0] = 40
    assert restarts.nodes("ds", {"u1": pod("new")}) == {"n1"}  # carried out after all: held for the restart
    clock[0] = 200
    assert restarts.nodes("ds", {"u1": pod("new")}) == {"n1"}
    clock[0] = 341
    assert restarts.nodes("ds", {"u1": pod("new")}) == set()
    restarts.record("ds", "n1", "u1", "new", {"main": "containerd://1"})  # answered 200: the full time
    clock[0] = 400
    assert restarts.nodes("ds", {"u1": pod("old")}) == {"n1"}


def test_a_restart_to_a_revision_no_longer_rolled_is_forgotten() -> None:
    """A restart stuck in ImagePullBackOff on a revision a rollout plan rolled back must not keep its node out of
    the roll back to the restored revision until the memory's time runs out."""
    restarts = InPlaceRestarts(ttl=300, clock=lambda: 0.0)
    restarts.record("ds", "n1", "u1", "bad", {"main": "containerd://1"})
    stuck = pod("bad", image="app:bad", ready=False)
    assert restarts.nodes("ds", {"u1": stuck}, "bad") == {"n1"}
    assert restarts.nodes("ds", {"u1": stuck}) == {"n1"}  # no revision given: kept
    assert restarts.nodes("ds", {"u1": stuck}, "old") == set()
    assert restarts.restarting("ds", "u1") is None


def test_a_pod_read_again_may_be_patched_only_if_it_is_still_the_planned_pod() -> None:
    planned = pod()
    assert still_movable(copy.deepcopy(planned) | {"status": {"conditions": []}}, planned)
    other = copy.deepcopy(planned)
    other["metadata"]["uid"] = "u2"
    assert not still_movable(other, planned)
    moved = copy.deepcopy(planned)
    moved["metadata"]["labels"][LABEL_REVISION_HASH] = "new"
    assert not still_movable(moved, planned)
    deleting = copy.deepcopy(planned)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not still_movable(deleting, planned)
    held = copy.deepcopy(planned)
    held["status"]["conditions"].append({"type": CONDITION_UPGRADE_HELD, "status": "True", "reason": "HeldByOperator"})
    assert not still_movable(held, planned)
    changed = copy.deepcopy(planned)
    changed["spec"]["containers"][0]["image"] = "app:9"
    assert not still_movable(changed, planned)


def test_gates_open_on_new_pods_and_finished_restarts_only() -> None:
    restarts = InPlaceRestarts()
    written = UnobservedWrites()
    assert gate_updates([pod(gate=None)], restarts, "ds", written) != []  # a new pod, containers ready
    assert gate_updates([pod(gate=None, ready=False)], restarts, "ds", written) == []
    assert gate_updates([pod(gate="True")], restarts, "ds", written) == []
    assert gate_updates([pod(gate=None, declared=False)], restarts, "ds", written) == []
    restarts.record("ds", "n1", "u1", "new", {"main": "containerd://1"})
    assert gate_updates([pod("new", gate="False")], restarts, "ds", written) == []  # restart under way
    assert gate_updates([pod("new", cid="containerd://2", gate="False")], restarts, "ds", written) != []
    written.record("u1", "5")
    assert gate_updates([pod("new", cid="containerd://2", gate="False")], restarts, "ds", written) == []


def template_of(revision: str | None) -> JSON | None:
    return TEMPLATES.get(revision or "")


def test_each_chosen_pod_is_patched_or_recreated_with_the_reason() -> None:
    [patched] = choose([pod()], "new", template_of)
    assert patched.patch is not None and patched.fallback is None
    assert patched.patch.images() == {"main": "app:2"}
    [fallback] = choose([pod()], "env", template_of)
    assert fallback.patch is None and fallback.fallback == "env of container main changed"
    [unknown] = choose([pod("gone")], "new", template_of)
    assert unknown.fallback == "the template of revision gone is not known"
