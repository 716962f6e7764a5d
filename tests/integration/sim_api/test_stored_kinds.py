"""ConfigMaps, Secrets and Services: stored with the defaults the real server fills in."""

from __future__ import annotations

import base64

from tests.support.sim_api import Api


async def test_secret_string_data_is_folded_into_base64_data(api: Api) -> None:
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": base64.b64encode(b"old").decode()}, "stringData": {"a": "new", "b": "2"}}
    created = await api.ok("POST", "/api/v1/namespaces/default/secrets", body=body)
    assert created["type"] == "Opaque" and "stringData" not in created
    assert created["data"] == {"a": base64.b64encode(b"new").decode(), "b": base64.b64encode(b"2").decode()}


async def test_service_defaults_and_its_cluster_ip_survive_an_update(api: Api) -> None:
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}
    created = await api.ok("POST", "/api/v1/namespaces/default/services", body=body)
    spec = created["spec"]
    assert spec["type"] == "ClusterIP" and spec["clusterIP"].startswith("10.")
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    replaced = await api.ok("PUT", "/api/v1/namespaces/default/services/web", body={
        **body, "metadata": {"name": "web", "resourceVersion": created["metadata"]["resourceVersion"]}})
    assert replaced["spec"]["clusterIP"] == spec["clusterIP"]
    other = await api.ok("POST", "/api/v1/namespaces/default/services", body={**body, "metadata": {"name": "w2"}})
    assert other["spec"]["clusterIP"] != spec["clusterIP"]


async def test_configmaps_are_listed(api: Api) -> None:
    await api.ok("POST", "/api/v1/namespaces/default/configmaps",
                 body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}})
    listed = await api.ok("GET", "/api/v1/namespaces/default/configmaps")
    assert listed["kind"] == "ConfigMapList" and [i["data"] for i in listed["items"]] == [{"k": "v"}]
