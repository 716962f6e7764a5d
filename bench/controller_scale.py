"""The controller at fleet scale on the simulated cluster: 2,000 nodes by default.

Figures (`name value unit` lines):
- CPU time of one full reconcile pass over every node (AdvancedRollingUpdate planning with all pods
  outdated but the roll paused, so nothing is written; and an OTA pass where every condition is already
  right), measured with process_time around the reconcile call, which does no I/O in these cases;
- API writes per rollout, by kind, next to what they should equal: OTA = conditions changed;
  AdvancedRollingUpdate = pods replaced + one Event per deletion batch;
- wall time to flag every pod (OTA) and to roll every node at max-unavailable 10% (AdvancedRollingUpdate),
  and the most replacements of available pods in progress at once, recorded from the store's event stream.

Everything (API server simulation, kubelets, controller) shares one event loop and one core, so wall times
are upper bounds for the controller alone; `*_planning_cpu` is the controller's own deciding CPU during
the phase (API calls excluded), which is what scales with the controller's design.

    .venv/bin/python bench/controller_scale.py [--nodes 2000] [--max-unavailable 10%] [--passes 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeagent import log
from edgeagent.config import ControllerConfig, LogConfig, SimConfig
from edgeagent.controller.app import ControllerApp
from edgeagent.controller.reconciler import Controller
from edgeagent.kube.objects import get_condition, is_pod_ready, is_terminating, uid_of
from edgeagent.kube.selectors import parse_label_selector
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.resources import DAEMONSETS, PODS

JSON = dict[str, Any]
NS = "default"
MERGE = "application/merge-patch+json"


def emit(name: str, value: float, unit: str) -> None:
    print(f"{name} {value:.6g} {unit}", flush=True)


def manifest(name: str, strategy: str, annotations: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS,
                     "annotations": {"apps.openyurt.io/update-strategy": strategy, **(annotations or {})}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"terminationGracePeriodSeconds": 1,
                                  "containers": [{"name": "main", "image": "app:1"}]}},
        },
    }


def live_pods(sim: SimCluster, name: str) -> list[JSON]:
    """Read without copies: this polls every 50 ms, and stored objects are replaced, never changed in place
    (a copying list of 2,000 pods per poll was measurably slowing the rollout being timed)."""
    page = sim.store.list_page(PODS, NS, labels=parse_label_selector(f"app={name}"))
    return [s.obj for s in page.items if not is_terminating(s.obj)]


async def until(probe: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> float:
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - started


def set_image(sim: SimCluster, name: str, image: str) -> None:
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}}
    sim.store.patch(DAEMONSETS, NS, name, patch, MERGE)


def annotate(sim: SimCluster, name: str, annotations: dict[str, str | None]) -> None:
    sim.store.patch(DAEMONSETS, NS, name, {"metadata": {"annotations": annotations}}, MERGE)


def all_on(sim: SimCluster, name: str, image: str, nodes: int) -> bool:
    pods = live_pods(sim, name)
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


def planning_cpu(metrics: Any) -> float:
    return float(metrics.registry.get_sample_value("edgeagent_controller_planning_cpu_seconds_total") or 0.0)


class DisruptionWatch:
    """Most nodes at once between the deletion of an available pod and a Ready pod there again."""

    def __init__(self, sim: SimCluster, name: str) -> None:
        self.sim, self.name = sim, name
        self.pods: dict[str, JSON] = {p["metadata"]["uid"]: p for p in live_pods(sim, name)}
        self.disrupted: set[str] = set()
        self.max = 0
        self._ready_by_node: dict[str, set[str]] = {}
        for uid, pod in self.pods.items():
            if is_pod_ready(pod):
                self._ready_by_node.setdefault(pod["spec"]["nodeName"], set()).add(uid)

    async def run(self) -> None:
        async for event in self.sim.store.subscribe([PODS]):
            pod = event.object
            if pod["metadata"].get("labels", {}).get("app") != self.name:
                continue
            uid, node = uid_of(pod), str(pod["spec"].get("nodeName") or "")
            previous = self.pods.get(uid)
            if is_terminating(pod) and previous is not None and not is_terminating(previous) \
                    and is_pod_ready(previous):
                self.disrupted.add(node)
            if event.type == "DELETED":
                self.pods.pop(uid, None)
            else:
                self.pods[uid] = pod
            ready = self._ready_by_node.setdefault(node, set())
            if event.type != "DELETED" and not is_terminating(pod) and is_pod_ready(pod):
                ready.add(uid)
            else:
                ready.discard(uid)
            if ready:
                self.disrupted.discard(node)
            self.max = max(self.max, len(self.disrupted))


async def run(args: argparse.Namespace) -> None:
    log.configure(LogConfig(level="error"))
    directory = Path(tempfile.mkdtemp(prefix="edgeagent-bench-"))
    sim = SimCluster(SimConfig(nodes=args.nodes, dir=directory, heartbeat_interval=30.0, node_grace=600.0,
                               pod_startup=0.05, pod_termination=0.05))
    await sim.start()
    n = args.nodes
    try:
        # ---------------------------------------------------------------- OTA
        sim.store.create(DAEMONSETS, manifest("ota", "OTA"))
        await until(lambda: all_on(sim, "ota", "app:1", n), 600, "OTA pods running")
        app = ControllerApp(ControllerConfig(kubeconfig=sim.admin_kubeconfig, metrics_port=0, request_timeout=30.0))
        task = asyncio.create_task(app.run())
        metrics = app.metrics

        def flagged(status: str) -> bool:
            pods = live_pods(sim, "ota")
            return len(pods) == n and all((get_condition(p, "PodNeedUpgrade") or {}).get("status") == status
                                          for p in pods)

        await until(lambda: flagged("False"), 600, "initial OTA conditions")
        assert app.controller is not None
        controller = app.controller
        emit("controller_nodes", n, "nodes")
        emit("controller_reconcile_cpu_ota_noop", await cpu_per_pass(controller, f"{NS}/ota", args.passes) * 1e3,
             "ms")

        writes_before = metrics.writes()
        cpu_before = planning_cpu(metrics)
        set_image(sim, "ota", "app:2")
        emit("controller_ota_flag_time", await until(lambda: flagged("True"), 3600, "OTA conditions True"), "s")
        emit("controller_ota_planning_cpu", planning_cpu(metrics) - cpu_before, "s")
        await until(lambda: len(controller.queue) == 0, 60, "queue drained")
        emit("controller_ota_writes", metrics.writes() - writes_before, "writes")
        emit("controller_ota_conditions_changed", n, "conditions")

        # ---------------------------------------------------------------- AdvancedRollingUpdate
        aru = manifest("aru", "AdvancedRollingUpdate", {"apps.openyurt.io/max-unavailable": args.max_unavailable,
                                                        "edgeagent.io/paused": "true"})
        sim.store.create(DAEMONSETS, aru)
        await until(lambda: all_on(sim, "aru", "app:1", n), 600, "ARU pods running")
        set_image(sim, "aru", "app:2")
        key = f"{NS}/aru"
        await until(lambda: metrics.registry.get_sample_value(
            "edgeagent_controller_rollout_nodes", {"namespace": NS, "daemonset": "aru", "state": "outdated"}) == n,
            60, "controller saw the paused roll")
        emit("controller_reconcile_cpu_aru_plan", await cpu_per_pass(controller, key, args.passes) * 1e3, "ms")

        if args.skip_roll:
            return
        sim.store.delete(DAEMONSETS, NS, "ota")  # fewer pods for the simulated DaemonSet controller to scan
        watch = DisruptionWatch(sim, "aru")
        watcher = asyncio.create_task(watch.run())
        writes_before_by_kind = {kind: metrics.writes(kind) for kind in ("pod_delete", "event", "condition_patch")}
        deletions_before = len([d for d in sim.store.deletes if d["outcome"] == "graceful"])
        cpu_before = planning_cpu(metrics)
        started = time.monotonic()
        annotate(sim, "aru", {"edgeagent.io/paused": None})
        await until(lambda: all_on(sim, "aru", "app:2", n), 3600, "ARU roll", interval=0.2)
        emit("controller_aru_roll_time", time.monotonic() - started, "s")
        emit("controller_aru_planning_cpu", planning_cpu(metrics) - cpu_before, "s")
        replaced = len([d for d in sim.store.deletes if d["outcome"] == "graceful"]) - deletions_before
        deletes = metrics.writes("pod_delete") - writes_before_by_kind["pod_delete"]
        events = metrics.writes("event") - writes_before_by_kind["event"]
        emit("controller_aru_pods_replaced", replaced, "pods")
        emit("controller_aru_delete_writes", deletes, "writes")
        emit("controller_aru_event_writes", events, "writes")
        for outcome in ("deleted", "gone", "replaced", "error"):
            value = metrics.registry.get_sample_value("edgeagent_controller_pod_deletions_total", {"outcome": outcome})
            emit(f"controller_aru_delete_outcome_{outcome}", value or 0.0, "writes")
        condition_writes = metrics.writes("condition_patch") - writes_before_by_kind["condition_patch"]
        emit("controller_aru_condition_writes", condition_writes, "writes")
        budget = controller.metrics.registry.get_sample_value(
            "edgeagent_controller_rollout_nodes", {"namespace": NS, "daemonset": "aru", "state": "total"})
        emit("controller_aru_max_in_progress", watch.max, "nodes")
        emit("controller_aru_budget", -(-int(args.max_unavailable.rstrip("%")) * int(budget or n) // 100)
             if args.max_unavailable.endswith("%") else int(args.max_unavailable), "nodes")
        watcher.cancel()
        task.cancel()
        for pending in (watcher, task):
            with contextlib.suppress(asyncio.CancelledError):
                await pending
    finally:
        await sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--max-unavailable", default="10%")
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--skip-roll", action="store_true",
                        help="stop after the OTA figures and the reconcile CPU (the full roll is sim-bound)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
