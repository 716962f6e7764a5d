"""The informer against the simulated API server over real HTTP, through a node's cuttable link.

What must hold: the cache follows create/update/delete of exactly the selected objects; a watch that
ends is resumed from the last resourceVersion (no relist, no duplicate ADDED); after a 410 the cache
equals the server's truth; a blackholed link is noticed within the idle timeout and healed after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

from edgeagent.kube.client import KubeClient, Timeouts
from edgeagent.kube.informer import Informer
from tests.conftest import SimFactory
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

NODE = "edge-1"
OTHER = "edge-2"
PODS = "/api/v1/pods"
FAST = Timeouts(connect=0.5, request=1.0)

Events = list[tuple[str, str, str]]  # (type, namespace/name, nodeName)
InformerFactory = Callable[..., Awaitable[tuple[Informer, Events]]]


def _pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "t"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1"}]},
    }


@pytest.fixture
async def sim(sim_factory: SimFactory) -> SimCluster:
    """Bookmarks every second (the sim's default is the real server's minute): bookmark handling is under test."""
    return await sim_factory(bookmark_interval=1.0)


@pytest.fixture
async def admin(sim: SimCluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(sim.admin_kubeconfig, FAST)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def start_informer(sim: SimCluster) -> AsyncIterator[InformerFactory]:
    """`await start_informer(**Informer kwargs)`: an informer on NODE's link, running until the test ends."""
    clients: list[KubeClient] = []
    tasks: list[asyncio.Task[None]] = []

    async def start(*, seed: tuple[list[dict[str, Any]], str] | None = None, wait_synced: bool = True,
                    **kwargs: Any) -> tuple[Informer, Events]:
        client = await KubeClient.connect(sim.node_kubeconfig(NODE), FAST)
        clients.append(client)
        options: dict[str, Any] = {"field_selector": f"spec.nodeName={NODE}", "idle_timeout": 2.0,
                                   "backoff_initial": 0.05, "backoff_max": 0.2, **kwargs}
        informer = Informer(client, PODS, **options)
        events: Events = []
        informer.add_handler(lambda t, obj, old: events.append(
            (t, f"{obj['metadata']['namespace']}/{obj['metadata']['name']}", obj["spec"].get("nodeName", ""))))
        if seed is not None:
            informer.seed(*seed)
        tasks.append(asyncio.create_task(informer.run()))
        if wait_synced:
            await eventually(lambda: informer.healthy, timeout=5, what="the first list")
        return informer, events

    try:
        yield start
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for client in clients:
            await client.close()


async def _truth(admin: KubeClient, node: str = NODE) -> dict[str, str]:
    listed = await admin.get(PODS, query={"fieldSelector": f"spec.nodeName={node}"})
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["resourceVersion"]
            for p in listed["items"]}


def _cached(informer: Informer) -> dict[str, str]:
    return {key: obj["metadata"]["resourceVersion"] for key, obj in informer.items.items()}


async def _converged(informer: Informer, admin: KubeClient) -> None:
    async def same() -> bool:
        return _cached(informer) == await _truth(admin)

    await eventually(same, timeout=5, what="cache equal to the server's pods (names and resourceVersions)")


async def _create(admin: KubeClient, name: str, node: str = NODE) -> dict[str, Any]:
    return await admin.create("/api/v1/namespaces/default/pods", _pod(name, node))


async def _delete_now(admin: KubeClient, name: str) -> None:
    await admin.delete(f"/api/v1/namespaces/default/pods/{name}", {"gracePeriodSeconds": 0})


async def _label(admin: KubeClient, name: str, **labels: str) -> None:
    await admin.patch(f"/api/v1/namespaces/default/pods/{name}", {"metadata": {"labels": labels}},
                      "application/merge-patch+json")


async def test_follows_create_update_delete_of_this_nodes_pods_only(
        admin: KubeClient, start_informer: InformerFactory) -> None:
    await _create(admin, "mine-1")
    await _create(admin, "theirs-1", OTHER)
    informer, events = await start_informer()
    assert set(informer.items) == {"default/mine-1"}

    await _create(admin, "mine-2")
    await _create(admin, "theirs-2", OTHER)
    await eventually(lambda: "default/mine-2" in informer.items, what="the created pod")
    await _label(admin, "mine-1", version="2")
    await eventually(lambda: informer.items["default/mine-1"]["metadata"]["labels"].get("version") == "2",
                     what="the label change")
    await _delete_now(admin, "mine-2")
    await eventually(lambda: "default/mine-2" not in informer.items, what="the deletion")

    await _converged(informer, admin)
    assert ("ADDED", "default/mine-2", NODE) in events
    assert ("MODIFIED", "default/mine-1", NODE) in events
    assert ("DELETED", "default/mine-2", NODE) in events
    assert {node for _, _, node in events} == {NODE}


async def test_a_pod_moved_out_of_the_selector_is_dropped_locally(start_informer: InformerFactory) -> None:
    # Defence in depth: even if a server sent an object that does not match, the cache never serves it.
    informer, events = await start_informer()
    informer._handle_event({"type": "ADDED", "object": _pod("stray", OTHER)})
    assert "default/stray" not in informer.items
    assert events == []


async def test_ended_watch_resumes_from_resource_version_without_relist_or_duplicate_added(
        admin: KubeClient, start_informer: InformerFactory) -> None:
    await _create(admin, "a")
    # idle_timeout 2 s -> timeoutSeconds 1: the server ends each stream after a second.
    informer, events = await start_informer()
    await eventually(lambda: informer.watch_restarts >= 1, timeout=5, what="a watch stream to end")
    await _create(admin, "b")
    await eventually(lambda: informer.watch_restarts >= 2, timeout=8, what="another watch stream to end")
    await _converged(informer, admin)

    added = [key for kind, key, _ in events if kind == "ADDED"]
    assert sorted(added) == ["default/a", "default/b"]
    assert informer.relists == 1


async def test_bookmarks_advance_the_resource_version(start_informer: InformerFactory) -> None:
    informer, events = await start_informer(watch_timeout_seconds=30, idle_timeout=60.0)
    listed = int(informer.resource_version)
    # Node heartbeats move the global RV; only bookmarks can carry that into a pods-only watch.
    await eventually(lambda: int(informer.resource_version) > listed, timeout=5, what="a bookmark")
    assert events == [] and informer.watch_restarts == 0


async def test_after_410_the_cache_equals_the_servers_truth(
        sim: SimCluster, admin: KubeClient, start_informer: InformerFactory) -> None:
    for name in ("keep", "change", "remove"):
        await _create(admin, name)
    informer, events = await start_informer()
    assert set(informer.items) == {"default/keep", "default/change", "default/remove"}

    await sim.disconnect(NODE, "refuse")
    await eventually(lambda: not informer.healthy, what="the informer to notice the cut")
    await _delete_now(admin, "remove")
    await _label(admin, "change", version="2")
    await _create(admin, "new")
    await _create(admin, "elsewhere", OTHER)
    sim.store.compact()  # the informer's resourceVersion is now too old: its next watch gets 410
    await sim.connect(NODE)

    await eventually(lambda: informer.relists >= 2, what="a relist after 410")
    await _converged(informer, admin)
    assert ("DELETED", "default/remove", NODE) in events
    assert ("ADDED", "default/new", NODE) in events
    assert ("MODIFIED", "default/change", NODE) in events
    assert "default/elsewhere" not in informer.items
    assert informer.healthy


async def test_blackholed_link_turns_unhealthy_within_idle_timeout_and_recovers(
        sim: SimCluster, admin: KubeClient, start_informer: InformerFactory) -> None:
    informer, _ = await start_informer(idle_timeout=1.5)
    await sim.disconnect(NODE, "blackhole")
    # Nothing is refused or reset: only the idle deadline on the stream (and request timeouts) can tell.
    await eventually(lambda: not informer.healthy, timeout=4, what="healthy False after the idle timeout")
    await _create(admin, "during-cut")
    await sim.connect(NODE)
    await eventually(lambda: informer.healthy and "default/during-cut" in informer.items, timeout=8,
                     what="recovery after the link returns")
    await _converged(informer, admin)


async def test_seeded_snapshot_is_reconciled_by_the_first_list(
        admin: KubeClient, start_informer: InformerFactory) -> None:
    live = await _create(admin, "live")
    gone = _pod("gone-while-offline", NODE)
    gone["metadata"]["resourceVersion"] = "1"
    informer, events = await start_informer(seed=([live, gone], "1"), wait_synced=False)
    assert informer.synced.is_set() and set(informer.items) == {"default/live", "default/gone-while-offline"}
    await eventually(lambda: informer.healthy, what="the first list")
    await _converged(informer, admin)
    assert ("DELETED", "default/gone-while-offline", NODE) in events
    assert [kind for kind, key, _ in events if key == "default/live"].count("ADDED") == 1
