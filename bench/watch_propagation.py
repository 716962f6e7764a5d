"""Watch propagation: a change in the cloud → visible in the agent's `GET /pods`, p50/p99 over 500 changes.

One change at a time: a merge patch puts a unique annotation on one of the node's 110 pods through
the sim's admin API; the clock starts just before the PATCH is sent and stops at the first `GET /pods`
whose body holds the new value (the agent is polled back to back, about 1 ms per poll at 110 pods).
So each sample is an upper bound: PATCH round trip + watch delivery + cache update + one poll.

    .venv/bin/python bench/watch_propagation.py [--changes 500] [--pods 110]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Agent, Sim, bench_pod, median, note, percentile, report, workdir

NODE = "edge-1"


async def bench(changes: int, pods: int) -> None:
    async with workdir("watch") as work:
        sim = Sim(work)
        await sim.start()
        try:
            names = [f"app-{i:04d}" for i in range(pods)]
            await sim.create_pods([bench_pod(n, NODE) for n in names])
            agent = Agent(work, sim, NODE)
            await agent.start()
            try:
                await agent.wait_pods(pods)
                await asyncio.sleep(1.0)  # pods started by the kubelet sim; nothing else moves now
                samples: list[float] = []
                for n in range(changes):
                    marker = f"bench-{n:05d}-{time.monotonic_ns()}"
                    needle = f'"bench/seq":"{marker}"'.encode()
                    started = time.perf_counter()
                    await sim.patch_pod(names[n % pods], {"metadata": {"annotations": {"bench/seq": marker}}})
                    deadline = started + 10
                    while True:
                        _, body = await agent.get("/pods")
                        if needle in body:
                            break
                        if time.perf_counter() > deadline:
                            raise RuntimeError(f"change {n} not visible in GET /pods after 10 s")
                    samples.append(time.perf_counter() - started)
            finally:
                await agent.stop()
        finally:
            await sim.stop()
    note(f"{changes} changes, one at a time, {pods} pods on the node; sample = PATCH sent → first GET /pods showing it")
    report("watch_propagation_p50", median(samples) * 1000, "ms")
    report("watch_propagation_p99", percentile(samples, 99) * 1000, "ms")
    report("watch_propagation_max", max(samples) * 1000, "ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=110)
    args = parser.parse_args()
    asyncio.run(bench(args.changes, args.pods))
    return 0


if __name__ == "__main__":
    sys.exit(main())
