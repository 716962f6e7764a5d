"""LinkMonitor over a node's real link: hysteresis, transitions under refuse and blackhole, failure reports."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

from edgeagent.agent.link.monitor import LinkMonitor
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.kube.client import KubeClient
from edgeagent.kube.informer import Informer
from tests.integration.agent_runtime.conftest import NODE
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

Transitions = list[tuple[bool, int, int]]  # (connected, consecutive failures, consecutive successes) at the flip


@pytest.fixture
async def monitors(node_client: KubeClient) -> AsyncIterator[Any]:
    tasks: list[asyncio.Task[None]] = []

    async def start(*, run: bool = True, **kwargs: Any) -> tuple[LinkMonitor, Transitions]:
        options: dict[str, Any] = {"interval": 0.05, "timeout": 0.3, "failures_to_disconnect": 2,
                                   "successes_to_connect": 2, **kwargs}
        monitor = LinkMonitor(node_client, NODE, **options)
        transitions: Transitions = []
        monitor.add_listener(lambda connected: transitions.append(
            (connected, monitor.consecutive_failures, monitor.consecutive_successes)))
        if run:
            tasks.append(asyncio.create_task(monitor.run()))
        return monitor, transitions

    try:
        yield start
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
async def test_transitions_under_a_cut_link_with_hysteresis(sim: SimCluster, monitors: Any, mode: str) -> None:
    monitor, transitions = await monitors(failures_to_disconnect=3, successes_to_connect=2)
    assert monitor.connected is False  # not assumed: proven by probes
    await asyncio.wait_for(monitor.wait_connected(), 5)
    await sim.disconnect(NODE, mode)
    await eventually(lambda: not monitor.connected, what=f"disconnected after {mode}")
    assert monitor.details()["probe"]["last_error"]
    await sim.connect(NODE)
    await asyncio.wait_for(monitor.wait_connected(), 5)
    # Each flip happened exactly when the configured number of consecutive results was reached.
    assert transitions == [(True, 0, 2), (False, 3, 0), (True, 0, 2)]
    assert monitor.transitions == 3


async def test_reported_failures_count_like_failed_probes(monitors: Any) -> None:
    # The probe loop is not running: only the reports and explicit successes move the counters.
    monitor, transitions = await monitors(run=False, failures_to_disconnect=3, successes_to_connect=1)
    monitor._record(True, "")
    assert monitor.connected
    monitor.report_failure("DELETE timed out")
    monitor.report_failure("DELETE timed out")
    assert monitor.connected, "two failures must not cut a link that needs three"
    monitor._record(True, "")
    monitor.report_failure("GET timed out")
    monitor.report_failure("GET timed out")
    assert monitor.connected, "a success in between resets the count"
    monitor.report_failure("GET timed out")
    assert not monitor.connected
    assert monitor.reported_failures == 5
    assert transitions == [(True, 0, 1), (False, 3, 0)]
    assert monitor.details()["probe"]["last_error"] == "reported: GET timed out"


async def test_a_watch_losing_health_triggers_an_immediate_probe(
        sim: SimCluster, node_client: KubeClient, monitors: Any) -> None:
    informer = Informer(node_client, "/api/v1/pods", field_selector=f"spec.nodeName={NODE}", idle_timeout=2.0,
                        backoff_initial=0.05, backoff_max=0.2)
    # The regular interval is far beyond the test: only the informer's signal can cause a second probe.
    monitor, _ = await monitors(interval=3600, failures_to_disconnect=1, successes_to_connect=1,
                                informer=informer)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(monitor.wait_connected(), 5)
        await eventually(lambda: informer.healthy, what="the informer listing")
        await sim.disconnect(NODE, "refuse")
        await eventually(lambda: not monitor.connected, what="disconnected without waiting for the interval")
        assert monitor.details()["watch"]["healthy"] is False
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_state_is_exposed_in_metrics(sim: SimCluster, monitors: Any) -> None:
    metrics = AgentMetrics()
    monitor, _ = await monitors(failures_to_disconnect=1, successes_to_connect=1, metrics=metrics)
    await asyncio.wait_for(monitor.wait_connected(), 5)
    assert metrics.registry.get_sample_value("edgeagent_cloud_link_connected") == 1.0
    await sim.disconnect(NODE, "refuse")
    await eventually(lambda: not monitor.connected, what="disconnected")
    assert metrics.registry.get_sample_value("edgeagent_cloud_link_connected") == 0.0
    assert metrics.registry.get_sample_value("edgeagent_cloud_link_transitions_total",
                                             {"to": "disconnected"}) == 1.0
    assert (metrics.registry.get_sample_value("edgeagent_cloud_link_probes_total", {"result": "failed"}) or 0) >= 1


async def test_a_returning_link_is_noticed_faster_than_the_probe_interval(sim: SimCluster, monitors: Any) -> None:
    """Queued upgrades wait for the link's return: while down, probes run every 0.5 s, not every `interval`."""
    monitor, _ = await monitors(interval=30.0, failures_to_disconnect=1, successes_to_connect=1)
    await asyncio.wait_for(monitor.wait_connected(), 5)
    await sim.disconnect(NODE, "refuse")
    monitor.report_failure("test: the link was cut")  # wake the sleeping prober, as a failed cloud call would
    # A real probe must have failed on the cut link (not just the reported failure), so the prober now sleeps.
    await eventually(lambda: not monitor.connected and monitor.details()["probe"]["last_ok"] is False,
                     what="disconnected after a failed probe")
    await sim.connect(NODE)
    # With a 30 s interval this could only happen within the deadline through the faster reconnect probing.
    await asyncio.wait_for(monitor.wait_connected(), 5)
