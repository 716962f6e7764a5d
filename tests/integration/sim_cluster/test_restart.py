"""A sim restarted on the same --dir resumes its store, its resourceVersion and its ports; bad state is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient, KubeError
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.persist import STATE_FILE, StateError
from tests.conftest import fast_sim_config
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"


def _pod(name: str, node: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "example/app:1"}]}}


async def _running(admin: KubeClient, name: str) -> bool:
    return bool((await admin.get(f"{PODS}/{name}")).get("status", {}).get("phase") == "Running")


async def test_restart_resumes_objects_uids_resource_version_and_ports(tmp_path: Path) -> None:
    config = fast_sim_config(tmp_path / "sim", nodes=2)
    first = SimCluster(config)
    await first.start()
    try:
        async with await KubeClient.connect(first.admin_kubeconfig) as admin:
            created = await admin.create(PODS, _pod("kept", "edge-1"))
            await admin.create(PODS, _pod("gone", "edge-2"))
            await eventually(lambda: _running(admin, "kept"), what="pod kept Running")
            await admin.delete(f"{PODS}/gone", {"gracePeriodSeconds": 0})
            before = await admin.get(PODS)
        urls = (first.url, first.node_url("edge-1"), first.node_url("edge-2"))
        kubeconfig = first.node_kubeconfig("edge-1").read_text()
        rv_before = first.store.resource_version
        assert not first.resumed
    finally:
        await first.stop()

    second = SimCluster(config)
    await second.start()
    try:
        assert second.resumed
        assert (second.url, second.node_url("edge-1"), second.node_url("edge-2")) == urls
        assert second.node_kubeconfig("edge-1").read_text() == kubeconfig
        assert second.store.resource_version >= rv_before  # never back: clients' RVs stay valid
        async with await KubeClient.connect(second.admin_kubeconfig) as admin:
            pod = await admin.get(f"{PODS}/kept")
            assert pod["metadata"]["uid"] == created["metadata"]["uid"]
            assert pod["status"]["phase"] == "Running"
            names = [p["metadata"]["name"] for p in (await admin.get(PODS))["items"]]
            assert names == [p["metadata"]["name"] for p in before["items"]] == ["kept"]
            # History before the restart is gone, as after a compaction: older RVs are 410, not replayed.
            with pytest.raises(KubeError) as expired:
                await admin.get(PODS, query={"resourceVersion": str(rv_before - 1), "resourceVersionMatch": "Exact"})
            assert expired.value.code == 410
            # New writes continue above every RV a client could have seen.
            await admin.create(PODS, _pod("new", "edge-1"))
            assert int((await admin.get(f"{PODS}/new"))["metadata"]["resourceVersion"]) > rv_before
    finally:
        await second.stop()


async def test_a_corrupt_state_file_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    directory = tmp_path / "sim"
    directory.mkdir()
    garbage = b"SQLite format 3\x00" + b"\x07" * 4000
    (directory / STATE_FILE).write_bytes(garbage)
    sim = SimCluster(fast_sim_config(directory, nodes=1))
    with pytest.raises(StateError, match=r"not a readable sim state database.*nothing was loaded"):
        await sim.start()
    assert (directory / STATE_FILE).read_bytes() == garbage
    assert not (directory / "admin.kubeconfig").exists()


async def test_a_second_sim_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    config = fast_sim_config(tmp_path / "sim", nodes=1)
    first = SimCluster(config)
    await first.start()
    try:
        with pytest.raises(StateError, match="in use by another edgeagent sim"):
            await SimCluster(config).start()
        assert first.store.resource_version > 0
    finally:
        await first.stop()


def _waiting_reason(pod: JSON) -> str | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return statuses[0].get("state", {}).get("waiting", {}).get("reason") if statuses else None


async def _backing_off(admin: KubeClient) -> bool:
    return _waiting_reason(await admin.get(f"{PODS}/stuck")) == "ImagePullBackOff"


async def test_restart_keeps_the_image_registry(tmp_path: Path) -> None:
    """A pod in ImagePullBackOff on a missing image stays there after a restart; pull times are kept too."""
    config = fast_sim_config(tmp_path / "sim", nodes=1, image_pull_seconds=0.1, kubelet_backoff=0.2)
    registry = [{"image": "registry.local/missing:1", "pullSeconds": 0.1, "missing": True, "crash": False},
                {"image": "registry.local/slow:1", "pullSeconds": 3600, "missing": False, "crash": False}]
    first = SimCluster(config)
    await first.start()
    try:
        async with await KubeClient.connect(first.admin_kubeconfig) as admin:
            for entry in registry:
                await admin.request("POST", "/sim/v1/images", body={k: entry[k] for k in ("image", "pullSeconds",
                                                                                          "missing")})
            pod = _pod("stuck", "edge-1")
            pod["spec"]["containers"][0]["image"] = "registry.local/missing:1"
            await admin.create(PODS, pod)
            await eventually(lambda: _backing_off(admin), what="stuck in ImagePullBackOff")
    finally:
        await first.stop()

    second = SimCluster(config)
    await second.start()
    try:
        async with await KubeClient.connect(second.admin_kubeconfig) as admin:
            listed = await admin.request("GET", "/sim/v1/images")
            assert sorted(listed["items"], key=lambda e: str(e["image"])) == registry
            # Give the restarted kubelet time for several pull attempts (its back-off is 0.2 s here): each fails.
            await eventually(lambda: _backing_off(admin), what="still in ImagePullBackOff after the restart")
            pulls = 0

            async def retried() -> bool:
                nonlocal pulls
                pod = await admin.get(f"{PODS}/stuck")
                assert pod["status"]["phase"] == "Pending", pod["status"]
                pulls += _waiting_reason(pod) == "ErrImagePull"
                return pulls >= 2

            await eventually(retried, interval=0.01, what="the restarted kubelet retrying the missing image")
    finally:
        await second.stop()


async def test_a_crash_looping_pod_goes_on_crashing_after_a_restart(tmp_path: Path) -> None:
    """The restarted kubelet has no crash loop running for a pod it finds Running and not Ready: it starts it again
    (restartCount going on), instead of taking the pod for one the node controller marked unready meanwhile and
    restoring Ready -- which made the seed-29 soak's bad version look good on the 20 nodes it had reached."""
    config = fast_sim_config(tmp_path / "sim", nodes=1, kubelet_backoff=0.2)
    first = SimCluster(config)
    await first.start()
    try:
        async with await KubeClient.connect(first.admin_kubeconfig) as admin:
            await admin.request("POST", "/sim/v1/images", body={"image": "registry.local/bad:1", "crash": True})
            pod = _pod("crashing", "edge-1")
            pod["spec"]["containers"][0]["image"] = "registry.local/bad:1"
            await admin.create(PODS, pod)
            before = await eventually(lambda: _restarts(admin, at_least=2), what="crash-looping, 2 restarts")
    finally:
        await first.stop()

    second = SimCluster(config)
    await second.start()
    try:
        async with await KubeClient.connect(second.admin_kubeconfig) as admin:
            await eventually(lambda: _restarts(admin, at_least=before + 2), what="crashing on after the restart")
    finally:
        await second.stop()


async def _restarts(admin: KubeClient, *, at_least: int) -> int | None:
    pod = await admin.get(f"{PODS}/crashing")
    ready: JSON = next((c for c in pod["status"].get("conditions") or [] if c.get("type") == "Ready"), {})
    assert ready.get("status") != "True", pod["status"]
    statuses = pod["status"].get("containerStatuses") or [{}]
    count = int(statuses[0].get("restartCount") or 0)
    return count if count >= at_least and _waiting_reason(pod) == "CrashLoopBackOff" else None
