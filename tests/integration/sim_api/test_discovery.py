"""Discovery and health endpoints kubectl and client-go need."""

from __future__ import annotations

import pytest

from tests.support.sim_api import Api


async def test_version(api: Api) -> None:
    body = await api.ok("GET", "/version")
    assert body["major"] == "1" and body["minor"].isdigit()
    assert body["gitVersion"].startswith("v1.")


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
async def test_health_endpoints_say_ok(api: Api, path: str) -> None:
    reply = await api.call("GET", path)
    assert (reply.status, reply.raw) == (200, b"ok")


async def test_core_api_versions(api: Api) -> None:
    body = await api.ok("GET", "/api")
    assert body["kind"] == "APIVersions" and body["versions"] == ["v1"]


async def test_api_group_list(api: Api) -> None:
    body = await api.ok("GET", "/apis")
    assert body["kind"] == "APIGroupList"
    groups = {g["name"]: g["preferredVersion"]["groupVersion"] for g in body["groups"]}
    assert groups == {"apps": "apps/v1", "coordination.k8s.io": "coordination.k8s.io/v1", "batch": "batch/v1",
                      "rbac.authorization.k8s.io": "rbac.authorization.k8s.io/v1", "events.k8s.io": "events.k8s.io/v1",
                      "admissionregistration.k8s.io": "admissionregistration.k8s.io/v1",
                      "apiextensions.k8s.io": "apiextensions.k8s.io/v1"}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1", {"pods", "pods/status", "nodes", "nodes/status", "namespaces", "namespaces/status", "events",
                     "serviceaccounts", "configmaps", "secrets", "services", "services/status"}),
        ("/apis/apps/v1", {"daemonsets", "daemonsets/status", "deployments", "deployments/status",
                           "controllerrevisions"}),
        ("/apis/rbac.authorization.k8s.io/v1", {"clusterroles", "clusterrolebindings", "roles", "rolebindings"}),
        ("/apis/coordination.k8s.io/v1", {"leases"}),
        ("/apis/batch/v1", {"jobs", "jobs/status"}),
    ],
)
async def test_api_resource_lists(api: Api, path: str, expected: set[str]) -> None:
    body = await api.ok("GET", path)
    assert body["kind"] == "APIResourceList"
    assert {r["name"] for r in body["resources"]} == expected
    for entry in body["resources"]:
        assert {"name", "singularName", "namespaced", "kind", "verbs"} <= set(entry)


async def test_pods_resource_entry(api: Api) -> None:
    body = await api.ok("GET", "/api/v1")
    pods = next(r for r in body["resources"] if r["name"] == "pods")
    assert pods["singularName"] == "pod" and pods["namespaced"] is True and pods["kind"] == "Pod"
    assert pods["shortNames"] == ["po"]
    assert {"get", "list", "watch", "create", "update", "patch", "delete"} <= set(pods["verbs"])


async def test_discovery_answers_plain_json_even_when_aggregated_is_asked(api: Api) -> None:
    session = api.client.rest_client.pool_manager
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    async with session.get(api.url + "/apis", headers={"Accept": accept}) as response:
        assert response.headers["Content-Type"] == "application/json"
        assert (await response.json())["kind"] == "APIGroupList"


async def test_openapi_v3_declares_server_side_field_validation(api: Api) -> None:
    index = await api.ok("GET", "/openapi/v3")
    url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
    doc = await api.ok("GET", url.split("?")[0])
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "apps", "version": "v1", "kind": "DaemonSet"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
