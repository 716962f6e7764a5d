"""Disconnect detection: link cut (blackhole or refuse) → the agent counts the cloud as unreachable.

With default agent flags (probe every 2 s, 2 s probe timeout, 2 failures to disconnect). The clock
starts just before the cut is asked of the sim and stops at the agent's own transition time (the
`link.since` of `/v1/readyz`, microsecond wall clock); restoring the link is timed the same way.

    .venv/bin/python bench/disconnect_detection.py [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Agent, Sim, median, note, parse_time, report, workdir

NODE = "edge-1"


async def bench(trials: int, seed: int) -> None:
    rng = random.Random(seed)
    detect: dict[str, list[float]] = {"blackhole": [], "refuse": []}
    restore: list[float] = []
    async with workdir("detect") as work:
        sim = Sim(work)
        await sim.start()
        agent = Agent(work, sim, NODE)
        try:
            await agent.start()
            await agent.wait_link(True)
            for _ in range(trials):
                for mode in ("blackhole", "refuse"):
                    # Cut at a random phase of the probe cycle, not always right after a probe.
                    await asyncio.sleep(rng.uniform(0.0, 2.0))
                    cut = time.time()
                    await sim.disconnect(NODE, mode)
                    link = await agent.wait_link(False, timeout=60)
                    detect[mode].append(parse_time(link["since"]) - cut)
                    await asyncio.sleep(rng.uniform(0.0, 2.0))
                    back = time.time()
                    await sim.connect(NODE)
                    link = await agent.wait_link(True, timeout=60)
                    restore.append(parse_time(link["since"]) - back)
        finally:
            await agent.stop()
            await sim.stop()
    note(f"{trials} cuts per mode at random phases, default agent flags "
         "(--probe-interval 2 --probe-timeout 2 --failures-to-disconnect 2)")
    for mode, samples in detect.items():
        report(f"disconnect_detect_{mode}_p50", median(samples) * 1000, "ms")
        report(f"disconnect_detect_{mode}_max", max(samples) * 1000, "ms")
    report("reconnect_detect_after_cut_p50", median(restore) * 1000, "ms")
    report("reconnect_detect_after_cut_max", max(restore) * 1000, "ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=6)
    args = parser.parse_args()
    asyncio.run(bench(args.trials, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
