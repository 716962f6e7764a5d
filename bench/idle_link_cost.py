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

from bench.common import (
    Agent,
    Sim,
    bench_pod,
    note,
    proxied_kubeconfig,
    realistic_bookmark_args,
    report,
    server_of,
    workdir,
)
from bench.counting_proxy import CountingProxy

NODE = "edge-1"
LEASE = "/leases/"


async def bench(window: float, pods: int) -> None:
    async with workdir("idle") as work:
        sim = Sim(work, extra=realistic_bookmark_args())
        await sim.start()
        host, port = server_of(sim.kubeconfig(NODE))
        proxy = CountingProxy(host, port)
        await proxy.start()
        kubeconfig = proxied_kubeconfig(sim.kubeconfig(NODE), work / "counted.kubeconfig", proxy.url)
        agent = Agent(work, sim, NODE, kubeconfig=kubeconfig)
        try:
            await sim.create_pods([bench_pod(f"app-{i:04d}", NODE, owner="edge-app") for i in range(pods)])
            await sim.wait_running(NODE, pods)  # the kubelet's status writes are not idle traffic
            await agent.start()
            await agent.wait_pods(pods)

            async def idle() -> bool:
                link = (await agent.readyz())["link"]
                return bool(link["connected"]) and link["probe"].get("active") is False

            await agent.wait_for("the link monitor idle (connected, not probing)", idle, timeout=60, interval=0.1)
            # Once per start the agent publishes UpgradeHeld on every DaemonSet pod (a PATCH each): not idle cost.
            await sim.wait_quiet(NODE)
            await agent.wait_for("the link monitor still idle", idle, timeout=60, interval=0.1)
            proxy.reset()
            started = time.monotonic()
            await asyncio.sleep(window)
            counted = proxy.reset()
            elapsed = time.monotonic() - started
            ready = await agent.readyz()
        finally:
            await agent.stop()
            await proxy.close()
            await sim.stop()
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
