"""The controller at fleet scale: 10,000 nodes x 3 DaemonSets (30,000 pods) on the simulated cluster.

The sim runs as its own process (`edgeagent sim --nodes N`, node heartbeats every 60 s); the controller
runs in this process (`ControllerApp`, admin kubeconfig, over HTTP like in production) so that its
reconcile passes can be timed directly and its RSS read; this script's own driving code holds no
objects (it reads the controller's caches and a few DaemonSet statuses). Three DaemonSets share every
node: one OTA, one AdvancedRollingUpdate (max-unavailable 10 %), one the controller does not manage.

Figures (`name value unit`):
- `controller_rss`: this process's RSS with every pod and node cached (Python, aiohttp and the
  controller's caches; the driver adds nothing measurable);
- `controller_reconcile_cpu_ota_noop`: CPU of one full OTA reconcile pass where every condition is
  already right (median of `--passes`), and `..._aru_plan` for planning a paused roll of every node;
- writes per rollout: OTA = conditions changed; AdvancedRollingUpdate = pods replaced (+ one Event per
  deletion batch, reported separately) and no condition writes;
- `controller_aru_roll_time`: wall time to roll every node at 10 %, and the CPU the sim and the
  controller each used meanwhile (`..._sim_cpu`, `..._controller_cpu`) to show which one limited it;
- `controller_aru_max_in_progress` next to the budget: the most nodes between the deletion of an
  available pod and a Ready pod there again, from the controller's own watch of the pods.

    .venv/bin/python bench/controller_scale.py [--nodes 10000] [--max-unavailable 10%] [--passes 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import MERGE_PATCH, NAMESPACE, Sim, note, report, rss_mb, workdir
from edgeagent import log
from edgeagent.config import ControllerConfig, LogConfig
from edgeagent.controller.app import ControllerApp
from edgeagent.controller.reconciler import Controller
from edgeagent.kube.objects import get_condition, is_pod_ready, is_terminating, labels_of, uid_of

JSON = dict[str, Any]
DS_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets"


def manifest(name: str, strategy: str | None, annotations: dict[str, str] | None = None) -> JSON:
    meta: JSON = {"name": name, "namespace": NAMESPACE, "annotations": dict(annotations or {})}
    if strategy is not None:
        meta["annotations"]["apps.openyurt.io/update-strategy"] = strategy
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta,
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"terminationGracePeriodSeconds": 1,
                                  "containers": [{"name": "main", "image": "app:1"}]}},
        },
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (from /proc), to compare the sim's and the controller's share."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def until(probe: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> float:
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - started


def pods_of(controller: Controller, name: str) -> list[JSON]:
    return [p for p in controller.pods.items.values() if labels_of(p).get("app") == name and not is_terminating(p)]


def flagged(controller: Controller, name: str, status: str, nodes: int) -> bool:
    pods = pods_of(controller, name)
    return len(pods) == nodes and all((get_condition(p, "PodNeedUpgrade") or {}).get("status") == status
                                      for p in pods)


def rolled(controller: Controller, name: str, image: str, nodes: int) -> bool:
    pods = pods_of(controller, name)
    return len(pods) == nodes and all(is_pod_ready(p) and p["spec"]["containers"][0]["image"] == image
                                      for p in pods)


async def cpu_per_pass(controller: Controller, key: str, passes: int) -> float:
    """Median CPU seconds of one reconcile (no writes happen in the cases measured)."""
    samples = []
    for _ in range(passes):
        started = time.process_time()
        await controller.reconcile(key)
        samples.append(time.process_time() - started)
    return statistics.median(samples)


class Disruption:
    """Most nodes at once between the deletion of an available pod and a Ready pod there again,
    from the controller's own pod events (an informer handler: no second watch)."""

    def __init__(self, controller: Controller, name: str) -> None:
        self.name = name
        self.disrupted: set[str] = set()
        self.max = 0
        self._ready: dict[str, set[str]] = {}
        for pod in pods_of(controller, name):
            if is_pod_ready(pod):
                self._ready.setdefault(str(pod["spec"].get("nodeName")), set()).add(uid_of(pod))
        controller.pods.add_handler(self.on_pod)

    def on_pod(self, etype: str, pod: JSON, old: JSON | None) -> None:
        if labels_of(pod).get("app") != self.name:
            return
        uid, node = uid_of(pod), str(pod["spec"].get("nodeName") or "")
        if is_terminating(pod) and old is not None and not is_terminating(old) and is_pod_ready(old):
            self.disrupted.add(node)
        ready = self._ready.setdefault(node, set())
        if etype != "DELETED" and not is_terminating(pod) and is_pod_ready(pod):
            ready.add(uid)
        else:
            ready.discard(uid)
        if ready:
            self.disrupted.discard(node)
        self.max = max(self.max, len(self.disrupted))


async def ds_ready(sim: Sim, name: str) -> int:
    status = (await sim.request("GET", f"{DS_PATH}/{name}")).get("status") or {}
    return int(status.get("numberReady") or 0)


async def wait_rolled(sim: Sim, name: str, nodes: int, timeout: float) -> None:
    """Until the DaemonSet's status says every node runs an updated, available pod (one GET a second:
    scanning the controller's cache for this was most of this process's CPU during a roll)."""
    started = time.monotonic()
    while True:
        status = (await sim.request("GET", f"{DS_PATH}/{name}")).get("status") or {}
        if all(int(status.get(field) or 0) == nodes
               for field in ("updatedNumberScheduled", "numberAvailable", "currentNumberScheduled")):
            return
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{name} not rolled after {timeout}s: {status}")
        await asyncio.sleep(1.0)


async def wait_daemonsets(sim: Sim, names: list[str], nodes: int, timeout: float) -> float:
    started = time.monotonic()
    while True:
        counts = [await ds_ready(sim, n) for n in names]
        if all(c == nodes for c in counts):
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"DaemonSets not ready after {timeout}s: {dict(zip(names, counts, strict=True))}")
        await asyncio.sleep(1.0)


async def run(args: argparse.Namespace) -> None:
    log.configure(LogConfig(level="error"))
    n = args.nodes
    async with workdir("controller") as work:
        # A real API server keeps minutes of watch history (etcd compacts every 5 minutes); the sim's default
        # 10,000 events are seconds of a 10,000-node cluster's heartbeats, and an informer that falls behind
        # them relists 30,000 pods, over and over.
        sim = Sim(work, nodes=n, extra=["--heartbeat-interval", "60", "--node-grace", "600",
                                        "--history", str(max(10_000, 30 * n))])
        started = time.monotonic()
        await sim.start(timeout=300)
        app: ControllerApp | None = None
        task: asyncio.Task[None] | None = None
        try:
            for ds in (manifest("ota", "OTA"), manifest("plain", None),
                       manifest("aru", "AdvancedRollingUpdate", {"apps.openyurt.io/max-unavailable":
                                                                 args.max_unavailable, "edgeagent.io/paused": "true"})):
                await sim.request("POST", DS_PATH, ds)
            await wait_daemonsets(sim, ["ota", "plain", "aru"], n, 600)
            note(f"sim: {n} nodes and {3 * n} pods running {time.monotonic() - started:.0f} s after its start; "
                 f"sim RSS {rss_mb(sim.proc.pid):.0f} MiB")
            gc.collect()
            rss_base = rss_mb(os.getpid())
            app = ControllerApp(ControllerConfig(kubeconfig=sim.dir / "admin.kubeconfig", metrics_port=0,
                                                 request_timeout=60.0))
            synced_from = time.monotonic()
            task = asyncio.create_task(app.run())
            await until(lambda: app is not None and app.controller is not None, 60, "the controller started")
            assert app.controller is not None
            controller = app.controller
            metrics = app.metrics
            await until(lambda: len(controller.pods.items) == 3 * n and flagged(controller, "ota", "False", n),
                        900, "every pod cached and the OTA conditions written", interval=1.0)
            report("controller_nodes", n, "nodes")
            report("controller_pods", len(controller.pods.items), "pods")
            report("controller_sync_time", time.monotonic() - synced_from, "s")
            await asyncio.sleep(2)
            gc.collect()
            report("controller_rss", rss_mb(os.getpid()), "MiB")
            note(f"this process before the controller started: {rss_base:.0f} MiB")
            report("controller_reconcile_cpu_ota_noop",
                   await cpu_per_pass(controller, f"{NAMESPACE}/ota", args.passes) * 1e3, "ms")

            # ---------------------------------------------------------------- OTA rollout
            writes_before = metrics.writes()
            await sim.request("PATCH", f"{DS_PATH}/ota", {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "app:2"}]}}}}, MERGE_PATCH)
            report("controller_ota_flag_time",
                   await until(lambda: flagged(controller, "ota", "True", n), 900, "OTA conditions True"), "s")
            await until(lambda: len(controller.queue) == 0, 60, "queue drained")
            await asyncio.sleep(1)
            report("controller_ota_writes", metrics.writes() - writes_before, "writes")
            report("controller_ota_conditions_changed", n, "conditions")

            # ---------------------------------------------------------------- AdvancedRollingUpdate
            await sim.request("PATCH", f"{DS_PATH}/aru", {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "app:2"}]}}}}, MERGE_PATCH)
            await until(lambda: metrics.registry.get_sample_value(
                "edgeagent_controller_rollout_nodes",
                {"namespace": NAMESPACE, "daemonset": "aru", "state": "outdated"}) == n, 120,
                "the controller saw the paused roll")
            report("controller_reconcile_cpu_aru_plan",
                   await cpu_per_pass(controller, f"{NAMESPACE}/aru", args.passes) * 1e3, "ms")
            if args.skip_roll:
                return
            watch = Disruption(controller, "aru")
            kinds = ("pod_delete", "event", "condition_patch")
            before = {kind: metrics.writes(kind) for kind in kinds}
            deleted_before = metrics.registry.get_sample_value("edgeagent_controller_pod_deletions_total",
                                                               {"outcome": "deleted"}) or 0.0
            sim_cpu, own_cpu = cpu_seconds(sim.proc.pid), time.process_time()
            roll_started = time.monotonic()
            await sim.request("PATCH", f"{DS_PATH}/aru", {"metadata": {"annotations": {"edgeagent.io/paused": None}}},
                              MERGE_PATCH)
            await wait_rolled(sim, "aru", n, 3600)
            roll = time.monotonic() - roll_started
            await until(lambda: rolled(controller, "aru", "app:2", n), 120, "the roll in the controller's cache")
            report("controller_aru_roll_time", roll, "s")
            report("controller_aru_roll_sim_cpu", cpu_seconds(sim.proc.pid) - sim_cpu, "s")
            report("controller_aru_roll_controller_cpu", time.process_time() - own_cpu, "s")
            deleted = (metrics.registry.get_sample_value("edgeagent_controller_pod_deletions_total",
                                                         {"outcome": "deleted"}) or 0.0) - deleted_before
            report("controller_aru_pods_replaced", deleted, "pods")
            report("controller_aru_delete_writes", metrics.writes("pod_delete") - before["pod_delete"], "writes")
            report("controller_aru_event_writes", metrics.writes("event") - before["event"], "writes")
            report("controller_aru_condition_writes", metrics.writes("condition_patch") - before["condition_patch"],
                   "writes")
            report("controller_aru_max_in_progress", watch.max, "nodes")
            percent = args.max_unavailable.endswith("%")
            budget = -(-int(args.max_unavailable.rstrip("%")) * n // 100) if percent else int(args.max_unavailable)
            report("controller_aru_budget", budget, "nodes")
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--max-unavailable", default="10%")
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--skip-roll", action="store_true", help="stop after the OTA figures and the reconcile CPU")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
