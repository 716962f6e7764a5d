"""List semantics: resourceVersion rules, paging, selectors, no-op writes."""

from __future__ import annotations

import asyncio

import pytest

from edgeagent.sim.resources import NAMESPACES, PODS
from tests.integration.sim_api.conftest import ApiFactory
from tests.support.sim_api import Api, create_node, create_pod
from tests.support.waiting import eventually

PODS_PATH = "/api/v1/namespaces/default/pods"


async def test_list_rv_is_the_global_counter_and_items_carry_their_last_change(api: Api) -> None:
    first = create_pod(api.store, "a")
    create_node(api.store, "edge-1")  # another kind still advances the one counter
    second = create_pod(api.store, "b")
    body = await api.ok("GET", PODS_PATH)
    assert body["kind"] == "PodList"
    assert body["metadata"]["resourceVersion"] == str(api.store.resource_version)
    rvs = {item["metadata"]["name"]: item["metadata"]["resourceVersion"] for item in body["items"]}
    assert rvs == {"a": first["metadata"]["resourceVersion"], "b": second["metadata"]["resourceVersion"]}
    assert int(second["metadata"]["resourceVersion"]) == int(first["metadata"]["resourceVersion"]) + 2


async def test_noop_write_keeps_rv_and_emits_no_event(api: Api) -> None:
    created = create_pod(api.store, "a", labels={"app": "x"})
    rv = created["metadata"]["resourceVersion"]
    watcher = await api.watch(PODS_PATH, resourceVersion=rv, allowWatchBookmarks="true")
    patched = await api.ok(
        "PATCH",
        f"{PODS_PATH}/a",
        body={"metadata": {"labels": {"app": "x"}}},
        content_type="application/merge-patch+json",
    )
    replaced = await api.ok("PUT", f"{PODS_PATH}/a", body=created)
    assert patched["metadata"]["resourceVersion"] == rv
    assert replaced["metadata"]["resourceVersion"] == rv
    assert api.store.resource_version == int(rv)
    # A later real change arrives as the first non-bookmark event: nothing was emitted for the no-ops.
    create_pod(api.store, "b")
    await eventually(lambda: [e for e in watcher.events if e["type"] != "BOOKMARK"], what="the ADDED event")
    assert [e["type"] for e in watcher.events if e["type"] != "BOOKMARK"] == ["ADDED"]


async def test_list_without_rv_returns_the_latest_state(api: Api) -> None:
    create_pod(api.store, "a")
    api.store.patch(PODS, "default", "a", {"metadata": {"labels": {"v": "2"}}}, "application/merge-patch+json")
    body = await api.ok("GET", PODS_PATH)
    assert body["items"][0]["metadata"]["labels"] == {"v": "2"}


async def test_list_rv_zero_returns_current_state(api: Api) -> None:
    create_pod(api.store, "a")
    body = await api.ok("GET", PODS_PATH, query={"resourceVersion": "0"})
    assert [i["metadata"]["name"] for i in body["items"]] == ["a"]
    assert body["metadata"]["resourceVersion"] == str(api.store.resource_version)


async def test_list_rv_without_limit_is_not_older_than(api: Api) -> None:
    created = create_pod(api.store, "a")
    create_pod(api.store, "b")
    body = await api.ok("GET", PODS_PATH, query={"resourceVersion": created["metadata"]["resourceVersion"]})
    assert sorted(i["metadata"]["name"] for i in body["items"]) == ["a", "b"]
    assert body["metadata"]["resourceVersion"] == str(api.store.resource_version)


async def test_list_rv_with_limit_is_exactly_that_rv(api: Api) -> None:
    created = create_pod(api.store, "a")
    rv = created["metadata"]["resourceVersion"]
    api.store.patch(PODS, "default", "a", {"metadata": {"labels": {"v": "2"}}}, "application/merge-patch+json")
    create_pod(api.store, "b")
    body = await api.ok("GET", PODS_PATH, query={"resourceVersion": rv, "limit": "10"})
    assert body["metadata"]["resourceVersion"] == rv
    assert [i["metadata"]["name"] for i in body["items"]] == ["a"]
    assert body["items"][0]["metadata"]["labels"] == {}


async def test_exact_list_at_compacted_rv_is_410(api: Api) -> None:
    created = create_pod(api.store, "a")
    create_pod(api.store, "b")
    api.store.compact()
    reply = await api.call(
        "GET", PODS_PATH, query={"resourceVersion": created["metadata"]["resourceVersion"], "limit": "1"}
    )
    assert reply.status == 410
    assert reply.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "The resourceVersion for the provided list is too old.",
        "reason": "Expired",
        "code": 410,
    }


async def test_event_history_is_bounded(api_factory: ApiFactory) -> None:
    api = await api_factory(history=3)
    created = create_pod(api.store, "a")
    for i in range(5):
        create_pod(api.store, f"p{i}")
    reply = await api.call(
        "GET", PODS_PATH, query={"resourceVersion": created["metadata"]["resourceVersion"], "limit": "1"}
    )
    assert reply.status == 410


async def test_continue_with_nonzero_rv_is_400(api: Api) -> None:
    for name in ("a", "b"):
        create_pod(api.store, name)
    first = await api.ok("GET", PODS_PATH, query={"limit": "1"})
    reply = await api.call(
        "GET",
        PODS_PATH,
        query={"limit": "1", "continue": first["metadata"]["continue"], "resourceVersion": "1"},
    )
    assert reply.status == 400
    assert reply.body["reason"] == "BadRequest"
    assert reply.body["message"] == "specifying resource version is not allowed when using continue"


async def test_list_rv_newer_than_server_waits_then_504(api: Api) -> None:
    future = api.store.resource_version + 5
    reply = await api.call("GET", PODS_PATH, query={"resourceVersion": str(future)})
    assert reply.status == 504
    assert reply.body["reason"] == "Timeout"
    assert reply.body["message"].startswith("Timeout: Too large resource version")
    assert reply.body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


async def test_list_rv_newer_than_server_is_answered_once_reached(api: Api) -> None:
    wanted = api.store.resource_version + 1
    request = asyncio.create_task(api.call("GET", PODS_PATH, query={"resourceVersion": str(wanted)}))
    await eventually(lambda: api.store.pending_rv_waits, what="the list to wait for the RV")
    create_pod(api.store, "a")
    reply = await request
    assert reply.status == 200
    assert [i["metadata"]["name"] for i in reply.body["items"]] == ["a"]


async def test_paging_limit_continue_same_rv_on_all_pages(api: Api) -> None:
    for name in ("a", "b", "c", "d", "e"):
        create_pod(api.store, name)
    first = await api.ok("GET", PODS_PATH, query={"limit": "2"})
    rv = first["metadata"]["resourceVersion"]
    assert first["metadata"]["remainingItemCount"] == 3
    create_pod(api.store, "f")  # a write between pages must not show up in this list
    api.store.delete(PODS, "default", "e", {"gracePeriodSeconds": 0})
    second = await api.ok("GET", PODS_PATH, query={"limit": "2", "continue": first["metadata"]["continue"]})
    third = await api.ok("GET", PODS_PATH, query={"limit": "2", "continue": second["metadata"]["continue"]})
    assert {p["metadata"]["resourceVersion"] for p in (first, second, third)} == {rv}
    names = [i["metadata"]["name"] for page in (first, second, third) for i in page["items"]]
    assert names == ["a", "b", "c", "d", "e"]
    assert "continue" not in third["metadata"]


async def test_list_items_omit_kind_and_api_version(api: Api) -> None:
    create_pod(api.store, "a")
    body = await api.ok("GET", PODS_PATH)
    assert body["apiVersion"] == "v1"
    assert "kind" not in body["items"][0] and "apiVersion" not in body["items"][0]


async def test_list_across_namespaces_and_within_one(api: Api) -> None:
    api.store.create(NAMESPACES, {"metadata": {"name": "team-a"}})
    create_pod(api.store, "a")
    create_pod(api.store, "b", namespace="team-a")
    everywhere = await api.ok("GET", "/api/v1/pods")
    one = await api.ok("GET", "/api/v1/namespaces/team-a/pods")
    assert sorted(i["metadata"]["name"] for i in everywhere["items"]) == ["a", "b"]
    assert [i["metadata"]["name"] for i in one["items"]] == ["b"]


async def test_field_selector_spec_node_name(api: Api) -> None:
    create_pod(api.store, "a", node="edge-1")
    create_pod(api.store, "b", node="edge-2")
    create_pod(api.store, "c", node=None)
    body = await api.ok("GET", "/api/v1/pods", query={"fieldSelector": "spec.nodeName=edge-2"})
    assert [i["metadata"]["name"] for i in body["items"]] == ["b"]
    unbound = await api.ok("GET", "/api/v1/pods", query={"fieldSelector": "spec.nodeName="})
    assert [i["metadata"]["name"] for i in unbound["items"]] == ["c"]


async def test_field_selector_metadata_name_not_equal_and_conjunction(api: Api) -> None:
    for name, node_name in (("a", "edge-1"), ("b", "edge-1"), ("c", "edge-2")):
        create_pod(api.store, name, node=node_name)
    by_name = await api.ok("GET", PODS_PATH, query={"fieldSelector": "metadata.name==b"})
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["b"]
    both = await api.ok("GET", PODS_PATH, query={"fieldSelector": "spec.nodeName=edge-1,metadata.name!=a"})
    assert [i["metadata"]["name"] for i in both["items"]] == ["b"]


async def test_unsupported_field_selector_is_400(api: Api) -> None:
    reply = await api.call("GET", PODS_PATH, query={"fieldSelector": "spec.hostname=x"})
    assert reply.status == 400
    assert reply.body["reason"] == "BadRequest"
    assert reply.body["message"] == "field label not supported: spec.hostname"


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=web", ["a"]),
        ("tier==web", ["a"]),
        ("tier!=web", ["b", "c"]),  # also the pod without the label
        ("tier in (web,db)", ["a", "b"]),
        ("tier notin (web)", ["b", "c"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c"]),
        ("tier,app=x", ["a"]),
    ],
)
async def test_label_selector_operators(api: Api, selector: str, expected: list[str]) -> None:
    create_pod(api.store, "a", labels={"tier": "web", "app": "x"})
    create_pod(api.store, "b", labels={"tier": "db"})
    create_pod(api.store, "c", labels={})
    body = await api.ok("GET", PODS_PATH, query={"labelSelector": selector})
    assert sorted(i["metadata"]["name"] for i in body["items"]) == expected


async def test_bad_label_selector_is_400(api: Api) -> None:
    reply = await api.call("GET", PODS_PATH, query={"labelSelector": "tier in (web"})
    assert reply.status == 400
    assert reply.body["kind"] == "Status" and reply.body["reason"] == "BadRequest"


async def test_kubectl_style_list_limit_500(api: Api) -> None:
    for i in range(3):
        create_pod(api.store, f"p{i}")
    body = await api.ok("GET", "/api/v1/pods", query={"limit": "500"})
    assert len(body["items"]) == 3
    assert "continue" not in body["metadata"]
