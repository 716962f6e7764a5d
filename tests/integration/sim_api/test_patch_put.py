"""PATCH and PUT semantics, status subresource split and Leases."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from edgeagent.sim.resources import DAEMONSETS, NODES, PODS
from tests.support.sim_api import Api, create_node, create_pod, daemonset

PODS_PATH = "/api/v1/namespaces/default/pods"
DS_PATH = "/apis/apps/v1/namespaces/default/daemonsets"
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def _conditions(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"conditions": list(conditions)}}


async def _pod_with_conditions(api: Api) -> None:
    create_pod(api.store, "a")
    api.store.patch(
        PODS,
        "default",
        "a",
        _conditions(
            {"type": "Ready", "status": "True", "reason": "Started"},
            {"type": "PodNeedUpgrade", "status": "False", "message": "v1"},
        ),
        MERGE,
        subresource="status",
    )


async def test_unsupported_patch_content_type_is_415(api: Api) -> None:
    create_pod(api.store, "a")
    for content_type in ("text/plain", "application/json"):
        reply = await api.call("PATCH", f"{PODS_PATH}/a", body=b'{"metadata":{}}', content_type=content_type)
        # As measured on v1.24: go-restful answers before the handler runs, in plain text.
        assert (reply.status, reply.raw) == (415, b"415: Unsupported Media Type")
        assert reply.headers["Content-Type"].startswith("text/plain")


async def test_invalid_json_patch_body_is_400(api: Api) -> None:
    create_pod(api.store, "a")
    reply = await api.call("PATCH", f"{PODS_PATH}/a", body=b"{not json", content_type=MERGE)
    assert reply.status == 400
    assert reply.body["reason"] == "BadRequest"


async def test_strategic_merge_merges_status_conditions_by_type(api: Api) -> None:
    await _pod_with_conditions(api)
    patch = _conditions({"type": "PodNeedUpgrade", "status": "True"}, {"type": "Custom", "status": "True"})
    body = await api.ok("PATCH", f"{PODS_PATH}/a/status", body=patch, content_type=STRATEGIC)
    assert body["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "reason": "Started"},
        {"type": "PodNeedUpgrade", "status": "True", "message": "v1"},  # fields left out keep their values
        {"type": "Custom", "status": "True"},  # new types are appended
    ]


async def test_strategic_merge_patch_delete_directive_and_null(api: Api) -> None:
    await _pod_with_conditions(api)
    patch = _conditions({"type": "Ready", "$patch": "delete"}, {"type": "PodNeedUpgrade", "message": None})
    body = await api.ok("PATCH", f"{PODS_PATH}/a/status", body=patch, content_type=STRATEGIC)
    assert body["status"]["conditions"] == [{"type": "PodNeedUpgrade", "status": "False"}]


async def test_strategic_merge_keeps_container_statuses_atomic(api: Api) -> None:
    create_pod(api.store, "a")
    statuses = [{"name": "app", "ready": True, "restartCount": 0}, {"name": "side", "ready": True}]
    api.store.patch(PODS, "default", "a", {"status": {"containerStatuses": statuses}}, MERGE, subresource="status")
    patch = {"status": {"containerStatuses": [{"name": "app", "ready": False}]}}
    body = await api.ok("PATCH", f"{PODS_PATH}/a/status", body=patch, content_type=STRATEGIC)
    assert body["status"]["containerStatuses"] == [{"name": "app", "ready": False}]


async def test_merge_patch_replaces_lists_whole(api: Api) -> None:
    await _pod_with_conditions(api)
    body = await api.ok(
        "PATCH", f"{PODS_PATH}/a/status", body=_conditions({"type": "Ready", "status": "False"}), content_type=MERGE
    )
    assert body["status"]["conditions"] == [{"type": "Ready", "status": "False"}]


async def test_json_patch(api: Api) -> None:
    create_pod(api.store, "a", labels={"app": "x"})
    ops = [
        {"op": "test", "path": "/metadata/labels/app", "value": "x"},
        {"op": "add", "path": "/metadata/labels/v", "value": "2"},
    ]
    body = await api.ok("PATCH", f"{PODS_PATH}/a", body=ops, content_type=JSON_PATCH)
    assert body["metadata"]["labels"] == {"app": "x", "v": "2"}


async def test_failed_json_patch_test_op_is_422(api: Api) -> None:
    create_pod(api.store, "a", labels={"app": "x"})
    ops = [{"op": "test", "path": "/metadata/labels/app", "value": "y"}]
    reply = await api.call("PATCH", f"{PODS_PATH}/a", body=ops, content_type=JSON_PATCH)
    assert reply.status == 422


async def test_apply_patch_yaml(api: Api) -> None:
    create_pod(api.store, "a")
    body = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  labels:\n    applied: 'yes'\n"
    reply = await api.call("PATCH", f"{PODS_PATH}/a", query={"fieldManager": "t"}, body=body, content_type=APPLY)
    assert reply.status == 200
    assert reply.body["metadata"]["labels"] == {"applied": "yes"}


async def test_kubernetes_asyncio_default_patch_types(api: Api) -> None:
    await _pod_with_conditions(api)
    # A dict body goes out as strategic merge: conditions merge by type.
    pod = await api.core.patch_namespaced_pod_status(
        "a", "default", _conditions({"type": "PodNeedUpgrade", "status": "True"})
    )
    assert [(c.type, c.status) for c in pod.status.conditions] == [("Ready", "True"), ("PodNeedUpgrade", "True")]
    # A list body goes out as JSON patch.
    pod = await api.core.patch_namespaced_pod(
        "a", "default", [{"op": "add", "path": "/metadata/labels", "value": {"via": "json-patch"}}]
    )
    assert pod.metadata.labels == {"via": "json-patch"}


async def test_patch_carrying_a_stale_rv_conflicts(api: Api) -> None:
    created = create_pod(api.store, "a")
    api.store.patch(PODS, "default", "a", {"metadata": {"labels": {"v": "1"}}}, MERGE)
    patch = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"], "labels": {"v": "2"}}}
    reply = await api.call("PATCH", f"{PODS_PATH}/a", body=patch, content_type=MERGE)
    assert reply.status == 409
    assert reply.body["message"] == (
        'Operation cannot be fulfilled on pods "a": the object has been modified; please apply your changes to the '
        "latest version and try again"
    )


async def test_patch_carrying_the_current_rv_applies(api: Api) -> None:
    created = create_pod(api.store, "a")
    patch = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"], "labels": {"v": "2"}}}
    body = await api.ok("PATCH", f"{PODS_PATH}/a", body=patch, content_type=MERGE)
    assert body["metadata"]["labels"] == {"v": "2"}


async def test_patch_without_rv_is_unconditional(api: Api) -> None:
    create_pod(api.store, "a")
    api.store.patch(PODS, "default", "a", {"metadata": {"labels": {"v": "1"}}}, MERGE)
    body = await api.ok("PATCH", f"{PODS_PATH}/a", body={"metadata": {"labels": {"v": "2"}}}, content_type=MERGE)
    assert body["metadata"]["labels"] == {"v": "2"}


async def test_patch_with_a_different_uid_is_422(api: Api) -> None:
    create_pod(api.store, "a")
    patch = {"metadata": {"uid": "someone-else"}, "status": {"phase": "Failed"}}
    reply = await api.call("PATCH", f"{PODS_PATH}/a/status", body=patch, content_type=STRATEGIC)
    assert reply.status == 422
    assert reply.body["reason"] == "Invalid"
    assert reply.body["details"]["kind"] == "Pod"
    assert (
        reply.body["message"] == 'Pod "a" is invalid: metadata.uid: Invalid value: "someone-else": field is immutable'
    )
    assert api.store.get(PODS, "default", "a")["status"]["phase"] == "Pending"


async def test_pod_status_endpoint_stores_only_status(api: Api) -> None:
    create_pod(api.store, "a")
    patch = {
        "metadata": {
            "labels": {"sneaky": "1"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}],
            "deletionTimestamp": "2020-01-01T00:00:00Z",
        },
        "spec": {"nodeName": "elsewhere"},
        "status": {"phase": "Running"},
    }
    body = await api.ok("PATCH", f"{PODS_PATH}/a/status", body=patch, content_type=MERGE)
    assert body["status"]["phase"] == "Running"
    assert body["spec"]["nodeName"] == "edge-1"
    assert body["metadata"]["labels"] == {}
    assert "ownerReferences" not in body["metadata"] and "deletionTimestamp" not in body["metadata"]


async def test_main_endpoint_drops_status_changes(api: Api) -> None:
    create_pod(api.store, "a")
    patch = {"metadata": {"labels": {"v": "2"}}, "status": {"phase": "Running"}}
    body = await api.ok("PATCH", f"{PODS_PATH}/a", body=patch, content_type=MERGE)
    assert body["metadata"]["labels"] == {"v": "2"}
    assert body["status"]["phase"] == "Pending"


async def test_daemonset_status_split(api: Api) -> None:
    api.store.create(DAEMONSETS, daemonset("agent"))
    via_main = await api.ok("PATCH", f"{DS_PATH}/agent", body={"status": {"numberReady": 3}}, content_type=MERGE)
    assert via_main["status"]["numberReady"] == 0
    via_status = await api.ok(
        "PATCH",
        f"{DS_PATH}/agent/status",
        body={"status": {"numberReady": 3}, "spec": {"minReadySeconds": 9}},
        content_type=MERGE,
    )
    assert via_status["status"]["numberReady"] == 3
    assert "minReadySeconds" not in via_status["spec"]
    assert via_status["metadata"]["generation"] == 1


async def test_node_status_split(api: Api) -> None:
    create_node(api.store, "edge-1")
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    via_main = await api.ok("PATCH", "/api/v1/nodes/edge-1", body=ready, content_type=STRATEGIC)
    assert via_main["status"]["conditions"] == []
    via_status = await api.ok("PATCH", "/api/v1/nodes/edge-1/status", body=ready, content_type=STRATEGIC)
    assert via_status["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert api.store.get(NODES, None, "edge-1")["status"]["conditions"][0]["status"] == "True"


async def test_put_with_a_stale_rv_is_409(api: Api) -> None:
    created = create_pod(api.store, "a")
    api.store.patch(PODS, "default", "a", {"metadata": {"labels": {"v": "1"}}}, MERGE)
    created["metadata"]["labels"] = {"v": "2"}
    reply = await api.call("PUT", f"{PODS_PATH}/a", body=created)
    assert reply.status == 409
    assert reply.body["reason"] == "Conflict"
    assert reply.body["message"].endswith("please apply your changes to the latest version and try again")


async def test_put_without_rv_is_allowed_for_pods_and_daemonsets(api: Api) -> None:
    pod = create_pod(api.store, "a")
    del pod["metadata"]["resourceVersion"]
    pod["metadata"]["labels"] = {"v": "2"}
    assert (await api.ok("PUT", f"{PODS_PATH}/a", body=pod))["metadata"]["labels"] == {"v": "2"}
    ds = api.store.create(DAEMONSETS, daemonset("agent"))
    del ds["metadata"]["resourceVersion"]
    ds["spec"]["minReadySeconds"] = 5
    assert (await api.ok("PUT", f"{DS_PATH}/agent", body=ds))["spec"]["minReadySeconds"] == 5


async def test_put_with_a_different_uid_is_409(api: Api) -> None:
    pod = create_pod(api.store, "a")
    pod["metadata"]["uid"] = "other"
    reply = await api.call("PUT", f"{PODS_PATH}/a", body=pod)
    assert reply.status == 409
    assert "Precondition failed: UID in precondition: other" in reply.body["message"]


async def test_put_name_must_match_the_url(api: Api) -> None:
    pod = create_pod(api.store, "a")
    reply = await api.call("PUT", f"{PODS_PATH}/b", body=pod)
    assert reply.status == 400
    assert reply.body["message"] == "the name of the object (a) does not match the name on the URL (b)"


async def test_pod_spec_is_immutable_apart_from_images(api: Api) -> None:
    create_pod(api.store, "a")
    reply = await api.call("PATCH", f"{PODS_PATH}/a", body={"spec": {"nodeName": "edge-9"}}, content_type=MERGE)
    assert reply.status == 422
    assert "pod updates may not change fields" in reply.body["message"]
    image = {"spec": {"containers": [{"name": "app", "image": "registry.local/app:2"}]}}
    body = await api.ok("PATCH", f"{PODS_PATH}/a", body=image, content_type=STRATEGIC)
    assert body["spec"]["containers"][0]["image"] == "registry.local/app:2"


async def test_lease_put_without_rv_is_422(api: Api) -> None:
    lease = await api.ok("POST", LEASES_PATH, body={"metadata": {"name": "edge-1"}, "spec": {"holderIdentity": "a"}})
    del lease["metadata"]["resourceVersion"]
    reply = await api.call("PUT", f"{LEASES_PATH}/edge-1", body=lease)
    assert reply.status == 422
    assert reply.body["reason"] == "Invalid"
    assert reply.body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0x0: must be specified for an update",
            "field": "metadata.resourceVersion",
        }
    ]


async def test_lease_leader_election_flow(api: Api) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    assert (await api.call("GET", f"{path}/leader")).status == 404
    spec = {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2024-01-01T00:00:00.000001Z",
        "renewTime": "2024-01-01T00:00:00.000001Z",
        "leaseTransitions": 0,
    }
    created = await api.ok("POST", path, body={"metadata": {"name": "leader"}, "spec": spec})
    lost = await api.call("POST", path, body={"metadata": {"name": "leader"}, "spec": {**spec, "holderIdentity": "b"}})
    assert lost.status == 409 and lost.body["reason"] == "AlreadyExists"
    fetched = await api.ok("GET", f"{path}/leader")
    assert fetched["spec"] == spec  # microsecond timestamps stored as sent
    taken = {**fetched, "spec": {**spec, "holderIdentity": "b", "leaseTransitions": 1}}
    renewed = await api.ok("PUT", f"{path}/leader", body=taken)
    assert renewed["spec"]["holderIdentity"] == "b"
    stale = {**created, "spec": {**spec, "holderIdentity": "c"}}
    race = await api.call("PUT", f"{path}/leader", body=stale)
    assert race.status == 409 and race.body["reason"] == "Conflict"


async def test_generated_api_raises_api_exception_with_status(api: Api) -> None:
    with pytest.raises(ApiException) as caught:
        await api.core.read_namespaced_pod("ghost", "default")
    assert caught.value.status == 404
