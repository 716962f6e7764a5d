"""Watch semantics: RV rules, framing, selectors, bookmarks, 410, timeouts."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch as k8s_watch
from kubernetes_asyncio.client.exceptions import ApiException

from edgeagent.sim.resources import NODES, PODS
from edgeagent.sim.server import INITIAL_EVENTS_END, ServerSettings, _watch_timeout
from tests.integration.sim_api.conftest import ApiFactory
from tests.support.sim_api import JSON, Api, create_pod
from tests.support.waiting import eventually

PODS_PATH = "/api/v1/namespaces/default/pods"
MERGE = "application/merge-patch+json"


def _label(api: Api, name: str, **labels: str) -> JSON:
    return api.store.patch(PODS, "default", name, {"metadata": {"labels": labels}}, MERGE)


@pytest.mark.parametrize("flag", ["true", "True", "1"])
async def test_watch_flag_is_parsed_loosely(api: Api, flag: str) -> None:
    create_pod(api.store, "a")
    session = api.client.rest_client.pool_manager
    async with session.get(api.url + PODS_PATH, params={"watch": flag, "timeoutSeconds": "1"}) as response:
        assert response.status == 200
        first = json.loads(await response.content.readline())
    assert first["type"] == "ADDED"


async def test_watch_without_rv_sends_synthetic_added_then_live_changes(api: Api) -> None:
    create_pod(api.store, "a")
    create_pod(api.store, "b")
    watcher = await api.watch(PODS_PATH)
    await eventually(lambda: len(watcher.events) == 2, what="synthetic ADDED events")
    _label(api, "a", v="2")
    await eventually(lambda: len(watcher.events) == 3, what="the live MODIFIED event")
    assert watcher.types() == ["ADDED", "ADDED", "MODIFIED"]
    assert sorted(e["object"]["metadata"]["name"] for e in watcher.events[:2]) == ["a", "b"]


async def test_watch_rv_zero_also_starts_with_current_state(api: Api) -> None:
    create_pod(api.store, "a")
    watcher = await api.watch(PODS_PATH, resourceVersion="0")
    await eventually(lambda: watcher.types() == ["ADDED"], what="the synthetic ADDED")


async def test_watch_from_rv_replays_only_later_changes(api: Api) -> None:
    create_pod(api.store, "a")
    modified = _label(api, "a", v="2")
    create_pod(api.store, "b")
    watcher = await api.watch(PODS_PATH, resourceVersion=modified["metadata"]["resourceVersion"])
    await eventually(lambda: watcher.events, what="the replayed event")
    _label(api, "b", v="3")
    await eventually(lambda: len(watcher.events) == 2, what="the live event")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in watcher.events] == [
        ("ADDED", "b"),
        ("MODIFIED", "b"),
    ]


async def test_watch_framing_is_chunked_compact_json_lines(api: Api) -> None:
    create_pod(api.store, "a")
    watcher = await api.watch(PODS_PATH, timeoutSeconds="1")
    await eventually(lambda: watcher.done, what="the watch to end")
    assert watcher.response.headers["Content-Type"].startswith("application/json")
    assert watcher.response.headers["Transfer-Encoding"] == "chunked"
    assert len(watcher.lines) == 1
    line = watcher.lines[0]
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    event = json.loads(line)
    assert set(event) == {"type", "object"}
    assert line == json.dumps(event, separators=(",", ":")).encode() + b"\n"
    assert event["object"]["kind"] == "Pod" and event["object"]["apiVersion"] == "v1"


async def test_watch_field_selector_sees_a_pod_bound_to_its_node_as_added(api: Api) -> None:
    create_pod(api.store, "a", node=None)
    watcher = await api.watch("/api/v1/pods", fieldSelector="spec.nodeName=edge-1", allowWatchBookmarks="true")
    api.store.patch(PODS, "default", "a", {"spec": {"nodeName": "edge-1"}}, MERGE)
    await eventually(lambda: watcher.of_type("ADDED"), what="ADDED on binding")
    added = watcher.of_type("ADDED")
    assert len(added) == 1 and added[0]["object"]["spec"]["nodeName"] == "edge-1"


async def test_watch_label_selector_object_that_stops_matching_is_deleted(api: Api) -> None:
    create_pod(api.store, "a", labels={"tier": "web"})
    watcher = await api.watch(PODS_PATH, labelSelector="tier=web")
    await eventually(lambda: watcher.types() == ["ADDED"], what="initial ADDED")
    moved = _label(api, "a", tier="db")
    await eventually(lambda: len(watcher.events) == 2, what="DELETED on leaving the selector")
    deleted = watcher.events[1]
    assert deleted["type"] == "DELETED"
    assert deleted["object"]["metadata"]["resourceVersion"] == moved["metadata"]["resourceVersion"]
    _label(api, "a", tier="web")
    await eventually(lambda: len(watcher.events) == 3, what="ADDED on matching again")
    assert watcher.types() == ["ADDED", "DELETED", "ADDED"]


async def test_watch_field_selector_metadata_name(api: Api) -> None:
    create_pod(api.store, "a")
    create_pod(api.store, "b")
    watcher = await api.watch(PODS_PATH, fieldSelector="metadata.name=b")
    _label(api, "a", v="1")
    _label(api, "b", v="1")
    await eventually(lambda: len(watcher.events) == 2, what="events for b only")
    assert {e["object"]["metadata"]["name"] for e in watcher.events} == {"b"}


async def test_deleted_event_carries_last_state_with_the_deletion_rv(api: Api) -> None:
    created = create_pod(api.store, "a", node=None)
    watcher = await api.watch(PODS_PATH, resourceVersion=created["metadata"]["resourceVersion"])
    api.store.delete(PODS, "default", "a")
    await eventually(lambda: watcher.of_type("DELETED"), what="DELETED")
    deleted = watcher.of_type("DELETED")[0]["object"]
    assert deleted["metadata"]["resourceVersion"] == str(api.store.resource_version)
    assert deleted["metadata"]["uid"] == created["metadata"]["uid"]
    assert deleted["spec"]["containers"] == created["spec"]["containers"]


async def test_no_bookmarks_unless_asked(api: Api) -> None:
    watcher = await api.watch(PODS_PATH, timeoutSeconds="1")  # bookmark interval is 0.2 s in tests
    await eventually(lambda: watcher.done, what="the watch to end")
    assert watcher.events == []


async def test_bookmarks_when_asked_hold_only_the_resource_version(api: Api) -> None:
    create_pod(api.store, "a")
    watcher = await api.watch(PODS_PATH, resourceVersion=str(api.store.resource_version), allowWatchBookmarks="1")
    # Only a bookmark that moves the client's RV is sent: another kind's write moves it.
    api.store.create(NODES, {"metadata": {"name": "n"}})
    await eventually(lambda: watcher.of_type("BOOKMARK"), what="a periodic bookmark")
    bookmark = watcher.of_type("BOOKMARK")[0]["object"]
    assert bookmark == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(api.store.resource_version)},
    }


async def test_a_bookmark_arrives_shortly_before_the_timeout(api_factory: ApiFactory) -> None:
    """With the default (real) cadence a 3 s watch gets just the one bookmark 2 s before its deadline."""
    api = await api_factory(settings=ServerSettings(disconnect_poll=0.1))
    rv = str(api.store.resource_version)
    watcher = await api.watch(PODS_PATH, resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds="3")
    create_pod(api.store, "a")
    await eventually(lambda: watcher.done, what="the watch to end")
    assert watcher.types() == ["ADDED", "BOOKMARK"]


async def test_bookmarks_come_about_once_a_minute_by_default(api_factory: ApiFactory) -> None:
    """Measured on v1.24: a 3 s watch with allowWatchBookmarks gets none from the real server (the old sim sent ~3)."""
    api = await api_factory(settings=ServerSettings(disconnect_poll=0.1))
    rv = str(api.store.resource_version)
    watcher = await api.watch(PODS_PATH, resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds="3")
    await eventually(lambda: watcher.done, what="the watch to end")
    assert watcher.types() == []


async def test_timeout_seconds_ends_the_stream_silently(api: Api) -> None:
    create_pod(api.store, "a")
    watcher = await api.watch(PODS_PATH, timeoutSeconds="1")
    await eventually(lambda: watcher.done, what="the watch to end")
    assert watcher.types() == ["ADDED"]  # no ERROR, no Status: just the end of the stream


def test_server_default_watch_timeout_is_30_to_60_minutes() -> None:
    from edgeagent.sim.server import _ServerState
    from edgeagent.sim.store import Store

    state = _ServerState(Store(), ServerSettings())
    assert all(1800 <= _watch_timeout(state, {}) <= 3600 for _ in range(50))


async def test_watch_from_compacted_rv_gets_one_error_410_event_then_closes(api: Api) -> None:
    created = create_pod(api.store, "a")
    create_pod(api.store, "b")
    api.store.compact()
    rv = created["metadata"]["resourceVersion"]
    watcher = await api.watch(PODS_PATH, resourceVersion=rv)
    await eventually(lambda: watcher.done, what="the stream to close")
    assert watcher.response.status == 200
    assert watcher.events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {rv} ({api.store.resource_version})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


async def test_watch_rv_newer_than_server_ends_with_a_504_error_event(api: Api) -> None:
    watcher = await api.watch(PODS_PATH, resourceVersion=str(api.store.resource_version + 10))
    await eventually(lambda: watcher.done, what="the stream to close")
    assert watcher.types() == ["ERROR"]
    assert watcher.events[0]["object"]["code"] == 504


async def test_send_initial_events_ends_with_an_annotated_bookmark(api: Api) -> None:
    create_pod(api.store, "a")
    create_pod(api.store, "b")
    rv = str(api.store.resource_version)
    watcher = await api.watch(
        PODS_PATH, sendInitialEvents="true", resourceVersionMatch="NotOlderThan", allowWatchBookmarks="true"
    )
    await eventually(lambda: len(watcher.events) >= 3, what="initial events and their bookmark")
    assert watcher.types()[:3] == ["ADDED", "ADDED", "BOOKMARK"]
    assert watcher.events[2]["object"]["metadata"] == {
        "resourceVersion": rv,
        "annotations": {INITIAL_EVENTS_END: "true"},
    }


async def test_send_initial_events_requires_not_older_than(api: Api) -> None:
    reply = await api.call(
        "GET", PODS_PATH, query={"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true"}
    )
    assert reply.status == 422
    assert reply.body["reason"] == "Invalid"
    assert reply.body["details"]["causes"][0]["field"] == "resourceVersionMatch"


async def test_watch_with_bad_selector_is_400_before_streaming(api: Api) -> None:
    reply = await api.call("GET", PODS_PATH, query={"watch": "1", "fieldSelector": "spec.host=x"})
    assert reply.status == 400
    assert reply.body["message"] == "field label not supported: spec.host"


async def test_kubernetes_asyncio_watch_stream_reads_events(api: Api) -> None:
    create_pod(api.store, "a")
    seen: list[tuple[str, str]] = []
    watch = k8s_watch.Watch()
    async with watch:
        stream = watch.stream(api.core.list_namespaced_pod, "default", timeout_seconds=5)
        async for event in stream:
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 1:
                _label(api, "a", v="2")
            else:
                watch.stop()
    assert seen == [("ADDED", "a"), ("MODIFIED", "a")]
    assert watch.resource_version == str(api.store.resource_version)


async def test_kubernetes_asyncio_watch_raises_on_expired_rv(api: Api) -> None:
    created = create_pod(api.store, "a")
    create_pod(api.store, "b")
    api.store.compact()
    watch = k8s_watch.Watch()
    with pytest.raises(ApiException) as caught:
        async with watch:
            async for _ in watch.stream(
                api.core.list_namespaced_pod,
                "default",
                resource_version=created["metadata"]["resourceVersion"],
                timeout_seconds=5,
            ):
                pass
    assert caught.value.status == 410
    assert "Expired" in str(caught.value.reason)


async def test_kubernetes_asyncio_list_model_round_trip(api: Api) -> None:
    create_pod(api.store, "a")
    pods = await api.core.list_namespaced_pod("default")
    assert isinstance(pods, k8s.V1PodList)
    assert [p.metadata.name for p in pods.items] == ["a"]
    assert pods.metadata.resource_version == str(api.store.resource_version)


async def test_a_watcher_that_falls_too_far_behind_is_dropped(api_factory: ApiFactory) -> None:
    api = await api_factory(settings=ServerSettings(watch_queue_limit=3, disconnect_poll=0.1))
    watcher = await api.watch(PODS_PATH, resourceVersion=str(api.store.resource_version))
    for i in range(10):  # all queued before the server gets to run: the queue overflows
        create_pod(api.store, f"p{i}")
    await eventually(lambda: watcher.done, what="the stream to be closed")
    assert len(watcher.events) <= 3
    # The store keeps working for everyone else.
    assert len(api.store.list(PODS)[0]) == 10


async def test_server_shutdown_ends_open_watches(api_factory: ApiFactory) -> None:
    api = await api_factory()
    watcher = await api.watch(PODS_PATH)
    await api.server_app.shutdown()
    await eventually(lambda: watcher.done, what="the stream to end on shutdown")


async def test_legacy_watch_path_watches_one_object(api: Api) -> None:
    create_pod(api.store, "a")
    create_pod(api.store, "b")
    watcher = await api.watch("/api/v1/watch/namespaces/default/pods/b")
    _label(api, "a", v="1")
    _label(api, "b", v="1")
    await eventually(lambda: len(watcher.events) == 2, what="ADDED and MODIFIED for b")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in watcher.events] == [("ADDED", "b"), ("MODIFIED", "b")]
