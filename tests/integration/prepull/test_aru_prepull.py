"""AdvancedRollingUpdate with `edgeagent.io/pre-pull: "true"`: every old pod is deleted only once its node has
the new images, and pulls run ahead of the unavailability budget (watch-recorded over HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient, Timeouts
from edgeagent.kube.informer import Informer
from edgeagent.kube.objects import get_condition, is_pod_ready
from tests.conftest import SimFactory
from tests.integration.controller.conftest import Controllers, current_hash
from tests.integration.prepull.conftest import JobRecorder
from tests.support.waiting import eventually

JSON = dict[str, Any]
NS = "default"
DS_PATH = f"/apis/apps/v1/namespaces/{NS}/daemonsets"


def aru(pre_pull: bool) -> JSON:
    annotations = {"apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
                   "apps.openyurt.io/max-unavailable": "1"}
    if pre_pull:
        annotations["edgeagent.io/pre-pull"] = "true"
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "web", "namespace": NS, "annotations": annotations},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "updateStrategy": {"type": "OnDelete"},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "main", "image": "registry.local/web:1"}]}}}}


class DeletionWatch:
    """Records each DaemonSet pod as it was when its deletion began, and the pre-pull requests seen by then."""

    def __init__(self, client: KubeClient) -> None:
        self.informer = Informer(client, f"/api/v1/namespaces/{NS}/pods", label_selector="app=web", name="w",
                                 backoff_initial=0.05)
        self.deleted: list[JSON] = []
        self.requested_at_first_delete: int | None = None
        self.requested: set[str] = set()
        self.informer.add_handler(self._on)

    def _on(self, etype: str, pod: JSON, old: JSON | None) -> None:
        if get_condition(pod, "PodImageReady") is not None:
            self.requested.add(pod["metadata"]["name"])
        if pod["metadata"].get("deletionTimestamp") and (old is None or not old["metadata"].get("deletionTimestamp")):
            self.deleted.append(pod)
            if self.requested_at_first_delete is None:
                self.requested_at_first_delete = len(self.requested)


async def roll(sim_factory: SimFactory, controllers: Controllers, *,
               pre_pull: bool) -> tuple[DeletionWatch, JobRecorder]:
    sim = await sim_factory(nodes=4, image_pull_seconds=0.3)
    admin = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=10))
    try:
        await admin.create(DS_PATH, aru(pre_pull))

        async def all_ready(image: str) -> bool:
            pods = (await admin.get(f"/api/v1/namespaces/{NS}/pods", query={"labelSelector": "app=web"}))["items"]
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            return len(live) == 4 and all(is_pod_ready(p) and p["spec"]["containers"][0]["image"] == image
                                          for p in live)

        await eventually(lambda: all_ready("registry.local/web:1"), what="v1 running")
        first = await current_hash(admin, "web")
        await controllers.start(sim, image_prepull_backoff=0.3)
        watch = DeletionWatch(admin)
        task = asyncio.create_task(watch.informer.run())
        recorder = JobRecorder(admin)
        try:
            async with recorder.running():
                await asyncio.wait_for(watch.informer.synced.wait(), 10)
                await admin.patch(f"{DS_PATH}/web", {"spec": {"template": {"spec": {"containers": [
                    {"name": "main", "image": "registry.local/web:2"}]}}}}, CONTENT_MERGE_PATCH)
                await eventually(lambda: all_ready("registry.local/web:2"), timeout=40, what="v2 everywhere")
                hash_ = await current_hash(admin, "web")
                assert hash_ != first
                watch.hash = hash_  # type: ignore[attr-defined]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return watch, recorder
    finally:
        await admin.close()


async def test_with_pre_pull_each_node_pulls_before_its_pod_is_deleted(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    watch, recorder = await roll(sim_factory, controllers, pre_pull=True)
    hash_ = watch.hash  # type: ignore[attr-defined]
    assert len(watch.deleted) == 4
    for pod in watch.deleted:
        cond = get_condition(pod, "PodImageReady") or {}
        assert (cond.get("status"), cond.get("reason"), cond.get("message")) == (
            "True", "PullImageSuccess", f"controllerrevision: {hash_}"), pod["metadata"]["name"]
    # Budget 1, cap 20: the pulls for other nodes were asked before the first deletion (run ahead).
    assert watch.requested_at_first_delete is not None and watch.requested_at_first_delete >= 2
    assert len(recorder.created) == 4 and recorder.wrong_node == [] and recorder.max_per_node == 1


async def test_without_pre_pull_nothing_is_pulled_ahead(sim_factory: SimFactory, controllers: Controllers) -> None:
    watch, recorder = await roll(sim_factory, controllers, pre_pull=False)
    assert len(watch.deleted) == 4
    assert all(get_condition(p, "PodImageReady") is None for p in watch.deleted)
    assert recorder.created == []
