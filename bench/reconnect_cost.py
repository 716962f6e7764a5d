"""Reconnect cost: link bytes to catch up after a partition during which 20 of the node's pods changed.

The agent (default flags, 110 pods cached) talks to its node's link through a counting TCP proxy
(`counting_proxy.py`). The link is cut (`refuse`: the far end unreachable), 20 pods are changed in the
cloud (an annotation and a label each), and the link is restored. A 10-minute partition is simulated
by its effect rather than waited out: what matters for the catch-up is whether the server's history
still holds the missed changes (the sim keeps the last 10,000 events; a real API server's watch cache
holds several minutes). Counted from the restore until the agent serves all 20 changes and its link
monitor is idle again: application payload both ways (probes, the resumed watch, its events). The
figure is compared with the size of the 20 changed objects as the API server serves them (compact
JSON), and the agent's relist counter shows whether it resumed the watch or listed everything again.

    .venv/bin/python bench/reconnect_cost.py [--pods 110] [--changes 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import NAMESPACE, Agent, note, report
from bench.counting_proxy import counted_idle_node

NODE = "edge-1"
MARK = "bench.edgeagent.io/changed"


async def relists(agent: Agent) -> float:
    _, body = await agent.get("/metrics")
    for line in body.decode().splitlines():
        if line.startswith("edgeagent_watch_relists_total"):
            return float(line.split()[1])
    raise RuntimeError("edgeagent_watch_relists_total not in /metrics")


async def bench(pods: int, changes: int) -> None:
    names = [f"app-{i:04d}" for i in range(pods)]
    async with counted_idle_node("resume", NODE, names) as node:
        sim, agent, proxy = node.sim, node.agent, node.proxy
        relists_before = await relists(agent)

        await sim.disconnect(NODE, "refuse")
        await agent.wait_link(False)
        changed = names[:changes]
        for index, name in enumerate(changed):
            await sim.patch_pod(name, {"metadata": {"annotations": {MARK: f"value-{index}"},
                                                    "labels": {"bench-changed": "true"}}})
        served = [await sim.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{n}") for n in changed]
        object_bytes = sum(len(json.dumps(p, separators=(",", ":")).encode()) for p in served)

        proxy.reset()
        await sim.connect(NODE)

        async def caught_up() -> bool:
            status, body = await agent.get("/pods")
            if status != 200:
                return False
            items = json.loads(body)["items"]
            seen = {p["metadata"]["name"] for p in items
                    if (p["metadata"].get("annotations") or {}).get(MARK)}
            return seen == set(changed)

        await agent.wait_for("the changes in the agent's cache", caught_up, timeout=60, interval=0.05)
        await agent.wait_for("the link monitor idle again", node.link_idle, timeout=60, interval=0.05)
        counted = proxy.reset()
        relisted = await relists(agent) - relists_before
    note(f"partition (refuse) with {changes} of {pods} pods changed; after the restore: "
         f"{len(counted.requests)} requests ({len(counted.matching('watch='))} watch, "
         f"{len(counted.matching('/leases/'))} probe, {len(counted.matching('limit='))} list), "
         f"up {counted.up} B, down {counted.down} B; relists {relisted:.0f}")
    report("reconnect_bytes", counted.total, "B")
    report("reconnect_changed_objects_bytes", object_bytes, "B")
    report("reconnect_bytes_ratio_to_changed", counted.total / object_bytes, "x")
    report("reconnect_relists", relisted, "lists")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--changes", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(bench(args.pods, args.changes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
