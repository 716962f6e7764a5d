"""Issue 37's point, on one node: with an in-place upgrade the node runs a container of the DaemonSet all
through a link outage (the patch reaches it on return, the kubelet restarts the container then); with a
recreate cut between the old pod's removal and the new pod's start, it runs none for the outage. What the node
runs is sampled from the sim's kubelet (`GET /sim/v1/nodes/{node}/containers`), not from the frozen API."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import is_node_ready, is_pod_ready, is_terminating
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    pods_of,
    set_image,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
OLD, NEW = "nginx:1.19.4", "nginx:1.19.5"
NODE = "edge-1"
SAMPLE_EVERY = 0.05


@contextlib.asynccontextmanager
async def sampling(sim: SimCluster, kube: KubeClient) -> AsyncIterator[list[tuple[bool, bool]]]:
    """(link cut, a container of the DaemonSet running on the node) every SAMPLE_EVERY seconds."""
    samples: list[tuple[bool, bool]] = []

    async def run() -> None:
        while True:
            items = (await kube.get(f"/sim/v1/nodes/{NODE}/containers"))["items"]
            running = any(i["pod"].startswith("default/web-") and i["state"] == "running" for i in items)
            samples.append((sim.link_mode(NODE) != "connected", running))
            await asyncio.sleep(SAMPLE_EVERY)  # a sampler's period, not a wait for anything

    task = asyncio.create_task(run())
    try:
        await eventually(lambda: samples, what="first sample")
        yield samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def outage(sim: SimCluster, kube: KubeClient) -> None:
    """Keep the link cut until the node controller has noticed (a real outage, not a blip), then restore it."""
    async def unknown() -> bool:
        return not is_node_ready(await kube.get(f"/api/v1/nodes/{NODE}"))

    await eventually(unknown, what="node not Ready")
    await sim.connect(NODE)


async def upgraded(kube: KubeClient) -> bool:
    pods = [p for p in await pods_of(kube, "web") if not is_terminating(p)]
    return len(pods) == 1 and is_pod_ready(pods[0]) and pods[0]["spec"]["containers"][0]["image"] == NEW and \
        pods[0]["status"]["containerStatuses"][0]["image"].endswith(NEW.split("/")[-1])


@pytest.mark.parametrize("update_type", ["InPlaceIfPossible", "Recreate"])
async def test_a_link_outage_stops_the_daemon_only_without_in_place(
        sim_factory: SimFactory, controllers: Controllers, update_type: str) -> None:
    sim = await sim_factory(node_names=[NODE])
    async with admin_client(sim) as kube:
        annotations = {"edgeagent.io/update-type": update_type, "apps.openyurt.io/max-unavailable": "1"}
        await create_daemonset(kube, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                        annotations=annotations))
        await eventually(lambda: all_running(kube, "web", 1), what="the pod running")
        old_uid = (await pods_of(kube, "web"))[0]["metadata"]["uid"]
        await kube.request("POST", "/sim/v1/images", body={"image": NEW, "pullSeconds": 0.3})
        await controllers.start(sim)
        async with sampling(sim, kube) as samples:
            if update_type == "InPlaceIfPossible":
                # Cut first, then the new revision: the controller patches the pod while the node still looks
                # Ready, and the patch waits on the far side of the cut.
                await sim.disconnect(NODE)
                await set_image(kube, "web", NEW)
                revision = await eventually(lambda: current_hash(kube, "web"), what="new revision")

                async def patched() -> bool:
                    pod = (await pods_of(kube, "web"))[0]
                    return bool(pod["metadata"]["labels"].get("controller-revision-hash") == revision)

                await eventually(patched, what="the pod patched in the API")
            else:
                # The recreate's weak spot: the old pod is gone from the node, the new one not started yet.
                await set_image(kube, "web", NEW)

                async def replaced() -> bool:
                    pods = await pods_of(kube, "web")
                    return bool(pods) and all(p["metadata"]["uid"] != old_uid for p in pods)

                await eventually(replaced, interval=0.005, what="the old pod gone, the new one created")
                await sim.disconnect(NODE)
            await outage(sim, kube)
            await eventually(lambda: upgraded(kube), timeout=20,
                             what="the upgrade finished after the link returned")
        during_cut = [running for cut, running in samples if cut]
        assert during_cut, "no sample taken during the cut"
        if update_type == "InPlaceIfPossible":
            assert all(during_cut), "the node lost its daemon during the outage"
            assert (await pods_of(kube, "web"))[0]["metadata"]["uid"] == old_uid
        else:
            assert not any(during_cut), "the recreate kept a container running through the cut"
