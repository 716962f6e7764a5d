"""Idle cloud-link cost: bytes an agent with 110 pods cached and nothing queued moves over its link.

A counting TCP proxy (`counting_proxy.py`) sits between the agent and its node's link on the sim; the
agent's kubeconfig points at the proxy. Counted is application payload both ways (HTTP request and
response headers, bodies, chunk framing), what a metered edge link bills apart from TCP/IP overhead.
The sim sends watch bookmarks at the real API server's cadence (about one a minute). The agent runs
with default flags; once it has synced its 110 pods and its link monitor has stopped probing, the
counters are reset and a window of `--window` seconds is counted and scaled to an hour.

    .venv/bin/python bench/idle_link_cost.py [--window 180] [--pods 110]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import note, report
from bench.counting_proxy import counted_idle_node

NODE = "edge-1"
LEASE = "/leases/"


async def bench(window: float, pods: int) -> None:
    async with counted_idle_node("idle", NODE, [f"app-{i:04d}" for i in range(pods)]) as node:
        node.proxy.reset()
        started = time.monotonic()
        await asyncio.sleep(window)
        counted = node.proxy.reset()
        elapsed = time.monotonic() - started
        ready = await node.agent.readyz()
    per_hour = 3600 / elapsed
    watches = counted.matching("watch=")
    note(f"{elapsed:.0f} s counted with {pods} pods cached and nothing queued, default agent flags; "
         f"{len(counted.requests)} requests ({len(watches)} watch, {len(counted.matching(LEASE))} probe); "
         f"up {counted.up} B, down {counted.down} B; link connected={ready['link']['connected']}")
    report("idle_link_bytes_per_hour", counted.total * per_hour / 1e6, "MB/h")
    report("idle_link_requests_per_hour", len(counted.requests) * per_hour, "req/h")
    report("idle_link_probes_per_hour", len(counted.matching(LEASE)) * per_hour, "req/h")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=180.0, help="seconds counted (scaled to an hour)")
    parser.add_argument("--pods", type=int, default=110)
    args = parser.parse_args()
    asyncio.run(bench(args.window, args.pods))
    return 0


if __name__ == "__main__":
    sys.exit(main())
