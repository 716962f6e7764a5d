"""The sim runs batch/v1 Jobs: placement, completion, the real failure conditions, and
garbage collection through ownerReferences — over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient, KubeError, Timeouts
from edgeagent.kube.images import node_has_images
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.support.waiting import eventually

JSON = dict[str, Any]
JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"


def job(name: str, image: str = "tool:1", *, node: str | None = None, affinity_node: str | None = None,
        tolerations: list[JSON] | None = None, owner: JSON | None = None, **spec: Any) -> JSON:
    pod_spec: JSON = {"restartPolicy": "Never", "containers": [{"name": "pull", "image": image}]}
    if node:
        pod_spec["nodeName"] = node
    if affinity_node:
        pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                    "values": [affinity_node]}]}]}}}
    if tolerations is not None:
        pod_spec["tolerations"] = tolerations
    metadata: JSON = {"name": name}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            "spec": {**spec, "template": {"spec": pod_spec}}}


@pytest.fixture
async def cluster(sim_factory: SimFactory) -> AsyncIterator[tuple[SimCluster, KubeClient]]:
    sim = await sim_factory(kubelet_backoff=0.1, image_pull_seconds=0.2)
    client = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=5))
    try:
        yield sim, client
    finally:
        await client.close()


async def job_pods(admin: KubeClient, name: str) -> list[JSON]:
    listed = await admin.get(PODS, query={"labelSelector": f"batch.kubernetes.io/job-name={name}"})
    return list(listed["items"])


async def condition(admin: KubeClient, name: str, cond_type: str) -> JSON | None:
    obj = await admin.get(f"{JOBS}/{name}")
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond["type"] == cond_type and cond["status"] == "True":
            return dict(cond)
    return None


async def test_job_runs_on_its_node_after_the_pull_and_completes(cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    created = await admin.create(JOBS, job("j1", "registry.local/tool:1", node="edge-2"))
    assert created["spec"]["backoffLimit"] == 6
    uid = created["metadata"]["uid"]
    assert created["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    await eventually(lambda: condition(admin, "j1", "Complete"), what="j1 Complete")
    obj = await admin.get(f"{JOBS}/j1")
    assert obj["status"]["succeeded"] == 1 and "active" not in obj["status"]
    assert obj["status"]["completionTime"] and obj["status"]["startTime"]
    [pod] = await job_pods(admin, "j1")
    assert pod["spec"]["nodeName"] == "edge-2"
    assert pod["status"]["phase"] == "Succeeded"
    ref = pod["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("Job", "j1", uid, True)
    assert node_has_images(await admin.get("/api/v1/nodes/edge-2"), ["registry.local/tool:1"])
    assert not node_has_images(await admin.get("/api/v1/nodes/edge-1"), ["registry.local/tool:1"])


async def test_affinity_and_taints_decide_placement(cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    taint = {"spec": {"taints": [{"key": "site/busy", "value": "yes", "effect": "NoSchedule"}]}}
    await admin.patch("/api/v1/nodes/edge-3", taint, CONTENT_MERGE_PATCH)
    await admin.create(JOBS, job("blocked", affinity_node="edge-3"))
    await admin.create(JOBS, job("tolerant", affinity_node="edge-3", tolerations=[{"operator": "Exists"}]))
    await eventually(lambda: condition(admin, "tolerant", "Complete"), what="tolerant Complete")
    [pod] = await job_pods(admin, "tolerant")
    assert pod["spec"]["nodeName"] == "edge-3"

    async def unschedulable() -> bool:
        pods = await job_pods(admin, "blocked")
        if len(pods) != 1:
            return False
        assert not pods[0]["spec"].get("nodeName")
        scheduled = [c for c in pods[0]["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
        return bool(scheduled) and scheduled[0]["status"] == "False" and scheduled[0]["reason"] == "Unschedulable"

    await eventually(unschedulable, what="blocked pod unschedulable")
    await admin.patch("/api/v1/nodes/edge-3", {"spec": {"taints": None}}, CONTENT_MERGE_PATCH)
    await eventually(lambda: condition(admin, "blocked", "Complete"), what="blocked Complete once the taint went")
    [pod] = await job_pods(admin, "blocked")
    assert pod["spec"]["nodeName"] == "edge-3"


async def test_missing_image_ends_with_deadline_exceeded(cluster: tuple[SimCluster, KubeClient]) -> None:
    sim, admin = cluster
    sim.set_image("absent:1", missing=True)
    await admin.create(JOBS, job("late", "absent:1", node="edge-1", activeDeadlineSeconds=1))
    failed = await eventually(lambda: condition(admin, "late", "Failed"), timeout=15, what="late Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert failed["message"] == "Job was active longer than specified deadline"

    async def pods_gone() -> bool:
        return all(p["metadata"].get("deletionTimestamp") for p in await job_pods(admin, "late"))

    await eventually(pods_gone, what="the Job's pending pod deleted")
    assert await condition(admin, "late", "Complete") is None


async def test_crashing_pods_end_with_backoff_limit_exceeded(cluster: tuple[SimCluster, KubeClient]) -> None:
    sim, admin = cluster
    sim.set_image("bad:1", crash=True)
    await admin.create(JOBS, job("crash", "bad:1", node="edge-1", backoffLimit=1))
    failed = await eventually(lambda: condition(admin, "crash", "Failed"), timeout=15, what="crash Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == "Job has reached the specified backoff limit"
    obj = await admin.get(f"{JOBS}/crash")
    assert obj["status"]["failed"] == 2
    assert len(await job_pods(admin, "crash")) == 2


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
async def test_deleting_a_job_removes_its_pods(cluster: tuple[SimCluster, KubeClient], policy: str) -> None:
    sim, admin = cluster
    sim.set_image("slow:1", missing=True)  # keeps the pod pending, so it is still there to collect
    await admin.create(JOBS, job("gc", "slow:1", node="edge-1"))
    await eventually(lambda: job_pods(admin, "gc"), what="the Job's pod")
    await admin.delete(f"{JOBS}/gc", {"propagationPolicy": policy})

    async def gone() -> bool:
        return not await job_pods(admin, "gc")

    await eventually(gone, what="pods collected")


async def test_jobs_owned_by_a_pod_go_with_it(cluster: tuple[SimCluster, KubeClient]) -> None:
    sim, admin = cluster
    sim.set_image("slow:2", missing=True)
    owner = await admin.create(PODS, {"metadata": {"name": "owner"}, "spec": {
        "nodeName": "edge-1", "terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "x:1"}]}})
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner["metadata"]["uid"]}
    await admin.create(JOBS, job("owned", "slow:2", node="edge-1", owner=ref))
    await eventually(lambda: job_pods(admin, "owned"), what="the owned Job's pod")
    await admin.delete(f"{PODS}/owner")

    async def all_gone() -> bool:
        jobs = [j["metadata"]["name"] for j in (await admin.get(JOBS))["items"]]
        return "owned" not in jobs and not await job_pods(admin, "owned")

    await eventually(all_gone, what="Job and its pod collected with their owner pod")
    # A Job created for a pod that is already gone is collected too.
    await admin.create(JOBS, job("late-owned", "slow:2", node="edge-1", owner=ref))

    async def collected() -> bool:
        return "late-owned" not in [j["metadata"]["name"] for j in (await admin.get(JOBS))["items"]]

    await eventually(collected, what="orphan Job collected")
    assert sim.gc.collected >= 1


async def test_job_template_must_not_restart_always(cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    body = job("always")
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(KubeError) as caught:
        await admin.create(JOBS, body)
    assert caught.value.code == 422
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always"' in caught.value.status["message"]
