"""What kube-apiserver answers at the edges of custom resources, over HTTP: a body without (or with another)
`kind`/`apiVersion`, a CRD update that drops a version objects may still be stored in (status.storedVersions),
CEL rules reading root metadata other than name/generateName, and a metadata Required error keeping the CEL rules
from running (sim/custom_writes.py, sim/crds.py, sim/crd_cel.py, sim/crd_schema.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.crd_widget import CRDS, GROUP, WIDGETS, widget, widget_crd
from tests.support.sim_api import Api

JSON = dict[str, Any]
CRD = f"{CRDS}/widgets.{GROUP}"
_NOT_CHECKED = ("<nil>: Invalid value: null: some validation rules were not checked because the object was "
                "invalid; correct the existing errors to complete validation")


@pytest.fixture
async def widgets(api: Api) -> Api:
    await api.ok("POST", CRDS, body=widget_crd())
    await api.ok("POST", WIDGETS, body=widget("w1"))
    return api


def _without(key: str) -> JSON:
    body = widget("w1")
    del body[key]
    return body


# --- kind and apiVersion of a custom object's body -------------------------------------------------------------

_MISSING_KIND = "Object 'Kind' is missing in 'object has no kind field '"


def _wrong_api_version(given: str) -> str:
    return f"the API version in the data ({given}) does not match the expected API version ({GROUP}/v1)"


@pytest.mark.parametrize(("body", "message"), [
    (_without("kind"), _MISSING_KIND),
    ({**widget("w1"), "kind": ""}, _MISSING_KIND),
    (_without("apiVersion"), _wrong_api_version("")),
    ({**widget("w1"), "apiVersion": "other.example.com/v1"}, _wrong_api_version("other.example.com/v1")),
    ({**widget("w1"), "apiVersion": f"{GROUP}/v2"}, _wrong_api_version(f"{GROUP}/v2")),
])
@pytest.mark.parametrize("method", ["POST", "PUT"])
async def test_a_body_without_its_kind_or_api_version_is_a_bad_request(
        widgets: Api, body: JSON, message: str, method: str) -> None:
    path = WIDGETS if method == "POST" else f"{WIDGETS}/w1"
    if method == "PUT":
        # Checked before the name on the URL: a body naming another object gets the same answer.
        body = copy.deepcopy(body)
        body["metadata"]["name"] = "other"
    reply = await widgets.call(method, path, body=body)
    assert reply.status == 400, reply.raw
    assert reply.body["reason"] == "BadRequest"
    assert reply.body["message"] == message


async def test_a_body_of_another_kind_under_the_right_api_version_is_invalid(widgets: Api) -> None:
    reply = await widgets.call("POST", WIDGETS, body={**widget("w2"), "kind": "Gizmo"})
    assert reply.status == 422, reply.raw
    assert reply.body["message"] == 'Gizmo.example.com "w2" is invalid: kind: Invalid value: "Gizmo": must be Widget'
    assert reply.body["details"] == {"name": "w2", "group": GROUP, "kind": "Gizmo", "causes": [
        {"reason": "FieldValueInvalid", "message": 'Invalid value: "Gizmo": must be Widget', "field": "kind"}]}


async def test_built_in_kinds_still_take_their_kind_from_the_url(api: Api) -> None:
    created = await api.ok("POST", "/api/v1/namespaces/default/configmaps",
                           body={"metadata": {"name": "c"}, "data": {"a": "b"}})
    assert created["kind"] == "ConfigMap"


# --- status.storedVersions -------------------------------------------------------------------------------------

def _two_versions() -> JSON:
    """Widgets served as v1alpha1 (stored) and v1."""
    crd = widget_crd()
    v1 = crd["spec"]["versions"][0]
    crd["spec"]["versions"] = [{**copy.deepcopy(v1), "name": "v1alpha1", "storage": True},
                               {**v1, "storage": False}]
    return crd


async def test_stored_versions_gain_the_new_storage_version_and_keep_the_old(api: Api) -> None:
    created = await api.ok("POST", CRDS, body=_two_versions())
    assert created["status"]["storedVersions"] == ["v1alpha1"]
    crd = await api.ok("GET", CRD)
    crd["spec"]["versions"][0]["storage"] = False
    crd["spec"]["versions"][1]["storage"] = True
    updated = await api.ok("PUT", CRD, body=crd)
    assert updated["status"]["storedVersions"] == ["v1alpha1", "v1"]
    assert (await api.ok("GET", CRD))["status"]["storedVersions"] == ["v1alpha1", "v1"]


async def test_a_version_still_in_stored_versions_may_not_leave_spec_versions(api: Api) -> None:
    await api.ok("POST", CRDS, body=_two_versions())
    crd = await api.ok("GET", CRD)
    crd["spec"]["versions"] = [{**crd["spec"]["versions"][1], "storage": True}]  # v1 only, now stored
    reply = await api.call("PUT", CRD, body=crd)
    assert reply.status == 422, reply.raw
    assert reply.body["message"] == (
        f'CustomResourceDefinition.apiextensions.k8s.io "widgets.{GROUP}" is invalid: '
        'status.storedVersions[0]: Invalid value: "v1alpha1": must appear in spec.versions')
    assert reply.body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "status.storedVersions[0]",
                                                "message": 'Invalid value: "v1alpha1": must appear in spec.versions'}]
    assert [v["name"] for v in (await api.ok("GET", CRD))["spec"]["versions"]] == ["v1alpha1", "v1"]


async def test_once_the_status_drops_the_old_version_it_may_go(api: Api) -> None:
    """The storage migration path: store everything as v1, take v1alpha1 off the status, then off the spec."""
    await api.ok("POST", CRDS, body=_two_versions())
    crd = await api.ok("GET", CRD)
    crd["spec"]["versions"][0]["storage"] = False
    crd["spec"]["versions"][1]["storage"] = True
    await api.ok("PUT", CRD, body=crd)
    await api.ok("PATCH", f"{CRD}/status", body={"status": {"storedVersions": ["v1"]}},
                 content_type="application/merge-patch+json")
    crd = await api.ok("GET", CRD)
    crd["spec"]["versions"] = [crd["spec"]["versions"][1]]
    updated = await api.ok("PUT", CRD, body=crd)
    assert [v["name"] for v in updated["spec"]["versions"]] == ["v1"]
    assert updated["status"]["storedVersions"] == ["v1"]


# --- CEL rules and root metadata -------------------------------------------------------------------------------

def _with_root_rule(rule: str) -> JSON:
    crd = widget_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["x-kubernetes-validations"] = [{"rule": rule}]
    return crd


@pytest.mark.parametrize(("rule", "column", "field"), [
    ("self.metadata.labels['tier'] == 'gold'", 14, "labels"),
    ("has(self.metadata.annotations)", 18, "annotations"),
    ("self.metadata.name.size() < 10 && self.metadata.namespace == 'default'", 48, "namespace"),
    ("oldSelf.metadata.uid == self.metadata.name", 17, "uid"),
])
async def test_a_root_rule_sees_only_name_and_generate_name_of_metadata(
        api: Api, rule: str, column: int, field: str) -> None:
    reply = await api.call("POST", CRDS, body=_with_root_rule(rule))
    assert reply.status == 422, reply.raw
    causes = reply.body["details"]["causes"]
    assert len(causes) == 1
    assert causes[0]["field"] == "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule"
    assert causes[0]["field"].endswith("x-kubernetes-validations[0].rule"), causes[0]
    assert causes[0]["message"].endswith(
        f"compilation failed: ERROR: <input>:1:{column}: undefined field '{field}'\n | {rule}\n"
        f" | {'.' * (column - 1)}^"), causes[0]["message"]


async def test_a_root_rule_on_name_and_generate_name_compiles_and_runs(api: Api) -> None:
    await api.ok("POST", CRDS, body=_with_root_rule(
        "self.metadata.name.startsWith('w') || self.metadata.generateName == 'gen-'"))
    await api.ok("POST", WIDGETS, body=widget("w1"))
    body = widget("x1")
    reply = await api.call("POST", WIDGETS, body=body)
    assert reply.status == 422, reply.raw
    assert reply.body["details"]["causes"][0]["field"] == "<nil>"
    generated = {**widget("ignored"), "metadata": {"generateName": "gen-"}}
    assert (await api.ok("POST", WIDGETS, body=generated))["metadata"]["name"].startswith("gen-")


async def test_below_the_root_metadata_is_an_ordinary_field(api: Api) -> None:
    crd = widget_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["metadata"] = {"type": "object", "properties": {"labels": {"type": "string"}}}
    spec["x-kubernetes-validations"].append({"rule": "!has(self.metadata) || self.metadata.labels != 'x'"})
    await api.ok("POST", CRDS, body=crd)


# --- a metadata Required error keeps the CEL rules from running -------------------------------------------------

async def test_a_missing_name_joins_the_schema_causes_and_skips_the_rules(widgets: Api) -> None:
    body = widget("w9", replicas=1, minReplicas=5)  # the CEL rule would fail
    del body["metadata"]["name"]
    reply = await widgets.call("POST", WIDGETS, body=body)
    assert reply.status == 422, reply.raw
    assert reply.body["message"] == (
        f'Widget.{GROUP} "" is invalid: [metadata.name: Required value: name or generateName is required, '
        f"{_NOT_CHECKED}]")
    assert [c["field"] for c in reply.body["details"]["causes"]] == ["metadata.name", "<nil>"]


async def test_a_missing_name_is_reported_with_the_schema_errors(widgets: Api) -> None:
    body = widget("w9", size="huge")
    del body["metadata"]["name"]
    reply = await widgets.call("POST", WIDGETS, body=body)
    assert reply.status == 422, reply.raw
    assert [c["field"] for c in reply.body["details"]["causes"]] == ["metadata.name", "spec.size", "<nil>"]


async def test_without_a_metadata_error_the_rules_still_run(widgets: Api) -> None:
    reply = await widgets.call("POST", WIDGETS, body=widget("w9", replicas=1, minReplicas=5))
    assert reply.status == 422, reply.raw
    assert [c["field"] for c in reply.body["details"]["causes"]] == ["spec"]
