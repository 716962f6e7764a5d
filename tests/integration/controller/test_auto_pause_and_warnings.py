"""A bad version stops its own roll; bad annotations are reported once per value, never crash-looped."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import is_pod_ready, is_terminating, name_of, namespace_of, uid_of
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.errors import ApiError
from edgeagent.sim.resources import PODS
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    controller_deletions,
    create_daemonset,
    daemonset_manifest,
    events_for,
    get_daemonset,
    image_of,
    need_upgrade,
    patch_daemonset,
    pods_of,
    set_image,
)
from tests.support.tasks import running
from tests.support.waiting import eventually

BAD = "nginx:bad"


@contextlib.asynccontextmanager
async def pods_never_ready(sim: SimCluster, image: str) -> AsyncIterator[None]:
    """Plays a version that never passes its readiness probe: its pods are set back to not Ready each time
    the simulated kubelet reports them Ready (the sim kubelet itself always reports Ready)."""

    async def saboteur() -> None:
        subscription = sim.store.subscribe([PODS])
        async for event in subscription:
            pod = event.object
            if event.type == "DELETED" or is_terminating(pod) or not is_pod_ready(pod) or image_of(pod) != image:
                continue
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            patch = {"metadata": {"uid": uid_of(pod)}, "status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "ReadinessProbeFailed", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "False", "lastTransitionTime": now},
            ]}}
            with contextlib.suppress(ApiError):
                sim.store.patch(PODS, namespace_of(pod), name_of(pod), patch,
                                "application/strategic-merge-patch+json", subresource="status")

    async with running(saboteur()):
        yield


async def test_version_whose_pods_never_become_ready_pauses_the_roll(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    annotations = {"apps.openyurt.io/max-unavailable": "1", "edgeagent.io/max-failed": "1",
                   "edgeagent.io/progress-deadline-seconds": "1"}
    manifest = daemonset_manifest("web", strategy="AdvancedRollingUpdate", annotations=annotations, min_ready=3)
    await create_daemonset(admin, manifest)
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    app = await controllers.start(sim)
    async with pods_never_ready(sim, BAD):
        await set_image(admin, "web", BAD)

        async def paused() -> bool:
            ds = await get_daemonset(admin, "web")
            flag: str | None = ds["metadata"]["annotations"].get("edgeagent.io/paused")
            return flag == "true"

        await eventually(paused, timeout=10, what="the roll paused itself")

        async def auto_paused() -> list[dict[str, Any]]:
            return [e for e in await events_for(admin, "web") if e["reason"] == "RolloutAutoPaused"]

        # The Event follows the annotation's write: a loaded run read the Events in between.
        warnings = await eventually(auto_paused, what="the RolloutAutoPaused Event")
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
        assert "max-failed is 1" in warnings[0]["message"]
        # Only the first node got the bad version: the budget held it there, the pause stopped the rest.
        assert len(controller_deletions(sim)) == 1
        assert sorted(image_of(p) for p in await pods_of(admin, "web") if not is_terminating(p)) == [
            "nginx:1.19.4", "nginx:1.19.4", BAD]
        assert app.metrics.registry.get_sample_value("edgeagent_controller_auto_pauses_total") == 1.0


async def reconciles(app: ControllerApp) -> float:
    return app.metrics.registry.get_sample_value("edgeagent_controller_reconciles_total", {"result": "ok"}) or 0.0


async def test_invalid_strategy_is_reported_once_per_value(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="Bogus"))
    app = await controllers.start(sim)

    async def warnings() -> list[str]:
        return [e["message"] for e in await events_for(admin, "web") if e["reason"] == "InvalidUpdateStrategy"]

    async def warned_times(n: int) -> bool:
        return len(await warnings()) == n

    await eventually(lambda: warned_times(1), what="one warning")
    assert "'Bogus'" in (await warnings())[0]

    # More reconciles with the same bad value: no more warnings (and no crash loop).
    before = await reconciles(app)
    await patch_daemonset(admin, "web", {"metadata": {"annotations": {"touch": "1"}}})
    async def reconciled_again() -> bool:
        return await reconciles(app) > before

    await eventually(reconciled_again, what="reconciled again")
    assert len(await warnings()) == 1
    assert app.metrics.registry.get_sample_value("edgeagent_controller_reconciles_total", {"result": "error"}) is None

    await patch_daemonset(admin, "web", {"metadata": {"annotations": {"apps.openyurt.io/update-strategy": "Other"}}})
    await eventually(lambda: warned_times(2), what="a warning for the new value")

    # Fixed: the DaemonSet is managed from now on.
    await patch_daemonset(admin, "web", {"metadata": {"annotations": {"apps.openyurt.io/update-strategy": "ota"}}})

    async def flagged() -> bool:
        pods = await pods_of(admin, "web")
        return len(pods) == 3 and all(need_upgrade(p) is not None for p in pods)

    await eventually(flagged, what="OTA conditions once the value is valid")


async def test_bad_annotation_stops_the_roll_with_a_warning(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    annotations = {"apps.openyurt.io/max-unavailable": "lots"}
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", annotations=annotations))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    await controllers.start(sim)
    await set_image(admin, "web", "nginx:1.19.5")

    async def warned() -> list[dict[str, str]]:
        return [e for e in await events_for(admin, "web") if e["reason"] == "InvalidAnnotation"]

    (event,) = await eventually(warned, what="InvalidAnnotation warning")
    assert "apps.openyurt.io/max-unavailable='lots'" in event["message"]
    assert controller_deletions(sim) == []

    await patch_daemonset(admin, "web", {"metadata": {"annotations": {"apps.openyurt.io/max-unavailable": "1"}}})
    await eventually(lambda: all_running(admin, "web", 3, "nginx:1.19.5"), timeout=10, what="roll after the fix")

