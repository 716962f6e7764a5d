"""Controller tests: real controllers (in this event loop) against the simulated cluster over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from typing import Any

import pytest

from edgeagent.config import ControllerConfig, RolloutConfig
from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient, Timeouts
from edgeagent.kube.objects import get_condition, is_node_ready, is_pod_ready, is_terminating
from edgeagent.rollout import command as rollout_command
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.support.waiting import eventually

JSON = dict[str, Any]
NS = "default"
DS_PATH = f"/apis/apps/v1/namespaces/{NS}/daemonsets"


def daemonset_manifest(name: str, *, strategy: str, image: str = "nginx:1.19.4",
                       annotations: dict[str, str] | None = None, min_ready: int = 0,
                       update_type: str = "OnDelete") -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS,
                     "annotations": {"apps.openyurt.io/update-strategy": strategy, **(annotations or {})}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": update_type},
            "minReadySeconds": min_ready,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": image}]},
            },
        },
    }


class Controllers:
    """Controllers running in this event loop; `stop(app)` without lease release simulates a crash."""

    def __init__(self) -> None:
        self._tasks: dict[int, asyncio.Task[None]] = {}

    async def start(self, cluster: SimCluster, *, release_lease: bool = True, workers: int = 4,
                    serve_metrics: bool = False, **overrides: Any) -> ControllerApp:
        values: dict[str, Any] = {
            # kube-system exists in every cluster; the real default (edgeagent-system) is tested on its own.
            "kubeconfig": cluster.admin_kubeconfig, "metrics_port": 0, "lease_duration": 1.0,
            "lease_namespace": "kube-system",
            "renew_interval": 0.2, "request_timeout": 5.0, **overrides,
        }
        app = ControllerApp(ControllerConfig(**values), release_lease=release_lease, workers=workers,
                            serve_metrics=serve_metrics)
        ready = asyncio.Event()
        task = asyncio.create_task(app.run(ready=ready), name=f"controller-{app.identity}")
        self._tasks[id(app)] = task
        await asyncio.wait_for(ready.wait(), 10)
        return app

    async def stop(self, app: ControllerApp) -> None:
        task = self._tasks.pop(id(app))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def stop_all(self) -> None:
        """Cancellation is how controllers stop here; any other exception on the way out fails the test."""
        for task in reversed(list(self._tasks.values())):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()


@pytest.fixture
async def controllers() -> AsyncIterator[Controllers]:
    group = Controllers()
    try:
        yield group
    finally:
        await group.stop_all()


async def create_daemonset(kube: KubeClient, manifest: JSON) -> JSON:
    return await kube.create(DS_PATH, manifest)


async def patch_daemonset(kube: KubeClient, name: str, patch: JSON) -> JSON:
    return await kube.patch(f"{DS_PATH}/{name}", patch, CONTENT_MERGE_PATCH)


async def set_image(kube: KubeClient, name: str, image: str) -> JSON:
    return await patch_daemonset(kube, name, {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": image}]}}}})


async def get_daemonset(kube: KubeClient, name: str) -> JSON:
    return await kube.get(f"{DS_PATH}/{name}")


async def pods_of(kube: KubeClient, name: str) -> list[JSON]:
    listed = await kube.get(f"/api/v1/namespaces/{NS}/pods", query={"labelSelector": f"app={name}"})
    return list(listed.get("items") or [])


async def current_hash(kube: KubeClient, name: str) -> str | None:
    """The hash of the newest ControllerRevision of the DaemonSet (what the controller must use)."""
    ds = await get_daemonset(kube, name)
    revs = (await kube.get(f"/apis/apps/v1/namespaces/{NS}/controllerrevisions"))["items"]
    owned = [r for r in revs if any(ref.get("uid") == ds["metadata"]["uid"]
                                    for ref in r["metadata"].get("ownerReferences") or [])]
    if not owned:
        return None
    newest = max(owned, key=lambda r: int(r.get("revision") or 0))
    return str(newest["metadata"]["labels"]["controller-revision-hash"])


def image_of(pod: JSON) -> str:
    return str(pod["spec"]["containers"][0]["image"])


async def template_back_on(kube: KubeClient, name: str, image: str) -> JSON:
    """The DaemonSet once its template runs `image` again. A rollback writes the plan's status first and restores
    the template after it (a refused status write moves nothing), so a read right after the status says
    RolledBack can still see the bad template: on a loaded `make test` it did."""
    async def probe() -> JSON | None:
        ds = await get_daemonset(kube, name)
        return ds if image_of(ds["spec"]["template"]) == image else None

    found: JSON = await eventually(probe, timeout=30, what=f"{name}'s template back on {image}")
    return found


async def images_by_node(kube: KubeClient, name: str) -> dict[str, str]:
    """Live (non-terminating) pods only."""
    return {p["spec"].get("nodeName", ""): image_of(p) for p in await pods_of(kube, name) if not is_terminating(p)}


async def all_running(kube: KubeClient, name: str, count: int, image: str | None = None) -> bool:
    pods = [p for p in await pods_of(kube, name) if not is_terminating(p)]
    return len(pods) == count and all(is_pod_ready(p) and (image is None or image_of(p) == image) for p in pods)


async def node_ready(kube: KubeClient, node: str) -> bool:
    return is_node_ready(await kube.get(f"/api/v1/nodes/{node}"))


async def events_for(kube: KubeClient, name: str) -> list[JSON]:
    listed = await kube.get(f"/api/v1/namespaces/{NS}/events")
    return [e for e in listed.get("items") or [] if (e.get("involvedObject") or {}).get("name") == name
            and (e.get("involvedObject") or {}).get("kind") == "DaemonSet"]


def need_upgrade(pod: JSON) -> tuple[str, str] | None:
    cond = get_condition(pod, "PodNeedUpgrade")
    return (str(cond.get("status")), str(cond.get("message"))) if cond else None


@contextlib.asynccontextmanager
async def admin_client(cluster: SimCluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(cluster.admin_kubeconfig, Timeouts(connect=2, request=5))
    try:
        yield client
    finally:
        await client.close()


def controller_deletions(cluster: SimCluster) -> list[JSON]:
    """Graceful pod deletions recorded by the sim's store: the controller's (the kubelet's are grace 0)."""
    return [d for d in cluster.store.deletes if d["resource"] == "pods" and d["outcome"] == "graceful"]


class DisruptionRecorder:
    """Watches a DaemonSet's pods and records, at every event, how many nodes are in a replacement that the
    deletion of an available pod started: from the deletion until a Ready pod runs on that node again.

    Pods that were already unavailable when deleted cost no availability (OpenYurt replaces them first),
    and unavailability that nobody's deletion caused (a node partition) is not the controller's doing.
    """

    def __init__(self, client: KubeClient, app_label: str) -> None:
        self._client = client
        self._label = app_label
        self.pods: dict[str, JSON] = {}
        self.disrupted: set[str] = set()
        self.max_disrupted = 0
        self.history: list[tuple[str, str, int]] = []
        self._task: asyncio.Task[None] | None = None
        self.started = asyncio.Event()

    async def __aenter__(self) -> DisruptionRecorder:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.started.wait(), 5)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        path = f"/api/v1/namespaces/{NS}/pods"
        query = {"labelSelector": f"app={self._label}"}
        listed = await self._client.get(path, query=query)
        for pod in listed.get("items") or []:
            self.pods[pod["metadata"]["uid"]] = pod
        rv = str(listed["metadata"]["resourceVersion"])
        self.started.set()
        while True:
            async for event in self._client.watch(path, query={**query, "resourceVersion": rv}, idle_timeout=30):
                obj = event.get("object") or {}
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(str(event["type"]), obj)

    def _apply(self, etype: str, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        node = str(pod["spec"].get("nodeName") or "")
        previous = self.pods.get(uid)
        if (is_terminating(pod) and previous is not None and not is_terminating(previous)
                and is_pod_ready(previous)):
            self.disrupted.add(node)
        if etype == "DELETED":
            self.pods.pop(uid, None)
        else:
            self.pods[uid] = pod
        for name in list(self.disrupted):
            if any(p["spec"].get("nodeName") == name and not is_terminating(p) and is_pod_ready(p)
                   for p in self.pods.values()):
                self.disrupted.discard(name)
        self.max_disrupted = max(self.max_disrupted, len(self.disrupted))
        self.history.append((etype, pod["metadata"]["name"], len(self.disrupted)))


async def rollout(sim: SimCluster, action: str, name: str = "web") -> tuple[int, str, str]:
    """`edgeagent rollout ACTION NAME` as the CLI runs it (status or a steering verb): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    cfg = RolloutConfig(daemonset=name, namespace="default", kubeconfig=sim.admin_kubeconfig, action=action)
    main = rollout_command.main
    code = await asyncio.to_thread(main, cfg, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
async def six(sim_factory: SimFactory) -> SimCluster:
    """A six-node sim for the rollout-steering tests."""
    return await sim_factory(nodes=6)


@pytest.fixture
async def kube(six: SimCluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(six.admin_kubeconfig, Timeouts(connect=2, request=5))
    try:
        yield client
    finally:
        await client.close()
