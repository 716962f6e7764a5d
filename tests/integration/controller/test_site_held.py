"""AdvancedRollingUpdate honours UpgradeHeld, end to end: three real agents, one outside its window.

Agents and controller run in this event loop against the sim over HTTP. edge-3's agent has a
maintenance window and a FakeClock standing two hours before it, so it publishes UpgradeHeld True; the
other two have no window. A watch records every pod that starts terminating, with its node and time.
"""

from __future__ import annotations

import asyncio
import io
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from edgeagent.agent.policy.held import current
from edgeagent.config import RolloutConfig
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import is_pod_ready, is_terminating
from edgeagent.rollout import command as rollout
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api.conftest import AgentFactory, agent_factory, wait_connected
from tests.integration.controller.conftest import (
    Controllers,
    DisruptionRecorder,
    all_running,
    create_daemonset,
    daemonset_manifest,
    images_by_node,
    pods_of,
    set_image,
)
from tests.support.clock import FakeClock
from tests.support.waiting import eventually

__all__ = ["agent_factory"]  # the fixture, imported so that pytest finds it here

JSON = dict[str, Any]
OLD, NEW = "nginx:1.19.4", "nginx:1.20"
OPENING = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


class TerminationRecorder(DisruptionRecorder):
    """Also records (node, real time) of every pod seen starting to terminate or vanishing."""

    def __init__(self, client: KubeClient, app_label: str) -> None:
        super().__init__(client, app_label)
        self.terminations: list[tuple[str, float]] = []

    def _apply(self, etype: str, pod: JSON) -> None:
        previous = self.pods.get(pod["metadata"]["uid"])
        if (previous is not None and not is_terminating(previous)
                and (is_terminating(pod) or etype == "DELETED")):
            self.terminations.append((str(pod["spec"].get("nodeName") or ""), time.time()))
        super()._apply(etype, pod)

    def nodes(self) -> list[str]:
        return [node for node, _ in self.terminations]


async def held_on(admin: KubeClient, node: str) -> tuple[str, str, str] | None:
    pods = [p for p in await pods_of(admin, "web") if p["spec"].get("nodeName") == node and not is_terminating(p)]
    return current(pods[0]) if pods else None


async def status(sim: SimCluster) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    cfg = RolloutConfig(daemonset="web", namespace="default", kubeconfig=sim.admin_kubeconfig)
    code = await asyncio.to_thread(rollout.main, cfg, out=out, err=err)
    return code, out.getvalue()


async def test_node_outside_its_window_is_never_deleted_then_catches_up_when_it_opens(
        sim: SimCluster, admin: KubeClient, controllers: Controllers, agent_factory: AgentFactory) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                     annotations={"apps.openyurt.io/max-unavailable": "1"}))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    clock = FakeClock(OPENING - timedelta(hours=2))
    agents = {node: await agent_factory(kubeconfig=sim.node_kubeconfig(node), node_name=node)
              for node in ("edge-1", "edge-2")}
    agents["edge-3"] = await agent_factory(kubeconfig=sim.node_kubeconfig("edge-3"), node_name="edge-3",
                                           clock=clock, maintenance_windows=("Sat 12:00-13:00",), timezone="UTC")
    for agent in agents.values():
        await wait_connected(agent)
    for node, want in (("edge-1", "False"), ("edge-2", "False"), ("edge-3", "True")):
        async def published(node: str = node, want: str = want) -> bool:
            found = await held_on(admin, node)
            return found is not None and found[0] == want

        await eventually(published, what=f"UpgradeHeld {want} on {node}")

    # edge-3's held pod is also not Ready: held pods must not eat the budget (max-unavailable 1) even then.
    (edge3,) = [p for p in await pods_of(admin, "web") if p["spec"].get("nodeName") == "edge-3"]
    await admin.patch(f"/api/v1/namespaces/default/pods/{edge3['metadata']['name']}/status",
                      {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})

    await controllers.start(sim)
    recorder = TerminationRecorder(admin, "web")
    async with recorder:
        await set_image(admin, "web", NEW)

        async def others_upgraded() -> bool:
            images = await images_by_node(admin, "web")
            live = [p for p in await pods_of(admin, "web") if not is_terminating(p)]
            ready = {p["spec"].get("nodeName") for p in live if is_pod_ready(p)}
            return images.get("edge-1") == NEW and images.get("edge-2") == NEW and {"edge-1", "edge-2"} <= ready

        await eventually(others_upgraded, timeout=30, what="edge-1 and edge-2 upgraded")
        assert (await images_by_node(admin, "web"))["edge-3"] == OLD
        assert not is_pod_ready(await admin.get(f"/api/v1/namespaces/default/pods/{edge3['metadata']['name']}"))
        assert sorted(recorder.nodes()) == ["edge-1", "edge-2"], recorder.terminations
        assert recorder.max_disrupted == 1, recorder.history

        code, out = await status(sim)
        assert code == 3, out
        held_line = next(line for line in out.splitlines() if line.startswith("edge-3"))
        assert "  held  " in held_line and "outside the maintenance windows" in held_line  # the fleet's why
        assert "rollout in progress" in out

        # The window opens (the agent's timer), the agent publishes Open, the controller deletes edge-3's pod.
        clock.set(OPENING - timedelta(seconds=1))
        assert agents["edge-3"].policy is not None
        agents["edge-3"].policy.poke()
        await eventually(lambda: "edge-3" in recorder.nodes(), timeout=60, what="edge-3's pod deleted")
        opened = clock.to_real(OPENING).timestamp()
        first = min(t for node, t in recorder.terminations if node == "edge-3")
        latency = first - opened
        assert 0 <= latency < 60, latency
        print(f"\nUpgradeHeld path: window opening -> first deletion on edge-3: {latency * 1000:.0f} ms")
        await eventually(lambda: all_running(admin, "web", 3, NEW), timeout=30, what="all upgraded")
    assert recorder.max_disrupted == 1
    code, out = await status(sim)
    assert code == 0 and "rollout complete" in out, out
