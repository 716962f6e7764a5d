"""Event routing and the cache-only decisions of the reconciler, fed through the informers' seed (no API
server: every path exercised here must not call it, and the client given would fail if it did)."""

from __future__ import annotations

import copy
from typing import Any

from edgeagent.controller.reconciler import Controller, _batch_message
from edgeagent.controller.rolling import Plan
from edgeagent.kube.client import KubeClient
from edgeagent.rollout.plan import stable_hash
from tests.unit.test_controller_objects import T0, daemonset, node, pod, revision, ts

JSON = dict[str, Any]
ARU = {"apps.openyurt.io/update-strategy": "AdvancedRollingUpdate"}
KEY = "default/web"


def controller_with(ds: JSON, pods: list[JSON], nodes: list[JSON], revisions: list[JSON]) -> Controller:
    ctl = Controller(KubeClient(api_client=None), workers=1)
    ctl.daemonsets.seed([ds], "1")
    ctl.pods.seed(pods, "1")
    ctl.nodes.seed(nodes, "1")
    ctl.revisions.seed(revisions, "1")
    return ctl


def drain(ctl: Controller) -> list[str]:
    keys = []
    while len(ctl.queue):
        key = ctl.queue._queue.popleft()
        ctl.queue._dirty.discard(key)
        keys.append(key)
    return keys


def fixture() -> Controller:
    ds = daemonset(annotations=ARU)
    return controller_with(ds, [pod("a", "n1", "old"), pod("b", "n2", "old")], [node("n1"), node("n2"), node("n3")],
                           [revision(ds, "new", 2)])


def test_pods_and_revisions_enqueue_their_daemonset() -> None:
    ctl = fixture()
    assert drain(ctl) == [KEY]
    changed = copy.deepcopy(ctl.pods.items["default/a"])
    changed["status"]["phase"] = "Failed"
    ctl._on_pod("MODIFIED", changed, ctl.pods.items["default/a"])
    assert drain(ctl) == [KEY]
    assert sorted(p["metadata"]["name"] for p in ctl.pods_of(ctl.daemonsets.items[KEY])) == ["a", "b"]


def test_node_heartbeats_do_not_enqueue_but_readiness_changes_do() -> None:
    ctl = fixture()
    drain(ctl)
    old = ctl.nodes.items["n1"]
    heartbeat = copy.deepcopy(old)
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = ts(T0)
    ctl._on_node("MODIFIED", heartbeat, old)
    assert drain(ctl) == []
    down = node("n1", ready=False, changed=T0)
    ctl._on_node("MODIFIED", down, old)
    assert drain(ctl) == [KEY]
    # A node without pods of any DaemonSet concerns nobody.
    ctl._on_node("MODIFIED", node("n3", ready=False, changed=T0), ctl.nodes.items["n3"])
    assert drain(ctl) == []


def test_daemonset_status_only_changes_do_not_enqueue() -> None:
    ctl = fixture()
    drain(ctl)
    old = ctl.daemonsets.items[KEY]
    status_only = copy.deepcopy(old)
    status_only["status"]["numberReady"] = 1
    ctl._on_daemonset("MODIFIED", status_only, old)
    assert drain(ctl) == []
    observed = copy.deepcopy(old)
    observed["status"]["observedGeneration"] = 3
    ctl._on_daemonset("MODIFIED", observed, old)
    assert drain(ctl) == [KEY]


def test_deleted_pod_leaves_the_indexes() -> None:
    ctl = fixture()
    gone = ctl.pods.items["default/a"]
    ctl._on_pod("DELETED", gone, gone)
    assert [p["metadata"]["name"] for p in ctl.pods_of(ctl.daemonsets.items[KEY])] == ["b"]
    assert "n1" not in ctl._owners_by_node


async def test_no_deletions_while_an_informer_is_unhealthy() -> None:
    ctl = fixture()  # seeded caches never listed: not healthy
    await ctl.reconcile(KEY)  # would fail on the client if it tried to delete
    assert ctl.expectations.pending(KEY) == 0
    assert ctl.queue._timers, "a retry is scheduled"
    ctl.queue.shutdown()


def healthy(ctl: Controller) -> Controller:
    for informer in ctl.informers:
        informer.healthy = True
    return ctl


async def test_unmanaged_daemonset_is_left_alone() -> None:
    ds = daemonset()
    ctl = healthy(controller_with(ds, [pod("a", "n1", "old")], [node("n1")], [revision(ds, "new", 2)]))
    await ctl.reconcile(KEY)  # the client would fail if anything were written
    assert ctl.expectations.pending(KEY) == 0 and not ctl.queue._timers


async def test_roll_waits_while_the_revision_of_the_template_is_not_seen() -> None:
    ds = daemonset(annotations=ARU)
    stale = revision(ds, "old", 1, template={"metadata": {}, "spec": {"containers": []}})
    ctl = healthy(controller_with(ds, [pod("a", "n1", "old")], [node("n1")], [stale]))
    await ctl.reconcile(KEY)
    assert ctl.expectations.pending(KEY) == 0
    assert ctl.metrics.registry.get_sample_value(
        "edgeagent_controller_rollout_desired_nodes", {"namespace": "default", "daemonset": "web"}) is None


def test_a_node_is_put_in_the_hash_order_as_it_arrives() -> None:
    """The first ranking after a restart orders every node by the sha256 of its name; the node handler puts each
    cached node in the controller's node order (sorted in when the caches have synced), which the ranking filters."""
    ctl = controller_with(daemonset(annotations=ARU), [], [node("n1"), node("n2")], [])
    assert ctl.nodes.items.keys() == {"n1", "n2"}
    assert len(ctl.node_order) == 2
    ctl.node_order.settle()
    assert ctl.node_order.names() == sorted(["n1", "n2"], key=stable_hash)


def test_a_batch_event_names_its_pods_and_the_budget_it_was_decided_under() -> None:
    """The UpgradingPods Event of a deletion batch and of an in-place batch (docs/operations.md shows the latter):
    one wording for both, the in-place one saying so."""
    plan = Plan(total=3, updated=1, max_unavailable=2, unavailable=1)
    pods = [pod("web-a", "n1", "old"), pod("web-b", "n2", "old")]
    assert _batch_message("69888948cc", plan, "deleted", pods) == (
        "AdvancedRollingUpdate to revision 69888948cc: deleted 2 outdated pod(s) (web-a, web-b); max unavailable 2, "
        "unavailable before 1, 1/3 nodes up to date")
    assert _batch_message("69888948cc", plan, "patched", pods[:1], " in place") == (
        "AdvancedRollingUpdate to revision 69888948cc: patched 1 outdated pod(s) in place (web-a); max unavailable 2, "
        "unavailable before 1, 1/3 nodes up to date")
