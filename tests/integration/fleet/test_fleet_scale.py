"""At 1,000+ nodes every list a fleet view makes is read whole, page by page (issue 36).

The server cuts a list at `limit` and hands a `continue` token; a view that reads only the first page would
show 500 of 1,001 nodes without a word. The sim pages like kube-apiserver, so the audit shows the pages.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from edgeagent.rollout.listing import PAGE_SIZE
from tests.conftest import SimFactory
from tests.integration.fleet.test_fleet_command import fleet
from tests.support.dashboard_server import dashboard
from tests.support.waiting import eventually

NODES = 1001


async def test_fleet_nodes_and_the_dashboard_list_every_page_of_a_1001_node_fleet(sim_factory: SimFactory) -> None:
    # Slow heartbeats: a thousand kubelets every 0.2 s would load the machine, and nothing here is about them.
    sim = await sim_factory(nodes=NODES, heartbeat_interval=5.0, node_grace=60.0)
    assert NODES > PAGE_SIZE * 2

    code, out, err = await fleet("nodes", "-o", "json", "--kubeconfig", str(sim.admin_kubeconfig))
    assert code == 0, err
    items = json.loads(out)["items"]
    assert len(items) == NODES and len({n["node"] for n in items}) == NODES
    assert all(n["lastSeen"] for n in items)  # the Leases, a list as long as the nodes', are read whole too
    pages = [e for e in sim.audit.entries if e["path"] == "/api/v1/nodes"
             and str(e["userAgent"]).startswith("edgeagent-fleet/")]
    assert sum("continue=" in str(e["query"]) for e in pages) >= 2

    async with dashboard(sim.admin_kubeconfig) as url:
        async def grid() -> list[Any] | None:
            async with aiohttp.ClientSession() as session, session.get(url + "api/snapshot") as response:
                snapshot = await response.json()
            return snapshot["nodes"] if snapshot["health"]["state"] == "ok" else None

        nodes = await eventually(grid, timeout=60, what="the dashboard's first snapshot")
        assert len(nodes) == NODES
