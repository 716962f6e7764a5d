"""`edgeagent_node_held{reason}`: the alert "node held too long" reads it, so it must follow the policy."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from tests.integration.agent_api.conftest import AgentFactory
from tests.support.clock import FakeClock


def _held_samples(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("edgeagent_node_held{")]


async def test_held_gauge_follows_an_operator_hold_set_and_released_offline(
        agent_factory: AgentFactory, offline_kubeconfig: Path, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=offline_kubeconfig)
    async with http.get(f"{agent.url}/metrics") as resp:
        assert _held_samples(await resp.text()) == ['edgeagent_node_held{reason="Open"} 0.0']
    async with http.post(f"{agent.url}/v1/hold", json={"reason": "site audit"}) as resp:
        assert resp.status == 200
    async with http.get(f"{agent.url}/metrics") as resp:
        assert _held_samples(await resp.text()) == ['edgeagent_node_held{reason="HeldByOperator"} 1.0']
    async with http.delete(f"{agent.url}/v1/hold") as resp:
        assert resp.status == 200
    async with http.get(f"{agent.url}/metrics") as resp:
        assert _held_samples(await resp.text()) == ['edgeagent_node_held{reason="Open"} 0.0']


async def test_held_gauge_reports_a_closed_maintenance_window(
        agent_factory: AgentFactory, offline_kubeconfig: Path, http: aiohttp.ClientSession) -> None:
    clock = FakeClock(datetime(2026, 11, 21, 9, 0, tzinfo=UTC))  # a Saturday, three hours before the window
    agent = await agent_factory(kubeconfig=offline_kubeconfig, clock=clock, maintenance_windows=("Sat 12:00-13:00",),
                                timezone="UTC")
    async with http.get(f"{agent.url}/metrics") as resp:
        assert _held_samples(await resp.text()) == ['edgeagent_node_held{reason="OutsideMaintenanceWindow"} 1.0']
