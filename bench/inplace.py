"""In-place upgrades against recreate (issue 37): per-node unavailability and writes per node of one roll, and
how long a node is without its daemon when links are cut at random during the roll.

Each roll runs on a fresh simulated cluster with the controller in the same process: AdvancedRollingUpdate of
`--nodes` nodes (max-unavailable `--max-unavailable`, 50 % by default so that the six rolls take minutes, not a
quarter of an hour: a node's own unavailability does not depend on how many move at once) to an image whose
pull takes `--pull-seconds` on each node, with `edgeagent.io/update-type` `Recreate` and `InPlaceIfPossible`.

Side by side, without and with `edgeagent.io/pre-pull: "true"` (healthy links):
- `unavailable_*_p50|p95`: per node, how long during the roll it had no Ready, non-terminating pod of the
  DaemonSet (a pod watch; from the template change until every node runs the new image, Ready).
- `writes_per_node_*`: writes to pods and Jobs during the roll, by every actor (the controller, the DaemonSet
  controller, the kubelets, the garbage collector), counted from the sim's store, per node. Node heartbeats
  and Leases are left out (they do not depend on the roll), and so are Events: the sim's kubelet writes
  container Events (Killing, Pulling, ...) only for in-place restarts, where a real kubelet writes them for a
  new pod's containers too, so counting them would charge in-place for the sim's omission.
- `controller_writes_per_node_*`: of those, the controller's own (its `edgeagent_controller_api_writes`
  counter, Events excluded): what the upgrade itself sends towards the node.

Then, without pre-pull, the same roll with random link cuts (`--cut-fraction` of the nodes, each cut once at a
random moment of the roll's first `--cut-window` seconds, for 5-15 s; the same seeded cuts for both kinds):
- `cuts_*_longest_gap`: the longest time any node ran no container of the DaemonSet, sampled every 0.1 s from
  what the node's kubelet really runs (the sim's runtime: it goes on while the link is cut);
- `cuts_*_restart_p50|max`: the same gap on the nodes that were never cut: the container's own restart;
- `cuts_*_gap_cut_p50|max`: the gap on the nodes that were cut.

Prints `name value unit` lines.

    .venv/bin/python bench/inplace.py [--nodes 200] [--pull-seconds 10] [--max-unavailable 50%]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import note, percentile, report
from bench.prepull import DS_PATH, PODS, all_on, cluster, daemonset, wait
from edgeagent.kube.client import CONTENT_MERGE_PATCH
from edgeagent.kube.informer import DELETED, Informer
from edgeagent.kube.objects import is_pod_ready
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.resources import JOBS
from edgeagent.sim.resources import PODS as POD_RESOURCE

JSON = dict[str, Any]
NEW = "registry.local/app:2"
SAMPLE_EVERY = 0.1


def node_names(nodes: int) -> list[str]:
    return [f"edge-{i:03d}" for i in range(1, nodes + 1)]


def annotations_for(update_type: str, pre_pull: bool, max_unavailable: str) -> dict[str, str]:
    annotations = {"edgeagent.io/update-type": update_type, "apps.openyurt.io/max-unavailable": max_unavailable}
    if pre_pull:
        annotations["edgeagent.io/pre-pull"] = "true"
    return annotations


async def roll(nodes: int, pull: float, update_type: str, pre_pull: bool, max_unavailable: str
               ) -> tuple[list[float], float, float, float]:
    """(per-node seconds without a Ready pod, writes per node, controller writes per node, the roll's duration)."""
    names = node_names(nodes)
    async with cluster(names, heartbeat_interval=2.0, node_grace=60.0, image_pull_seconds=0.2) as (sim, admin, app):
        await admin.create(DS_PATH, daemonset("AdvancedRollingUpdate",
                                              annotations_for(update_type, pre_pull, max_unavailable)))
        await wait("v1 running", lambda: all_on(admin, nodes, "registry.local/app:1"))
        sim.set_image(NEW, pull_seconds=pull)
        pods: dict[str, JSON] = {}
        down_since: dict[str, float] = {}
        down_total: dict[str, float] = dict.fromkeys(names, 0.0)
        rolling = False

        def node_up(node: str) -> bool:
            return any(p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")
                       and is_pod_ready(p) for p in pods.values())

        def on_pod(etype: str, pod: JSON, old: JSON | None) -> None:
            uid = pod["metadata"]["uid"]
            if etype == DELETED:
                pods.pop(uid, None)
            else:
                pods[uid] = pod
            node = str(pod["spec"].get("nodeName") or "")
            if not rolling or not node:
                return
            now = time.monotonic()
            if node_up(node):
                if node in down_since:
                    down_total[node] += now - down_since.pop(node)
            elif node not in down_since:
                down_since[node] = now

        writes = 0

        async def count_writes() -> None:
            nonlocal writes
            subscription = sim.store.open_subscription([POD_RESOURCE, JOBS], copy=False)
            try:
                async for _event in subscription:
                    writes += 1
            finally:
                subscription.close()

        informer = Informer(admin, PODS, label_selector="app=app", name="bench-pods")
        informer.add_handler(on_pod)
        watch = asyncio.create_task(informer.run())
        counter = asyncio.create_task(count_writes())
        try:
            await asyncio.wait_for(informer.synced.wait(), 30)
            await asyncio.sleep(0)
            rolling = True
            writes = 0
            own_before = app.metrics.writes() - app.metrics.writes("event")
            started = time.monotonic()
            await admin.patch(f"{DS_PATH}/app", {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": NEW}]}}}}, CONTENT_MERGE_PATCH)
            await wait("v2 everywhere", lambda: all_on(admin, nodes, NEW), timeout=1800, interval=0.5)
            duration = time.monotonic() - started
            total_writes = writes
            own = app.metrics.writes() - app.metrics.writes("event") - own_before
        finally:
            for task in (watch, counter):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return list(down_total.values()), total_writes / nodes, own / nodes, duration


def draw_cuts(names: list[str], fraction: float, window: float, seed: int) -> dict[str, tuple[float, float]]:
    """node -> (seconds after the template change, outage length): the same for every roll of a run."""
    rng = random.Random(seed)
    chosen = rng.sample(names, max(1, round(fraction * len(names))))
    return {node: (round(rng.uniform(0.0, window), 2), round(rng.uniform(5.0, 15.0), 2)) for node in sorted(chosen)}


class GapMeter:
    """Per node, the longest time its kubelet ran no container of the DaemonSet, sampled from the sim's runtime
    (`/sim/v1/containers`' source, read in process) every SAMPLE_EVERY seconds."""

    def __init__(self, sim: SimCluster, names: list[str], clock: Callable[[], float] = time.monotonic) -> None:
        self.sim = sim
        self.clock = clock
        self.last_running: dict[str, float] = {}
        self.longest: dict[str, float] = dict.fromkeys(names, 0.0)

    def sample(self) -> None:
        now = self.clock()
        running = {row["node"] for row in self.sim.nodes.containers()
                   if str(row.get("pod", "")).startswith("default/app-") and row.get("state") == "running"}
        for node in self.longest:
            if node in running:
                since = self.last_running.get(node)
                if since is not None:
                    self.longest[node] = max(self.longest[node], now - since - SAMPLE_EVERY)
                self.last_running[node] = now

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_EVERY)


async def roll_with_cuts(nodes: int, pull: float, update_type: str, max_unavailable: str,
                         cuts: dict[str, tuple[float, float]]) -> tuple[dict[str, float], float]:
    """(per node, the longest stretch without a running container of the DaemonSet; the roll's duration)."""
    names = node_names(nodes)
    async with cluster(names, heartbeat_interval=2.0, node_grace=60.0, image_pull_seconds=0.2) as (sim, admin, _):
        await admin.create(DS_PATH, daemonset("AdvancedRollingUpdate",
                                              annotations_for(update_type, False, max_unavailable)))
        await wait("v1 running", lambda: all_on(admin, nodes, "registry.local/app:1"))
        sim.set_image(NEW, pull_seconds=pull)
        meter = GapMeter(sim, names)

        async def outage(node: str, after: float, seconds: float) -> None:
            await asyncio.sleep(after)
            await sim.disconnect(node, "blackhole")
            try:
                await asyncio.sleep(seconds)
            finally:
                await sim.connect(node)

        sampler = asyncio.create_task(meter.run())
        tasks: list[asyncio.Task[None]] = []
        try:
            started = time.monotonic()
            await admin.patch(f"{DS_PATH}/app", {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": NEW}]}}}}, CONTENT_MERGE_PATCH)
            tasks = [asyncio.create_task(outage(node, after, seconds)) for node, (after, seconds) in cuts.items()]
            await asyncio.gather(*tasks)
            await wait("v2 everywhere", lambda: all_on(admin, nodes, NEW), timeout=1800, interval=0.5)
            duration = time.monotonic() - started
            meter.sample()
        finally:
            for task in (sampler, *tasks):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return meter.longest, duration


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pull-seconds", type=float, default=10.0)
    parser.add_argument("--max-unavailable", default="50%")
    parser.add_argument("--cut-fraction", type=float, default=0.3, help="share of the nodes cut once")
    parser.add_argument("--cut-window", type=float, default=20.0, help="cuts start within this many seconds")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--skip-cuts", action="store_true")
    args = parser.parse_args()
    note(f"AdvancedRollingUpdate of {args.nodes} nodes (max-unavailable {args.max_unavailable}), new image pull "
         f"{args.pull_seconds:g} s per node")
    for pre_pull in (False, True):
        for update_type in ("Recreate", "InPlaceIfPossible"):
            label = f"{'inplace' if update_type == 'InPlaceIfPossible' else 'recreate'}_" \
                    f"{'prepull' if pre_pull else 'no_prepull'}"
            down, writes, own, duration = await roll(args.nodes, args.pull_seconds, update_type, pre_pull,
                                                     args.max_unavailable)
            report(f"unavailable_{label}_p50", percentile(down, 50), "s")
            report(f"unavailable_{label}_p95", percentile(down, 95), "s")
            report(f"writes_per_node_{label}", writes, "writes")
            report(f"controller_writes_per_node_{label}", own, "writes")
            report(f"roll_{label}", duration, "s")
    if args.skip_cuts:
        return 0
    cuts = draw_cuts(node_names(args.nodes), args.cut_fraction, args.cut_window, args.seed)
    note(f"random link cuts, no pre-pull: {len(cuts)} of {args.nodes} nodes cut once (blackhole), starting within "
         f"{args.cut_window:g} s of the template change, {min(s for _, s in cuts.values()):g}-"
         f"{max(s for _, s in cuts.values()):g} s long (seed {args.seed})")
    report("cuts_nodes_cut", len(cuts), "nodes")
    report("cuts_outage_max", max(s for _, s in cuts.values()), "s")
    for update_type in ("InPlaceIfPossible", "Recreate"):
        label = "inplace" if update_type == "InPlaceIfPossible" else "recreate"
        gaps, duration = await roll_with_cuts(args.nodes, args.pull_seconds, update_type, args.max_unavailable,
                                              cuts)
        cut_gaps = [g for node, g in gaps.items() if node in cuts]
        restarts = [g for node, g in gaps.items() if node not in cuts]
        report(f"cuts_{label}_longest_gap", max(gaps.values()), "s")
        report(f"cuts_{label}_restart_p50", percentile(restarts, 50), "s")
        report(f"cuts_{label}_restart_max", max(restarts), "s")
        report(f"cuts_{label}_gap_cut_p50", percentile(cut_gaps, 50), "s")
        report(f"cuts_{label}_gap_cut_max", max(cut_gaps), "s")
        report(f"cuts_roll_{label}", duration, "s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
