"""Custom objects of a CRD that is not ours ("Widget"), over HTTP: defaults, each schema rule and the CEL rule
refused with the real texts, fieldValidation, patches (strategic merge refused with the real 415), the status
subresource, generation, printer columns, selectors, watches and deletion (sim/custom_writes.py and the Store)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.crd_widget import CEL_MESSAGE, CRDS, GROUP, WIDGETS, widget, widget_crd
from tests.support.sim_api import Api
from tests.support.waiting import eventually

JSON = dict[str, Any]
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"


@pytest.fixture
async def widgets(api: Api) -> Api:
    await api.ok("POST", CRDS, body=widget_crd())
    return api


async def test_created_with_defaults_and_generation_one(widgets: Api) -> None:
    created = await widgets.ok("POST", WIDGETS, body=widget("w1"))
    assert created["kind"] == "Widget" and created["apiVersion"] == f"{GROUP}/v1"
    assert created["spec"] == {"size": "small", "replicas": 1, "minReplicas": 0}
    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["namespace"] == "default"
    got = await widgets.ok("GET", f"{WIDGETS}/w1")
    assert got == created


async def test_status_sent_on_create_is_dropped(widgets: Api) -> None:
    body = widget("w1")
    body["status"] = {"observed": 3}
    created = await widgets.ok("POST", WIDGETS, body=body)
    assert "status" not in created


def _invalid(name: str, text: str) -> str:
    return f'Widget.example.com "{name}" is invalid: {text}'


_NOT_CHECKED = ("<nil>: Invalid value: null: some validation rules were not checked because the object was "
                "invalid; correct the existing errors to complete validation")


@pytest.mark.parametrize(("spec", "message", "field"), [
    ({"size": "huge"}, 'spec.size: Unsupported value: "huge": supported values: "small", "medium", "large"',
     "spec.size"),
    ({"size": "small", "replicas": 11},
     "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10", "spec.replicas"),
    ({"size": "small", "replicas": -1},
     "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
     "spec.replicas"),
    ({"size": "small", "color": "Red"},
     "spec.color: Invalid value: \"Red\": spec.color in body should match '^[a-z]+$'", "spec.color"),
    ({"size": "small", "color": "abcdefghijk"},
     "spec.color: Too long: may not be more than 10 bytes", "spec.color"),
    ({}, "spec.size: Required value", "spec.size"),
    ({"size": "small", "replicas": "two"},
     'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"',
     "spec.replicas"),
    ({"size": "small", "replicas": 1, "minReplicas": 2}, f"spec: Invalid value: {CEL_MESSAGE}", "spec"),
])
async def test_each_rule_refuses_with_the_real_message(widgets: Api, spec: JSON, message: str, field: str) -> None:
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": spec}
    reply = await widgets.call("POST", WIDGETS, body=body)
    assert reply.status == 422, reply.raw
    assert reply.body["reason"] == "Invalid"
    assert reply.body["details"]["kind"] == "Widget" and reply.body["details"]["group"] == GROUP
    causes = reply.body["details"]["causes"]
    assert causes[0]["field"] == field
    assert reply.body["message"].startswith(_invalid("bad", "")), reply.body["message"]
    assert message in reply.body["message"]
    assert (await widgets.call("GET", f"{WIDGETS}/bad")).status == 404


async def test_an_update_is_checked_as_a_create_is(widgets: Api) -> None:
    await widgets.ok("POST", WIDGETS, body=widget("w1"))
    reply = await widgets.call("PATCH", f"{WIDGETS}/w1", body={"spec": {"size": "huge"}}, content_type=MERGE)
    assert reply.status == 422
    assert reply.body["details"]["causes"][0]["field"] == "spec.size"


async def test_strict_field_validation_refuses_unknown_fields(widgets: Api) -> None:
    body = widget("w1", foo=1)
    reply = await widgets.call("POST", WIDGETS, body=body, query={"fieldValidation": "Strict"})
    assert reply.status == 400
    assert reply.body["reason"] == "BadRequest"
    assert reply.body["message"] == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.foo"')
    await widgets.ok("POST", WIDGETS, body=widget("w1"))
    reply = await widgets.call("PATCH", f"{WIDGETS}/w1", body={"spec": {"foo": 1, "bar": 2}}, content_type=MERGE,
                               query={"fieldValidation": "Strict"})
    assert reply.status == 400
    assert reply.body["message"] == 'strict decoding error: unknown field "spec.bar", unknown field "spec.foo"'


async def test_warn_is_the_default_and_prunes_with_a_warning_header(widgets: Api) -> None:
    for query in ({}, {"fieldValidation": "Warn"}):
        name = f"w{len(query)}"
        reply = await widgets.call("POST", WIDGETS, body=widget(name, foo=1), query=query)
        assert reply.status == 201
        assert reply.headers.getall("Warning") == ['299 - "unknown field \\"spec.foo\\""']
        assert "foo" not in reply.body["spec"]


async def test_ignore_prunes_silently(widgets: Api) -> None:
    reply = await widgets.call("POST", WIDGETS, body=widget("w1", foo=1), query={"fieldValidation": "Ignore"})
    assert reply.status == 201
    assert "Warning" not in reply.headers
    assert "foo" not in reply.body["spec"]


async def test_an_unknown_field_validation_value_is_refused(widgets: Api) -> None:
    reply = await widgets.call("POST", WIDGETS, body=widget("w1"), query={"fieldValidation": "Loose"})
    assert reply.status == 422
    assert reply.body["message"] == ('CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: '
                                     '"Loose": supported values: "", "Ignore", "Strict", "Warn"')


async def test_strategic_merge_patch_is_415_with_the_real_text(widgets: Api) -> None:
    await widgets.ok("POST", WIDGETS, body=widget("w1"))
    reply = await widgets.call("PATCH", f"{WIDGETS}/w1", body={"spec": {"size": "large"}}, content_type=SMP)
    assert reply.status == 415
    assert reply.body["reason"] == "UnsupportedMediaType"
    assert reply.body["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")


async def test_merge_and_json_patches(widgets: Api) -> None:
    await widgets.ok("POST", WIDGETS, body=widget("w1"))
    merged = await widgets.ok("PATCH", f"{WIDGETS}/w1", body={"spec": {"size": "large"}}, content_type=MERGE)
    assert merged["spec"]["size"] == "large"
    ops = [{"op": "replace", "path": "/spec/replicas", "value": 4}]
    patched = await widgets.ok("PATCH", f"{WIDGETS}/w1", body=ops, content_type=JSON_PATCH)
    assert patched["spec"] == {"size": "large", "replicas": 4, "minReplicas": 0}
    assert patched["metadata"]["generation"] == 3


async def test_status_is_written_apart_from_the_rest(widgets: Api) -> None:
    await widgets.ok("POST", WIDGETS, body=widget("w1"))
    # A write of the object ignores status...
    ignored = await widgets.ok("PATCH", f"{WIDGETS}/w1", body={"status": {"observed": 1}}, content_type=MERGE)
    assert "status" not in ignored
    # ...and a write of /status ignores the rest, and leaves the generation alone.
    body = {"spec": {"size": "large"}, "status": {"observed": 1, "conditions": [{"type": "Ready", "status": "True"}]},
            "metadata": {"labels": {"a": "b"}}}
    written = await widgets.ok("PATCH", f"{WIDGETS}/w1/status", body=body, content_type=MERGE)
    assert written["status"]["observed"] == 1
    assert written["spec"]["size"] == "small"
    assert "labels" not in written["metadata"]
    assert written["metadata"]["generation"] == 1
    # The status is checked against the schema too.
    reply = await widgets.call("PATCH", f"{WIDGETS}/w1/status", body={"status": {"observed": "x"}},
                               content_type=MERGE)
    assert reply.status == 422
    assert reply.body["details"]["causes"][0]["field"] == "status.observed"


async def test_generation_moves_with_spec_changes_only(widgets: Api) -> None:
    await widgets.ok("POST", WIDGETS, body=widget("w1"))
    labelled = await widgets.ok("PATCH", f"{WIDGETS}/w1", body={"metadata": {"labels": {"x": "y"}}},
                                content_type=MERGE)
    assert labelled["metadata"]["generation"] == 1
    changed = await widgets.ok("PATCH", f"{WIDGETS}/w1", body={"spec": {"replicas": 2}}, content_type=MERGE)
    assert changed["metadata"]["generation"] == 2
    same = await widgets.ok("PATCH", f"{WIDGETS}/w1", body={"spec": {"replicas": 2}}, content_type=MERGE)
    assert same["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]  # a no-op stores nothing


async def test_put_with_a_stale_resource_version_conflicts(widgets: Api) -> None:
    created = await widgets.ok("POST", WIDGETS, body=widget("w1"))
    await widgets.ok("PATCH", f"{WIDGETS}/w1", body={"spec": {"replicas": 2}}, content_type=MERGE)
    created["spec"]["replicas"] = 3
    reply = await widgets.call("PUT", f"{WIDGETS}/w1", body=created)
    assert reply.status == 409
    assert reply.body["message"] == (
        'Operation cannot be fulfilled on widgets.example.com "w1": the object has been modified; please apply '
        "your changes to the latest version and try again")


async def test_printer_columns_in_the_table(widgets: Api) -> None:
    await widgets.ok("POST", WIDGETS, body=widget("w1", replicas=3))
    await widgets.ok("PATCH", f"{WIDGETS}/w1/status",
                     body={"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, content_type=MERGE)
    reply = await widgets.call("GET", WIDGETS)
    assert reply.status == 200
    response = await widgets.client.rest_client.pool_manager.get(widgets.url + WIDGETS, headers={"Accept": TABLE})
    table = json.loads(await response.read())
    assert table["kind"] == "Table"
    assert [(c["name"], c["type"], c["format"]) for c in table["columnDefinitions"]] == [
        ("Name", "string", "name"), ("Size", "string", ""), ("Replicas", "integer", ""), ("Ready", "string", ""),
        ("Age", "date", "")]
    cells = table["rows"][0]["cells"]
    assert cells[:4] == ["w1", "small", 3, "True"]
    assert cells[4].endswith("s")  # an age, such as "0s"


async def test_a_crd_without_columns_prints_name_and_age(api: Api) -> None:
    from tests.support.crd_widget import GADGETS, gadget_crd

    await api.ok("POST", CRDS, body=gadget_crd())
    await api.ok("POST", GADGETS, body={"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": "g"}})
    response = await api.client.rest_client.pool_manager.get(api.url + GADGETS, headers={"Accept": TABLE})
    table = json.loads(await response.read())
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert table["rows"][0]["cells"][0] == "g"


async def test_label_and_field_selectors(widgets: Api) -> None:
    for name, tier in (("a", "front"), ("b", "back")):
        body = widget(name)
        body["metadata"]["labels"] = {"tier": tier}
        await widgets.ok("POST", WIDGETS, body=body)
    by_label = await widgets.ok("GET", WIDGETS, query={"labelSelector": "tier=back"})
    assert [i["metadata"]["name"] for i in by_label["items"]] == ["b"]
    by_name = await widgets.ok("GET", f"/apis/{GROUP}/v1/widgets", query={"fieldSelector": "metadata.name=a"})
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["a"]
    reply = await widgets.call("GET", WIDGETS, query={"fieldSelector": "spec.size=small"})
    assert reply.status == 400
    assert reply.body["message"] == (
        '"spec.size" is not a known field selector: only "metadata.name", "metadata.namespace"')


async def test_watch_events_resource_versions_and_410(widgets: Api) -> None:
    created = await widgets.ok("POST", WIDGETS, body=widget("w1"))
    rv = created["metadata"]["resourceVersion"]
    watcher = await widgets.watch(WIDGETS, resourceVersion=rv, allowWatchBookmarks="true")
    await widgets.ok("PATCH", f"{WIDGETS}/w1", body={"spec": {"replicas": 2}}, content_type=MERGE)
    await widgets.ok("POST", WIDGETS, body=widget("w2"))
    await widgets.ok("DELETE", f"{WIDGETS}/w1")
    await eventually(lambda: watcher.of_type("DELETED"), what="the DELETED event")
    assert [e["type"] for e in watcher.events if e["type"] != "BOOKMARK"] == ["MODIFIED", "ADDED", "DELETED"]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in watcher.events if e["type"] != "BOOKMARK"]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    bookmark = await eventually(lambda: watcher.of_type("BOOKMARK"), what="a bookmark")
    assert bookmark[0]["object"]["kind"] == "Widget"
    assert bookmark[0]["object"]["apiVersion"] == f"{GROUP}/v1"
    widgets.store.compact()
    old = await widgets.watch(WIDGETS, resourceVersion=rv)
    await eventually(lambda: old.done, what="the expired watch to end")
    assert old.events[0]["type"] == "ERROR" and old.events[0]["object"]["code"] == 410


async def test_deleted_at_once_unless_finalizers_and_with_preconditions(widgets: Api) -> None:
    created = await widgets.ok("POST", WIDGETS, body=widget("w1"))
    reply = await widgets.call("DELETE", f"{WIDGETS}/w1", body={"preconditions": {"uid": "not-it"}})
    assert reply.status == 409
    assert reply.body["message"] == (
        'Operation cannot be fulfilled on Widget.example.com "w1": the UID in the precondition (not-it) does not '
        f'match the UID in record ({created["metadata"]["uid"]}). The object might have been deleted and then '
        "recreated")
    deleted = await widgets.ok("DELETE", f"{WIDGETS}/w1", body={"gracePeriodSeconds": 30})
    assert deleted["kind"] == "Status" and deleted["status"] == "Success"
    assert (await widgets.call("GET", f"{WIDGETS}/w1")).status == 404
    body = widget("w2")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await widgets.ok("POST", WIDGETS, body=body)
    held = await widgets.ok("DELETE", f"{WIDGETS}/w2")
    assert held["metadata"]["deletionTimestamp"]
    await widgets.ok("PATCH", f"{WIDGETS}/w2", body={"metadata": {"finalizers": None}}, content_type=MERGE)
    assert (await widgets.call("GET", f"{WIDGETS}/w2")).status == 404


async def test_the_scale_subresource(api: Api) -> None:
    crd = widget_crd()
    crd["spec"]["versions"][0]["subresources"]["scale"] = {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.observed",
        "labelSelectorPath": ".status.selector"}
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["selector"] = {
        "type": "string"}
    await api.ok("POST", CRDS, body=crd)
    entries = {r["name"]: r for r in (await api.ok("GET", f"/apis/{GROUP}/v1"))["resources"]}
    assert entries["widgets/scale"] == {"name": "widgets/scale", "singularName": "", "namespaced": True,
                                        "group": "autoscaling", "version": "v1", "kind": "Scale",
                                        "verbs": ["get", "patch", "update"]}
    created = await api.ok("POST", WIDGETS, body=widget("w1", replicas=2))
    await api.ok("PATCH", f"{WIDGETS}/w1/status", body={"status": {"observed": 2, "selector": "app=w1"}},
                 content_type=MERGE)
    scale = await api.ok("GET", f"{WIDGETS}/w1/scale")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["metadata"]["uid"] == created["metadata"]["uid"]
    assert scale["spec"] == {"replicas": 2} and scale["status"] == {"replicas": 2, "selector": "app=w1"}
    scaled = await api.ok("PATCH", f"{WIDGETS}/w1/scale", body={"spec": {"replicas": 5}}, content_type=MERGE)
    assert scaled["spec"] == {"replicas": 5}
    got = await api.ok("GET", f"{WIDGETS}/w1")
    assert got["spec"]["replicas"] == 5 and got["metadata"]["generation"] == 2
    scaled["spec"]["replicas"] = 11  # the schema still applies: at most 10
    reply = await api.call("PUT", f"{WIDGETS}/w1/scale", body=scaled)
    assert reply.status == 422
    assert reply.body["details"]["causes"][0]["field"] == "spec.replicas"
    stale = {**scaled, "spec": {"replicas": 4}, "metadata": {**scaled["metadata"], "resourceVersion": "1"}}
    assert (await api.call("PUT", f"{WIDGETS}/w1/scale", body=stale)).status == 409


async def test_no_scale_path_without_the_subresource(widgets: Api) -> None:
    await widgets.ok("POST", WIDGETS, body=widget("w1"))
    assert (await widgets.call("GET", f"{WIDGETS}/w1/scale")).status == 404
    assert "widgets/scale" not in {r["name"] for r in (await widgets.ok("GET", f"/apis/{GROUP}/v1"))["resources"]}
