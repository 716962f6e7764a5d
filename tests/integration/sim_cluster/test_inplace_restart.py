"""The sim's kubelet restarts a container in place when its image changes (issue 37): same pod and UID, the
real Events in order, new container and image IDs, `restartCount` 1, Ready False meanwhile, the pull time
(none when pre-pulled), a bad image, a cut link, readiness gates and `GET /sim/v1/nodes/{node}/containers`."""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest

from edgeagent.contract import CONDITION_IN_PLACE_UPDATE_READY
from edgeagent.kube.client import KubeClient, KubeError, Timeouts
from edgeagent.kube.objects import get_condition
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.support.tasks import running as in_background
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"
EVENTS = "/api/v1/namespaces/default/events"


def pod(name: str, *, gate: bool = False) -> JSON:
    spec: JSON = {"nodeName": "edge-1", "terminationGracePeriodSeconds": 0,
                  "containers": [{"name": "app", "image": "registry.local/app:1"},
                                 {"name": "side", "image": "registry.local/side:1"}]}
    if gate:
        spec["readinessGates"] = [{"conditionType": CONDITION_IN_PLACE_UPDATE_READY}]
    return {"metadata": {"name": name}, "spec": spec}


async def connect(sim: SimCluster) -> KubeClient:
    return await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=5))


def status_of(obj: JSON, container: str) -> JSON:
    return next(s for s in obj["status"]["containerStatuses"] if s["name"] == container)


def ready(obj: JSON) -> str | None:
    cond = get_condition(obj, "Ready")
    return None if cond is None else str(cond["status"])


async def running(admin: KubeClient, name: str) -> JSON | None:
    obj = await admin.get(f"{PODS}/{name}")
    return obj if ready(obj) == "True" else None


async def restarted(admin: KubeClient, name: str, image: str = "registry.local/app:2") -> JSON | None:
    obj = await admin.get(f"{PODS}/{name}")
    app = status_of(obj, "app") if obj["status"].get("containerStatuses") else {}
    return obj if app.get("image") == image and "running" in app.get("state", {}) and ready(obj) == "True" else None


async def containers(admin: KubeClient, node: str = "edge-1") -> list[JSON]:
    return list((await admin.get(f"/sim/v1/nodes/{node}/containers"))["items"])


async def events_of(admin: KubeClient, uid: str) -> list[JSON]:
    items = (await admin.get(EVENTS))["items"]
    return [e for e in items if e["involvedObject"].get("uid") == uid and e["source"].get("component") == "kubelet"]


async def patch_image(admin: KubeClient, name: str, image: str = "registry.local/app:2") -> None:
    await admin.patch(f"{PODS}/{name}", {"spec": {"containers": [{"name": "app", "image": image}]}})


async def test_an_image_patch_restarts_the_container_in_the_same_pod(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=["edge-1"], image_pull_seconds=0.3)
    admin = await connect(sim)
    try:
        await admin.create(PODS, pod("p"))
        before = await eventually(lambda: running(admin, "p"), what="p running")
        await patch_image(admin, "p")
        seen_not_ready = False

        async def done() -> JSON | None:
            nonlocal seen_not_ready
            obj = await admin.get(f"{PODS}/p")
            if ready(obj) == "False":
                seen_not_ready = True
                assert status_of(obj, "app")["ready"] is False
            return await restarted(admin, "p")

        after = await eventually(done, what="app restarted with app:2")
        assert seen_not_ready, "Ready never went False during the restart"
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["status"]["podIP"] == before["status"]["podIP"]
        old, new = status_of(before, "app"), status_of(after, "app")
        assert new["restartCount"] == 1
        assert new["containerID"] != old["containerID"]
        assert new["imageID"] != old["imageID"] and new["imageID"].startswith("registry.local/app@sha256:")
        assert new["lastState"]["terminated"]["containerID"] == old["containerID"]
        assert new["lastState"]["terminated"]["reason"] == "Completed"
        assert new["lastState"]["terminated"]["exitCode"] == 0
        # The other container was not touched.
        assert status_of(after, "side")["containerID"] == status_of(before, "side")["containerID"]
        assert status_of(after, "side")["restartCount"] == 0
        events = await events_of(admin, after["metadata"]["uid"])
        assert [e["reason"] for e in events] == ["Killing", "Pulling", "Pulled", "Created", "Started"]
        assert {e["involvedObject"]["fieldPath"] for e in events} == {"spec.containers{app}"}
        assert events[0]["message"] == "Container app definition changed, will be restarted"
        assert events[1]["message"] == 'Pulling image "registry.local/app:2"'
        assert events[2]["message"].startswith('Successfully pulled image "registry.local/app:2" in ')
        assert events[3]["message"] == "Created container: app"
        assert events[4]["message"] == "Started container app"
        assert events[0]["source"] == {"component": "kubelet", "host": "edge-1"}
        rows = await containers(admin)
        assert {(r["container"], r["image"], r["state"]) for r in rows} == {
            ("app", "registry.local/app:2", "running"), ("side", "registry.local/side:1", "running")}
    finally:
        await admin.close()


async def test_the_pull_costs_its_time_and_nothing_when_pre_pulled(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=["edge-1"], image_pull_seconds=0.05)
    admin = await connect(sim)
    try:
        await admin.request("POST", "/sim/v1/images", body={"image": "registry.local/app:2", "pullSeconds": 1.5})
        await admin.create(PODS, pod("slow"))
        await eventually(lambda: running(admin, "slow"), what="slow running")
        began = time.monotonic()
        await patch_image(admin, "slow")
        after = await eventually(lambda: restarted(admin, "slow"), what="slow restarted")
        assert time.monotonic() - began >= 1.5  # the pull is paid during the restart
        pulled = [e for e in await events_of(admin, after["metadata"]["uid"]) if e["reason"] == "Pulled"]
        assert pulled[0]["message"].startswith('Successfully pulled image "registry.local/app:2" in 1.5')
        # The node has it now: a second pod's restart to the same image pulls nothing.
        await admin.create(PODS, pod("fast"))
        await eventually(lambda: running(admin, "fast"), what="fast running")
        await patch_image(admin, "fast")
        after = await eventually(lambda: restarted(admin, "fast"), what="fast restarted")
        events = await events_of(admin, after["metadata"]["uid"])
        assert [e["reason"] for e in events] == ["Killing", "Pulled", "Created", "Started"]
        assert events[1]["message"] == 'Container image "registry.local/app:2" already present on machine'
    finally:
        await admin.close()


async def test_a_bad_image_waits_in_image_pull_back_off_not_ready(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=["edge-1"])
    admin = await connect(sim)
    try:
        await admin.request("POST", "/sim/v1/images", body={"image": "registry.local/app:bad", "missing": True})
        await admin.create(PODS, pod("p"))
        before = await eventually(lambda: running(admin, "p"), what="p running")

        async def backing_off() -> JSON | None:
            obj = await admin.get(f"{PODS}/p")
            waiting = status_of(obj, "app").get("state", {}).get("waiting", {})
            return obj if waiting.get("reason") == "ImagePullBackOff" else None

        await patch_image(admin, "p", "registry.local/app:bad")
        obj = await eventually(backing_off, what="ImagePullBackOff")
        assert ready(obj) == "False"
        app = status_of(obj, "app")
        assert app["ready"] is False and app["restartCount"] == 0
        assert app["lastState"]["terminated"]["containerID"] == status_of(before, "app")["containerID"]
        reasons = [e["reason"] for e in await events_of(admin, obj["metadata"]["uid"])]
        assert reasons[:4] == ["Killing", "Pulling", "Failed", "Failed"] and "BackOff" in reasons
        rows = await containers(admin)
        assert ("app", "waiting") in {(r["container"], r["state"]) for r in rows}
    finally:
        await admin.close()


async def test_a_cut_node_keeps_its_old_container_until_the_link_returns(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=["edge-1"])
    admin = await connect(sim)
    try:
        await admin.create(PODS, pod("p"))
        before = await eventually(lambda: running(admin, "p"), what="p running")
        await sim.disconnect("edge-1")
        await patch_image(admin, "p")

        async def node_unknown() -> bool:  # a cut long enough for the node controller to notice it
            return ready(await admin.get("/api/v1/nodes/edge-1")) == "Unknown"

        async def old_runs() -> bool:
            rows = {r["container"]: r for r in await containers(admin)}
            assert (rows["app"]["image"], rows["app"]["state"]) == ("registry.local/app:1", "running")
            assert rows["app"]["containerID"] == status_of(before, "app")["containerID"]
            return await node_unknown()

        # The patch is stored, but the node has not heard of it: it runs app:1 all through the cut.
        await eventually(old_runs, what="node Unknown, still running app:1")
        await sim.connect("edge-1")
        after = await eventually(lambda: restarted(admin, "p"), what="restart after the link returned")
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert status_of(after, "app")["restartCount"] == 1
    finally:
        await admin.close()


async def test_the_containers_endpoint_sees_a_restart_the_api_does_not(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=["edge-1"], image_pull_seconds=0.05)
    admin = await connect(sim)
    try:
        await admin.request("POST", "/sim/v1/images", body={"image": "registry.local/app:2", "pullSeconds": 0.6})
        await admin.create(PODS, pod("p"))
        await eventually(lambda: running(admin, "p"), what="p running")
        await patch_image(admin, "p")

        async def killed() -> bool:
            rows = {r["container"]: r for r in await containers(admin)}
            return bool(rows["app"]["state"] == "terminated")

        await eventually(killed, what="the old container killed (pull under way)")
        await sim.disconnect("edge-1")
        frozen = await admin.get(f"{PODS}/p")

        async def new_runs() -> bool:
            rows = {r["container"]: r for r in await containers(admin)}
            return (rows["app"]["image"], rows["app"]["state"]) == ("registry.local/app:2", "running")

        await eventually(new_runs, what="the node runs app:2 behind the cut")
        # The fleet-wide endpoint shows the same truth, each row with its node.
        fleet = (await admin.get("/sim/v1/containers"))["items"]
        assert fleet == [{"node": "edge-1", **row} for row in await containers(admin)]
        # The API's view is frozen where the cut caught it.
        now = await admin.get(f"{PODS}/p")
        assert now["status"] == frozen["status"]
        assert "running" not in status_of(now, "app")["state"]
        await sim.connect("edge-1")
        after = await eventually(lambda: restarted(admin, "p"), what="the restart reported after the cut")
        assert status_of(after, "app")["restartCount"] == 1
    finally:
        await admin.close()


async def test_ready_needs_every_readiness_gate_true(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=["edge-1"])
    admin = await connect(sim)
    versions: list[JSON] = []

    async def record() -> None:  # every version of the pod, so a moment of Ready True cannot slip by
        async for event in admin.watch(PODS, query={"fieldSelector": "metadata.name=g"}):
            versions.append(event["object"])

    try:
        async with in_background(record()):
            await gated_pod_follows_its_gate(admin)
        await eventually(lambda: versions, what="watched versions")
        # Ready never turns True while the gate is not True (it turns False only after the gate does, of course).
        for previous, obj in zip([{}, *versions], versions, strict=False):
            gate = get_condition(obj, CONDITION_IN_PLACE_UPDATE_READY)
            if ready(obj) == "True" and (not previous or ready(previous) != "True"):
                assert gate is not None and gate["status"] == "True", obj["status"]
    finally:
        await admin.close()


async def gated_pod_follows_its_gate(admin: KubeClient) -> None:
    await admin.create(PODS, pod("g", gate=True))

    async def gated() -> JSON | None:
        obj = await admin.get(f"{PODS}/g")
        containers_ready = get_condition(obj, "ContainersReady")
        return obj if containers_ready is not None and containers_ready["status"] == "True" else None

    obj = await eventually(gated, what="g's containers ready")
    cond = get_condition(obj, "Ready")
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "ReadinessGatesNotReady",
        f'corresponding condition of pod readiness gate "{CONDITION_IN_PLACE_UPDATE_READY}" does not exist.')

    async def set_gate(status: str) -> None:
        patch = {"status": {"conditions": [{"type": CONDITION_IN_PLACE_UPDATE_READY, "status": status}]}}
        await admin.patch(f"{PODS}/g/status", patch)

    await set_gate("True")
    await eventually(lambda: running(admin, "g"), what="Ready once the gate is True")
    await set_gate("False")

    async def held() -> JSON | None:
        obj = await admin.get(f"{PODS}/g")
        return obj if ready(obj) == "False" else None

    obj = await eventually(held, what="Ready False again")
    assert get_condition(obj, "Ready")["message"] == (  # type: ignore[index]
        f'the status of pod readiness gate "{CONDITION_IN_PLACE_UPDATE_READY}" is not "True", but False')
    # An in-place restart with the gate False leaves Ready False; the gate's True makes it Ready.
    await patch_image(admin, "g")

    async def new_image_held() -> JSON | None:
        obj = await admin.get(f"{PODS}/g")
        app = status_of(obj, "app")
        return obj if app["image"] == "registry.local/app:2" and app["ready"] else None

    obj = await eventually(new_image_held, what="g restarted")
    assert ready(obj) == "False"
    await set_gate("True")
    await eventually(lambda: restarted(admin, "g"), what="g Ready with app:2")


async def test_the_containers_of_an_unknown_node_are_404(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=["edge-1"])
    admin = await connect(sim)
    try:
        assert await containers(admin) == []  # a node running nothing
        with pytest.raises(KubeError) as missing:
            await admin.get("/sim/v1/nodes/edge-9/containers")
        assert (missing.value.code, missing.value.message) == (404, 'nodes "edge-9" not found')
    finally:
        await admin.close()


async def test_the_fleet_wide_containers_are_every_nodes_own_with_its_name(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=["edge-1", "edge-2", "edge-3"])
    admin = await connect(sim)
    try:
        for node in ("edge-1", "edge-2"):
            await admin.create(PODS, {**pod(f"p-{node}"), "spec": {**pod("x")["spec"], "nodeName": node}})
            await eventually(functools.partial(running, admin, f"p-{node}"), what=f"p-{node} running")
        fleet = (await admin.get("/sim/v1/containers"))["items"]
        expected = [{"node": node, **row} for node in ("edge-1", "edge-2", "edge-3")
                    for row in await containers(admin, node)]
        assert fleet == expected
        assert sorted((r["node"], r["pod"], r["container"]) for r in fleet) == [
            ("edge-1", "default/p-edge-1", "app"), ("edge-1", "default/p-edge-1", "side"),
            ("edge-2", "default/p-edge-2", "app"), ("edge-2", "default/p-edge-2", "side")]
    finally:
        await admin.close()


async def test_an_image_rolled_back_during_the_pull_back_off_restarts_at_once(sim_factory: SimFactory) -> None:
    """The kubelet's back-off is per image: rolling a failed in-place image back starts the old one at once,
    however long the back-off on the bad one (an hour here)."""
    sim = await sim_factory(node_names=["edge-1"], kubelet_backoff=3600.0)
    admin = await connect(sim)
    try:
        await admin.request("POST", "/sim/v1/images", body={"image": "registry.local/app:bad", "missing": True})
        await admin.create(PODS, pod("p"))
        before = await eventually(lambda: running(admin, "p"), what="p running")

        async def backing_off() -> bool:
            app = status_of(await admin.get(f"{PODS}/p"), "app")
            return bool(app.get("state", {}).get("waiting", {}).get("reason") == "ImagePullBackOff")

        await patch_image(admin, "p", "registry.local/app:bad")
        await eventually(backing_off, what="ImagePullBackOff")
        await patch_image(admin, "p", "registry.local/app:1")
        after = await eventually(lambda: restarted(admin, "p", "registry.local/app:1"), what="app:1 again")
        app = status_of(after, "app")
        assert app["restartCount"] == 1 and app["containerID"] != status_of(before, "app")["containerID"]
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
    finally:
        await admin.close()
