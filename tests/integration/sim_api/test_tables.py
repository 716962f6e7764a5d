"""Server-side printing over HTTP: what kubectl's `Accept: …;as=Table;…` gets back (as v1.24 sends it)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from edgeagent.sim.resources import NODES, PODS
from tests.support.sim_api import Api, create_node, create_pod
from tests.support.waiting import eventually

JSON = dict[str, Any]
KUBECTL_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
                  "g=meta.k8s.io,application/json")
POD_COLUMNS = ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]


async def get(api: Api, path: str, accept: str = KUBECTL_ACCEPT, **query: str) -> tuple[int, JSON]:
    session = api.client.rest_client.pool_manager
    async with session.get(api.url + path, params=query, headers={"Accept": accept}) as resp:
        return resp.status, json.loads(await resp.read())


async def test_list_answers_a_table_with_the_pod_columns(api: Api) -> None:
    create_pod(api.store, "a")
    create_pod(api.store, "b", node=None)
    status, body = await get(api, "/api/v1/namespaces/default/pods", limit="500")
    assert status == 200
    assert (body["kind"], body["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert body["metadata"]["resourceVersion"] == str(api.store.resource_version)
    assert [c["name"] for c in body["columnDefinitions"]] == POD_COLUMNS
    assert [c["priority"] for c in body["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    rows = {row["cells"][0]: row for row in body["rows"]}
    assert rows["a"]["cells"][1:4] == ["0/1", "Pending", "0"]
    assert rows["a"]["cells"][5:] == ["<none>", "edge-1", "<none>", "<none>"]
    assert rows["b"]["cells"][6] == "<none>"
    assert rows["a"]["object"]["kind"] == "PartialObjectMetadata"
    assert rows["a"]["object"]["metadata"]["uid"] == api.store.get(PODS, "default", "a")["metadata"]["uid"]


async def test_table_pages_carry_continue_and_remaining_count(api: Api) -> None:
    for name in ("a", "b", "c"):
        create_pod(api.store, name)
    _, first = await get(api, "/api/v1/namespaces/default/pods", limit="2")
    assert [r["cells"][0] for r in first["rows"]] == ["a", "b"]
    assert first["metadata"]["remainingItemCount"] == 1
    token = first["metadata"]["continue"]
    _, second = await get(api, "/api/v1/namespaces/default/pods", limit="2", **{"continue": token})
    assert [r["cells"][0] for r in second["rows"]] == ["c"]


async def test_get_one_object_as_a_table(api: Api) -> None:
    create_node(api.store, "edge-1")
    status, body = await get(api, "/api/v1/nodes/edge-1")
    assert status == 200 and body["kind"] == "Table"
    assert [c["name"] for c in body["columnDefinitions"]][:5] == ["Name", "Status", "Roles", "Age", "Version"]
    assert body["rows"][0]["cells"][:3] == ["edge-1", "Unknown", "<none>"]
    assert body["metadata"]["resourceVersion"] == api.store.get(NODES, None, "edge-1")["metadata"]["resourceVersion"]


async def test_include_object_chooses_what_each_row_carries(api: Api) -> None:
    create_pod(api.store, "a")
    _, full = await get(api, "/api/v1/namespaces/default/pods", includeObject="Object")
    assert full["rows"][0]["object"]["kind"] == "Pod" and full["rows"][0]["object"]["spec"]["nodeName"] == "edge-1"
    _, none = await get(api, "/api/v1/namespaces/default/pods", includeObject="None")
    assert "object" not in none["rows"][0]
    status, err = await get(api, "/api/v1/namespaces/default/pods", includeObject="Everything")
    assert status == 400 and err["kind"] == "Status"


async def test_v1beta1_table_when_only_that_is_asked(api: Api) -> None:
    _, body = await get(api, "/api/v1/namespaces", accept="application/json;as=Table;v=v1beta1;g=meta.k8s.io")
    assert body["apiVersion"] == "meta.k8s.io/v1beta1"


async def test_plain_json_clients_still_get_the_list(api: Api) -> None:
    create_pod(api.store, "a")
    for accept in ("application/json", "*/*", "application/json, application/json;as=Table;v=v1;g=meta.k8s.io"):
        _, body = await get(api, "/api/v1/namespaces/default/pods", accept=accept)
        assert body["kind"] == "PodList", accept
        _, one = await get(api, "/api/v1/namespaces/default/pods/a", accept=accept)
        assert one["kind"] == "Pod", accept


async def test_kinds_without_a_printer_get_name_and_created_at(api: Api) -> None:
    _, body = await get(api, "/apis/rbac.authorization.k8s.io/v1/clusterroles")
    assert [c["name"] for c in body["columnDefinitions"]] == ["Name", "Created At"]


async def test_watch_events_carry_one_row_tables_and_columns_only_first(api: Api) -> None:
    create_pod(api.store, "a")
    session = api.client.rest_client.pool_manager
    params = {"watch": "1", "timeoutSeconds": "5"}
    async with session.get(api.url + "/api/v1/namespaces/default/pods", params=params,
                           headers={"Accept": KUBECTL_ACCEPT}, timeout=aiohttp.ClientTimeout(total=10)) as resp:
        lines: list[JSON] = []

        async def read() -> None:
            while line := await resp.content.readline():
                lines.append(json.loads(line))

        reader = asyncio.create_task(read())
        try:
            await eventually(lambda: len(lines) >= 1, what="the initial ADDED event")
            create_pod(api.store, "b")
            await eventually(lambda: len(lines) >= 2, what="the ADDED event of b")
        finally:
            reader.cancel()
    first, second = lines[0], lines[1]
    assert (first["type"], second["type"]) == ("ADDED", "ADDED")
    assert first["object"]["kind"] == "Table" and len(first["object"]["rows"]) == 1
    assert [c["name"] for c in first["object"]["columnDefinitions"]] == POD_COLUMNS
    assert second["object"]["columnDefinitions"] is None
    assert second["object"]["rows"][0]["cells"][0] == "b"
    assert second["object"]["metadata"]["resourceVersion"] == (
        second["object"]["rows"][0]["object"]["metadata"]["resourceVersion"])
