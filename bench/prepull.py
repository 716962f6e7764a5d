"""Image pre-pull: what it saves during an upgrade, what it costs, how fast it goes (issue 11).

Three measurements, each on a fresh simulated cluster with the controller in the same process:

- `aru_unavailable_*`: an AdvancedRollingUpdate roll (6 nodes, max-unavailable 2) to an image whose pull takes
  `--pull-seconds` (default 10) on each node, without and with `edgeagent.io/pre-pull: "true"`. Per node, the
  unavailability is from the moment the old pod's deletion begins (its deletionTimestamp seen by a watch)
  until a pod of the new revision on that node is Ready. p50 and max over the nodes, plus the roll's duration.
- `prepull_jobs_per_pod`, `prepull_writes_per_pod`: the controller's Jobs and API writes (its own
  `edgeagent_controller_api_writes` counter: Job create/delete, condition patches, Events) per pre-pulled
  pod, over a 200-pod pre-pull; the request itself (the agent's one condition patch) is not the controller's.
- `prepull_throughput_200`: 200 pods on 200 nodes ask for a pre-pull at once (default caps: 20 Jobs, one
  per node; default sim pull 0.5 s); pods per second from the last request written to the last
  `PullImageSuccess` seen.

Prints `name value unit` lines.

    .venv/bin/python bench/prepull.py [--pull-seconds 10] [--pods 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import note, percentile, report
from edgeagent.config import ControllerConfig, SimConfig
from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient, Timeouts
from edgeagent.kube.informer import DELETED, Informer
from edgeagent.kube.objects import get_condition, is_pod_ready
from edgeagent.sim.cluster import SimCluster

JSON = dict[str, Any]
NS = "default"
DS_PATH = f"/apis/apps/v1/namespaces/{NS}/daemonsets"
PODS = f"/api/v1/namespaces/{NS}/pods"


def daemonset(strategy: str, annotations: dict[str, str]) -> JSON:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "app", "namespace": NS,
                         "annotations": {"apps.openyurt.io/update-strategy": strategy, **annotations}},
            "spec": {"selector": {"matchLabels": {"app": "app"}}, "updateStrategy": {"type": "OnDelete"},
                     "template": {"metadata": {"labels": {"app": "app"}},
                                  "spec": {"terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "main", "image": "registry.local/app:1"}]}}}}


@contextlib.asynccontextmanager
async def cluster(node_names: list[str], **sim: Any) -> AsyncIterator[tuple[SimCluster, KubeClient, ControllerApp]]:
    """The sim with these nodes (`sim`: SimConfig fields), an admin client, and a started controller."""
    with tempfile.TemporaryDirectory(prefix="bench-prepull-") as tmp:
        config = SimConfig(dir=Path(tmp), pod_startup=0.2, pod_termination=0.2, **sim)
        async with SimCluster(config, node_names=node_names) as sim_cluster:
            admin = await KubeClient.connect(sim_cluster.admin_kubeconfig, Timeouts(connect=2, request=30))
            app = ControllerApp(ControllerConfig(kubeconfig=sim_cluster.admin_kubeconfig, metrics_port=0), workers=4)
            ready = asyncio.Event()
            task = asyncio.create_task(app.run(ready=ready))
            try:
                await asyncio.wait_for(ready.wait(), 30)
                yield sim_cluster, admin, app
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await admin.close()


async def wait(what: str, probe: Any, timeout: float = 300.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


async def live_pods(admin: KubeClient) -> list[JSON]:
    listed = await admin.get(PODS, query={"labelSelector": "app=app"})
    return [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]


async def all_on(admin: KubeClient, count: int, image: str) -> bool:
    pods = await live_pods(admin)
    return len(pods) == count and all(is_pod_ready(p) and p["spec"]["containers"][0]["image"] == image for p in pods)


async def aru_roll(nodes: int, pull: float, pre_pull: bool) -> tuple[list[float], float]:
    annotations = {"apps.openyurt.io/max-unavailable": "2"}
    if pre_pull:
        annotations["edgeagent.io/pre-pull"] = "true"
    names = [f"edge-{i}" for i in range(1, nodes + 1)]
    async with cluster(names, heartbeat_interval=2.0, node_grace=60.0, image_pull_seconds=0.2) as (sim, admin, _app):
        await admin.create(DS_PATH, daemonset("AdvancedRollingUpdate", annotations))
        await wait("v1 running", lambda: all_on(admin, nodes, "registry.local/app:1"))
        sim.set_image("registry.local/app:2", pull_seconds=pull)
        down: dict[str, float] = {}
        back: dict[str, float] = {}

        def on_pod(etype: str, pod: JSON, old: JSON | None) -> None:
            node = str(pod["spec"].get("nodeName") or "")
            now = time.monotonic()
            if pod["metadata"].get("deletionTimestamp") and node not in down and etype != DELETED:
                down[node] = now
            image = pod["spec"]["containers"][0]["image"]
            if (node in down and node not in back and image == "registry.local/app:2" and is_pod_ready(pod)
                    and not pod["metadata"].get("deletionTimestamp")):
                back[node] = now

        informer = Informer(admin, PODS, label_selector="app=app", name="bench-pods")
        informer.add_handler(on_pod)
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.synced.wait(), 30)
            started = time.monotonic()
            await admin.patch(f"{DS_PATH}/app", {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "registry.local/app:2"}]}}}}, CONTENT_MERGE_PATCH)
            await wait("v2 everywhere", lambda: all_on(admin, nodes, "registry.local/app:2"), timeout=600)
            await wait("every node seen back", lambda: _true(len(back) == nodes), timeout=30)
            duration = max(back.values()) - started
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return [back[n] - down[n] for n in down], duration


async def _true(value: bool) -> bool:
    return value


async def burst(count: int) -> tuple[float, float, float]:
    """(pods per second, Jobs per pod, controller writes per pod) for `count` pods asking at once."""
    names = [f"n{i:03d}" for i in range(count)]
    async with cluster(names, heartbeat_interval=5.0, node_grace=120.0) as (_sim, admin, app):
        await admin.create(DS_PATH, daemonset("OTA", {}))
        await wait("v1 running", lambda: all_on(admin, count, "registry.local/app:1"))
        await admin.patch(f"{DS_PATH}/app", {"spec": {"template": {"spec": {"containers": [
            {"name": "main", "image": "registry.local/app:2"}]}}}}, CONTENT_MERGE_PATCH)

        async def outdated() -> list[JSON] | None:
            pods = await live_pods(admin)
            marked = [p for p in pods if (get_condition(p, "PodNeedUpgrade") or {}).get("status") == "True"]
            return marked if len(marked) == count else None

        pods = await wait("PodNeedUpgrade everywhere", outdated)
        hash_ = str((get_condition(pods[0], "PodNeedUpgrade") or {}).get("message", "")).split()[-1]
        await asyncio.sleep(1.0)  # let the OTA condition writes settle before counting
        writes_before = app.metrics.writes()
        jobs_before = app.metrics.writes("job_create")
        sem = asyncio.Semaphore(16)

        async def ask(pod: JSON) -> None:
            async with sem:
                await admin.patch(f"{PODS}/{pod['metadata']['name']}/status", {
                    "metadata": {"uid": pod["metadata"]["uid"]},
                    "status": {"conditions": [{"type": "PodImageReady", "status": "False",
                                               "reason": "WaitPullImage",
                                               "message": f"controllerrevision: {hash_}"}]}})

        await asyncio.gather(*(ask(p) for p in pods))
        asked = time.monotonic()

        async def done() -> bool:
            states = [get_condition(p, "PodImageReady") or {} for p in await live_pods(admin)]
            return sum(1 for s in states if s.get("reason") == "PullImageSuccess") == count

        await wait("all pulled", done, timeout=600, interval=0.2)
        elapsed = time.monotonic() - asked
        jobs_gone = lambda: _true(app.metrics.writes("job_delete") >= count)  # noqa: E731
        await wait("jobs deleted", jobs_gone, timeout=60)
        await asyncio.sleep(0.5)
        writes = app.metrics.writes() - writes_before
        jobs = app.metrics.writes("job_create") - jobs_before
    return count / elapsed, jobs / count, writes / count


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pull-seconds", type=float, default=10.0)
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--pods", type=int, default=200)
    args = parser.parse_args()
    note(f"ARU roll: {args.nodes} nodes, max-unavailable 2, new image pull {args.pull_seconds:g} s per node")
    for label, pre_pull in (("without", False), ("with", True)):
        samples, duration = await aru_roll(args.nodes, args.pull_seconds, pre_pull)
        report(f"aru_unavailable_{label}_prepull_p50", percentile(samples, 50), "s")
        report(f"aru_unavailable_{label}_prepull_max", max(samples), "s")
        report(f"aru_roll_{label}_prepull", duration, "s")
    note(f"pre-pull burst: {args.pods} pods on {args.pods} nodes, default caps (20 Jobs, 1 per node), pull 0.5 s")
    rate, jobs, writes = await burst(args.pods)
    report(f"prepull_throughput_{args.pods}", rate, "pods/s")
    report("prepull_jobs_per_pod", jobs, "jobs")
    report("prepull_writes_per_pod", writes, "writes")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
