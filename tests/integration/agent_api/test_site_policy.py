"""Site policy against the sim: UpgradeHeld follows hold and windows (only on change), and `?when=open`.

The agent's wall clock is a FakeClock standing hours before a window; a test moves it to a second before
the opening and the policy's own timer (not a poll) opens the node.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from edgeagent.agent.app import Agent
from edgeagent.agent.policy.held import current
from edgeagent.contract import CONDITION_UPGRADE_HELD
from edgeagent.kube.client import CONTENT_MERGE_PATCH
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    orphan_ds_pod,
    wait_cached,
    wait_connected,
)
from tests.support.agent_outcomes import running_agent
from tests.support.clock import FakeClock
from tests.support.waiting import eventually

JSON = dict[str, Any]
# A Saturday; the window opens at noon UTC.
OPENING = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
WINDOW = "Sat 12:00-13:00"


class UpgradeHeldPatches:
    """Counts the PATCHes of pods/status that carry UpgradeHeld, as the sim's store receives them."""

    def __init__(self, sim: SimCluster) -> None:
        self.count = 0
        self.names: list[str] = []
        store = sim.store
        original = store.patch

        def patch(res: Any, namespace: str | None, name: str, body: Any, content_type: str, **kw: Any) -> JSON:
            raw = body if isinstance(body, bytes) else json.dumps(body, default=str).encode()
            if res.plural == "pods" and kw.get("subresource") == "status" and CONDITION_UPGRADE_HELD.encode() in raw:
                self.count += 1
                self.names.append(name)
            return original(res, namespace, name, body, content_type, **kw)

        store.patch = patch  # type: ignore[method-assign]


async def policy_agent(world: World, agent_factory: AgentFactory, clock: FakeClock, **fields: Any) -> Agent:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), clock=clock,
                                maintenance_windows=(WINDOW,), timezone="UTC", **fields)
    await wait_connected(agent)
    return agent


async def cloud_held(world: World, name: str | None = None) -> tuple[str, str, str] | None:
    pod = await world.pod() if name is None else await world.admin.get(f"/api/v1/namespaces/default/pods/{name}")
    return current(pod)


async def held_is(world: World, status: str, reason: str, name: str | None = None) -> tuple[str, str, str] | None:
    found = await cloud_held(world, name)
    return found if found is not None and found[:2] == (status, reason) else None


async def test_upgrade_held_follows_hold_and_window_and_is_idle_between_changes(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    patches = UpgradeHeldPatches(world.sim)
    clock = FakeClock(OPENING - timedelta(hours=2))
    agent = await policy_agent(world, agent_factory, clock)
    assert agent.held is not None and agent.policy is not None

    found = await eventually(lambda: held_is(world, "True", "OutsideMaintenanceWindow"), what="held outside window")
    assert "Sat 12:00-13:00" in found[2] and "2026-11-21T12:00+00:00" in found[2]

    # Between changes nothing is sent: a pod change wakes the publisher, which finds nothing to patch.
    pod = await world.pod()
    sent, passes, seen = agent.held.patches, agent.held.passes, patches.count
    await world.admin.patch(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}",
                            {"metadata": {"labels": {"touched": "yes"}}}, CONTENT_MERGE_PATCH)

    def woke_after_touch() -> bool:
        cached = agent.cache.get("default", pod["metadata"]["name"]) if agent.cache else None
        touched = cached is not None and cached["metadata"].get("labels", {}).get("touched") == "yes"
        return touched and agent.held.passes > passes  # type: ignore[union-attr]

    await eventually(woke_after_touch, what="publisher woken by the pod change")
    assert (agent.held.patches, patches.count) == (sent, seen)

    async with http.post(f"{agent.url}/v1/hold", json={"reason": "site audit"}) as resp:
        body = await resp.json()
        assert resp.status == 200, body
        assert (body["held"], body["reason"], body["hold"]["reason"]) == (True, "HeldByOperator", "site audit")
    found = await eventually(lambda: held_is(world, "True", "HeldByOperator"), what="HeldByOperator published")
    assert found[2] == "site audit"

    async with http.delete(f"{agent.url}/v1/hold") as resp:
        assert resp.status == 200
    await eventually(lambda: held_is(world, "True", "OutsideMaintenanceWindow"), what="back to the window")

    # The window opens on the policy's timer: a second before the opening, then nothing but waiting.
    clock.set(OPENING - timedelta(seconds=1))
    agent.policy.poke()
    await eventually(lambda: held_is(world, "False", "Open"), what="Open published when the window opens")
    assert datetime.now(UTC) >= clock.to_real(OPENING)

    # A new DaemonSet pod on the node gets the condition at once.
    newcomer = await orphan_ds_pod(world.admin, "newcomer")
    await eventually(lambda: held_is(world, "False", "Open", newcomer["metadata"]["name"]),
                     what="the new pod's UpgradeHeld")
    # Exactly one patch per change: outside the window, held, outside again, open.
    assert patches.names.count(pod["metadata"]["name"]) == 4, patches.names


async def entry(http: aiohttp.ClientSession, agent: Agent, request_id: str) -> JSON:
    async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}") as resp:
        assert resp.status == 200
        result: JSON = await resp.json()
        return result


async def post_upgrade(http: aiohttp.ClientSession, agent: Agent, name: str, query: str = "") -> tuple[int, JSON]:
    url = f"{agent.url}/openyurt.io/v1/namespaces/default/pods/{name}/upgrade{query}"
    async with http.post(url, headers={"Accept": "application/json"}) as resp:
        return resp.status, await resp.json()


def deletions_of(world: World, name: str) -> list[JSON]:
    return [d for d in world.agent_deletes() if d["name"] == name and d["outcome"] in ("deleted", "graceful")]


async def test_when_open_is_queued_outside_the_window_and_applied_by_the_drainer_when_it_opens(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    clock = FakeClock(OPENING - timedelta(hours=2))
    # A short --ready-timeout: the orphan below gets no replacement, and its verification (which keeps the
    # link probing, as it waits for a live cache) should end soon.
    agent = await policy_agent(world, agent_factory, clock, ready_timeout=2.0)
    assert agent.policy is not None
    pod = await world.pod()
    name = pod["metadata"]["name"]
    other = await orphan_ds_pod(world.admin, "other")
    await wait_cached(agent, pod)
    await wait_cached(agent, other)

    status, body = await post_upgrade(http, agent, name, "?when=later")
    assert status == 400 and "when=open" in body["message"]
    status, body = await post_upgrade(http, agent, name, "?when=open")
    assert status == 202, body
    waiting = body["id"]
    assert (await entry(http, agent, waiting))["whenOpen"] is True

    # A plain request queued offline is drained when the link returns; the ?when=open one keeps waiting.
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    status, body = await post_upgrade(http, agent, "other")
    assert status == 202, body
    plain = body["id"]
    await world.sim.connect(NODE)
    await wait_connected(agent)

    async def drained() -> bool:
        # Applied, and its verification over (the orphan is never replaced: failed at --ready-timeout).
        return (await entry(http, agent, plain))["state"] not in ("queued", "running", "verifying")

    await eventually(drained, what="the plain queued request drained")
    assert deletions_of(world, "other")
    assert (await entry(http, agent, waiting))["state"] == "queued"
    assert deletions_of(world, name) == []
    # Waiting for the site is not waiting for the cloud: the link monitor stops probing (no idle link cost).
    await eventually(lambda: agent.link is not None and not agent.link.probing, what="link probes paused")

    clock.set(OPENING - timedelta(seconds=1))
    agent.policy.poke()
    await eventually(lambda: deletions_of(world, name), what="the ?when=open request applied")
    first = min(d["time"] for d in deletions_of(world, name))
    opened = clock.to_real(OPENING).timestamp()
    latency = first - opened
    assert 0 <= latency < 60, latency
    print(f"\n?when=open: window opening -> pod deleted by the drainer: {latency * 1000:.0f} ms")
    await eventually(lambda: world.replaced(pod), what="the DaemonSet replaced the pod")
    assert time.time() >= opened


async def test_a_restarted_agent_sends_no_upgrade_held_patch_that_is_already_in_the_cloud(
        world: World, tmp_path: Path) -> None:
    """The idle-link promise across restarts: the condition is compared with the synced cache, not assumed."""
    patches = UpgradeHeldPatches(world.sim)
    kubeconfig, state_dir = world.sim.node_kubeconfig(NODE), tmp_path / "restart-state"
    async with running_agent(kubeconfig, state_dir) as first:
        await eventually(lambda: held_is(world, "False", "Open"), what="Open published by the first agent")
        assert first.held is not None
    sent = patches.count
    assert sent == 1
    async with running_agent(kubeconfig, state_dir) as again:
        await wait_connected(again)
        held, cache = again.held, again.cache
        assert held is not None and cache is not None
        # A change after the sync wakes the publisher: its pass sees the synced pod and must find nothing to do.
        pod = await world.pod()
        name = pod["metadata"]["name"]
        passes = held.passes
        await world.admin.patch(f"/api/v1/namespaces/default/pods/{name}", {"metadata": {"labels": {"touched": "yes"}}},
                                CONTENT_MERGE_PATCH)

        def passed_over_the_change() -> bool:
            cached = cache.get("default", name)
            return cached is not None and cached["metadata"].get("labels", {}).get("touched") == "yes" \
                and held.passes > passes

        await eventually(passed_over_the_change, what="a publishing pass over the synced, touched pod")
    assert patches.count == sent, patches.names
