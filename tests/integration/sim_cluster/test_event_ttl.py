"""Events expire as on kube-apiserver (`--event-ttl`): an Event is deleted a TTL after its last write, watchers
see it DELETED, a write renews it, and Events kept across a sim restart still expire."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient, KubeError
from edgeagent.sim import event_ttl
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.store import WatchEvent
from tests.conftest import SimFactory, fast_sim_config
from tests.support.waiting import eventually

JSON = dict[str, Any]
EVENTS = "/api/v1/namespaces/default/events"
MERGE = "application/merge-patch+json"


def _event(name: str) -> JSON:
    return {"metadata": {"name": name}, "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
            "reason": "Tested", "message": name, "type": "Normal", "count": 1,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
            "source": {"component": "test"}}


async def _gone(admin: KubeClient, name: str) -> bool:
    try:
        await admin.get(f"{EVENTS}/{name}")
    except KubeError as exc:
        return exc.code == 404
    return False


async def _no_events(admin: KubeClient) -> bool:
    return not (await admin.get(EVENTS))["items"]


async def test_an_event_is_deleted_a_ttl_after_its_last_write_and_watchers_see_it(
        sim_factory: SimFactory) -> None:
    # Long enough that the PATCH below lands well inside the first Event's life.
    sim = await sim_factory(event_ttl=2.0)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        rv = (await admin.get(EVENTS))["metadata"]["resourceVersion"]
        first = await admin.create(EVENTS, _event("first"))
        await admin.create(EVENTS, _event("second"))
        # A write renews the lease: `first`, created before `second`, now outlives it.
        renewed = await admin.patch(f"{EVENTS}/first", {"count": 2}, content_type=MERGE)
        deleted: list[JSON] = []
        async with asyncio.timeout(30):  # a deadline: an Event that never expires fails here, not at pytest's
            async for event in admin.watch(EVENTS, query={"resourceVersion": rv}):
                if event["type"] == "DELETED" and event["object"]["metadata"]["name"] in ("first", "second"):
                    deleted.append(event["object"])
                    if len(deleted) == 2:
                        break
        assert [e["metadata"]["name"] for e in deleted] == ["second", "first"]
        last = deleted[1]
        assert last["count"] == 2 and last["metadata"]["uid"] == first["metadata"]["uid"]
        assert int(last["metadata"]["resourceVersion"]) > int(renewed["metadata"]["resourceVersion"])
        assert await _gone(admin, "first") and await _gone(admin, "second")
        names = {e["metadata"]["name"] for e in (await admin.get(EVENTS))["items"]}
        assert not names & {"first", "second"}
    # etcd dropping a key is no API request: no DELETE on record, as on a real server's audit log.
    assert not [d for d in sim.store.deletes if d["resource"] == "events"]


async def test_other_kinds_never_expire(sim_factory: SimFactory) -> None:
    sim = await sim_factory(event_ttl=0.2)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await admin.create("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "kept"}, "data": {}})
        await admin.create(EVENTS, _event("short"))
        await eventually(lambda: _gone(admin, "short"), what="the Event to expire")
        assert (await admin.get("/api/v1/namespaces/default/configmaps/kept"))["metadata"]["name"] == "kept"
        assert (await admin.get("/api/v1/nodes"))["items"]


async def test_events_kept_across_a_restart_still_expire(tmp_path: Path) -> None:
    config = fast_sim_config(tmp_path / "sim", nodes=1, event_ttl=3600.0)
    async with SimCluster(config) as first, await KubeClient.connect(first.admin_kubeconfig) as admin:
        await admin.create(EVENTS, _event("old"))
    # The same state, served with a TTL shorter than the Event's age by the time the sim is back.
    config = fast_sim_config(tmp_path / "sim", nodes=1, event_ttl=0.3)
    async with SimCluster(config) as second:
        assert second.resumed
        async with await KubeClient.connect(second.admin_kubeconfig) as admin:
            await eventually(lambda: _gone(admin, "old"), what="the resumed Event to expire")
            kept = await admin.create(EVENTS, _event("new"))
            assert kept["metadata"]["name"] == "new"


async def test_an_expiry_the_state_file_refuses_is_retried_and_the_event_kept_meanwhile(
        sim_factory: SimFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_ttl, "RETRY_SECONDS", 0.2)
    sim = await sim_factory(event_ttl=0.3)
    durable = sim.store.persist
    assert durable is not None
    refused: list[str] = []

    def full_disk(event: WatchEvent) -> None:
        if event.resource.plural == "events" and event.type == "DELETED":
            refused.append(event.object["metadata"]["name"])
            raise sqlite3.OperationalError("database or disk is full")
        durable(event)

    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        # The sim's own start-up Events first: refused, they would stay at the head of the queue (a full disk
        # blocks every expiry, oldest first) and ours would never be tried.
        await eventually(lambda: _no_events(admin), what="the start-up Events to expire")
        sim.store.persist = full_disk
        await admin.create(EVENTS, _event("kept"))
        await eventually(lambda: refused.count("kept") >= 2, what="the expiry refused, then tried again")
        assert (await admin.get(f"{EVENTS}/kept"))["metadata"]["name"] == "kept"
        sim.store.persist = durable
        await eventually(lambda: _gone(admin, "kept"), what="the Event to expire once the disk has room")
    # The sim's controllers are still running: stop() (the fixture's) re-raises a crash of any of them.
    assert sim._task is not None and not sim._task.done()


def test_a_ttl_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="event TTL must be > 0 seconds, got 0"):
        SimCluster(fast_sim_config(tmp_path / "sim", event_ttl=0.0))
