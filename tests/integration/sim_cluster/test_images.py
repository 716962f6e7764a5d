"""The sim's kubelet pulls images: pull time, missing images with the kubelet's back-off,
crashing images, `status.images`, and `POST /sim/v1/images` — over real HTTP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient, KubeError, Timeouts
from edgeagent.kube.images import node_has_images
from edgeagent.kube.objects import get_condition
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory, fast_sim_config
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, image: str, node: str = "edge-1", restart: str = "Always") -> JSON:
    return {"metadata": {"name": name},
            "spec": {"nodeName": node, "restartPolicy": restart, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": image}]}}


def waiting_reason(obj: JSON) -> str | None:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    return statuses[0].get("state", {}).get("waiting", {}).get("reason") if statuses else None


async def connect(sim: Any) -> KubeClient:
    return await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=5))


async def test_pulled_image_is_listed_and_a_second_pod_skips_the_pull(sim_factory: SimFactory) -> None:
    sim = await sim_factory(image_pull_seconds=0.3)
    admin = await connect(sim)
    try:
        await admin.create(PODS, pod("a", "registry.local/app:1"))
        await eventually(lambda: _phase(admin, "a", "Running"), what="a running")
        node = await admin.get("/api/v1/nodes/edge-1")
        assert node_has_images(node, ["registry.local/app:1"])
        assert not node_has_images(await admin.get("/api/v1/nodes/edge-2"), ["registry.local/app:1"])
        # From now on a pull of this image would take an hour: only a node that already has it starts the pod.
        await admin.request("POST", "/sim/v1/images", body={"image": "registry.local/app:1", "pullSeconds": 3600})
        await admin.create(PODS, pod("b", "registry.local/app:1"))
        await admin.create(PODS, pod("c", "registry.local/app:1", node="edge-2"))
        await eventually(lambda: _phase(admin, "b", "Running"), what="b running without a pull")
        c = await admin.get(f"{PODS}/c")
        assert c["status"].get("phase") in (None, "Pending")
    finally:
        await admin.close()


async def test_missing_image_backs_off_then_starts_when_it_appears(sim_factory: SimFactory) -> None:
    sim = await sim_factory(image_pull_seconds=0.5)
    admin = await connect(sim)
    try:
        body = await admin.request("POST", "/sim/v1/images", body={"image": "nope:1", "missing": True})
        assert body == {"image": "nope:1", "pullSeconds": 0.5, "missing": True, "crash": False}
        await admin.create(PODS, pod("m", "nope:1"))
        seen: set[str] = set()

        async def backing_off() -> bool:
            obj = await admin.get(f"{PODS}/m")
            reason = waiting_reason(obj)
            if reason:
                seen.add(reason)
            assert obj["status"].get("phase") in (None, "Pending")
            ready = get_condition(obj, "Ready")
            assert ready is None or ready["status"] == "False"
            return reason == "ImagePullBackOff"

        await eventually(backing_off, what="ImagePullBackOff")
        assert "ErrImagePull" in seen or "ImagePullBackOff" in seen
        obj = await admin.get(f"{PODS}/m")
        assert obj["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == 'Back-off pulling image "nope:1"'
        assert not node_has_images(await admin.get("/api/v1/nodes/edge-1"), ["nope:1"])
        listed = await admin.get("/sim/v1/images")
        assert listed["items"] == [{"image": "nope:1", "pullSeconds": 0.5, "missing": True, "crash": False}]

        await admin.request("POST", "/sim/v1/images", body={"image": "nope:1", "missing": False})
        await eventually(lambda: _phase(admin, "m", "Running"), what="running once the image exists")
    finally:
        await admin.close()


async def test_err_image_pull_comes_first(sim_factory: SimFactory) -> None:
    sim = await sim_factory(pod_startup=1.0)  # ErrImagePull is shown for min(startup, 1 s) before the back-off
    admin = await connect(sim)
    try:
        sim.set_image("gone:1", missing=True)
        await admin.create(PODS, pod("e", "gone:1"))
        await eventually(lambda: _reason(admin, "e", "ErrImagePull"), what="ErrImagePull")
        await eventually(lambda: _reason(admin, "e", "ImagePullBackOff"), what="then ImagePullBackOff")
    finally:
        await admin.close()


async def test_crashing_image_loops_with_growing_restart_count(sim_factory: SimFactory) -> None:
    sim = await sim_factory(kubelet_backoff=0.1)
    admin = await connect(sim)
    try:
        await admin.request("POST", "/sim/v1/images", body={"image": "bad:2", "crash": True})
        await admin.create(PODS, pod("k", "bad:2"))

        async def restarted() -> bool:
            obj = await admin.get(f"{PODS}/k")
            assert (get_condition(obj, "Ready") or {}).get("status") != "True"
            statuses = obj["status"].get("containerStatuses") or [{}]
            return waiting_reason(obj) == "CrashLoopBackOff" and statuses[0].get("restartCount", 0) >= 2

        await eventually(restarted, what="CrashLoopBackOff with restartCount >= 2")
        obj = await admin.get(f"{PODS}/k")
        assert obj["status"]["phase"] == "Running"
        assert obj["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1
    finally:
        await admin.close()


async def test_a_crash_looping_image_can_be_ready_briefly_before_each_crash(sim_factory: SimFactory) -> None:
    """`readySeconds`: a crashing image's container passes its readiness probe and runs Ready that long before it
    dies, at every restart (as a real bad version often does); the controller's failure rule must see through it."""
    sim = await sim_factory(kubelet_backoff=0.2)
    admin = await connect(sim)
    try:
        body = await admin.request("POST", "/sim/v1/images", body={"image": "flaky:1", "crash": True,
                                                                   "readySeconds": 0.5})
        assert body == {"image": "flaky:1", "pullSeconds": 0.05, "missing": False, "crash": True, "readySeconds": 0.5}
        await admin.create(PODS, pod("f", "flaky:1"))
        seen: set[tuple[bool, str | None]] = set()

        async def ready_after_a_crash() -> bool:
            obj = await admin.get(f"{PODS}/f")
            statuses = obj["status"].get("containerStatuses") or [{}]
            ready = (get_condition(obj, "Ready") or {}).get("status") == "True"
            seen.add((ready, waiting_reason(obj)))
            if ready:
                assert statuses[0].get("ready") is True and "running" in statuses[0]["state"]
            return ready and statuses[0].get("restartCount", 0) >= 1 and (False, "CrashLoopBackOff") in seen

        await eventually(ready_after_a_crash, what="Ready again after a CrashLoopBackOff")
        assert (await admin.get("/sim/v1/images"))["items"][0]["readySeconds"] == 0.5
    finally:
        await admin.close()


async def test_a_crash_looping_pod_keeps_the_time_it_first_turned_not_ready(sim_factory: SimFactory) -> None:
    """As the kubelet: a condition's lastTransitionTime moves only when its status does, so `Ready` False keeps
    the time of the first failure across restarts (the seed-29 soak's controller gave a crash-looping pod a fresh
    progress deadline at every restart and rolled a bad version back 240 s after its pods came, not 90 s)."""
    sim = await sim_factory(kubelet_backoff=1.0)  # restarts 1 s, 2 s, 4 s apart: timestamps of whole seconds differ
    admin = await connect(sim)
    try:
        await admin.request("POST", "/sim/v1/images", body={"image": "bad:3", "crash": True})
        await admin.create(PODS, pod("c", "bad:3"))
        first: dict[str, str] = {}

        async def restarted(count: int) -> JSON | None:
            obj = await admin.get(f"{PODS}/c")
            statuses = obj["status"].get("containerStatuses") or [{}]
            return obj if waiting_reason(obj) == "CrashLoopBackOff" and \
                statuses[0].get("restartCount", 0) >= count else None

        obj = await eventually(lambda: restarted(0), what="CrashLoopBackOff")
        for kind in ("Ready", "ContainersReady"):
            first[kind] = str((get_condition(obj, kind) or {}).get("lastTransitionTime"))
        obj = await eventually(lambda: restarted(2), what="two restarts later", timeout=20)
        for kind in ("Ready", "ContainersReady"):
            cond = get_condition(obj, kind) or {}
            assert (cond.get("status"), cond.get("lastTransitionTime")) == ("False", first[kind]), kind
    finally:
        await admin.close()


async def test_run_to_completion_pods_succeed_or_fail(sim_factory: SimFactory) -> None:
    sim = await sim_factory()
    admin = await connect(sim)
    try:
        sim.set_image("bad:3", crash=True)
        await admin.create(PODS, pod("ok", "tool:1", restart="Never"))
        await admin.create(PODS, pod("ko", "bad:3", restart="Never"))
        await eventually(lambda: _phase(admin, "ok", "Succeeded"), what="ok Succeeded")
        await eventually(lambda: _phase(admin, "ko", "Failed"), what="ko Failed")
    finally:
        await admin.close()


async def test_pull_during_a_cut_link_is_reported_after_reconnect(sim_factory: SimFactory) -> None:
    sim = await sim_factory(image_pull_seconds=0.5)
    admin = await connect(sim)
    try:
        await admin.create(PODS, pod("p", "slow:1", node="edge-2"))
        await sim.disconnect("edge-2")
        node = await admin.get("/api/v1/nodes/edge-2")
        assert not node_has_images(node, ["slow:1"])
        await sim.connect("edge-2")
        await eventually(lambda: _phase(admin, "p", "Running"), timeout=20, what="p running after reconnect")
        assert node_has_images(await admin.get("/api/v1/nodes/edge-2"), ["slow:1"])
    finally:
        await admin.close()


@pytest.mark.parametrize("body, fragment", [
    ({"pullSeconds": 1}, "image:"),
    ({"image": "a b"}, "image:"),
    ({"image": "x", "pullSeconds": -1}, "pullSeconds"),
    ({"image": "x", "missing": "yes"}, "missing"),
    ({"image": "x", "crash": 1}, "crash"),
    ({"image": "x", "size": 1}, "unknown field"),
    ({"image": "x", "crash": True, "readySeconds": -1}, "readySeconds"),
    ({"image": "x", "readySeconds": 1}, "readySeconds"),
])
async def test_bad_image_bodies_are_400(sim_factory: SimFactory, body: JSON, fragment: str) -> None:
    sim = await sim_factory(nodes=1)
    admin = await connect(sim)
    try:
        with pytest.raises(KubeError) as caught:
            await admin.request("POST", "/sim/v1/images", body=body)
        assert caught.value.code == 400
        assert fragment in caught.value.status["message"]
        assert (await admin.get("/sim/v1/images"))["items"] == []
    finally:
        await admin.close()


async def _phase(admin: KubeClient, name: str, phase: str) -> bool:
    return bool((await admin.get(f"{PODS}/{name}")).get("status", {}).get("phase") == phase)


async def _reason(admin: KubeClient, name: str, reason: str) -> bool:
    return waiting_reason(await admin.get(f"{PODS}/{name}")) == reason


async def test_a_restarted_sim_keeps_what_its_nodes_pulled(tmp_path: Path) -> None:
    config = fast_sim_config(tmp_path / "sim", nodes=1, image_pull_seconds=0.1)
    first = SimCluster(config)
    await first.start()
    try:
        assert not first.nodes.kubelet("edge-1").images.has("registry.local/kept:1")
        async with await KubeClient.connect(first.admin_kubeconfig) as admin:
            await admin.create(PODS, pod("a", "registry.local/kept:1"))
            await eventually(lambda: _phase(admin, "a", "Running"), what="a running")
    finally:
        await first.stop()
    second = SimCluster(config)
    await second.start()
    try:
        assert second.nodes.kubelet("edge-1").images.has("registry.local/kept:1")
        async with await KubeClient.connect(second.admin_kubeconfig) as admin:
            assert node_has_images(await admin.get("/api/v1/nodes/edge-1"), ["registry.local/kept:1"])
    finally:
        await second.stop()


async def test_statuses_name_images_as_a_containerd_node_does(sim_factory: SimFactory) -> None:
    """Spec `nginx:1.19.4`: a started container reports `docker.io/library/nginx:1.19.4` with the digest form as
    imageID, and the node lists only fully qualified names; a container still waiting keeps the spec's form."""
    sim = await sim_factory()
    admin = await connect(sim)
    try:
        await admin.request("POST", "/sim/v1/images", body={"image": "registry.local/none:1", "missing": True})
        await admin.create(PODS, pod("web", "nginx:1.19.4"))
        await admin.create(PODS, pod("stuck", "registry.local/none:1"))
        await eventually(lambda: _phase(admin, "web", "Running"), what="web running")
        [status] = (await admin.get(f"{PODS}/web"))["status"]["containerStatuses"]
        assert status["image"] == "docker.io/library/nginx:1.19.4"
        assert re.fullmatch(r"docker\.io/library/nginx@sha256:[0-9a-f]{64}", status["imageID"]), status["imageID"]

        async def waiting() -> JSON | None:
            statuses = (await admin.get(f"{PODS}/stuck")).get("status", {}).get("containerStatuses") or []
            return statuses[0] if statuses and "waiting" in statuses[0]["state"] else None

        stuck = await eventually(waiting, what="stuck waiting for its image")
        assert (stuck["image"], stuck["imageID"]) == ("registry.local/none:1", "")
        node = await admin.get("/api/v1/nodes/edge-1")
        names = [name for entry in node["status"]["images"] for name in entry["names"]]
        assert "docker.io/library/nginx:1.19.4" in names and "nginx:1.19.4" not in names
        assert node_has_images(node, ["nginx:1.19.4", "docker.io/library/nginx:1.19.4"])
    finally:
        await admin.close()


async def test_new_nodes_start_with_their_base_images_listed_up_to_the_kubelets_cap(sim_factory: SimFactory) -> None:
    """`--node-images N`: a node lists N images from the start (at most 50, as a kubelet reports), and a pod of
    one of them starts without a pull."""
    sim = await sim_factory(node_images=60, image_pull_seconds=0.1)
    admin = await connect(sim)
    try:
        async def listed() -> list[JSON] | None:
            images = (await admin.get("/api/v1/nodes/edge-2")).get("status", {}).get("images") or []
            return images if len(images) == 50 else None

        images = await eventually(listed, what="edge-2 listing 50 images")
        assert all(len(entry["names"]) == 2 for entry in images)
        sizes = [entry["sizeBytes"] for entry in images]
        assert sizes == sorted(sizes, reverse=True)
        base = "registry.local/base/image-007:1"
        assert sim.nodes.kubelet("edge-2").images.has(base)
        await admin.request("POST", "/sim/v1/images", body={"image": base, "pullSeconds": 3600})
        await admin.create(PODS, pod("base", base, node="edge-2"))
        await eventually(lambda: _phase(admin, "base", "Running"), what="a base image starting without a pull")
    finally:
        await admin.close()
