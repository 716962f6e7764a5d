"""`UpgradeHeld` (issue 22 item 18): `lastTransitionTime` moves only when the status flips, and a change of
message alone (a new hold reason, a new `until`, a new "next opens" time) is still published.

No test guarded either: always stamping the time, or comparing only status and reason, passed every test.
Read back from the simulated cluster's pods over its API. The agent's wall clock is a FakeClock, so that the
times it stamps differ by hours between steps.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from edgeagent.agent.app import Agent
from edgeagent.contract import CONDITION_UPGRADE_HELD
from edgeagent.kube.objects import get_condition
from tests.integration.agent_api.conftest import NODE, AgentFactory, World, wait_connected
from tests.support.clock import FakeClock
from tests.support.waiting import eventually

JSON = dict[str, Any]
# A Saturday; the window is noon to one, UTC.
OPENING = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
WINDOW = "Sat 12:00-13:00"


async def held_condition(world: World) -> JSON:
    cond = get_condition(await world.pod(), CONDITION_UPGRADE_HELD)
    assert cond is not None
    return cond


async def published(world: World, status: str, reason: str, message_part: str) -> JSON | None:
    cond = get_condition(await world.pod(), CONDITION_UPGRADE_HELD)
    if cond is None or (cond.get("status"), cond.get("reason")) != (status, reason):
        return None
    return cond if message_part in str(cond.get("message")) else None


async def hold(http: aiohttp.ClientSession, agent: Agent, **body: str) -> None:
    async with http.post(f"{agent.url}/v1/hold", json=body) as resp:
        assert resp.status == 200, await resp.text()


async def test_transition_time_moves_only_when_the_status_flips_and_message_changes_are_published(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    clock = FakeClock(OPENING - timedelta(hours=3))
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), clock=clock,
                                maintenance_windows=(WINDOW,), timezone="UTC")
    await wait_connected(agent)
    assert agent.policy is not None

    first = await eventually(lambda: published(world, "True", "OutsideMaintenanceWindow", "2026-11-21T12:00+00:00"),
                             what="held outside the window")
    since = first["lastTransitionTime"]

    # Hours later by the agent's clock, so a time stamped now would differ from `since`.
    clock.set(OPENING - timedelta(hours=1))
    agent.policy.poke()

    # A new reason: the same status, a new message and reason.
    await hold(http, agent, reason="site audit")
    found = await eventually(lambda: published(world, "True", "HeldByOperator", "site audit"), what="the hold")
    assert found["lastTransitionTime"] == since
    # The message alone: another reason.
    await hold(http, agent, reason="network work")
    found = await eventually(lambda: published(world, "True", "HeldByOperator", "network work"),
                             what="the new reason")
    assert found["lastTransitionTime"] == since
    # The message alone: the same reason with an `until`.
    await hold(http, agent, reason="network work", until="2026-11-21T11:30:00Z")
    found = await eventually(lambda: published(world, "True", "HeldByOperator", "(until 2026-11-21T11:30+00:00)"),
                             what="the hold's until")
    assert found["lastTransitionTime"] == since

    # Released, still outside the window: "next opens" is noon today ...
    async with http.delete(f"{agent.url}/v1/hold") as resp:
        assert resp.status == 200
    await eventually(lambda: published(world, "True", "OutsideMaintenanceWindow", "next opens 2026-11-21T12:00"),
                     what="outside the window again")
    # ... and after today's window, next Saturday: the message alone changes.
    clock.set(OPENING + timedelta(hours=2))
    agent.policy.poke()
    found = await eventually(lambda: published(world, "True", "OutsideMaintenanceWindow",
                                               "next opens 2026-11-28T12:00"), what="next week's opening")
    assert found["lastTransitionTime"] == since

    # A flip: the time moves, to the agent's now.
    clock.set(OPENING + timedelta(days=7, seconds=-1))
    agent.policy.poke()
    opened = await eventually(lambda: published(world, "False", "Open", ""), what="the window opens")
    assert opened["lastTransitionTime"] != since
    assert opened["lastTransitionTime"] >= "2026-11-28T11:59:59Z", opened
