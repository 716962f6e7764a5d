"""POST semantics and error bodies: 201, AlreadyExists, generateName, bad input."""

from __future__ import annotations

import re

from edgeagent.sim.resources import JOBS
from tests.support.sim_api import Api, pod

PODS_PATH = "/api/v1/namespaces/default/pods"


async def test_create_is_201_with_server_fields(api: Api) -> None:
    reply = await api.call("POST", PODS_PATH, body=pod("a"))
    assert reply.status == 201
    meta = reply.body["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["resourceVersion"] == str(api.store.resource_version)
    assert reply.body["status"]["phase"] == "Pending"


async def test_duplicate_create_is_409_already_exists(api: Api) -> None:
    await api.ok("POST", PODS_PATH, body=pod("a"))
    reply = await api.call("POST", PODS_PATH, body=pod("a"))
    assert reply.status == 409
    assert reply.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "a" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "a", "kind": "pods"},
        "code": 409,
    }


async def test_generate_name(api: Api) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "agent-"}
    first = await api.ok("POST", PODS_PATH, body=body)
    second = await api.ok("POST", PODS_PATH, body=body)
    assert re.fullmatch(r"agent-[bcdfghjklmnpqrstvwxz2456789]{5}", first["metadata"]["name"])
    assert first["metadata"]["name"] != second["metadata"]["name"]


async def test_create_without_name_is_422(api: Api) -> None:
    body = pod("")
    body["metadata"] = {}
    reply = await api.call("POST", PODS_PATH, body=body)
    assert reply.status == 422
    assert reply.body["details"]["causes"][0]["field"] == "metadata.name"


async def test_default_namespaces_exist_and_others_must(api: Api) -> None:
    names = [n["metadata"]["name"] for n in (await api.ok("GET", "/api/v1/namespaces"))["items"]]
    assert names == ["default", "kube-node-lease", "kube-public", "kube-system"]
    reply = await api.call("POST", "/api/v1/namespaces/nowhere/pods", body=pod("a", namespace="nowhere"))
    assert reply.status == 404
    assert reply.body["message"] == 'namespaces "nowhere" not found'


async def test_body_namespace_must_match_the_url(api: Api) -> None:
    reply = await api.call("POST", PODS_PATH, body=pod("a", namespace="kube-system"))
    assert reply.status == 400
    assert reply.body["message"] == (
        "the namespace of the provided object does not match the namespace sent on the request"
    )


async def test_unknown_resource_is_404(api: Api) -> None:
    # (An unknown API group is plain text: test_v124_differences.)
    for path in ("/api/v1/namespaces/default/widgets", "/apis/apps/v1/things", "/api/v2/pods"):
        reply = await api.call("GET", path)
        assert reply.status == 404, path
        assert reply.body["reason"] == "NotFound"
        assert reply.body["message"] == "the server could not find the requested resource"


async def test_unknown_subresource_is_404(api: Api) -> None:
    await api.ok("POST", PODS_PATH, body=pod("a"))
    reply = await api.call("GET", f"{PODS_PATH}/a/exec")
    assert reply.status == 404


async def test_invalid_json_body_is_400(api: Api) -> None:
    reply = await api.call("POST", PODS_PATH, body=b'{"metadata": ')
    assert reply.status == 400
    assert reply.body["kind"] == "Status" and reply.body["reason"] == "BadRequest"


async def test_unsupported_body_content_type_is_415(api: Api) -> None:
    reply = await api.call("POST", PODS_PATH, body=b"name: a", content_type="text/csv")
    assert reply.status == 415
    assert reply.body["reason"] == "UnsupportedMediaType"


async def test_create_on_the_all_namespaces_path_is_405(api: Api) -> None:
    reply = await api.call("POST", "/api/v1/pods", body=pod("a"))
    assert reply.status == 405
    assert reply.body["reason"] == "MethodNotAllowed"


async def test_wrong_kind_in_body_is_400(api: Api) -> None:
    body = pod("a")
    body["kind"] = "Node"
    reply = await api.call("POST", PODS_PATH, body=body)
    assert reply.status == 400


async def test_jobs_are_stored(api: Api) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}}},
    }
    created = await api.ok("POST", "/apis/batch/v1/namespaces/default/jobs", body=job)
    assert created["metadata"]["generation"] == 1
    fetched = await api.ok("GET", "/apis/batch/v1/namespaces/default/jobs/once")
    assert fetched["spec"] == created["spec"]
    assert api.store.list(JOBS)[0][0]["metadata"]["name"] == "once"


async def test_core_events_are_stored_and_selectable(api: Api) -> None:
    event = {
        "metadata": {"name": "a.1"},
        "involvedObject": {"kind": "Pod", "name": "a", "namespace": "default"},
        "reason": "Upgraded",
        "type": "Normal",
    }
    await api.ok("POST", "/api/v1/namespaces/default/events", body=event)
    listed = await api.ok(
        "GET", "/api/v1/namespaces/default/events", query={"fieldSelector": "involvedObject.name=a,reason=Upgraded"}
    )
    assert [e["metadata"]["name"] for e in listed["items"]] == ["a.1"]


async def test_dry_run_create_stores_nothing(api: Api) -> None:
    rv = api.store.resource_version
    reply = await api.call("POST", PODS_PATH, query={"dryRun": "All"}, body=pod("a"))
    assert reply.status == 201 and reply.body["metadata"]["name"] == "a"
    assert api.store.resource_version == rv
    assert (await api.call("GET", f"{PODS_PATH}/a")).status == 404
