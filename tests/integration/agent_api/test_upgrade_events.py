"""Upgrade Events (issue 12): one core/v1 Event on the pod per transition, with the node as source.host and the
time it happened; transitions decided offline reach the cloud after the link returns, with their own times.

Read back from the simulated cluster's store over its API: what the cloud really received.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgeagent.agent.requests.events import EventReporter
from edgeagent.agent.state.store import StateStore, StateUnavailable, UpgradeRequest
from edgeagent.kube.client import KubeClient
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    orphan_ds_pod,
    wait_cached,
    wait_connected,
    write_kubeconfig,
)
from tests.support.agent_outcomes import final_entry, upgrade_json
from tests.support.faulty_proxy import FaultyProxy
from tests.support.waiting import eventually

JSON = dict[str, Any]


async def agent_events(admin: KubeClient, uid: str) -> list[JSON]:
    """The edgeagent Events about the pod with this uid, oldest first."""
    items = (await admin.get("/api/v1/namespaces/default/events"))["items"]
    mine = [e for e in items if e["involvedObject"].get("uid") == uid and e["source"].get("component") == "edgeagent"]
    return sorted(mine, key=lambda e: (e["firstTimestamp"], e["metadata"]["name"]))


def seconds(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def check_event(event: JSON, pod: JSON, reason: str, type_: str) -> None:
    assert event["reason"] == reason and event["type"] == type_, event
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "default",
                                       "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
    assert event["source"] == {"component": "edgeagent", "host": NODE}
    assert (event["reportingComponent"], event["reportingInstance"]) == ("edgeagent", NODE)
    assert event["count"] == 1 and event["firstTimestamp"] == event["lastTimestamp"]


async def test_online_upgrade_sends_started_then_succeeded_once_each(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=30)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body
    done = await final_entry(http, agent, body["id"])
    assert done["state"] == "succeeded"

    uid = old["metadata"]["uid"]
    events = await eventually(lambda: _events_with(world.admin, uid, 2), what="two Events")
    started, succeeded = events
    check_event(started, old, "UpgradeStarted", "Normal")
    check_event(succeeded, old, "UpgradeSucceeded", "Normal")
    assert body["id"] in started["message"] and "deleted" in started["message"]
    assert succeeded["firstTimestamp"] == seconds(parse(done["updated"]))  # when it happened
    assert parse(done["created"]) - 1 < parse(started["firstTimestamp"]) <= parse(succeeded["firstTimestamp"])
    assert agent.outcomes is not None
    await eventually(lambda: agent.outcomes.events.sent == 2, what="the reporter counted two sent")


async def _events_with(admin: KubeClient, uid: str, n: int) -> list[JSON] | None:
    events = await agent_events(admin, uid)
    assert len(events) <= n, events  # never more than one per transition
    return events if len(events) == n else None


async def test_failed_verification_sends_a_warning_with_the_reason(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    orphan = await orphan_ds_pod(world.admin, "lonely")
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=1)
    await wait_connected(agent)
    await wait_cached(agent, orphan)
    status, body = await upgrade_json(http, agent, orphan)
    assert status == 200, body
    assert (await final_entry(http, agent, body["id"]))["state"] == "failed"
    started, failed = await eventually(lambda: _events_with(world.admin, orphan["metadata"]["uid"], 2),
                                       what="two Events")
    check_event(started, orphan, "UpgradeStarted", "Normal")
    check_event(failed, orphan, "UpgradeFailed", "Warning")
    assert "no replacement pod appeared" in failed["message"]


async def test_transitions_decided_offline_arrive_after_reconnect_with_their_times(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=30)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    await world.sim.disconnect(NODE, "blackhole")
    # The online read hangs on the blackholed link and times out: queued (202).
    status, body = await upgrade_json(http, agent, old)
    assert status == 202, body
    await wait_connected(agent, False)
    queued_at = time.time()
    # Let the clock move to a later second, so that a time stamped at sending would differ.
    await eventually(lambda: time.time() >= queued_at + 1.2, timeout=5, what="a later second")
    assert await agent_events(world.admin, old["metadata"]["uid"]) == []
    assert agent.outcomes is not None
    assert [e.reason for e in await agent.outcomes.events.pending()] == ["UpgradeQueued"]

    await world.sim.connect(NODE)
    reconnected_at = time.time()
    done = await final_entry(http, agent, body["id"])
    assert done["state"] == "succeeded"
    queued, started, succeeded = await eventually(lambda: _events_with(world.admin, old["metadata"]["uid"], 3),
                                                  what="three Events")
    check_event(queued, old, "UpgradeQueued", "Normal")
    check_event(started, old, "UpgradeStarted", "Normal")
    check_event(succeeded, old, "UpgradeSucceeded", "Normal")
    assert queued["firstTimestamp"] == seconds(parse(done["created"]))  # stamped when queued, not when sent
    assert parse(queued["firstTimestamp"]) < int(reconnected_at)
    # The agent takes an Event's row off its outbox when the create's answer is back, which can be after the Event
    # is readable from the API: wait for the outbox to empty rather than read it once.
    outcomes = agent.outcomes

    async def outbox_empty() -> bool:
        return not await outcomes.events.pending()

    await eventually(outbox_empty, what="the agent's Event outbox to empty")


async def test_event_creation_refused_never_fails_the_upgrade(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        proxy: FaultyProxy) -> None:
    proxy.fail("POST", r"/events", 403, 'events is forbidden: User "system:node:edge-1" cannot create resource')
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "proxied.kubeconfig", proxy.url),
                                ready_timeout=30)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body
    assert (await final_entry(http, agent, body["id"]))["state"] == "succeeded"
    assert agent.outcomes is not None
    await eventually(lambda: agent.outcomes.events.dropped == 2, what="both Events refused and dropped")
    assert await agent.outcomes.events.pending() == []


# ---------------------------------------------------------------------- reporter on its own


class _Link:
    def __init__(self) -> None:
        self.connected = True

    async def wait_connected(self) -> None:
        return None

    def report_failure(self, reason: str) -> None:
        self.connected = False


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[StateStore]:
    s = await StateStore.open(tmp_path / "state")
    yield s
    await s.close()


def _request(state: str, **fields: Any) -> UpgradeRequest:
    base: dict[str, Any] = {"id": "r1", "namespace": "default", "name": "p", "uid": "uid-p", "node": NODE,
                            "state": state, "message": "m", "attempts": 0, "created": 1_700_000_000.0,
                            "updated": 1_700_000_000.0}
    return UpgradeRequest(**{**base, **fields})


async def test_repeats_are_aggregated_into_one_event_with_a_count(world: World, store: StateStore) -> None:
    reporter = EventReporter(client=world.admin, state=store, link=_Link(), node_name=NODE, request_timeout=5)

    async def occur(at: float) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            reporter.store_event(conn, None, _request("failed", updated=at))

        await store.write(tx)

    await occur(1_700_000_000.0)
    await occur(1_700_000_010.0)
    [row] = await reporter.pending()
    assert row.count == 2
    await reporter.send_pending()
    [event] = await agent_events(world.admin, "uid-p")
    assert (event["count"], event["firstTimestamp"], event["lastTimestamp"]) == \
        (2, "2023-11-14T22:13:20Z", "2023-11-14T22:13:30Z")
    # A repeat after sending raises the count of the same Event, as client-go's recorder does.
    await occur(1_700_000_020.0)
    await reporter.send_pending()
    [event] = await agent_events(world.admin, "uid-p")
    assert (event["count"], event["lastTimestamp"]) == (3, "2023-11-14T22:13:40Z")


async def test_a_repeat_after_the_event_expired_starts_a_new_event(world: World, store: StateStore) -> None:
    """The Event it would count up is gone (events expire after an hour): a new one, as the recorder does."""
    reporter = EventReporter(client=world.admin, state=store, link=_Link(), node_name=NODE, request_timeout=5)

    async def occur(at: float) -> None:
        await store.write(lambda conn: reporter.store_event(conn, None, _request("failed", updated=at)))

    await occur(1_700_000_000.0)
    await reporter.send_pending()
    [first] = await agent_events(world.admin, "uid-p")
    await world.admin.delete(f"/api/v1/namespaces/default/events/{first['metadata']['name']}")
    await occur(1_700_000_020.0)
    assert await reporter.send_pending()
    [event] = await agent_events(world.admin, "uid-p")
    assert event["metadata"]["name"] != first["metadata"]["name"]
    assert (event["count"], event["lastTimestamp"]) == (1, "2023-11-14T22:13:40Z")
    assert await reporter.pending() == []


async def test_an_event_sent_before_a_crash_is_not_sent_twice(world: World, store: StateStore) -> None:
    """Created, then the process died before the outbox row was deleted: the next agent's create gets 409."""
    before = EventReporter(client=world.admin, state=store, link=_Link(), node_name=NODE, request_timeout=5)
    await store.write(lambda conn: before.store_event(conn, None, _request("failed")))
    [row] = await before.pending()
    await before._send(row)  # the create reached the cloud; the row's deletion never ran
    after = EventReporter(client=world.admin, state=store, link=_Link(), node_name=NODE, request_timeout=5)
    assert await after.send_pending()
    assert await after.pending() == [] and after.dropped == 0
    [event] = await agent_events(world.admin, "uid-p")
    assert event["count"] == 1


async def test_an_event_whose_outbox_row_could_not_be_taken_off_is_not_counted_again(
        world: World, store: StateStore) -> None:
    """Created, then the outbox row's removal failed (a full state disk in the soak; here another writer holds
    the database): the next pass must not take the row for a repeat and raise the Event's count (issue 23)."""
    reporter = EventReporter(client=world.admin, state=store, link=_Link(), node_name=NODE, request_timeout=5)
    await store.write(lambda conn: reporter.store_event(conn, None, _request("succeeded")))
    blocker = sqlite3.connect(store.path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StateUnavailable):
            await reporter.send_pending()  # the create lands; taking the row off times out on the lock
        [created] = await agent_events(world.admin, "uid-p")
        assert created["count"] == 1
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert await reporter.send_pending()
    assert await reporter.pending() == []
    [event] = await agent_events(world.admin, "uid-p")
    assert event["count"] == 1
    # A real repeat is still counted, once.
    await store.write(lambda conn: reporter.store_event(conn, None, _request("succeeded", updated=1_700_000_030.0)))
    assert await reporter.send_pending()
    [event] = await agent_events(world.admin, "uid-p")
    assert (event["count"], event["lastTimestamp"]) == (2, "2023-11-14T22:13:50Z")


async def test_outbox_is_bounded_dropping_the_oldest(world: World, store: StateStore) -> None:
    link = _Link()
    link.connected = False
    reporter = EventReporter(client=world.admin, state=store, link=link, node_name=NODE, request_timeout=5,
                             capacity=3)
    for i in range(5):
        def tx(conn: sqlite3.Connection, i: int = i) -> None:
            reporter.store_event(conn, None, _request("obsolete", id=f"r{i}", uid=f"uid-{i}",
                                                       updated=1_700_000_000.0 + i))

        await store.write(tx)
    assert [e.pod_uid for e in await reporter.pending()] == ["uid-2", "uid-3", "uid-4"]
    assert reporter.dropped == 2
    link.connected = True
    assert await reporter.send_pending()
    sent = [e for i in range(5) for e in await agent_events(world.admin, f"uid-{i}")]
    assert [e["involvedObject"]["uid"] for e in sent] == ["uid-2", "uid-3", "uid-4"]
    conn = sqlite3.connect(store.path)
    try:
        assert conn.execute("SELECT count(*) FROM event_outbox").fetchone()[0] == 0
    finally:
        conn.close()
