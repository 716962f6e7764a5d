"""How fast the sim recreates a DaemonSet's deleted pods at fleet scale (issue 19: the 100,000-node wave changes).

`rollout_scale.py` times the controller's wave changes by deleting a wave's pods, as their agents would, and
waiting for the sim to recreate them on the new revision: 40,000 pods for wave 3 -> 4 at 100,000 nodes. This
times the sim alone doing that: `edgeagent sim` with rollout_scale's flags (`--no-node-links`, heartbeats every
600 s, a watch history of 3 events per node), one OnDelete DaemonSet on every node (rollout_scale's manifest),
every pod Ready, then a new template; `--fraction` of the pods (40 % by default, as wave 3 -> 4) are deleted,
32 graceful DELETEs at a time as rollout_scale does, while one pod watch (what the controller keeps open)
reads every event. Each pod goes through the whole pipeline: the kubelet finishes the graceful deletion, the
DaemonSet controller creates the replacement (and its Event), the kubelet pulls the new image and reports it
Running and Ready.

Figures (`name value unit`):
- `sim_recreate_rate`: pods deleted / seconds from the first DELETE until the DaemonSet's status shows every
  pod Ready again and the deleted ones updated (`numberReady` = nodes, `updatedNumberScheduled` = pods deleted);
- `sim_recreate_time`: those seconds; `sim_recreate_deletes_time`: until the last DELETE was answered;
- `sim_recreate_cpu`: the sim's CPU (user + system) meanwhile; `sim_recreate_watch_events`: events the watch read.

    .venv/bin/python bench/sim_recreate.py [--nodes 20000] [--fraction 0.4]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import NAMESPACE, STRATEGIC_PATCH, Sim, note, report, rss_mb, workdir
from bench.controller_scale import DS_PATH, cpu_seconds, manifest
from bench.rollout_waves import patient

JSON = dict[str, Any]
NAME = "fleet"


async def status(sim: Sim) -> JSON:
    return dict((await patient(sim, "GET", f"{DS_PATH}/{NAME}")).get("status") or {})


async def watch_pods(sim: Sim, resource_version: str, seen: list[int]) -> None:
    """One pod watch across the cluster, read to the end: the fan-out the controller's informer costs the sim."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http, http.get(
            f"{sim.url}/api/v1/pods?watch=1&resourceVersion={resource_version}") as resp:
        async for _line in resp.content:
            seen[0] += 1


async def run(args: argparse.Namespace) -> None:
    n = args.nodes
    async with workdir("sim-recreate") as work:
        sim = Sim(work, nodes=n, extra=["--heartbeat-interval", "600", "--node-grace", "6000", "--no-node-links",
                                        "--no-control-plane-events", "--history", str(max(10_000, 3 * n))])
        started = time.monotonic()
        await sim.start(timeout=900)
        watcher: asyncio.Task[None] | None = None
        try:
            plan = {"edgeagent.io/rollout-steps": "1%,10%,50%,100%"}
            await patient(sim, "POST", DS_PATH, manifest(NAME, "OTA", plan))
            deadline = time.monotonic() + 1800
            while int((await status(sim)).get("numberReady") or 0) < n:
                if time.monotonic() > deadline:
                    raise TimeoutError("the DaemonSet's pods did not all become Ready")
                await asyncio.sleep(2)
            note(f"sim: {n} nodes and {n} pods Ready {time.monotonic() - started:.0f} s after its start; "
                 f"sim RSS {rss_mb(sim.proc.pid):.0f} MiB")
            image = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "app:2"}]}}}}
            await sim.request("PATCH", f"{DS_PATH}/{NAME}", image, STRATEGIC_PATCH)
            deadline = time.monotonic() + 600
            while (await status(sim)).get("observedGeneration") != 2:
                if time.monotonic() > deadline:
                    raise TimeoutError("the sim did not observe the new template")
                await asyncio.sleep(0.5)
            listing = await patient(sim, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
            doomed = sorted(p["metadata"]["name"] for p in listing["items"])[:round(n * args.fraction)]
            seen = [0]
            watcher = asyncio.create_task(watch_pods(sim, str(listing["metadata"]["resourceVersion"]), seen))
            semaphore = asyncio.Semaphore(32)

            async def delete(name: str) -> None:
                async with semaphore:
                    await sim.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", ok=(200, 202))

            cpu = cpu_seconds(sim.proc.pid)
            started = time.monotonic()
            await asyncio.gather(*(delete(name) for name in doomed))
            deleted = time.monotonic() - started
            deadline = started + 3600
            while True:
                now = await status(sim)
                if int(now.get("numberReady") or 0) == n and int(now.get("updatedNumberScheduled") or 0) >= len(doomed):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the {len(doomed)} deleted pods were not recreated and Ready: {now}")
                await asyncio.sleep(0.5)
            took = time.monotonic() - started
            report("sim_recreate_rate", len(doomed) / took, "pods/s")
            report("sim_recreate_time", took, "s")
            report("sim_recreate_deletes_time", deleted, "s")
            report("sim_recreate_cpu", cpu_seconds(sim.proc.pid) - cpu, "s")
            report("sim_recreate_watch_events", seen[0], "events")
            note(f"{len(doomed)} of {n} pods deleted and recreated on the new revision")
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await watcher
            await sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--fraction", type=float, default=0.4, help="share of the pods deleted (wave 3 -> 4: 0.4)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
