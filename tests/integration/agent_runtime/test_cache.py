"""PodCache over a real informer and state store: bytes encoded once per change, snapshot debounced."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest

from edgeagent.agent.link.cache import PodCache
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.agent.state.store import StateStore
from edgeagent.kube.client import KubeClient
from edgeagent.kube.informer import Informer
from tests.integration.agent_runtime.conftest import NODE, OTHER, Admin
from tests.support.waiting import eventually


@pytest.fixture
async def state(tmp_path: Path) -> AsyncIterator[StateStore]:
    store = await StateStore.open(tmp_path / "state")
    try:
        yield store
    finally:
        await store.close()


def _informer(client: KubeClient) -> Informer:
    return Informer(client, "/api/v1/pods", field_selector=f"spec.nodeName={NODE}", idle_timeout=2.0,
                    backoff_initial=0.05, backoff_max=0.2)


@contextlib.asynccontextmanager
async def running(*coros: Coroutine[Any, Any, None]) -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_empty_cache_is_an_empty_podlist(node_client: KubeClient, state: StateStore) -> None:
    cache = PodCache(_informer(node_client), state, NODE)
    assert json.loads(cache.podlist_bytes()) == {
        "kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": ""}, "items": []}
    assert cache.get("default", "nothing") is None and cache.pods() == []


async def test_podlist_is_encoded_once_per_change_not_per_request(
        admin: Admin, node_client: KubeClient, state: StateStore) -> None:
    await admin.create("a")
    await admin.create("elsewhere", OTHER)
    metrics = AgentMetrics()
    informer = _informer(node_client)
    cache = PodCache(informer, state, NODE, metrics=metrics)
    async with running(informer.run()):
        await eventually(lambda: cache.get("default", "a"), what="the pod in the cache")
        # Quiesce: the kubelet simulation may still be updating the pod's status.
        await eventually(lambda: informer.items["default/a"]["status"].get("phase") == "Running",
                         what="the pod running")
        first = cache.podlist_bytes()
        encodes = metrics.registry.get_sample_value("edgeagent_cache_podlist_encodes_total")
        for _ in range(50):
            assert cache.podlist_bytes() is first
        assert metrics.registry.get_sample_value("edgeagent_cache_podlist_encodes_total") == encodes
        assert [p["metadata"]["name"] for p in json.loads(first)["items"]] == ["a"]

        await admin.create("b")
        await eventually(lambda: cache.get("default", "b"), what="the second pod")
        second = cache.podlist_bytes()
        assert second is not first
        assert [p["metadata"]["name"] for p in json.loads(second)["items"]] == ["a", "b"]
        assert cache.podlist_bytes() is second


async def test_snapshot_is_debounced_and_flushed_when_cancelled(
        admin: Admin, node_client: KubeClient, state: StateStore) -> None:
    await admin.create("first")
    informer = _informer(node_client)
    # An interval no test will reach: after the first write, only the final flush may write again.
    cache = PodCache(informer, state, NODE, persist_interval=3600)
    async with running(informer.run()) as _, running(cache.run()) as persister:
        async def first_saved() -> bool:
            pods, _ = await state.load_snapshot()
            return [p["metadata"]["name"] for p in pods] == ["first"]

        await eventually(first_saved, what="the first snapshot")
        assert cache.snapshot_writes == 1
        await admin.create("second")
        await admin.create("third")
        await eventually(lambda: cache.get("default", "third"), what="the later pods cached")
        assert cache.snapshot_writes == 1
        pods, _ = await state.load_snapshot()
        assert [p["metadata"]["name"] for p in pods] == ["first"]
        persister[0].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await persister[0]
    pods, rv = await state.load_snapshot()
    assert [p["metadata"]["name"] for p in pods] == ["first", "second", "third"]
    assert rv and cache.snapshot_writes == 2


async def test_snapshot_follows_changes_within_the_interval(
        admin: Admin, node_client: KubeClient, state: StateStore) -> None:
    informer = _informer(node_client)
    cache = PodCache(informer, state, NODE, persist_interval=0.05)
    async with running(informer.run(), cache.run()):
        await admin.create("x")

        async def saved(expected: list[str]) -> bool:
            pods, _ = await state.load_snapshot()
            return [p["metadata"]["name"] for p in pods] == expected

        await eventually(lambda: saved(["x"]), what="the created pod persisted")
        await admin.delete_now("x")
        await eventually(lambda: saved([]), what="the deletion persisted")
