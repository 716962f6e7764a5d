"""Reconnect drain: 100 queued upgrades, link restored → the last DELETE observed by the sim.

The node holds 100 upgradeable DaemonSet pods (PodNeedUpgrade True; their DaemonSet does not exist,
so nobody recreates them and the sim stays quiet). The link is blackholed and 100 upgrade requests are
queued (each answered 202; the first ones time out against the cut link, which tells the agent), and
the agent counts the link down. The clock starts just before the link is restored
(`POST /sim/v1/nodes/edge-1/connect`) and stops at the wall-clock time the sim recorded for the last of
the agent's 100 DELETEs; the restore comes at a random (seeded) phase of the agent's probe cycle. That
includes the agent noticing the link is back (while the link is down it probes every 0.5 s at most,
and a probe hanging on the blackholed link completes as soon as it is restored); the part after the
agent counted the link connected (its `/v1/readyz` `link.since`) is reported separately.

    .venv/bin/python bench/reconnect_drain.py [--entries 100] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Agent, Sim, bench_pod, median, note, parse_time, post_upgrades, report, workdir

NODE = "edge-1"
# A blackholed probe hangs for --probe-timeout (2 s), then the agent waits min(--probe-interval, 0.5 s).
PROBE_CYCLE = 4.0


async def trial(sim: Sim, work: Path, index: int, entries: int, rng: random.Random) -> tuple[float, float, float]:
    names = [f"app-t{index}-{i:03d}" for i in range(entries)]
    await sim.create_pods([bench_pod(n, NODE, owner="edge-app") for n in names])
    await sim.need_upgrade(names)
    agent = Agent(work, sim, NODE, label=f"agent-{index}", state_dir=work / f"state-{index}")
    await agent.start()
    try:
        await agent.wait_link(True)
        await agent.wait_pods(entries)
        await sim.disconnect(NODE, "blackhole")
        # Nothing is queued, so nothing probes the idle link: the first upgrades time out against the cut
        # link (--upgrade-timeout), which reports it; the rest are queued from the cache at once.
        answers = await post_upgrades(agent, names)
        bad = [(status, body) for status, body in answers if status != 202]
        if bad:
            raise RuntimeError(f"{len(bad)} upgrades not queued, e.g. {bad[0]}")
        await agent.wait_link(False)
        wanted = set(names)
        # Restore at a random phase of the agent's probe cycle: right after queueing, the agent has just
        # started waiting out a probe interval, which would make every trial wait almost all of it.
        await asyncio.sleep(rng.uniform(0.0, PROBE_CYCLE))
        restored = time.time()
        await sim.connect(NODE)

        async def all_deleted() -> list[float] | None:
            firsts: dict[str, float] = {}
            for record in await sim.deletes():
                if record["name"] in wanted and record["outcome"] == "graceful":
                    firsts.setdefault(record["name"], record["time"])
            return list(firsts.values()) if len(firsts) == len(wanted) else None

        times: list[float] = await agent.wait_for("all DELETEs", all_deleted, timeout=60, interval=0.05)

        async def all_applied() -> bool:
            # `verifying`: deleted, waiting for a replacement that never comes (these pods' DaemonSet does not
            # exist); the drain, which is what is timed, is over for the entry.
            states = [e["state"] for e in await agent.upgrades()]
            return len(states) == entries and all(s in ("verifying", "succeeded") for s in states)

        await agent.wait_for("every entry applied", all_applied, timeout=60)
        since = parse_time((await agent.readyz())["link"]["since"])
    finally:
        await agent.stop()
    last = max(times)
    return last - restored, last - since, since - restored


async def bench(entries: int, trials: int, seed: int) -> None:
    rng = random.Random(seed)
    totals: list[float] = []
    drains: list[float] = []
    detects: list[float] = []
    async with workdir("drain") as work:
        sim = Sim(work)
        await sim.start()
        try:
            for index in range(trials):
                total, drain, detect = await trial(sim, work, index, entries, rng)
                totals.append(total)
                drains.append(drain)
                detects.append(detect)
        finally:
            await sim.stop()
    note(f"{trials} trials of {entries} queued upgrades, blackholed link restored, default agent flags "
         "(--probe-interval 2)")
    report(f"reconnect_drain_{entries}_p50", median(totals) * 1000, "ms")
    report(f"reconnect_drain_{entries}_max", max(totals) * 1000, "ms")
    report("reconnect_detect_p50", median(detects) * 1000, "ms")
    report(f"reconnect_drain_{entries}_after_detect_p50", median(drains) * 1000, "ms")
    report(f"reconnect_drain_{entries}_after_detect_max", max(drains) * 1000, "ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=6)
    args = parser.parse_args()
    asyncio.run(bench(args.entries, args.trials, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
