"""DELETE semantics: options, preconditions, graceful pod deletion, finalizers."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from edgeagent.sim.resources import LEASES, PODS
from tests.support.sim_api import Api, create_pod, daemonset
from tests.support.waiting import eventually

PODS_PATH = "/api/v1/namespaces/default/pods"
MERGE = "application/merge-patch+json"


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


async def test_delete_missing_object_is_404_before_preconditions(api: Api) -> None:
    reply = await api.call(
        "DELETE", f"{PODS_PATH}/ghost", body={"preconditions": {"uid": "nope", "resourceVersion": "1"}}
    )
    assert reply.status == 404
    assert reply.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "ghost" not found',
        "reason": "NotFound",
        "details": {"name": "ghost", "kind": "pods"},
        "code": 404,
    }


async def test_uid_precondition_mismatch_is_the_exact_409(api: Api) -> None:
    created = create_pod(api.store, "a")
    uid = created["metadata"]["uid"]
    reply = await api.call("DELETE", f"{PODS_PATH}/a", body={"preconditions": {"uid": "other-uid"}})
    assert reply.status == 409
    assert reply.body["reason"] == "Conflict"
    assert reply.body["details"] == {"name": "a", "kind": "Pod"}
    assert reply.body["message"] == (
        f'Operation cannot be fulfilled on Pod "a": the UID in the precondition (other-uid) does not match the UID '
        f"in record ({uid}). The object might have been deleted and then recreated"
    )
    api.store.get(PODS, "default", "a")  # still there


async def test_rv_precondition_mismatch_is_the_exact_409(api: Api) -> None:
    created = create_pod(api.store, "a")
    rv = created["metadata"]["resourceVersion"]
    reply = await api.call("DELETE", f"{PODS_PATH}/a", body={"preconditions": {"resourceVersion": "1"}})
    assert reply.status == 409
    assert reply.body["details"]["kind"] == "Pod"
    assert reply.body["message"] == (
        f'Operation cannot be fulfilled on Pod "a": the ResourceVersion in the precondition (1) does not match the '
        f"ResourceVersion in record ({rv}). The object might have been modified"
    )


async def test_delete_options_come_from_query_when_body_is_empty(api: Api) -> None:
    create_pod(api.store, "a")
    reply = await api.call("DELETE", f"{PODS_PATH}/a", query={"gracePeriodSeconds": "0"})
    assert reply.status == 200
    assert api.store.list(PODS)[0] == []


async def test_delete_body_wins_over_query(api: Api) -> None:
    create_pod(api.store, "a")
    reply = await api.call(
        "DELETE", f"{PODS_PATH}/a", query={"gracePeriodSeconds": "0"}, body={"gracePeriodSeconds": 20}
    )
    assert reply.status == 200
    assert reply.body["metadata"]["deletionGracePeriodSeconds"] == 20


async def test_negative_grace_period_becomes_one_second(api: Api) -> None:
    create_pod(api.store, "a")
    body = await api.ok("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": -5})
    assert body["metadata"]["deletionGracePeriodSeconds"] == 1


async def test_pod_grace_defaults_to_spec_termination_grace_period(api: Api) -> None:
    create_pod(api.store, "a", terminationGracePeriodSeconds=7)
    create_pod(api.store, "b")
    custom = await api.ok("DELETE", f"{PODS_PATH}/a")
    default = await api.ok("DELETE", f"{PODS_PATH}/b")
    assert custom["metadata"]["deletionGracePeriodSeconds"] == 7
    assert default["metadata"]["deletionGracePeriodSeconds"] == 30


async def test_unbound_pod_is_deleted_at_once(api: Api) -> None:
    create_pod(api.store, "a", node=None)
    await api.ok("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 30})
    assert (await api.call("GET", f"{PODS_PATH}/a")).status == 404


async def test_finished_pods_are_deleted_at_once(api: Api) -> None:
    for name, phase in (("done", "Succeeded"), ("broken", "Failed")):
        create_pod(api.store, name)
        api.store.patch(PODS, "default", name, {"status": {"phase": phase}}, MERGE, subresource="status")
        await api.ok("DELETE", f"{PODS_PATH}/{name}")
        assert (await api.call("GET", f"{PODS_PATH}/{name}")).status == 404


async def test_graceful_delete_marks_the_pod_and_keeps_it(api: Api) -> None:
    created = create_pod(api.store, "a")
    watcher = await api.watch(PODS_PATH, resourceVersion=created["metadata"]["resourceVersion"])
    before = time.time()
    body = await api.ok("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 30})
    assert body["kind"] == "Pod"
    meta = body["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 30
    assert before + 28 <= _epoch(meta["deletionTimestamp"]) <= time.time() + 31
    await eventually(lambda: watcher.events, what="MODIFIED for the graceful delete")
    assert watcher.types() == ["MODIFIED"]
    still = await api.ok("GET", f"{PODS_PATH}/a")
    assert still["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]


async def test_deleting_again_with_longer_grace_changes_nothing(api: Api) -> None:
    create_pod(api.store, "a")
    first = await api.ok("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 10})
    again = await api.ok("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 60})
    assert again["metadata"] == first["metadata"]


async def test_deleting_again_with_shorter_grace_moves_the_deadline_earlier(api: Api) -> None:
    create_pod(api.store, "a")
    first = await api.ok("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 60})
    again = await api.ok("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 5})
    assert again["metadata"]["deletionGracePeriodSeconds"] == 5
    assert _epoch(again["metadata"]["deletionTimestamp"]) < _epoch(first["metadata"]["deletionTimestamp"])


async def test_grace_zero_is_modified_then_deleted(api: Api) -> None:
    created = create_pod(api.store, "a")
    watcher = await api.watch(PODS_PATH, resourceVersion=created["metadata"]["resourceVersion"])
    body = await api.ok("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 0})
    assert body["kind"] == "Pod"
    await eventually(lambda: len(watcher.events) == 2, what="MODIFIED then DELETED")
    modified, deleted = watcher.events
    assert (modified["type"], deleted["type"]) == ("MODIFIED", "DELETED")
    assert modified["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
    assert (
        int(deleted["object"]["metadata"]["resourceVersion"])
        == int(modified["object"]["metadata"]["resourceVersion"]) + 1
    )


async def test_kubelet_style_final_delete_removes_a_terminating_pod(api: Api) -> None:
    created = create_pod(api.store, "a")
    await api.ok("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 30})
    assert (await api.call("GET", f"{PODS_PATH}/a")).status == 200  # the server never finishes it by itself
    await api.ok(
        "DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 0, "preconditions": {"uid": created["metadata"]["uid"]}}
    )
    assert (await api.call("GET", f"{PODS_PATH}/a")).status == 404


async def test_deleting_other_kinds_returns_a_success_status(api: Api) -> None:
    created = await api.ok("POST", "/apis/apps/v1/namespaces/default/daemonsets", body=daemonset("agent"))
    body = await api.ok("DELETE", "/apis/apps/v1/namespaces/default/daemonsets/agent")
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "agent", "group": "apps", "kind": "daemonsets", "uid": created["metadata"]["uid"]},
    }


async def test_finalizers_keep_the_object_until_cleared(api: Api) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    await api.ok("POST", path, body={"metadata": {"name": "l", "finalizers": ["example.com/keep"]}, "spec": {}})
    body = await api.ok("DELETE", f"{path}/l")
    assert body["metadata"]["deletionTimestamp"]
    assert (await api.call("GET", f"{path}/l")).status == 200
    await api.ok("PATCH", f"{path}/l", body={"metadata": {"finalizers": None}}, content_type=MERGE)
    assert (await api.call("GET", f"{path}/l")).status == 404


async def test_every_delete_call_is_recorded(api: Api) -> None:
    created = create_pod(api.store, "a")
    uid = created["metadata"]["uid"]
    await api.call("DELETE", f"{PODS_PATH}/ghost")
    await api.call("DELETE", f"{PODS_PATH}/a", body={"preconditions": {"uid": "x"}})
    await api.call("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 30})
    await api.call("DELETE", f"{PODS_PATH}/a", body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
    outcomes = [(d["name"], d["outcome"], d["code"], d["precondition_uid"]) for d in api.store.deletes]
    assert outcomes == [
        ("ghost", "not_found", 404, None),
        ("a", "conflict", 409, "x"),
        ("a", "graceful", 200, None),
        ("a", "deleted", 200, uid),
    ]
    assert all(d["uid"] == uid for d in api.store.deletes[1:])


async def test_deleting_an_owner_deletes_its_dependents(api: Api) -> None:
    owner = api.store.create(LEASES, {"metadata": {"name": "owner", "namespace": "default"}, "spec": {}})
    ref = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": "owner", "uid": owner["metadata"]["uid"]}
    create_pod(api.store, "dep", node=None)
    api.store.patch(PODS, "default", "dep", {"metadata": {"ownerReferences": [ref]}}, MERGE)
    await api.ok("DELETE", "/apis/coordination.k8s.io/v1/namespaces/default/leases/owner")
    assert (await api.call("GET", f"{PODS_PATH}/dep")).status == 404


async def test_orphan_propagation_keeps_dependents(api: Api) -> None:
    owner = api.store.create(LEASES, {"metadata": {"name": "owner", "namespace": "default"}, "spec": {}})
    ref = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": "owner", "uid": owner["metadata"]["uid"]}
    create_pod(api.store, "dep", node=None)
    api.store.patch(PODS, "default", "dep", {"metadata": {"ownerReferences": [ref]}}, MERGE)
    await api.ok(
        "DELETE", "/apis/coordination.k8s.io/v1/namespaces/default/leases/owner", body={"propagationPolicy": "Orphan"}
    )
    dep = await api.ok("GET", f"{PODS_PATH}/dep")
    assert "ownerReferences" not in dep["metadata"]


async def test_deleting_a_namespace_deletes_its_contents(api: Api) -> None:
    await api.ok("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
    create_pod(api.store, "a", namespace="team")
    await api.ok("DELETE", "/api/v1/namespaces/team")
    assert (await api.call("GET", "/api/v1/namespaces/team/pods/a")).status == 404
    assert (await api.call("GET", "/api/v1/namespaces/team")).status == 404


async def test_delete_collection_honours_selectors(api: Api) -> None:
    create_pod(api.store, "a", node=None, labels={"tier": "web"})
    create_pod(api.store, "b", node=None, labels={"tier": "db"})
    body = await api.ok("DELETE", PODS_PATH, query={"labelSelector": "tier=web"})
    assert body["kind"] == "PodList" and [p["metadata"]["name"] for p in body["items"]] == ["a"]
    assert [p["metadata"]["name"] for p in api.store.list(PODS)[0]] == ["b"]


async def test_dry_run_delete_changes_nothing(api: Api) -> None:
    create_pod(api.store, "a")
    rv = api.store.resource_version
    body = await api.ok("DELETE", f"{PODS_PATH}/a", query={"dryRun": "All"})
    assert body["metadata"]["name"] == "a"
    assert (
        api.store.resource_version == rv and "deletionTimestamp" not in api.store.get(PODS, "default", "a")["metadata"]
    )
