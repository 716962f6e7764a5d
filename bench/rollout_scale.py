"""The controller at 100,000 nodes x 1 DaemonSet with a rollout plan (issue 19; the scale KubeEdge reports).

The sim runs as its own process (`edgeagent sim --nodes N --no-node-links`: one listening socket per node
would exceed the file-descriptor limit; heartbeats every 600 s, a watch history of 3 events per node); the
controller runs in this process (`ControllerApp`, admin kubeconfig, over HTTP) so that its passes can be
timed (`process_time`, median of `--passes`) and its RSS read. One OTA DaemonSet on every node, with a
RolloutPlan (steps `1%,10%,50%,100%`, an object): OTA pods only move when their node's user asks, and no agent
runs here, so after the template change the rollout stays in wave 1 (1 % of the pods `PodNeedUpgrade`
True, the others False/`WaitingForWave`): a steady state whose every pass is a full wave-planning pass.

Figures (`name value unit`):
- `rollout_scale_sync_time`: controller start -> every pod cached and every OTA condition written;
- `rollout_scale_rss`: this process's RSS then (goal <= 1 GiB); `rollout_scale_rss_end`: its RSS after every
  wave change, read without a collection of the bench's own, so what the controller's collector schedule has
  left (frozen garbage included) shows; `rollout_scale_rss_peak`: the most it held up to then (`VmHWM`), the
  template change's and the wave changes' passes included (the kernel moves that mark at certain points, not on
  every page, so it can read a fraction of a MiB under an earlier `rollout_scale_rss`: read it to within a MiB);
- `rollout_scale_cpu_ota_noop`: one OTA reconcile pass, every condition already right (goal <= 300 ms); the
  controller re-reads only the pods that changed since its last pass (none here), and
  `rollout_scale_cpu_ota_start_over`: the same pass deriving every pod's facts again (what the first pass after
  a restart or a new revision costs), from the pods' digests, which the informer handler made when each pod
  last changed: `rollout_scale_cpu_digests` is what making them for every pod costs (spread over the pods'
  events, and over the informer's list after a restart);
- `rollout_scale_cpu_wave_planning`: one reconcile pass of the waved revision (ranking reused), its
  `..._start_over` as above, its `..._first_pass` (the first pass after a restart: also ranking every node
  again, by filtering the controller's node order), and
  `rollout_scale_cpu_rank`: ranking every node and cutting the waves from scratch, which the controller
  does once per revision (goal <= 300 ms each); `rollout_scale_cpu_node_order`: sorting every cached node by
  the hash of its name, which the controller does once its caches have synced, before its first reconcile;
- `rollout_scale_flag_time` and the writes of the template change (conditions changed, Events, the plan's
  status writes: `rollout_scale_writes_rolloutplan_status`);
- `rollout_scale_wave_change_status_writes` (and `..._2_3_...`): the plan's status writes from the deletion of
  wave k's pods to wave k + 1's conditions written (goal <= 3 per wave: once per transition, never per node);
- `rollout_scale_cpu_wave_change`: the planning CPU (the plan's decision and the OTA conditions derived,
  the controller's `edgeagent_controller_planning_cpu_seconds`; not its API writes) of the pass that moves the
  rollout from wave 1 to wave 2 (goal <= 300 ms): the bench deletes wave 1's pods, as their agents would, the sim
  recreates them on the new revision, and the controller's own pass that sees the last of them Ready finishes
  wave 1 and starts wave 2 (no bake). `..._pass`: that whole pass's CPU, including its condition patches
  (`rollout_scale_wave_change_patches`) and whatever this process did while they were in flight;
- `rollout_scale_cpu_wave_change_2_3` and `..._3_4` (with their `_pass` and `rollout_scale_wave_change_2_3_patches`
  ...): the same for the later wave changes, which move far more nodes (at 100,000: 40,000 and 50,000 pods, against
  9,000 for 1 -> 2). A pass writes at most 10,000 conditions (`_CONDITION_BURST`), so the later passes of a wave
  change write the rest: `..._rest_max` (`rollout_scale_cpu_wave_change_rest_max`, ...) is the largest planning
  CPU among them, and `rollout_scale_cpu_wave_change_max` the largest of all those passes of every wave change;
  `rollout_scale_cpu_flag_pass_max` is the same for the passes that start the new revision (the first derives
  every pod again and ranks the nodes; together they write 100,000 conditions). Wave k's pods are deleted and
  recreated by the sim as wave 1's (9,000 for 2 -> 3 and 40,000 for 3 -> 4 at 100,000 nodes: the 40,000 took the
  sim 247 s, the whole bench 16 min); `--wave-changes N` times the first N changes only;
- `rollout_scale_gc_wave_change_pass` (and `..._2_3_pass`, ...): the CPU the garbage collector took during that
  whole pass (a `gc.callbacks` hook). A full collection at this scale pauses the process for 0.5-2 s wherever it
  lands; when one lands in a timed pass, the pass's figures include it. `rollout_scale_gc_wave_change_planning`
  (and `..._2_3_planning`, ...): the collector's CPU inside the planning steps of that pass (the windows the
  controller counts as planning CPU), so `..._cpu_wave_change` minus it is the planning's own. The start-over
  passes are noted with the collector's share of each. The controller does the full collections itself, between
  steps of the event loop (controller/gc_schedule.py): the last line counts them, and the deep ones.

    .venv/bin/python bench/rollout_scale.py [--nodes 100000] [--passes 5] [--wave-changes 3] [--node-images 0] \
        [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import MERGE_PATCH, NAMESPACE, Sim, note, report, rss_mb, workdir
from bench.controller_scale import DS_PATH, cpu_per_pass, manifest, pods_of, until
from bench.plans import create_plan, install_crd, steps_of
from bench.rollout_waves import patient, writes_by_kind
from edgeagent import log
from edgeagent.config import ControllerConfig, LogConfig
from edgeagent.contract import CONDITION_POD_NEED_UPGRADE, REASON_WAITING_FOR_WAVE
from edgeagent.controller import gc_schedule
from edgeagent.controller.app import ControllerApp
from edgeagent.controller.node_order import NodeOrder
from edgeagent.controller.ota import OtaFacts
from edgeagent.controller.pod_index import digest_of
from edgeagent.controller.pods import node_of
from edgeagent.controller.reconciler import WRITE_PLAN_STATUS, Controller
from edgeagent.kube.objects import get_condition, labels_of, name_of, uid_of
from edgeagent.rollout.api import parse_spec
from edgeagent.rollout.plan import rank

JSON = dict[str, Any]
T = TypeVar("T")
STEPS = "1%,10%,50%,100%"


def conditions(controller: Controller, name: str) -> dict[tuple[str, str], int]:
    """(status, reason) of PodNeedUpgrade -> pods."""
    counts: dict[tuple[str, str], int] = {}
    for pod in pods_of(controller, name):
        cond = get_condition(pod, CONDITION_POD_NEED_UPGRADE) or {}
        key = (str(cond.get("status")), str(cond.get("reason") or ""))
        counts[key] = counts.get(key, 0) + 1
    return counts


def with_status(controller: Controller, status: str) -> int:
    return sum(v for (s, _), v in conditions(controller, "fleet").items() if s == status)


async def ready_count(sim: Sim, name: str) -> int:
    status = (await patient(sim, "GET", f"{DS_PATH}/{name}")).get("status") or {}
    return int(status.get("numberReady") or 0)


class Collector:
    """CPU spent in CPython's garbage collector (a `gc.callbacks` hook). At 100,000 nodes a full collection walks
    the whole cache and pauses this process for 0.5-2 s; one that lands in a timed pass is counted in that pass's
    CPU though the pass did not cause it, so each timed window reports the collector's share beside it. While
    `recording`, each collection's CPU interval is kept, and `planning` (what the controller counts as its
    planning CPU, `watch_planning`) can be set against them: `in_planning` is the collector's CPU inside it."""

    def __init__(self) -> None:
        self.spent = 0.0
        self.full = 0
        self._began = 0.0
        self.recording = False
        self.collections: list[tuple[float, float]] = []
        self.planning: list[tuple[float, float]] = []

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.process_time()
        else:
            ended = time.process_time()
            self.spent += ended - self._began
            self.full += info.get("generation") == 2
            if self.recording:
                self.collections.append((self._began, ended))

    def record(self) -> None:
        self.recording = True
        self.collections.clear()
        self.planning.clear()

    def in_planning(self) -> float:
        """The collector's CPU inside the planning windows recorded since `record`."""
        return sum(max(0.0, min(end, stop) - max(start, began)) for began, stop in self.collections
                   for start, end in self.planning)


def watch_planning(app: ControllerApp, collector: Collector) -> None:
    """The controller counts each planning step's CPU (`edgeagent_controller_planning_cpu_seconds`) right after it;
    the window (now - amount, now) is kept while the collector records, to find the collections inside it."""
    counter = app.metrics.planning_cpu
    inc = counter.inc

    def counted(amount: float = 1.0, exemplar: dict[str, str] | None = None) -> None:
        if collector.recording:
            now = time.process_time()
            collector.planning.append((now - amount, now))
        inc(amount, exemplar)

    setattr(counter, "inc", counted)  # noqa: B010 -- the controller looks the method up on the counter


COLLECTOR = Collector()


async def start_over_cpu(controller: Controller, key: str, passes: int, what: str, ranking: bool = False,
                         profile: str | None = None) -> float:
    """Median CPU seconds of a reconcile whose per-pod facts are derived again from every pod (what the first
    pass after a restart or a new revision costs; the passes in between re-read only the pods that changed).
    The pods' digests stay: the informer handler made them as the pods arrived (`rollout_scale_cpu_digests`).
    `ranking`: the nodes are ranked again too, as after a restart (the node names' hashes stay: the node handler
    worked them out as the nodes arrived)."""
    samples = []
    collected = []
    for _ in range(passes):
        for owned in controller._pods_by_owner.values():
            owned.forget_facts()
        if ranking:
            for uid in list(controller._plan_gates):
                controller.ranks.forget(uid)
        gc_before = COLLECTOR.spent
        started = time.process_time()
        await controller.reconcile(key)
        samples.append(time.process_time() - started)
        collected.append(COLLECTOR.spent - gc_before)
    if profile:
        # One more pass, under cProfile (not among the timed ones: the profiler slows every call).
        for owned in controller._pods_by_owner.values():
            owned.forget_facts()
        if ranking:
            for uid in list(controller._plan_gates):
                controller.ranks.forget(uid)
        profiler = cProfile.Profile()
        profiler.enable()
        await controller.reconcile(key)
        profiler.disable()
        profiler.dump_stats(profile)
    note(f"{what}: passes " + ", ".join(f"{s * 1e3:.0f}" for s in samples) + " ms, of which the garbage collector "
         + ", ".join(f"{c * 1e3:.0f}" for c in collected) + " ms")
    return statistics.median(samples)


def median_cpu(passes: int, step: Callable[[T], object], setup: Callable[[], T]) -> float:
    """Median CPU seconds of `step(setup())` over `passes` runs; `setup` is not timed."""
    samples = []
    for _ in range(passes):
        prepared = setup()
        started = time.process_time()
        step(prepared)
        samples.append(time.process_time() - started)
    return statistics.median(samples)


def digests_cpu(controller: Controller, passes: int) -> float:
    """Median CPU seconds of making every cached pod's digest (`pod_index.digest_of`): what the informer handler
    does once per pod event, so what a restarted controller spends on it while the informer lists the pods."""
    pods = [pod for owned in controller._pods_by_owner.values() for pod in owned.pods.values()]

    def digest_all(_: None) -> None:
        for pod in pods:
            digest_of(pod)

    return median_cpu(passes, digest_all, lambda: None)


def unsorted_order(names: Iterable[str]) -> NodeOrder:
    """A node order told of every name, not settled yet: what the controller has once its caches have synced."""
    order = NodeOrder()
    for name in names:
        order.add(name)
    return order


def planning_cpu(app: ControllerApp) -> float:
    value = app.metrics.registry.get_sample_value("edgeagent_controller_planning_cpu_seconds_total")
    return float(value or 0.0)


def wave_of(controller: Controller, uid: str) -> int | None:
    gate = controller._plan_gates.get(uid)
    return None if gate is None else gate.wave


def wave_change_name(k: int, prefix: str = "rollout_scale_cpu_", suffix: str = "") -> str:
    """Figure names of the change from wave k to k + 1: 1 -> 2 keeps the names the docs cite
    (`rollout_scale_cpu_wave_change`), the later ones name their waves (`..._wave_change_2_3`)."""
    waves = "" if k == 1 else f"_{k}_{k + 1}"
    return f"{prefix}wave_change{waves}{suffix}"


class Pass(NamedTuple):
    """One reconcile run by the controller's own worker, as `PassLog` saw it."""

    wave_before: int | None
    wave_after: int | None
    planning: float  # the controller's planning CPU in it (seconds)
    whole: float  # its CPU, writes included
    patches: float  # condition patches it sent
    collected: float  # the garbage collector's CPU in it
    collected_in_planning: float


class PassLog:
    """Times the reconciles run by the controller's own worker (a wrapper around `reconcile`, looked up on the
    instance by the worker) while installed."""

    def __init__(self, app: ControllerApp, controller: Controller, uid: str) -> None:
        self.app, self.controller, self.uid = app, controller, uid
        self.passes: list[Pass] = []
        self._reconcile = controller.reconcile

    def __enter__(self) -> PassLog:
        reconcile, app, controller, uid = self._reconcile, self.app, self.controller, self.uid

        async def timed(key: str) -> None:
            before, planned, cpu = wave_of(controller, uid), planning_cpu(app), time.process_time()
            patched = writes_by_kind(app.metrics).get("condition_patch", 0.0)
            collected = COLLECTOR.spent
            COLLECTOR.record()
            try:
                await reconcile(key)
            finally:
                self.passes.append(Pass(before, wave_of(controller, uid), planning_cpu(app) - planned,
                                        time.process_time() - cpu,
                                        writes_by_kind(app.metrics).get("condition_patch", 0.0) - patched,
                                        COLLECTOR.spent - collected, COLLECTOR.in_planning()))
                COLLECTOR.recording = False

        setattr(self.controller, "reconcile", timed)  # noqa: B010 -- the worker looks the method up on the instance
        return self

    def __exit__(self, *_: object) -> None:
        setattr(self.controller, "reconcile", self._reconcile)  # noqa: B010


def conditions_written(controller: Controller, uid: str) -> bool:
    """Every PodNeedUpgrade of the DaemonSet is right (the OTA tracker lists nothing) and nothing is queued: the
    batches of a wave change (`_CONDITION_BURST` per pass) are all written."""
    owned = controller._pods_by_owner.get(uid)
    return owned is not None and not owned.tracker(OtaFacts).wrong and len(controller.queue) == 0


async def wave_change(sim: Sim, app: ControllerApp, controller: Controller, ds: JSON, k: int) -> float:
    """Wave k -> k + 1 as it happens: the reconciles run by the controller's own worker are timed (`PassLog`),
    and the one whose gate went from wave k to k + 1 is reported; then the passes that write the rest of the new
    wave's conditions (a pass writes at most `_CONDITION_BURST`), whose largest planning CPU is `..._rest_max`.
    Returns the largest planning CPU of all those passes (seconds)."""
    uid = uid_of(ds)
    gate = controller._plan_gates.get(uid)
    assert gate is not None and gate.ranking is not None and gate.wave == k, gate
    status_before = writes_by_kind(app.metrics).get(WRITE_PLAN_STATUS, 0.0)
    reached = set(gate.ranking.nodes_of_wave(k))
    moved = len(gate.ranking.nodes_of_wave(k + 1))
    with PassLog(app, controller, uid) as log:
        passes = log.passes
        doomed = [p for p in pods_of(controller, "fleet") if node_of(p) in reached]
        semaphore = asyncio.Semaphore(32)

        async def delete(pod: JSON) -> None:
            async with semaphore:
                await sim.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name_of(pod)}", ok=(200, 202))

        started = time.monotonic()
        await asyncio.gather(*(delete(p) for p in doomed))
        await until(lambda: any(p.wave_before == k and p.wave_after == k + 1 for p in passes), 3600,
                    f"wave {k + 1} started", interval=0.5)
        note(f"wave {k}'s {len(doomed)} pods deleted; wave {k + 1} started {time.monotonic() - started:.0f} s "
             f"later, {len(passes)} reconcile(s) in between")
        at = next(i for i, p in enumerate(passes) if p.wave_before == k and p.wave_after == k + 1)
        await until(lambda: conditions_written(controller, uid), 1800, f"wave {k + 1}'s conditions written",
                    interval=0.5)
    change, rest = passes[at], passes[at + 1:]
    # The plan's status is written once per transition, never per node (goal <= 3 per wave).
    report(wave_change_name(k, "rollout_scale_", "_status_writes"),
           writes_by_kind(app.metrics).get(WRITE_PLAN_STATUS, 0.0) - status_before, "writes")
    report(wave_change_name(k), change.planning * 1e3, "ms")
    report(wave_change_name(k, suffix="_pass"), change.whole * 1e3, "ms")
    report(wave_change_name(k, "rollout_scale_gc_", "_pass"), change.collected * 1e3, "ms")
    report(wave_change_name(k, "rollout_scale_gc_", "_planning"), change.collected_in_planning * 1e3, "ms")
    report(wave_change_name(k, "rollout_scale_", "_patches"), change.patches, "writes")
    worst = max([change.planning, *(p.planning for p in rest)])
    rest_max = max((p.planning for p in rest), default=0.0)
    report(wave_change_name(k, suffix="_rest_max"), rest_max * 1e3, "ms")
    collected = max((p.collected_in_planning for p in rest), default=0.0)
    note(f"wave {k + 1} moves {moved} nodes; {len(rest)} later pass(es) until its conditions were written, "
         f"{sum(p.patches for p in rest):.0f} patches, the collector {collected * 1e3:.0f} ms at most inside one's "
         "planning")
    return worst


async def run(args: argparse.Namespace) -> None:
    log.configure(LogConfig(level="error"))
    n = args.nodes
    gc.callbacks.append(COLLECTOR)
    async with workdir("rollout-scale") as work:
        sim = Sim(work, nodes=n, extra=["--heartbeat-interval", "600", "--node-grace", "6000", "--no-node-links",
                                        "--no-control-plane-events", "--node-images", str(args.node_images),
                                        "--history", str(max(10_000, 3 * n))])
        started = time.monotonic()
        await sim.start(timeout=900)
        task: asyncio.Task[None] | None = None
        try:
            await install_crd(sim)
            await create_plan(sim, "fleet", steps_of(STEPS))
            await patient(sim, "POST", DS_PATH, manifest("fleet", "OTA", {}))
            deadline = time.monotonic() + 1800
            while await ready_count(sim, "fleet") < n:
                if time.monotonic() > deadline:
                    raise TimeoutError("the DaemonSet's pods did not all become Ready")
                await asyncio.sleep(2)
            note(f"sim: {n} nodes and {n} pods Ready {time.monotonic() - started:.0f} s after its start; "
                 f"sim RSS {rss_mb(sim.proc.pid):.0f} MiB")
            gc.collect()
            rss_base = rss_mb(os.getpid())
            app = ControllerApp(ControllerConfig(kubeconfig=sim.dir / "admin.kubeconfig", metrics_port=0,
                                                 request_timeout=120.0))
            synced_from = time.monotonic()
            task = asyncio.create_task(app.run())
            await until(lambda: app.controller is not None, 120, "the controller started")
            controller = app.controller
            assert controller is not None
            watch_planning(app, COLLECTOR)
            await until(lambda: len(controller.pods.items) == n and with_status(controller, "False") == n
                        and len(controller.queue) == 0, 1800,
                        "every pod cached and its PodNeedUpgrade written", interval=2.0)
            report("rollout_scale_nodes", n, "nodes")
            report("rollout_scale_sync_time", time.monotonic() - synced_from, "s")
            await asyncio.sleep(2)
            gc.collect()
            report("rollout_scale_rss", rss_mb(os.getpid()), "MiB")
            note(f"this process before the controller started: {rss_base:.0f} MiB")
            key = f"{NAMESPACE}/fleet"
            report("rollout_scale_cpu_ota_noop", await cpu_per_pass(controller, key, args.passes) * 1e3, "ms")
            report("rollout_scale_cpu_ota_start_over",
                   await start_over_cpu(controller, key, args.passes, "OTA start over") * 1e3, "ms")
            report("rollout_scale_cpu_digests", digests_cpu(controller, args.passes) * 1e3, "ms")

            before = writes_by_kind(app.metrics)
            ds = next(d for d in controller.daemonsets.items.values() if name_of(d) == "fleet")
            flag_from = time.monotonic()
            wave1 = -(-n // 100)

            def flagged() -> bool:
                counts = conditions(controller, "fleet")
                return bool(sum(v for (status, _), v in counts.items() if status == "True") == wave1
                        and counts.get(("False", REASON_WAITING_FOR_WAVE), 0) == n - wave1)

            with PassLog(app, controller, uid_of(ds)) as flag_log:
                await sim.request("PATCH", f"{DS_PATH}/fleet", {"spec": {"template": {"spec": {"containers": [
                    {"name": "main", "image": "app:2"}]}}}}, MERGE_PATCH)
                await until(flagged, 1800, "wave 1 flagged and the others WaitingForWave", interval=2.0)
                await until(lambda: conditions_written(controller, uid_of(ds)), 120, "the conditions written")
            report("rollout_scale_flag_time", time.monotonic() - flag_from, "s")
            # The passes that start the new revision: the first derives every pod again and ranks the nodes, and
            # each writes at most `_CONDITION_BURST` of the 100,000 conditions.
            report("rollout_scale_cpu_flag_pass_max", max(p.planning for p in flag_log.passes) * 1e3, "ms")
            note(f"template change: {len(flag_log.passes)} pass(es), planning "
                 + ", ".join(f"{p.planning * 1e3:.0f}" for p in flag_log.passes if p.patches) + " ms in those that "
                 "wrote, the collector at most "
                 f"{max(p.collected_in_planning for p in flag_log.passes) * 1e3:.0f} ms inside one's planning")
            await until(lambda: len(controller.queue) == 0, 120, "the queue drained")
            await asyncio.sleep(2)
            note(f"PodNeedUpgrade (status, reason) -> pods: {conditions(controller, 'fleet')}")
            report("rollout_scale_cpu_wave_planning", await cpu_per_pass(controller, key, args.passes) * 1e3, "ms")
            report("rollout_scale_cpu_wave_planning_start_over",
                   await start_over_cpu(controller, key, args.passes, "wave planning start over") * 1e3, "ms")
            report("rollout_scale_cpu_wave_planning_first_pass",
                   await start_over_cpu(controller, key, args.passes, "wave planning first pass", ranking=True,
                                        profile=args.profile) * 1e3,
                   "ms")
            after = writes_by_kind(app.metrics)
            for kind in sorted(after):
                delta = after[kind] - before.get(kind, 0.0)
                if delta:
                    report(f"rollout_scale_writes_{kind}", delta, "writes")

            gate = controller._plan_gates.get(uid_of(ds))
            assert gate is not None and gate.ranking is not None, gate
            changes = min(args.wave_changes, gate.ranking.waves - 1)
            worst = 0.0
            for k in range(1, changes + 1):
                began = time.monotonic()
                worst = max(worst, await wave_change(sim, app, controller, ds, k))
                note(f"wave change {k} -> {k + 1}: {time.monotonic() - began:.0f} s wall clock")
            report("rollout_scale_cpu_wave_change_max", worst * 1e3, "ms")
            report("rollout_scale_rss_end", rss_mb(os.getpid()), "MiB")
            report("rollout_scale_rss_peak", rss_mb(os.getpid(), "VmHWM"), "MiB")
            spec, problems = parse_spec(controller.plans.items[key]["spec"])
            assert spec is not None, problems
            plan = spec.plan()
            node_labels = {name_of(node): labels_of(node) for node in controller.nodes.items.values()}
            note(f"waves: {rank(plan, node_labels).targets} cumulative nodes")
            report("rollout_scale_cpu_rank",
                   median_cpu(args.passes, lambda _: rank(plan, node_labels), lambda: None) * 1e3, "ms")
            report("rollout_scale_cpu_node_order",
                   median_cpu(args.passes, NodeOrder.settle, lambda: unsorted_order(node_labels)) * 1e3, "ms")
            note(f"garbage collector: {COLLECTOR.spent:.1f} s of CPU in all, {COLLECTOR.full} full collections "
                 f"({gc_schedule.SCHEDULE.collections} by the controller's schedule, "
                 f"{gc_schedule.SCHEDULE.deep_collections} of them deep)")
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await sim.stop()
            gc.callbacks.remove(COLLECTOR)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--node-images", type=int, default=0,
                        help="images each node lists from the start (the sim's --node-images; a real node: dozens)")
    parser.add_argument("--wave-changes", type=int, default=3,
                        help="how many wave changes to time (1: only 1 -> 2; default: all three)")
    parser.add_argument("--profile", metavar="FILE",
                        help="also run one wave-planning first pass under cProfile and write its stats to FILE")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
