"""Watch history compaction (410 Gone) under load: the agent relists and its cache converges.

A writer keeps changing the node's pods through the admin API (creates, label patches, deletes) while
the node's link is cut three times; during each cut the sim's history is compacted, as etcd does, so
the agent's watch resumes from a resourceVersion that is gone, gets 410, and must relist. The relist
counter proves the 410 path ran; the cache must then equal the sim's truth.
"""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import pytest

from edgeagent.kube.client import KubeClient, KubeError
from tests.faults.conftest import NODE, AgentProc, AgentSpawner, cache_matches_cloud, wait_link
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

SEED = 410
CUTS = 3
POOL = 40

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def relists(http: aiohttp.ClientSession, agent: AgentProc) -> int:
    async with http.get(agent.url + "/metrics") as resp:
        text = await resp.text()
    found = re.search(r"^edgeagent_watch_relists_total (\S+)$", text, re.MULTILINE)
    assert found, "edgeagent_watch_relists_total missing from /metrics"
    return int(float(found.group(1)))


async def test_compaction_under_load_converges(sim: SimCluster, admin: KubeClient, spawn_agent: AgentSpawner,
                                               http: aiohttp.ClientSession, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    agent = await spawn_agent(sim.node_kubeconfig(NODE), tmp_path / "state")
    await wait_link(http, agent, True)
    stop = asyncio.Event()
    writes = 0

    async def writer() -> None:
        nonlocal writes
        while not stop.is_set():
            name = f"load-{rng.randrange(POOL):02d}"
            path = f"/api/v1/namespaces/default/pods/{name}"
            action = rng.random()
            try:
                if action < 0.6:
                    await admin.patch(path, {"metadata": {"labels": {"seq": str(writes)}}},
                                      "application/merge-patch+json")
                elif action < 0.8:
                    await admin.delete(path, {"gracePeriodSeconds": 0})
                else:
                    await admin.create("/api/v1/namespaces/default/pods", {
                        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "registry.local/x:1"}]}})
            except KubeError as exc:
                if exc.code not in (404, 409):  # the random pod did not exist / already existed
                    raise
            writes += 1
            if writes % 5 == 0:
                await asyncio.sleep(0)  # a fair share of the loop for the sim serving the agent

    async with asyncio.TaskGroup() as tg:
        load = tg.create_task(writer())
        await eventually(lambda: writes >= 100, what="load running")
        before = await relists(http, agent)

        async def cut_compact_restore(cut: int) -> None:
            await sim.disconnect(NODE, "refuse")
            await wait_link(http, agent, False)
            at_cut = writes
            await eventually(lambda: writes >= at_cut + 50, what="writes while cut")
            sim.store.compact()  # the agent's resourceVersion is now too old: its next watch gets 410
            await sim.connect(NODE)
            await eventually(lambda: _relisted(http, agent, before + cut), timeout=15,
                             what=f"a relist after the 410 of cut {cut}")

        for cut in range(1, CUTS + 1):
            await cut_compact_restore(cut)
        await eventually(lambda: writes >= 100 * (CUTS + 2), what="load after the last relist")
        stop.set()
        await load

    await eventually(lambda: cache_matches_cloud(http, agent, admin), timeout=15, what="cache equal to the sim")
    assert agent.alive


async def _relisted(http: aiohttp.ClientSession, agent: AgentProc, wanted: int) -> int | None:
    count = await relists(http, agent)
    return count if count >= wanted else None
