"""Events under an overloaded API server (issue 22 item 21): a request the drainer retries after a 5xx or a
timeout sends `UpgradeQueued` once, and an Event create answered 429 or 5xx is retried until it lands, never
dropped. Faults come from the sim's own switch (`POST /sim/v1/faults`), scoped to this node's agent.

Each fault lasts until the test has seen it do its work (an injected refusal, a second attempt), then the test
removes it: a fault that ended after a fixed time could be over before a loaded machine's agent first tried.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from edgeagent.agent.app import Agent
from tests.integration.agent_api.conftest import NODE, AgentFactory, World, wait_cached, wait_connected
from tests.integration.agent_api.test_upgrade_events import agent_events
from tests.support.agent_outcomes import final_entry, request_entry, upgrade_json
from tests.support.waiting import eventually

JSON = dict[str, Any]
AGENT = f"({NODE})"  # the agent's User-Agent ends with its node name


async def add_fault(http: aiohttp.ClientSession, world: World, **rule: Any) -> int:
    async with http.post(f"{world.sim.url}/sim/v1/faults", json={"userAgent": AGENT, **rule}) as resp:
        body: JSON = await resp.json()
        assert resp.status == 201, body
        return int(body["id"])


async def clear_fault(http: aiohttp.ClientSession, world: World, fault_id: int) -> None:
    async with http.delete(f"{world.sim.url}/sim/v1/faults/{fault_id}") as resp:
        assert resp.status == 200, await resp.text()


async def injected(http: aiohttp.ClientSession, world: World) -> dict[str, int]:
    async with http.get(f"{world.sim.url}/sim/v1/faults") as resp:
        body: JSON = await resp.json()
        return {str(k): int(v) for k, v in body["injected"].items()}


async def hold(http: aiohttp.ClientSession, agent: Agent) -> None:
    async with http.post(f"{agent.url}/v1/hold", json={"reason": "test"}) as resp:
        assert resp.status == 200


async def release(http: aiohttp.ClientSession, agent: Agent) -> None:
    async with http.delete(f"{agent.url}/v1/hold") as resp:
        assert resp.status == 200


@pytest.mark.parametrize("fault", [{"codes": [503]}, {"codes": [500, 504]}, {"rate": 1.0, "codes": [],
                                                                              "latencySeconds": 3}],
                         ids=["503", "500-504", "timeout"])
async def test_a_retried_request_sends_upgrade_queued_once(
        fault: JSON, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=30)
    await wait_connected(agent)
    pod = await world.pod()
    await wait_cached(agent, pod)
    name = pod["metadata"]["name"]
    await hold(http, agent)  # so that ?when=open queues it, and the drainer applies it once released
    async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/default/pods/{name}/upgrade?when=open",
                         headers={"Accept": "application/json"}) as resp:
        body = await resp.json()
        assert resp.status == 202, body

    # The drainer's DELETE fails (an error answer, or no answer within --request-timeout) until it has tried twice.
    fault_id = await add_fault(http, world, path=f"/api/v1/namespaces/default/pods/{name}", verbs=["DELETE"],
                               durationSeconds=60, **fault)
    await release(http, agent)
    await eventually(lambda: _retried(http, agent, body["id"]), timeout=30, what="the drainer retrying the request")
    await clear_fault(http, world, fault_id)
    done = await final_entry(http, agent, body["id"], timeout=30)
    assert done["state"] in ("succeeded", "obsolete"), done  # obsolete: a slow DELETE that went through
    assert done["attempts"] >= 2, done
    assert sum((await injected(http, world)).values()) >= 1

    queued = [e for e in await agent_events(world.admin, pod["metadata"]["uid"]) if e["reason"] == "UpgradeQueued"]
    assert [e["count"] for e in queued] == [1], queued


async def _retried(http: aiohttp.ClientSession, agent: Agent, request_id: str) -> bool:
    entry = await request_entry(http, agent, request_id)
    return int(entry["attempts"]) >= 2 or entry["state"] not in ("queued", "running")


@pytest.mark.parametrize("code", [429, 500, 503])
async def test_an_event_create_answered_429_or_5xx_is_retried_not_dropped(
        code: int, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=30)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    fault_id = await add_fault(http, world, codes=[code], retryAfterSeconds=1, path="/api/v1/namespaces/default/events",
                               verbs=["POST"], durationSeconds=60)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body
    # The first Event create is refused (however long the agent takes to send it); then the API server recovers.
    await eventually(lambda: _refused(http, world, code), timeout=30, what=f"an Event create answered {code}")
    await clear_fault(http, world, fault_id)
    assert (await final_entry(http, agent, body["id"]))["state"] == "succeeded"

    async def both() -> list[JSON] | None:
        events = await agent_events(world.admin, old["metadata"]["uid"])
        return events if [e["reason"] for e in events] == ["UpgradeStarted", "UpgradeSucceeded"] else None

    events = await eventually(both, timeout=15, what="both Events, after the refusals")
    assert [e["count"] for e in events] == [1, 1]
    assert agent.outcomes is not None and agent.outcomes.events.dropped == 0
    async with http.get(agent.url + "/metrics") as resp:
        text = await resp.text()
    assert 'edgeagent_events_dropped_total{why="refused"} 0.0' in text


async def test_an_event_create_whose_answer_was_lost_exists_once_with_count_1(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    """The sim commits the create and answers 503 (`after`): the retry meets 409 and counts it as sent, so the
    cloud holds one Event per transition, count 1 (the soak's events-once invariant, issue 23)."""
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=30)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    fault_id = await add_fault(http, world, codes=[503], after=True, path="/api/v1/namespaces/default/events",
                               verbs=["POST", "PATCH"], durationSeconds=60)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body
    await eventually(lambda: _refused(http, world, "503-after"), timeout=30, what="an Event create committed, then 503")
    await clear_fault(http, world, fault_id)
    assert (await final_entry(http, agent, body["id"]))["state"] == "succeeded"
    assert agent.outcomes is not None
    outcomes = agent.outcomes

    async def drained() -> bool:
        return not await outcomes.events.pending() and outcomes.events.sent >= 2

    await eventually(drained, timeout=15, what="the outbox drained")
    events = await agent_events(world.admin, old["metadata"]["uid"])
    assert [(e["reason"], e["count"]) for e in events] == [("UpgradeStarted", 1), ("UpgradeSucceeded", 1)]


async def _refused(http: aiohttp.ClientSession, world: World, what: int | str) -> bool:
    """At least one answer of this kind (`503`, `503-after`) injected so far."""
    return (await injected(http, world)).get(str(what), 0) >= 1
