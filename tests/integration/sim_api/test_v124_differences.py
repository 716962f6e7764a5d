"""One test per difference measured side by side between kube-apiserver v1.24 and the old sim.

Each asserts what the real server answered (status, body text), so each failed against the sim as it was.
"""

from __future__ import annotations

import json

from edgeagent.sim.resources import LEASES, NODES, PODS
from tests.support.sim_api import Api, Watcher, create_node, create_pod, pod
from tests.support.waiting import eventually

PODS_PATH = "/api/v1/namespaces/default/pods"
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
EVENTS_PATH = "/api/v1/namespaces/default/events"


async def test_exact_list_at_rv_1_is_410_right_after_start(api: Api) -> None:
    reply = await api.call("GET", PODS_PATH, query={"resourceVersion": "1", "resourceVersionMatch": "Exact"})
    assert reply.status == 410
    assert (reply.body["reason"], reply.body["message"]) == (
        "Expired", "The resourceVersion for the provided list is too old.")


async def test_watch_from_rv_1_is_one_error_event_410(api: Api) -> None:
    oldest = api.store.oldest_resource_version
    watcher = await api.watch(PODS_PATH, resourceVersion="1")
    await _ended(watcher)
    assert watcher.events == [{"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: 1 ({oldest})", "reason": "Expired", "code": 410}}]


async def _ended(watcher: Watcher) -> None:
    await eventually(lambda: watcher.done, what="the watch to end")


async def test_daemonset_field_selectors_use_the_default_conversion_text(api: Api) -> None:
    reply = await api.call("GET", "/apis/apps/v1/daemonsets", query={"fieldSelector": "spec.foo=bar"})
    assert reply.status == 400
    assert reply.body["message"] == (
        '"spec.foo" is not a known field selector: only "metadata.name", "metadata.namespace"')
    reply = await api.call("GET", PODS_PATH, query={"fieldSelector": "spec.foo=bar"})
    assert (reply.status, reply.body["message"]) == (400, "field label not supported: spec.foo")


async def test_nodes_spec_unschedulable_false_matches_nodes_where_it_is_unset(api: Api) -> None:
    create_node(api.store, "plain")
    cordoned = create_node(api.store, "cordoned")
    api.store.patch(NODES, None, "cordoned", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
    assert cordoned["metadata"]["name"] == "cordoned"
    body = await api.ok("GET", "/api/v1/nodes", query={"fieldSelector": "spec.unschedulable=false"})
    assert [n["metadata"]["name"] for n in body["items"]] == ["plain"]
    body = await api.ok("GET", "/api/v1/nodes", query={"fieldSelector": "spec.unschedulable=true"})
    assert [n["metadata"]["name"] for n in body["items"]] == ["cordoned"]


async def test_label_selector_errors_carry_the_parser_prefix(api: Api) -> None:
    for text, message in (("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
                          ("!!x", "unable to parse requirement: found '!', expected: identifier")):
        reply = await api.call("GET", PODS_PATH, query={"labelSelector": text})
        assert (reply.status, reply.body["message"]) == (400, message), text


async def test_apply_patch_requires_a_field_manager(api: Api) -> None:
    body = json.dumps(pod("a")).encode()
    reply = await api.call("PATCH", f"{PODS_PATH}/a", body=body, content_type="application/apply-patch+yaml")
    assert reply.status == 422
    assert reply.body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch')
    reply = await api.call("PATCH", f"{PODS_PATH}/a?fieldManager=me", body=body,
                           content_type="application/apply-patch+yaml")
    assert reply.status == 201


async def test_patch_with_plain_json_is_415_in_plain_text(api: Api) -> None:
    create_pod(api.store, "a")
    reply = await api.call("PATCH", f"{PODS_PATH}/a", body=b'{"metadata":{}}', content_type="application/json")
    assert (reply.status, reply.raw) == (415, b"415: Unsupported Media Type")


def _lease(renew: str) -> dict[str, object]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
            "spec": {"holderIdentity": "me", "renewTime": renew}}


async def test_lease_micro_time_with_seconds_precision_is_400(api: Api) -> None:
    created = await api.ok("POST", LEASES_PATH, body=_lease("2026-11-22T10:00:00.123456Z"))
    put = {**_lease("2026-11-22T10:00:01Z"), "metadata": created["metadata"]}
    reply = await api.call("PUT", f"{LEASES_PATH}/l", body=put)
    assert reply.status == 400
    assert reply.body["message"] == (
        'Lease in version "v1" cannot be handled as a Lease: parsing time "2026-11-22T10:00:01Z" as '
        '"2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"')
    assert api.store.get(LEASES, "default", "l")["spec"]["renewTime"] == "2026-11-22T10:00:00.123456Z"


async def test_lease_micro_time_with_an_offset_in_a_merge_patch_is_422(api: Api) -> None:
    await api.ok("POST", LEASES_PATH, body=_lease("2026-11-22T10:00:00.123456Z"))
    patch = {"spec": {"renewTime": "2026-11-22T11:00:00.000000+01:00"}}
    reply = await api.call("PATCH", f"{LEASES_PATH}/l", body=patch, content_type="application/merge-patch+json")
    assert reply.status == 422
    assert reply.body["reason"] == "Invalid"
    assert api.store.get(LEASES, "default", "l")["spec"]["renewTime"] == "2026-11-22T10:00:00.123456Z"


async def test_event_namespace_must_match_its_involved_object(api: Api) -> None:
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}, "reason": "R", "message": "m",
             "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"}}
    reply = await api.call("POST", EVENTS_PATH, body=event)
    assert reply.status == 422
    assert reply.body["message"] == (
        'Event "e" is invalid: involvedObject.namespace: Invalid value: "other": does not match event.namespace')
    event["involvedObject"] = {"kind": "Pod", "name": "p", "namespace": "default"}
    assert (await api.call("POST", EVENTS_PATH, body=event)).status == 201


async def test_unfiltered_pages_carry_remaining_item_count(api: Api) -> None:
    for name in ("a", "b", "c"):
        create_pod(api.store, name)
    body = await api.ok("GET", PODS_PATH, query={"limit": "1"})
    assert body["metadata"]["remainingItemCount"] == 2
    filtered = await api.ok("GET", PODS_PATH, query={"limit": "1", "labelSelector": "x!=y"})
    assert "remainingItemCount" not in filtered["metadata"] and filtered["metadata"]["continue"]


async def test_garbage_continue_token_is_400_invalid_continue_token(api: Api) -> None:
    reply = await api.call("GET", PODS_PATH, query={"limit": "1", "continue": "garbage!!"})
    assert reply.status == 400
    assert reply.body["message"] == (
        "invalid continue token: continue key is not valid: illegal base64 data at input byte 7")


async def test_new_pod_condition_from_a_status_patch_goes_first(api: Api) -> None:
    create_pod(api.store, "a")
    api.store.patch(
        PODS, "default", "a", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        "application/strategic-merge-patch+json", subresource="status")
    patch = {"status": {"conditions": [{"type": "PodNeedUpgrade", "status": "True"}]}}
    body = await api.ok("PATCH", f"{PODS_PATH}/a/status", body=patch,
                        content_type="application/strategic-merge-patch+json")
    assert [c["type"] for c in body["status"]["conditions"]] == ["PodNeedUpgrade", "Ready"]


async def test_unknown_api_group_is_plain_text_page_not_found(api: Api) -> None:
    for path in ("/apis/example.com/v1/things", "/apis/example.com/v1", "/apis/example.com"):
        reply = await api.call("GET", path)
        assert (reply.status, reply.raw) == (404, b"404 page not found\n"), path
        assert reply.headers["Content-Type"].startswith("text/plain")


async def test_pod_update_changing_node_name_has_the_v132_text(api: Api) -> None:
    created = create_pod(api.store, "a", node="edge-1")
    created["spec"]["nodeName"] = "edge-2"
    reply = await api.call("PUT", f"{PODS_PATH}/a", body=created)
    assert reply.status == 422
    # v1.32 joins the fields with "," (v1.24 wrote ", " and "or") and follows them with a diff of the specs.
    assert reply.body["message"] == (
        'Pod "a" is invalid: spec: Forbidden: pod updates may not change fields other than '
        "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
        "`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
        '(allow it to be set to 1 if it was previously negative)\n- \tspec.nodeName: "edge-1"\n'
        '+ \tspec.nodeName: "edge-2"')
