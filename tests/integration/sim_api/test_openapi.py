"""`/openapi/v2` and `/openapi/v3`: what kubectl reads for validation and `kubectl explain`."""

from __future__ import annotations

import json
from typing import Any

from edgeagent.sim import openapi
from edgeagent.sim.protobuf import fields
from tests.support.sim_api import Api

PB_ACCEPT = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


async def _get(api: Api, path: str, accept: str) -> tuple[int, str, bytes]:
    session = api.client.rest_client.pool_manager
    async with session.get(api.url + path, headers={"Accept": accept}) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read()


def _named(data: bytes) -> dict[str, bytes]:
    """A gnostic repeated Named* message list → {name: value bytes}."""
    out: dict[str, bytes] = {}
    for _, _, entry in fields(data):
        parts = {n: v for n, _, v in fields(entry)}
        out[parts[1].decode()] = parts.get(2, b"")
    return out


async def test_v2_as_gnostic_protobuf_carries_definitions_with_their_gvk(api: Api) -> None:
    status, content_type, body = await _get(api, "/openapi/v2", PB_ACCEPT)
    assert status == 200
    assert content_type == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"  # no "@": Go parses it
    doc = {n: v for n, _, v in fields(body)}
    assert doc[1] == b"2.0"
    definitions = _named(doc[9])
    pod: dict[int, Any] = {}
    for number, _, value in fields(definitions["io.k8s.api.core.v1.Pod"]):
        pod.setdefault(number, []).append(value)
    assert {n for n, _, _ in fields(pod[22][0])} == {1} and fields(pod[22][0])[0][2] == b"object"  # type
    assert set(_named(pod[25][0])) == {"apiVersion", "kind", "metadata", "spec", "status"}  # properties
    extension = {n: v for n, _, v in fields(pod[31][0])}
    assert extension[1] == b"x-kubernetes-group-version-kind"
    yaml_text = {n: v for n, _, v in fields(extension[2])}[2]
    assert json.loads(yaml_text) == [{"group": "", "version": "v1", "kind": "Pod"}]


async def test_v2_as_json_for_everyone_else(api: Api) -> None:
    status, _, body = await _get(api, "/openapi/v2", "application/json")
    doc = json.loads(body)
    assert status == 200 and doc["swagger"] == "2.0" and doc["paths"] == {}
    spec = doc["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]
    assert spec["containers"] == {"type": "array", "items": {"$ref": "#/definitions/io.k8s.api.core.v1.Container"},
                                  "description": spec["containers"]["description"]}
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in doc["definitions"]


async def test_v3_documents_carry_schemas_and_a_content_hash(api: Api) -> None:
    _, _, raw_index = await _get(api, "/openapi/v3", "application/json")
    index = json.loads(raw_index)["paths"]
    url = index["apis/apps/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/apps/v1?hash=") and len(url.rsplit("=", 1)[1]) == 32
    _, _, raw = await _get(api, url, "application/json")
    doc = json.loads(raw)
    ds = doc["components"]["schemas"]["io.k8s.api.apps.v1.DaemonSet"]
    assert ds["x-kubernetes-group-version-kind"] == [{"group": "apps", "version": "v1", "kind": "DaemonSet"}]
    assert ds["properties"]["spec"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DaemonSetSpec"}]
    assert ds["description"] == "DaemonSet represents the configuration of a daemon set."
    spec = doc["components"]["schemas"]["io.k8s.api.apps.v1.DaemonSetSpec"]
    assert spec["required"] == ["selector", "template"]
    strategy = doc["components"]["schemas"]["io.k8s.api.apps.v1.DaemonSetUpdateStrategy"]
    assert strategy["properties"]["type"]["enum"] == ["OnDelete", "RollingUpdate"]
    assert "io.k8s.api.core.v1.PodSpec" in doc["components"]["schemas"]  # referenced from the template
    assert "io.k8s.api.core.v1.Pod" not in doc["components"]["schemas"]  # not an apps kind
    # Only merge-patch: kubectl keeps computing apply patches from its compiled-in types.
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"]["patch"]
    assert list(patch["requestBody"]["content"]) == ["application/merge-patch+json"]


def test_every_served_kind_has_a_model_and_events_map_to_the_core_event() -> None:
    definitions = openapi.definitions_v2()
    kinds = {(g["group"], g["kind"]) for d in definitions.values()
             for g in d.get("x-kubernetes-group-version-kind", [])}
    assert ("", "Event") in kinds and ("apps", "DaemonSet") in kinds and ("batch", "Job") in kinds
    assert "io.k8s.api.core.v1.EventSource" in definitions
