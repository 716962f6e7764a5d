"""Offline cold start: process start → first `GET /pods` 200 with the snapshot's 110 pods, link blackholed.

An agent first runs connected until its snapshot holds the node's 110 pods, and is stopped (SIGTERM).
The node's link is then blackholed (connections hang, as in a real partition) and the agent is started
again, five times; the clock runs from just before the process is spawned to the first `GET /pods`
answering 200 with all 110 pods (polled every 2 ms). For scale, the bare interpreter start with the
same imports is timed too (`python -c "import edgeagent.agent.app, ..."`).

    .venv/bin/python bench/offline_start.py [--runs 5] [--pods 110]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Agent, Sim, bench_pod, median, note, report, workdir
from edgeagent.demo.processes import child_env

NODE = "edge-1"
IMPORTS = "import edgeagent.cli, edgeagent.agent.app, edgeagent.agent.api.http, edgeagent.agent.requests.drainer"


async def first_full_pods(url: str, pods: int, deadline: float) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while True:
            try:
                async with http.get(url + "/pods") as resp:
                    if resp.status == 200 and len(json.loads(await resp.read())["items"]) == pods:
                        return
            except (aiohttp.ClientError, OSError):
                pass
            if time.perf_counter() > deadline:
                raise RuntimeError("no full GET /pods answer within the deadline")
            await asyncio.sleep(0.002)


async def import_time() -> float:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", IMPORTS, env=child_env())
    if await proc.wait() != 0:
        raise RuntimeError("import failed")
    return time.perf_counter() - started


async def bench(runs: int, pods: int) -> None:
    baseline = [await import_time() for _ in range(3)]  # before anything else runs
    async with workdir("coldstart") as work:
        sim = Sim(work)
        await sim.start()
        try:
            await sim.create_pods([bench_pod(f"app-{i:04d}", NODE) for i in range(pods)])
            state_dir = work / "state"
            first = Agent(work, sim, NODE, state_dir=state_dir, label="agent-online")
            await first.start()
            await first.wait_pods(pods)
            await first.stop()  # SIGTERM: the final snapshot is flushed
            await sim.disconnect(NODE, "blackhole")
            samples: list[float] = []
            for run in range(runs):
                agent = Agent(work, sim, NODE, state_dir=state_dir, label=f"agent-offline-{run}")
                started = time.perf_counter()
                await agent.start(wait=False)
                try:
                    await first_full_pods(agent.url, pods, started + 30)
                    samples.append(time.perf_counter() - started)
                    link = await agent.readyz()
                    if link["link"]["connected"]:
                        raise RuntimeError("the link should be blackholed")
                finally:
                    await agent.stop()
        finally:
            await sim.stop()
    note(f"{runs} starts from a {pods}-pod snapshot with the link blackholed; interpreter + imports alone: "
         f"{median(baseline) * 1000:.0f} ms")
    report("offline_cold_start_p50", median(samples) * 1000, "ms")
    report("offline_cold_start_max", max(samples) * 1000, "ms")
    report("python_import_baseline", median(baseline) * 1000, "ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pods", type=int, default=110)
    args = parser.parse_args()
    asyncio.run(bench(args.runs, args.pods))
    return 0


if __name__ == "__main__":
    sys.exit(main())
