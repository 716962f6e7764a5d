"""A new pod gets `PodNeedUpgrade` (controller) and `UpgradeHeld` (agent) written once each (issue 38 item 6).

Both were patched twice within ~15 ms, the second a no-op, on the sim and on real 1.24/1.36: the docs say the
conditions are written "only when they change". Counted in the sim's audit log, per pod and writer.
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Any

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api.conftest import NODE, AgentFactory, wait_connected
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    controllers,
    create_daemonset,
    daemonset_manifest,
    need_upgrade,
    pods_of,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods/"
__all__ = ["controllers"]  # the fixture
ROUNDS = 5


def status_patches(sim: SimCluster) -> Counter[tuple[str, str]]:
    """(pod, writer) -> PATCHes of its status, from the sim's audit log."""
    counts: Counter[tuple[str, str]] = Counter()
    for entry in sim.audit.find("PATCH", PODS):
        path = str(entry["path"])
        if path.endswith("/status"):
            writer = "agent" if "edgeagent-agent" in entry["userAgent"] else \
                "controller" if "edgeagent-controller" in entry["userAgent"] else entry["userAgent"]
            counts[path[len(PODS):-len("/status")], writer] += 1
    return counts


def conditions(pod: JSON) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}


async def test_a_new_pod_gets_each_condition_in_one_patch(
        sim: SimCluster, admin: KubeClient, controllers: Controllers, agent_factory: AgentFactory,
        tmp_path: Path) -> None:
    await controllers.start(sim)
    agent = await agent_factory(kubeconfig=sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    await create_daemonset(admin, daemonset_manifest("web", strategy="OTA"))
    nodes = len(sim.node_names)
    await eventually(lambda: all_running(admin, "web", nodes), what="web pods running")

    async def settled() -> list[JSON] | None:
        pods = await pods_of(admin, "web")
        mine = [p for p in pods if p["spec"]["nodeName"] == NODE]
        done = all(need_upgrade(p) is not None for p in pods) and all("UpgradeHeld" in conditions(p) for p in mine)
        return pods if done and len(pods) == nodes else None

    async def replaced(known: frozenset[str]) -> list[JSON] | None:
        found = await settled()
        fresh = found is not None and any(p["metadata"]["name"] not in known for p in found)
        return found if fresh else None

    pods = await eventually(settled, what="PodNeedUpgrade on every pod, UpgradeHeld on this node's")
    seen = {p["metadata"]["name"] for p in pods}
    for _ in range(ROUNDS):  # replacements: new pods while both writers are warm
        for pod in [p for p in pods if p["spec"]["nodeName"] == NODE]:
            await admin.delete(PODS + pod["metadata"]["name"], {"gracePeriodSeconds": 0})

        pods = await eventually(functools.partial(replaced, frozenset(seen)), what="the replacement settled")
        seen |= {p["metadata"]["name"] for p in pods}
    # Any second write comes from a pass that ran before the agent's cache showed its first: wait until the cache
    # shows every pod's condition, then for one more pass (woken by hand), which must write nothing.
    assert agent.cache is not None and agent.held is not None and agent.policy is not None
    cache, held = agent.cache, agent.held
    await eventually(lambda: all("UpgradeHeld" in conditions(p) for p in cache.pods()), what="the agent's cache")
    passes, patches = held.passes, held.patches
    agent.policy.poke()
    await eventually(lambda: held.passes > passes, what="one more held pass")
    assert held.patches == patches
    counts = status_patches(sim)
    for name in seen:
        assert counts[name, "controller"] == 1, (name, counts)
    assert all(n == 1 for (name, writer), n in counts.items() if writer == "agent"), counts
