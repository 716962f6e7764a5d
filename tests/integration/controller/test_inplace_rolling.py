"""AdvancedRollingUpdate in place (issue 37): pods patched, not deleted, within max-unavailable; a change that is
not image-only falls back to recreate with an Event; the readiness gate is False during the restart and True
after — real controller against the simulated cluster over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from edgeagent.contract import CONDITION_IN_PLACE_UPDATE_READY, LABEL_REVISION_HASH
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import get_condition, is_pod_ready, is_terminating
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    NS,
    Controllers,
    admin_client,
    all_running,
    controller_deletions,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    patch_daemonset,
    pods_of,
    set_image,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
OLD, NEW = "nginx:1.19.4", "nginx:1.19.5"
ARU = "AdvancedRollingUpdate"
IN_PLACE = {"edgeagent.io/update-type": "InPlaceIfPossible", "apps.openyurt.io/max-unavailable": "1"}


@contextlib.asynccontextmanager
async def unready_counter(kube: KubeClient, app: str) -> AsyncIterator[dict[str, Any]]:
    """Every version of the DaemonSet's pods, watched: the most pods not Ready at once, and every version."""
    seen: dict[str, Any] = {"max": 0, "versions": []}
    pods: dict[str, JSON] = {}

    async def run() -> None:
        path = f"/api/v1/namespaces/{NS}/pods"
        async for event in kube.watch(path, query={"labelSelector": f"app={app}"}):
            obj = event.get("object") or {}
            if event.get("type") == "DELETED":
                pods.pop(obj["metadata"]["uid"], None)
            elif event.get("type") in ("ADDED", "MODIFIED"):
                pods[obj["metadata"]["uid"]] = obj
                seen["versions"].append(obj)
            unready = sum(1 for p in pods.values() if is_terminating(p) or not is_pod_ready(p))
            seen["max"] = max(seen["max"], unready)

    task = asyncio.create_task(run())
    try:
        await eventually(lambda: len(pods) > 0, what="watch started")
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def app_status(pod: JSON) -> JSON:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == "main")


async def upgraded_in_place(kube: KubeClient, name: str, count: int, image: str) -> list[JSON] | None:
    pods = [p for p in await pods_of(kube, name) if not is_terminating(p)]
    done = [p for p in pods if is_pod_ready(p) and p["spec"]["containers"][0]["image"] == image
            and app_status(p)["image"].endswith(image.split("/")[-1]) and app_status(p)["ready"]]
    return pods if len(done) == count == len(pods) else None


async def test_aru_in_place_keeps_the_pods_and_respects_max_unavailable(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=3)
    async with admin_client(sim) as kube:
        await create_daemonset(kube, daemonset_manifest("web", strategy=ARU, image=OLD, annotations=IN_PLACE))
        await eventually(lambda: all_running(kube, "web", 3), what="3 pods running")
        before = {p["spec"]["nodeName"]: p for p in await pods_of(kube, "web")}
        # Each restart lasts its pull, so restarts that overlapped would show.
        await kube.request("POST", "/sim/v1/images", body={"image": NEW, "pullSeconds": 1.0})
        await controllers.start(sim)
        async with unready_counter(kube, "web") as seen:
            await set_image(kube, "web", NEW)
            pods = await eventually(lambda: upgraded_in_place(kube, "web", 3, NEW), timeout=20,
                                    what="3 pods upgraded in place")
        assert seen["max"] <= 1, seen["max"]  # max-unavailable 1
        revision = await current_hash(kube, "web")
        for pod in pods:
            old = before[pod["spec"]["nodeName"]]
            assert pod["metadata"]["uid"] == old["metadata"]["uid"]
            assert pod["metadata"]["labels"][LABEL_REVISION_HASH] == revision
            status = app_status(pod)
            assert status["restartCount"] == 1
            assert status["containerID"] != app_status(old)["containerID"]
            assert status["imageID"] != app_status(old)["imageID"]
        assert controller_deletions(sim) == []


async def test_an_env_change_falls_back_to_recreate_with_an_event(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=2)
    async with admin_client(sim) as kube:
        await create_daemonset(kube, daemonset_manifest("web", strategy=ARU, image=OLD, annotations=IN_PLACE))
        await eventually(lambda: all_running(kube, "web", 2), what="2 pods running")
        before = {p["metadata"]["uid"] for p in await pods_of(kube, "web")}
        await controllers.start(sim)
        await patch_daemonset(kube, "web", {"spec": {"template": {"spec": {"containers": [
            {"name": "main", "image": NEW, "env": [{"name": "MODE", "value": "b"}]}]}}}})

        async def recreated() -> bool:
            pods = [p for p in await pods_of(kube, "web") if not is_terminating(p)]
            return len(pods) == 2 and all(is_pod_ready(p) and p["metadata"]["uid"] not in before and
                                          p["spec"]["containers"][0].get("env") for p in pods)

        await eventually(recreated, timeout=20, what="pods recreated with the env")
        revision = await current_hash(kube, "web")
        events = (await kube.get(f"/api/v1/namespaces/{NS}/events"))["items"]
        fallbacks = [e for e in events if e["reason"] == "InPlaceUpdateFallback"]
        # One Event per old pod, on the pod, saying exactly why and what happens instead.
        assert sorted(e["involvedObject"]["uid"] for e in fallbacks) == sorted(before), fallbacks
        for event in fallbacks:
            assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Pod", event
            assert event["message"] == (f"cannot upgrade in place to revision {revision}: env of container main "
                                        "changed; recreating the pod"), event["message"]
        assert {d["uid"] for d in controller_deletions(sim)} == before
        assert not [e for e in events if e["reason"] == "UpgradingPods" and "in place" in e["message"]]


async def test_the_readiness_gate_is_false_during_the_restart_and_true_after(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=2)
    async with admin_client(sim) as kube:
        manifest = daemonset_manifest("web", strategy=ARU, image=OLD, annotations=IN_PLACE)
        manifest["spec"]["template"]["spec"]["readinessGates"] = [{"conditionType": CONDITION_IN_PLACE_UPDATE_READY}]
        await create_daemonset(kube, manifest)
        await controllers.start(sim)
        # The DaemonSet controller's new pods have no gate condition: the controller sets it once they run.
        await eventually(lambda: all_running(kube, "web", 2), what="2 pods Ready (gate set True)")
        async with unready_counter(kube, "web") as seen:
            await set_image(kube, "web", NEW)
            await eventually(lambda: upgraded_in_place(kube, "web", 2, NEW), timeout=20, what="upgraded in place")
        revision = await current_hash(kube, "web")
        for uid in {v["metadata"]["uid"] for v in seen["versions"]}:
            versions = [v for v in seen["versions"] if v["metadata"]["uid"] == uid]
            gates = [(get_condition(v, CONDITION_IN_PLACE_UPDATE_READY) or {}).get("status") for v in versions]
            assert "False" in gates and gates[-1] == "True", gates
            # The gate went False while the pod still had its old revision (before the image patch).
            first_false = next(v for v, g in zip(versions, gates, strict=True) if g == "False")
            assert first_false["metadata"]["labels"][LABEL_REVISION_HASH] != revision
            assert first_false["spec"]["containers"][0]["image"] == OLD
            # While the gate is False the pod is not Ready: only the version our gate write made still shows the
            # kubelet's Ready True (it answers the gate with its next write).
            for previous, version, gate in zip([None, *gates], versions, gates, strict=False):
                if gate == "False" and previous == "False":
                    assert not is_pod_ready(version), version["status"]
        assert controller_deletions(sim) == []
