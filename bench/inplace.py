"""In-place upgrades against recreate (issue 37): per-node unavailability and writes per node of one roll.

Four rolls, each on a fresh simulated cluster with the controller in the same process: AdvancedRollingUpdate
(default max-unavailable, 10 %) of `--nodes` nodes to an image whose pull takes `--pull-seconds` on each node,
with `edgeagent.io/update-type` `Recreate` and `InPlaceIfPossible`, each without and with
`edgeagent.io/pre-pull: "true"`.

- `unavailable_*_p50|p95`: per node, how long during the roll it had no Ready, non-terminating pod of the
  DaemonSet (a pod watch; from the template change until every node runs the new image, Ready).
- `writes_per_node_*`: writes to pods and Jobs during the roll, by every actor (the controller, the DaemonSet
  controller, the kubelets, the garbage collector), counted from the sim's store, per node. Node heartbeats
  and Leases are left out (they do not depend on the roll), and so are Events: the sim's kubelet writes
  container Events (Killing, Pulling, ...) only for in-place restarts, where a real kubelet writes them for a
  new pod's containers too, so counting them would charge in-place for the sim's omission.

Prints `name value unit` lines.

    .venv/bin/python bench/inplace.py [--nodes 200] [--pull-seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import note, percentile, report
from bench.prepull import DS_PATH, PODS, all_on, cluster, daemonset, wait
from edgeagent.kube.client import CONTENT_MERGE_PATCH
from edgeagent.kube.informer import DELETED, Informer
from edgeagent.kube.objects import is_pod_ready
from edgeagent.sim.resources import JOBS
from edgeagent.sim.resources import PODS as POD_RESOURCE

JSON = dict[str, Any]
NEW = "registry.local/app:2"


async def roll(nodes: int, pull: float, update_type: str, pre_pull: bool) -> tuple[list[float], float, float]:
    """(per-node seconds without a Ready pod, writes per node, the roll's duration)."""
    annotations = {"edgeagent.io/update-type": update_type}
    if pre_pull:
        annotations["edgeagent.io/pre-pull"] = "true"
    names = [f"edge-{i:03d}" for i in range(1, nodes + 1)]
    async with cluster(names, heartbeat_interval=2.0, node_grace=60.0, image_pull_seconds=0.2) as (sim, admin, _):
        await admin.create(DS_PATH, daemonset("AdvancedRollingUpdate", annotations))
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
            started = time.monotonic()
            await admin.patch(f"{DS_PATH}/app", {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": NEW}]}}}}, CONTENT_MERGE_PATCH)
            await wait("v2 everywhere", lambda: all_on(admin, nodes, NEW), timeout=1800, interval=0.5)
            duration = time.monotonic() - started
            total_writes = writes
        finally:
            for task in (watch, counter):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return list(down_total.values()), total_writes / nodes, duration


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pull-seconds", type=float, default=10.0)
    args = parser.parse_args()
    note(f"AdvancedRollingUpdate of {args.nodes} nodes (max-unavailable 10 %), new image pull "
         f"{args.pull_seconds:g} s per node")
    for pre_pull in (False, True):
        for update_type in ("Recreate", "InPlaceIfPossible"):
            label = f"{'inplace' if update_type == 'InPlaceIfPossible' else 'recreate'}_" \
                    f"{'prepull' if pre_pull else 'no_prepull'}"
            down, writes, duration = await roll(args.nodes, args.pull_seconds, update_type, pre_pull)
            report(f"unavailable_{label}_p50", percentile(down, 50), "s")
            report(f"unavailable_{label}_p95", percentile(down, 95), "s")
            report(f"writes_per_node_{label}", writes, "writes")
            report(f"roll_{label}", duration, "s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
