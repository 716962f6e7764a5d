"""Rollout plans at 10,000 nodes: what waves cost against the same roll without a plan (issue 19).

The sim runs as its own process (`edgeagent sim --nodes N --no-node-links`, heartbeats every 60 s); the
controller runs in this process (`ControllerApp`, admin kubeconfig, over HTTP), as in
`controller_scale.py`. Two AdvancedRollingUpdate DaemonSets share every node, both `max-unavailable` 10 %:
`plain` without a plan, `waved` with `edgeagent.io/rollout-steps: 1%,10%,50%,100%` and bake `0s`. Each is
rolled alone, `plain` first (app:1 -> app:2), then `waved` (app:1 -> app:3, so each roll pulls an image
no node has), timed from the template PATCH until the DaemonSet's status (of that generation) shows
every node updated and available.

Figures (`name value unit`):
- `rollout_plain_roll_time`, `rollout_waved_roll_time` (and `..._2`, ... for the later rounds);
  `rollout_waved_to_plain_ratio_round_K`: each round's waved roll over its plain one; `rollout_waved_to_plain_ratio`:
  the median of those (one noisy round does not decide: the machine is shared, and a single roll has been seen
  to take 0.6x or 1.2x its neighbour on unchanged code), and `..._ratio_pooled`: all waved time over all plain time;
- `rollout_waved_to_plain_floor`: the ratio's arithmetic floor, from the steps and the budget alone. The
  roll replaces at most `max-unavailable` pods at a time, so where each replacement takes about the same time
  (here: the pull of an image no node has, then the start) a roll takes one *round* per budget's worth of pods:
  10,000 nodes at 10 % are 10 rounds. A plan cuts the roll into waves and a wave must finish before the next
  starts, so each wave takes ceil(wave size / budget) rounds of its own, and a wave smaller than the budget
  still takes a whole round: `1%,10%,50%,100%` of 10,000 nodes are waves of 100, 900, 4,000 and 5,000 nodes,
  1 + 1 + 4 + 5 = 11 rounds against the plain roll's 10, so the floor is 1.1x. No controller can do better
  than the floor without breaking the budget or the waves; what the ratio shows above it is the plan's own cost
  (the wave gaps, the rounds that cannot overlap across a wave boundary). `rollout_waved_to_plain_above_floor`
  is the ratio minus the floor (issue 35 withdrew round 3's "<= 1.1x" goal: at a 10 % budget that is the floor
  itself);
- `rollout_wave_gap_p50` / `_max`: from the moment the last pod of wave k was Ready on the new revision
  to the first deletion of a pod of wave k+1 (goal: median <= 1 s). Both instants are taken from the
  controller's own pod informer (a handler: the same events the controller plans on), so the gap is the
  controller's reaction (queue, planning pass, the DELETE's round trip and its watch event back);
  `rollout_wave_gap_controller_p50` / `_max`: its part up to the first DELETE sent (the controller's share;
  each gap's note splits it further: reconcile started, state written, first DELETE sent);
- writes of the waved roll by kind (`rollout_waved_writes_<kind>`), per wave, next to the pods replaced,
  and `rollout_plan_extra_writes`: the waved roll's writes minus the plain roll's (same pods replaced): the
  plan's own Events and state writes, which must stay a few per wave, never one per node;
- the waves' sizes as the controller cut them (`rollout_waves`);
- `rollout_rss_after_first_round` / `_last_round`: this process's RSS (the controller's, with the bench's few
  per-node maps) after the first plain and waved rolls and after the last round, read without collecting first,
  so that `--rounds 10` shows whether the controller's memory grows roll after roll (a note lists each round's
  RSS and `sys.getallocatedblocks()`, which a leak grows and the allocator's high water does not).

Where the time goes (`#` notes): for each roll, how long its deletions took (first to last) and its tail (last
deletion to last Ready pod, i.e. one pod's replacement when little else is in flight), and the per-node time
from deletion to a Ready new pod; for the waved rolls the same per wave, and summed over the waves next to the
wave gaps, so the extra time of a waved roll splits into slower deletions, extra tails and gaps.
`--timeline FILE` appends each roll's timeline (a row every 0.5 s: pods old / terminating / new not Ready / new
Ready, nodes without a pod, the controller's and the sim's CPU, reconciles and DELETEs so far, the plan's wave).

    .venv/bin/python bench/rollout_waves.py [--nodes 10000] [--steps 1%,10%,50%,100%] [--max-unavailable 10%]
        [--rounds 3] [--timeline FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench.common import MERGE_PATCH, NAMESPACE, Sim, note, report, rss_mb, workdir
from bench.controller_scale import DS_PATH, cpu_seconds, manifest, until
from bench.plans import create_plan, install_crd, steps_of
from edgeagent import log
from edgeagent.config import ControllerConfig, LogConfig
from edgeagent.contract import LABEL_REVISION_HASH
from edgeagent.controller.app import ControllerApp
from edgeagent.controller.metrics import ControllerMetrics
from edgeagent.controller.reconciler import Controller
from edgeagent.controller.settings import parse_int_or_percent
from edgeagent.kube.objects import is_pod_ready, is_terminating, key_of, labels_of, name_of
from edgeagent.rollout.api import parse_spec
from edgeagent.rollout.plan import Ranking, rank

JSON = dict[str, Any]


class WaveClock:
    """First instant (monotonic) each node had a Ready pod of `revision`, and first instant an old pod of the
    node was seen terminating: from the controller's pod informer, so no second watch competes for CPU."""

    def __init__(self, controller: Controller, app: str) -> None:
        self.app = app
        self.revision = ""
        self.ready_at: dict[str, float] = {}
        self.deleted_at: dict[str, float] = {}
        controller.pods.add_handler(self.on_pod)

    def restart(self) -> None:
        """For the next roll: no revision yet (events are ignored until it is known), no instants."""
        self.revision = ""
        self.ready_at.clear()
        self.deleted_at.clear()

    def on_pod(self, etype: str, pod: JSON, old: JSON | None) -> None:
        labels = labels_of(pod)
        if labels.get("app") != self.app or not self.revision:
            return
        node = str(pod["spec"].get("nodeName") or "")
        now = time.monotonic()
        new = labels.get(LABEL_REVISION_HASH) == self.revision
        if new and etype != "DELETED" and not is_terminating(pod) and is_pod_ready(pod):
            self.ready_at.setdefault(node, now)
        elif not new and (is_terminating(pod) or etype == "DELETED"):
            self.deleted_at.setdefault(node, now)


class GapTrace:
    """When the controller reached each step between a wave's last Ready pod and the next wave's first DELETE:
    a reconcile of `key` started, a rollout-state write was answered, a DELETE was sent (each a monotonic
    instant, recorded by wrapping the controller's own methods: one clock read per call). Set against the
    WaveClock's instants, a gap splits into the controller's share (last Ready seen -> first DELETE sent: queue,
    the plan's decision and state write, the roll's pass) and the API's (DELETE sent -> its terminating pod seen
    in the cache: the sim's answer and the watch event)."""

    def __init__(self, controller: Controller, key: str) -> None:
        self.reconciles: list[float] = []
        self.state_writes: list[float] = []
        self.deletes: list[float] = []
        reconcile, write_plan, delete = controller.reconcile, controller._put_plan_status, controller._client.delete

        async def traced_reconcile(name: str) -> None:
            if name == key:
                self.reconciles.append(time.monotonic())
            await reconcile(name)

        async def traced_write_plan(*args: Any, **kwargs: Any) -> bool:
            written = await write_plan(*args, **kwargs)
            if written:
                self.state_writes.append(time.monotonic())
            return written

        async def traced_delete(*args: Any, **kwargs: Any) -> JSON:
            self.deletes.append(time.monotonic())
            return await delete(*args, **kwargs)

        setattr(controller, "reconcile", traced_reconcile)  # noqa: B010 (instance attributes, seen by the workers)
        setattr(controller, "_put_plan_status", traced_write_plan)  # noqa: B010
        setattr(controller._client, "delete", traced_delete)  # noqa: B010

    def split(self, ready: float, deleted: float) -> str:
        """The steps of one gap, from the last Ready pod seen (`ready`) to the first terminating one (`deleted`)."""
        def after(times: list[float]) -> str:
            found = next((t for t in times if ready <= t <= deleted), None)
            return "-" if found is None else f"{(found - ready) * 1e3:.0f}"

        return (f"reconcile started +{after(self.reconciles)} ms, state written +{after(self.state_writes)} ms, "
                f"first DELETE sent +{after(self.deletes)} ms, "
                f"its pod seen terminating +{(deleted - ready) * 1e3:.0f} ms")

    def controller_share(self, ready: float, deleted: float) -> float | None:
        sent = next((t for t in self.deletes if ready <= t <= deleted), None)
        return None if sent is None else sent - ready


class Timeline:
    """Where a roll's pods are, sampled every `period` s (`--timeline FILE`, JSON lines): the rolled DaemonSet's
    pods by state (old and live, old terminating, new not Ready, new Ready), nodes without a pod, the
    controller's and the sim's CPU, its reconciles and DELETEs so far. Counters kept by a handler on the
    controller's pod informer (the events it plans on), so sampling reads no pod."""

    def __init__(self, controller: Controller, metrics: ControllerMetrics, sim: Sim, nodes: int, file: Path | None,
                 period: float = 0.5) -> None:
        self.controller, self.metrics, self.sim, self.nodes, self.period = controller, metrics, sim, nodes, period
        self.file = file
        self.app = ""
        self.old_revision = ""
        self.state: dict[str, str] = {}  # pod key -> state
        self.counts: dict[str, int] = {}
        self.rows: list[JSON] = []
        self.deleted_at: dict[str, float] = {}  # node -> when its old pod was first seen deleted
        self.ready_at: dict[str, float] = {}  # node -> when a new pod of it was first seen Ready
        controller.pods.add_handler(self.on_pod)

    def start(self, app: str) -> None:
        """From now on count `app`'s pods: those of the revision it runs now are old, any other is new."""
        self.app, self.rows = app, []
        self.old_revision = str(labels_of(next(p for p in self.controller.pods.items.values()
                                               if labels_of(p).get("app") == app and not is_terminating(p)))
                                .get(LABEL_REVISION_HASH))
        self.state, self.counts, self.deleted_at, self.ready_at = {}, {}, {}, {}
        for pod in self.controller.pods.items.values():
            self.on_pod("ADDED", pod, None)

    def _state_of(self, pod: JSON) -> str:
        if is_terminating(pod):
            return "terminating"
        if labels_of(pod).get(LABEL_REVISION_HASH) == self.old_revision:
            return "old"
        return "new_ready" if is_pod_ready(pod) else "new_unready"

    def on_pod(self, etype: str, pod: JSON, old: JSON | None) -> None:
        if not self.app or labels_of(pod).get("app") != self.app:
            return
        key = key_of(pod)
        before = self.state.pop(key, None)
        if before is not None:
            self.counts[before] -= 1
        if etype != "DELETED":
            now = self._state_of(pod)
            self.state[key] = now
            self.counts[now] = self.counts.get(now, 0) + 1
        else:
            now = "gone"
        node = str(pod["spec"].get("nodeName") or "")
        if now in ("terminating", "gone"):
            self.deleted_at.setdefault(node, time.monotonic())
        elif now == "new_ready":
            self.ready_at.setdefault(node, time.monotonic())

    def save(self, name: str, image: str, took: float) -> None:
        if self.file is not None:
            with self.file.open("a") as out:
                out.write(json.dumps({"roll": name, "image": image, "took": took, "rows": self.rows}) + "\n")

    def summary(self) -> str:
        """When the deletions were made and how long each node took from its old pod's deletion to a Ready new one."""
        deletes, readies = self.deleted_at.values(), self.ready_at.values()
        if not deletes or not readies:
            return "no timeline"
        latencies = sorted(self.ready_at[n] - self.deleted_at[n] for n in self.ready_at if n in self.deleted_at)
        return (f"deletes over {max(deletes) - min(deletes):.1f} s, last delete -> last Ready "
                f"{max(readies) - max(deletes):.1f} s; per node delete -> Ready median "
                f"{statistics.median(latencies):.2f} s, max {latencies[-1]:.2f} s")

    def _wave(self) -> str:
        plan = self.controller.plans.items.get(f"{NAMESPACE}/{self.app}")
        status = (plan or {}).get("status") or {}
        if not status.get("phase"):
            return ""
        return f"{status.get('wave')}/{status.get('phase')}"

    async def run(self, started: float) -> None:
        while True:
            live = sum(v for k, v in self.counts.items() if k != "terminating")
            reconciles = sum(s.value for m in self.metrics.reconciles.collect() for s in m.samples
                             if s.name.endswith("_total"))
            self.rows.append({
                "t": round(time.monotonic() - started, 2), **self.counts, "no_pod": self.nodes - live,
                "ctl_cpu": round(time.process_time(), 2), "sim_cpu": round(cpu_seconds(self.sim.proc.pid), 2),
                "reconciles": reconciles, "deletes": writes_by_kind(self.metrics).get("pod_delete", 0.0),
                "queue": len(self.controller.queue), "wave": self._wave(),
            })
            await asyncio.sleep(self.period)


async def patient(sim: Sim, method: str, path: str, body: JSON | None = None) -> JSON:
    """A request with a long timeout: while the sim creates thousands of pods (one pass of its DaemonSet
    controller) it answers nothing else for minutes."""
    data = None if body is None else json.dumps(body)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as session, session.request(
            method, sim.url + path, data=data, headers={"Content-Type": "application/json"}) as resp:
        if resp.status not in (200, 201):
            raise RuntimeError(f"{method} {path}: {resp.status} {(await resp.text())[:300]}")
        return dict(await resp.json())


def writes_by_kind(metrics: ControllerMetrics) -> dict[str, float]:
    found: dict[str, float] = {}
    for metric in metrics.api_writes.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                found[str(sample.labels.get("kind"))] = sample.value
    return found


async def roll(sim: Sim, controller: Controller, timeline: Timeline, name: str, n: int,
               image: str) -> tuple[float, float, float]:
    """Wall time, sim CPU and controller CPU of rolling `name` to `image` (one no node has pulled yet)."""
    sim_cpu, own_cpu = cpu_seconds(sim.proc.pid), time.process_time()
    started = time.monotonic()
    timeline.start(name)
    sampler = asyncio.create_task(timeline.run(started))
    patched = await sim.request("PATCH", f"{DS_PATH}/{name}", {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": image}]}}}}, MERGE_PATCH)
    await wait_rolled(sim, name, n, int(patched["metadata"]["generation"]), 3600)
    took = time.monotonic() - started
    sampler.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sampler
    timeline.save(name, image, took)
    note(f"{name} roll to {image}: {timeline.summary()}")
    await until(lambda: len(controller.queue) == 0, 60, "the queue drained")
    return took, cpu_seconds(sim.proc.pid) - sim_cpu, time.process_time() - own_cpu


async def waved_roll(sim: Sim, controller: Controller, timeline: Timeline, ranking: Ranking, n: int,
                     image: str, trace: GapTrace, clock: WaveClock) -> tuple[float, list[float], list[float]]:
    """Roll `waved` to `image`: wall time, and per wave boundary the delay from the last Ready pod of wave k
    to the first deletion in wave k+1, and the controller's share of it (to its first DELETE sent)."""
    clock.restart()
    old = str(labels_of(next(p for p in controller.pods.items.values()
                             if labels_of(p).get("app") == "waved" and not is_terminating(p)))
              .get(LABEL_REVISION_HASH))
    revision_task = asyncio.create_task(new_revision(sim, "waved", old))
    waved_task = asyncio.create_task(roll(sim, controller, timeline, "waved", n, image))
    clock.revision = await revision_task
    took, sim_cpu, own_cpu = await waved_task
    note(f"waved roll to {image}: {took:.1f} s; CPU: sim {sim_cpu:.1f} s, controller {own_cpu:.1f} s")
    spans = [0.0, 0.0]  # the waves' deletions (first to last), their tails (last delete to last Ready)
    for k in range(1, ranking.waves + 1):
        # How long each wave took: a wave smaller than the budget still takes a whole replacement round, and
        # the next one waits for its last pod (what a plan costs over a roll without one).
        readies = [t for t in (clock.ready_at.get(node) for node in ranking.nodes_of_wave(k)) if t is not None]
        deletes = [t for t in (clock.deleted_at.get(node) for node in ranking.nodes_of_wave(k)) if t is not None]
        if readies and deletes:
            spans[0] += max(deletes) - min(deletes)
            spans[1] += max(readies) - max(deletes)
            latencies = sorted(clock.ready_at[node] - clock.deleted_at[node] for node in ranking.nodes_of_wave(k)
                               if node in clock.ready_at and node in clock.deleted_at)
            note(f"wave {k}: {len(ranking.nodes_of_wave(k))} nodes, first delete -> last Ready "
                 f"{max(readies) - min(deletes):.1f} s (deletes over {max(deletes) - min(deletes):.1f} s, "
                 f"last delete -> last Ready {max(readies) - max(deletes):.1f} s; per node delete -> Ready "
                 f"median {statistics.median(latencies):.2f} s, max {latencies[-1]:.2f} s)")
    gaps, shares = [], []
    for k in range(1, ranking.waves):
        finished = [clock.ready_at.get(node) for node in ranking.nodes_of_wave(k)]
        starts = [clock.deleted_at.get(node) for node in ranking.nodes_of_wave(k + 1)]
        if any(t is None for t in finished) or not any(t is not None for t in starts):
            note(f"wave {k}: incomplete clock ({sum(t is None for t in finished)} nodes never seen Ready)")
            continue
        last_ready = max(t for t in finished if t is not None)
        first_delete = min(t for t in starts if t is not None)
        gap = first_delete - last_ready
        note(f"wave {k} -> {k + 1}: first delete {gap * 1e3:.0f} ms after the last Ready pod of wave {k} "
             f"({trace.split(last_ready, first_delete)})")
        gaps.append(gap)
        share = trace.controller_share(last_ready, first_delete)
        if share is not None:
            shares.append(share)
    # Where the time went, to set against the plain roll's "deletes over" and "last delete -> last Ready".
    note(f"waved roll to {image}: deletions {spans[0]:.1f} s, tails (last delete -> last Ready) {spans[1]:.1f} s, "
         f"gaps {sum(gaps):.1f} s, summed over the {ranking.waves} waves")
    return took, gaps, shares


async def wait_rolled(sim: Sim, name: str, nodes: int, generation: int, timeout: float) -> None:
    """Until the DaemonSet's status, for this generation of its template, says every node runs an updated,
    available pod (one GET a second: scanning 20,000 cached pods would cost the controller's CPU)."""
    started = time.monotonic()
    while True:
        status = (await sim.request("GET", f"{DS_PATH}/{name}")).get("status") or {}
        if int(status.get("observedGeneration") or 0) >= generation and all(
                int(status.get(field) or 0) == nodes
                for field in ("updatedNumberScheduled", "numberAvailable", "currentNumberScheduled")):
            return
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{name} not rolled after {timeout}s: {status}")
        await asyncio.sleep(0.5)


async def new_revision(sim: Sim, name: str, old: str) -> str:
    """The hash of the DaemonSet's newest ControllerRevision, once it is not `old`."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = await sim.request("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/controllerrevisions")
        owned = [r for r in listed.get("items") or [] if r["metadata"]["name"].startswith(f"{name}-")]
        if owned:
            newest = max(owned, key=lambda r: int(r.get("revision") or 0))
            value = str(newest["metadata"]["labels"][LABEL_REVISION_HASH])
            if value != old:
                return value
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no new revision of {name}")


def wave_sizes(targets: list[int]) -> list[int]:
    """The waves' sizes from their cumulative `targets`."""
    return [after - before for before, after in zip([0, *targets], targets, strict=False)]


def budget_rounds(targets: list[int], budget: int) -> int:
    """Replacement rounds of the waves (cumulative `targets`), `budget` pods at a time, a wave finishing before
    the next starts: a wave smaller than the budget still takes a whole round."""
    return sum(-(-size // budget) for size in wave_sizes(targets))


def budget_floor(targets: list[int], budget: int) -> float:
    """Replacement rounds of the waves (cumulative `targets`) over those of one roll of every node, `budget` pods
    at a time: what a plan costs at the least when pods take a fixed time to replace, before any overhead
    (the module's docstring works the default case out)."""
    return budget_rounds(targets, budget) / -(-targets[-1] // budget)


async def run(args: argparse.Namespace) -> None:
    log.configure(LogConfig(level="error"))
    n = args.nodes
    async with workdir("rollout-waves") as work:
        sim = Sim(work, nodes=n, extra=["--heartbeat-interval", "60", "--node-grace", "600", "--no-node-links",
                                        "--no-control-plane-events",
                                        "--history", str(max(10_000, 30 * n))])
        await sim.start(timeout=300)
        task: asyncio.Task[None] | None = None
        try:
            budget = {"apps.openyurt.io/max-unavailable": args.max_unavailable}
            await install_crd(sim)
            await create_plan(sim, "waved", steps_of(args.steps), bake="0s")
            for ds in (manifest("plain", "AdvancedRollingUpdate", budget),
                       manifest("waved", "AdvancedRollingUpdate", budget)):
                await patient(sim, "POST", DS_PATH, ds)
            deadline = time.monotonic() + 1800
            while any([int(((await patient(sim, "GET", f"{DS_PATH}/{name}")).get("status") or {})
                            .get("numberReady") or 0) < n for name in ("plain", "waved")]):
                if time.monotonic() > deadline:
                    raise TimeoutError("the DaemonSets' pods did not all become Ready")
                await asyncio.sleep(2)
            app = ControllerApp(ControllerConfig(kubeconfig=sim.dir / "admin.kubeconfig", metrics_port=0,
                                                 request_timeout=60.0))
            task = asyncio.create_task(app.run())
            await until(lambda: app.controller is not None, 60, "the controller started")
            controller = app.controller
            assert controller is not None
            await until(lambda: len(controller.pods.items) == 2 * n and len(controller.queue) == 0, 900,
                        "every pod cached", interval=1.0)
            await asyncio.sleep(1)
            timeline = Timeline(controller, app.metrics, sim, n, Path(args.timeline) if args.timeline else None)
            trace = GapTrace(controller, f"{NAMESPACE}/waved")
            # One clock for every waved roll: an informer keeps its handlers, so a clock per roll kept every
            # earlier roll's instants alive (the process's RSS grew by them).
            clock = WaveClock(controller, "waved")

            plain_before = writes_by_kind(app.metrics)
            plain_time, plain_sim, plain_ctl = await roll(sim, controller, timeline, "plain", n, "app:2")
            plain_writes = writes_by_kind(app.metrics)
            plain_total = sum(plain_writes.values()) - sum(plain_before.values())
            report("rollout_nodes", n, "nodes")
            report("rollout_plain_roll_time", plain_time, "s")
            note(f"plain roll CPU: sim {plain_sim:.1f} s, controller {plain_ctl:.1f} s")

            spec, problems = parse_spec(controller.plans.items[f"{NAMESPACE}/waved"]["spec"])
            assert spec is not None, problems
            parsed = spec.plan()
            ranking = rank(parsed, {name_of(node): labels_of(node) for node in controller.nodes.items.values()})
            note(f"waves as ranked: {ranking.targets} cumulative nodes")
            report("rollout_waves", ranking.waves, "waves")
            before = writes_by_kind(app.metrics)
            waved_time, gaps, shares = await waved_roll(sim, controller, timeline, ranking, n, "app:3", trace, clock)
            after = writes_by_kind(app.metrics)
            report("rollout_waved_roll_time", waved_time, "s")
            plain_times, waved_times = [plain_time], [waved_time]
            # This process (the controller) after each round, no collection forced: RSS, and the objects the
            # interpreter's allocator holds (what a leak grows; RSS also moves with the allocator's high water).
            rss, blocks = [rss_mb(os.getpid())], [sys.getallocatedblocks()]
            # ABBA: a second waved roll, then a second plain one, so a load that changes during the run (the
            # machine is shared) weighs on both kinds alike.
            for round_ in range(1, args.rounds):
                more, more_gaps, more_shares = await waved_roll(sim, controller, timeline, ranking, n,
                                                                f"app:{2 + 2 * round_ + 1}", trace, clock)
                report(f"rollout_waved_roll_time_{round_ + 1}", more, "s")
                waved_times.append(more)
                gaps += more_gaps
                shares += more_shares
                again, _, _ = await roll(sim, controller, timeline, "plain", n, f"app:{2 + 2 * round_ + 2}")
                report(f"rollout_plain_roll_time_{round_ + 1}", again, "s")
                plain_times.append(again)
                rss.append(rss_mb(os.getpid()))
                blocks.append(sys.getallocatedblocks())
            note("this process's RSS after each round: " + ", ".join(f"{mib:.0f}" for mib in rss) + " MiB; "
                 "its allocated blocks: " + ", ".join(f"{count:,}" for count in blocks))
            report("rollout_rss_after_first_round", rss[0], "MiB")
            report("rollout_rss_after_last_round", rss[-1], "MiB")
            # Each round's ratio (its waved roll over its plain one), and their median: one round slowed by the
            # shared machine's load does not decide.
            ratios = [waved / plain for waved, plain in zip(waved_times, plain_times, strict=True)]
            for round_, ratio in enumerate(ratios, start=1):
                report(f"rollout_waved_to_plain_ratio_round_{round_}", ratio, "x")
            ratio = statistics.median(ratios)
            report("rollout_waved_to_plain_ratio", ratio, "x")
            report("rollout_waved_to_plain_ratio_pooled", sum(waved_times) / sum(plain_times), "x")
            per_round = max(1, parse_int_or_percent(args.max_unavailable).scaled(n, round_up=True))
            floor = budget_floor(ranking.targets, per_round)
            report("rollout_waved_to_plain_floor", floor, "x")
            report("rollout_waved_to_plain_above_floor", ratio - floor, "x")
            note(f"the floor: waves of {wave_sizes(ranking.targets)} nodes at {per_round} pods at a time take "
                 f"{budget_rounds(ranking.targets, per_round)} replacement rounds, one roll of {n} nodes "
                 f"{-(-n // per_round)}: {floor:.3f}x")
            if gaps:
                report("rollout_wave_gap_p50", statistics.median(gaps) * 1e3, "ms")
                report("rollout_wave_gap_max", max(gaps) * 1e3, "ms")
            if shares:
                # The controller's part of each gap: from the last Ready pod seen to its first DELETE sent (the rest
                # is the API's answer and the watch event of the terminating pod).
                report("rollout_wave_gap_controller_p50", statistics.median(shares) * 1e3, "ms")
                report("rollout_wave_gap_controller_max", max(shares) * 1e3, "ms")

            total = 0.0
            for kind in sorted(after):
                delta = after[kind] - before.get(kind, 0.0)
                if delta:
                    report(f"rollout_waved_writes_{kind}", delta, "writes")
                    total += delta
            report("rollout_waved_writes_total", total, "writes")
            report("rollout_plain_writes_total", plain_total, "writes")
            # What the plan adds over the same roll without one: its Events and state writes (per wave).
            report("rollout_plan_extra_writes", total - plain_total, "writes")
            report("rollout_waved_writes_per_wave", total / ranking.waves, "writes")
            non_pod = total - (after.get("pod_delete", 0.0) - before.get("pod_delete", 0.0))
            report("rollout_waved_writes_besides_deletes", non_pod, "writes")
            # The plan's own Events, by reason, over every waved roll (from the API, as `kubectl get events`).
            listed = await patient(sim, "GET", f"/api/v1/namespaces/{NAMESPACE}/events")
            reasons: dict[str, int] = {}
            for event in listed.get("items") or []:
                if (event.get("involvedObject") or {}).get("name") == "waved" \
                        and (event.get("involvedObject") or {}).get("kind") == "DaemonSet":
                    reason = str(event.get("reason"))
                    reasons[reason] = reasons.get(reason, 0) + int(event.get("count") or 1)
            note(f"Events on the waved DaemonSet over {len(waved_times)} roll(s), by reason: {reasons}")
            plan_events = sum(v for r, v in reasons.items() if r.startswith(("Wave", "Rollout")))
            report("rollout_plan_events_per_roll", plan_events / len(waved_times), "events")
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--steps", default="1%,10%,50%,100%")
    parser.add_argument("--max-unavailable", default="10%")
    parser.add_argument("--timeline", help="append each roll's timeline (JSON, a row every 0.5 s) to this file")
    parser.add_argument("--rounds", type=int, default=3,
                        help="plain, waved, then (rounds-1) x waved, plain; the ratio is the rounds' median")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
