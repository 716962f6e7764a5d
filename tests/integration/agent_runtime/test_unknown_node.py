"""Issue 14.7: a `--node-name` the cluster does not know is said out loud, not served as an empty node."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import structlog.testing

from edgeagent.agent.link.monitor import LinkMonitor
from edgeagent.kube.client import KubeClient, Timeouts
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_runtime.conftest import NODE, AgentFactory
from tests.support.inprocess_agent import RunningAgent
from tests.support.waiting import eventually


async def _readyz(http: aiohttp.ClientSession, agent: RunningAgent) -> dict[str, Any]:
    async with http.get(agent.url + "/v1/readyz", headers={"Accept": "application/json"}) as response:
        body: dict[str, Any] = await response.json()
        return body


async def test_unknown_node_name_is_warned_once_and_shown_in_readyz(
        sim: SimCluster, start_agent: AgentFactory, http: aiohttp.ClientSession) -> None:
    with structlog.testing.capture_logs() as logs:
        agent = await start_agent(node_name="edge-9", kubeconfig=sim.node_kubeconfig(NODE))
        body = await eventually(lambda: _degraded(http, agent), what="readyz degraded")
        assert "node 'edge-9' is not known to the cluster" in body["message"]
        assert body["link"]["node"] == {"name": "edge-9", "known": False}
        assert body["link"]["connected"] is True  # the API server answers: the link itself is fine
        async with http.get(agent.url + "/v1/readyz") as response:
            assert "not known to the cluster" in await response.text()
    warnings = [e for e in logs if e["event"].startswith("node_unknown")]
    assert len(warnings) == 1 and warnings[0]["node"] == "edge-9"


async def test_the_warning_is_not_repeated_by_every_probe(sim: SimCluster) -> None:
    client = await KubeClient.connect(sim.node_kubeconfig(NODE), Timeouts(connect=1, request=2))
    # Without an informer the monitor probes every interval: many answers, one warning.
    monitor = LinkMonitor(client, "edge-9", interval=0.02, timeout=1.0, failures_to_disconnect=2,
                          successes_to_connect=1)
    try:
        with structlog.testing.capture_logs() as logs:
            task = asyncio.create_task(monitor.run())
            await eventually(lambda: monitor.probes >= 10, what="ten probes")
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await client.close()
    assert monitor.node_known is False
    assert len([e for e in logs if e["event"].startswith("node_unknown")]) == 1


async def test_known_node_is_reported_known(start_agent: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await start_agent()
    body = await eventually(lambda: _known(http, agent), what="node known")
    assert body["status"] == "ok" and body["problems"] == []


async def _degraded(http: aiohttp.ClientSession, agent: RunningAgent) -> dict[str, Any] | None:
    body = await _readyz(http, agent)
    return body if body["status"] == "degraded" else None


async def _known(http: aiohttp.ClientSession, agent: RunningAgent) -> dict[str, Any] | None:
    body = await _readyz(http, agent)
    return body if body["link"]["node"]["known"] else None
