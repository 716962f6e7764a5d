"""The sim through kubernetes_asyncio's own Watch and generated API: what the sim must
answer so that the library's reconnect, 410 and bookmark logic behaves as against a real server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

import pytest
from kubernetes_asyncio import watch as k8s_watch
from kubernetes_asyncio.client.exceptions import ApiException

from edgeagent.sim.resources import NODES, PODS
from edgeagent.sim.server import ServerSettings
from tests.integration.sim_api.conftest import ApiFactory
from tests.support.sim_api import Api, create_node, create_pod
from tests.support.waiting import eventually

MERGE = "application/merge-patch+json"


def counting(api: Api) -> tuple[Any, list[str | None]]:
    """`list_namespaced_pod` that records the resource_version of every (re)connect Watch makes."""
    calls: list[str | None] = []
    target = api.core.list_namespaced_pod

    @functools.wraps(target)
    async def list_pods(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("resource_version"))
        return await target(*args, **kwargs)

    return list_pods, calls


async def test_watch_without_timeout_reconnects_from_the_last_rv_when_the_server_ends_the_stream(
        api_factory: ApiFactory) -> None:
    api = await api_factory(settings=ServerSettings(watch_timeout_range=(0.3, 0.3), disconnect_poll=0.05))
    created = create_pod(api.store, "a")
    list_pods, calls = counting(api)
    seen: list[tuple[str, str]] = []
    watch = k8s_watch.Watch()

    async def consume() -> None:
        async for event in watch.stream(list_pods, "default"):  # no timeout_seconds: watch for ever
            seen.append((event["type"], event["object"].metadata.name))

    task = asyncio.create_task(consume())
    try:
        await eventually(lambda: len(calls) >= 2, what="a reconnect after the server ended the stream")
        assert calls[:2] == [None, created["metadata"]["resourceVersion"]]
        api.store.patch(PODS, "default", "a", {"metadata": {"labels": {"v": "2"}}}, MERGE)
        await eventually(lambda: len(seen) >= 2, what="the change after the reconnect")
        assert seen == [("ADDED", "a"), ("MODIFIED", "a")]  # resumed, not restarted: no second ADDED
    finally:
        watch.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await watch.close()


async def test_bookmarks_advance_the_watch_resource_version(api: Api) -> None:
    create_pod(api.store, "a")
    start = str(api.store.resource_version)
    create_node(api.store, "edge-1")  # moves the global RV without a pod event
    api.store.patch(NODES, None, "edge-1", {"metadata": {"labels": {"x": "y"}}}, MERGE)
    target = str(api.store.resource_version)
    watch = k8s_watch.Watch()
    async with watch:
        async for event in watch.stream(api.core.list_namespaced_pod, "default", resource_version=start,
                                        allow_watch_bookmarks=True, timeout_seconds=5):
            assert event["type"] == "BOOKMARK", event["type"]
            if watch.resource_version == target:
                watch.stop()
    assert watch.resource_version == target


async def test_exact_list_410_is_raised_by_the_rest_layer(api: Api) -> None:
    created = create_pod(api.store, "a")
    create_pod(api.store, "b")
    api.store.compact()
    with pytest.raises(ApiException) as caught:
        await api.core.list_namespaced_pod("default", resource_version=created["metadata"]["resourceVersion"],
                                           limit=1)
    assert caught.value.status == 410
    # exceptions.pyi says `bytes | None`, but ApiClient decodes the body to str before re-raising.
    body: object = caught.value.body
    assert isinstance(body, str)
    assert '"reason":"Expired"' in body.replace(" ", "")


async def test_watch_forever_retries_a_410_once_with_the_same_rv_then_raises(api: Api) -> None:
    created = create_pod(api.store, "a")
    create_pod(api.store, "b")
    api.store.compact()
    rv = created["metadata"]["resourceVersion"]
    list_pods, calls = counting(api)
    watch = k8s_watch.Watch()
    with pytest.raises(ApiException) as caught:
        async with watch:
            async for _ in watch.stream(list_pods, "default", resource_version=rv):
                pass
    assert caught.value.status == 410 and str(caught.value.reason).startswith("Expired: too old resource version")
    assert calls == [rv, rv]
