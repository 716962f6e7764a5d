"""Disconnect detection: link cut (blackhole or refuse) → the agent counts the cloud as unreachable.

With default agent flags (probe every 2 s, 2 s probe timeout, 2 failures to disconnect). The clock
starts just before the cut is asked of the sim and stops at the agent's own transition time (the
`link.since` of `/v1/readyz`, microsecond wall clock); restoring the link is timed the same way.

An idle agent (watch healthy, nothing queued) does not probe, so a blackhole is noticed by its watch
(60 s idle deadline) or by the first request that needs the cloud. The blackhole trials therefore post
an upgrade right after the cut, as an operator would: it times out (--upgrade-timeout 3 s), is queued
(202), and from then on probes report the link. Its detection is timed from the cut and from the 202.
A refused link resets the watch at once, which starts the probes by itself.

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

from bench.common import Agent, Sim, bench_pod, median, note, parse_time, report, workdir

NODE = "edge-1"


async def bench(trials: int, seed: int) -> None:
    rng = random.Random(seed)
    detect: dict[str, list[float]] = {"blackhole": [], "refuse": []}
    after_queued: list[float] = []
    answers: list[float] = []
    restore: list[float] = []
    async with workdir("detect") as work:
        sim = Sim(work)
        await sim.start()
        names = [f"app-{i}" for i in range(trials)]
        await sim.create_pods([bench_pod(n, NODE, owner="edge-app") for n in names])
        await sim.need_upgrade(names)
        agent = Agent(work, sim, NODE)
        try:
            await agent.start()
            await agent.wait_link(True)
            await agent.wait_pods(trials)
            for trial in range(trials):
                for mode in ("blackhole", "refuse"):
                    # Cut at a random phase of the probe cycle, not always right after a probe.
                    await asyncio.sleep(rng.uniform(0.0, 2.0))
                    cut = time.time()
                    await sim.disconnect(NODE, mode)
                    if mode == "blackhole":
                        asked = time.monotonic()
                        status, body = await agent.upgrade(names[trial])
                        answers.append(time.monotonic() - asked)
                        if status != 202:
                            raise RuntimeError(f"upgrade during the blackhole answered {status}: {body}")
                        queued = time.time()
                    link = await agent.wait_link(False, timeout=60)
                    detect[mode].append(parse_time(link["since"]) - cut)
                    if mode == "blackhole":
                        after_queued.append(parse_time(link["since"]) - queued)
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
    report("upgrade_202_during_blackhole_max", max(answers) * 1000, "ms")
    report("disconnect_detect_blackhole_after_queued_p50", median(after_queued) * 1000, "ms")
    report("disconnect_detect_blackhole_after_queued_max", max(after_queued) * 1000, "ms")
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
