"""Issue 37: the rules of OTA in place on the controller's side (controller/inplace_exec.py `ota_request`), against
the simulated cluster over HTTP. The node's request is the condition `edgeagent.io/InPlaceUpgradeRequested` on its
pod's status (written here as its agent writes it): one naming an old revision is ignored; a request is executed
once and answered; a restarted controller neither executes a done request again nor misses a pending one; a PATCH
the API server refuses leaves nothing half-done (the readiness gate it closed is opened again, the request stays
open) and the request is executed once the refusals stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeagent.contract import (
    CONDITION_IN_PLACE_UPDATE_READY,
    CONDITION_IN_PLACE_UPGRADE_REQUESTED,
    LABEL_REVISION_HASH,
    REASON_IN_PLACE_EXECUTED,
    version_message,
)
from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient
from edgeagent.kube.objects import get_condition, is_pod_ready, is_terminating
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.agent_api.conftest import write_kubeconfig
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    patch_daemonset,
    pods_of,
    set_image,
)
from tests.integration.controller.test_inplace_rolling import unready_counter
from tests.support.hook_proxy import HookProxy
from tests.support.waiting import eventually

JSON = dict[str, Any]
NODE = "edge-1"
OLD, NEW, NEWER = "nginx:1.19.4", "nginx:1.19.5", "nginx:1.19.6"
IN_PLACE = {"edgeagent.io/update-type": "InPlaceIfPossible"}


async def pod_on(kube: KubeClient, node: str = NODE) -> JSON:
    return next(p for p in await pods_of(kube, "ota") if p["spec"].get("nodeName") == node and not is_terminating(p))


async def ota_daemonset(sim: SimCluster, kube: KubeClient, *, gate: bool = False) -> str:
    """An OTA `InPlaceIfPossible` DaemonSet on every node, running; its revision hash."""
    manifest = daemonset_manifest("ota", strategy="OTA", image=OLD, annotations=IN_PLACE)
    if gate:
        manifest["spec"]["template"]["spec"]["readinessGates"] = [{"conditionType": CONDITION_IN_PLACE_UPDATE_READY}]
    await create_daemonset(kube, manifest)

    async def running() -> bool:
        pods = await pods_of(kube, "ota")
        # With the gate, Ready waits for the controller's True (inplace_exec.gate_updates): running is enough here.
        return len(pods) == len(sim.node_names) and all(
            p["status"].get("phase") == "Running" if gate else is_pod_ready(p) for p in pods)

    await eventually(running, timeout=20, what="the ota pods Ready")
    return str(await current_hash(kube, "ota"))


async def new_revision(kube: KubeClient, image: str, before: str) -> str:
    await set_image(kube, "ota", image)

    async def moved() -> str | None:
        found = await current_hash(kube, "ota")
        return found if found and found != before else None

    return str(await eventually(moved, what="the new revision"))


async def flagged(kube: KubeClient, revision: str) -> JSON:
    async def needs() -> JSON | None:
        pod = await pod_on(kube)
        cond = get_condition(pod, "PodNeedUpgrade") or {}
        return pod if cond.get("status") == "True" and cond.get("message") == version_message(revision) else None

    return dict(await eventually(needs, what=f"PodNeedUpgrade True for {revision}"))


async def ask(sim: SimCluster, pod: JSON, revision: str) -> None:
    """The agent's write (agent/requests/guarded.py `request_patch`), with the node's own credential."""
    async with await KubeClient.connect(sim.node_kubeconfig(NODE)) as node:
        await node.patch(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/status", {
            "metadata": {"uid": pod["metadata"]["uid"]}, "status": {"conditions": [{
                "type": CONDITION_IN_PLACE_UPGRADE_REQUESTED, "status": "True", "reason": "RequestedByNode",
                "message": version_message(revision)}]}}, CONTENT_STRATEGIC_MERGE_PATCH)


def spec_patches(sim: SimCluster, pod: JSON) -> list[JSON]:
    """PATCHes of the pod itself (not its status) that the API server carried out."""
    path = f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}"
    return [e for e in sim.audit.find("PATCH", path) if e["path"] == path and e.get("code") == 200]


def reconciles(app: ControllerApp) -> float:
    return sum(s.value for m in app.metrics.reconciles.collect() for s in m.samples if s.name.endswith("_total"))


async def settle(kube: KubeClient, app: ControllerApp, poke: str) -> None:
    """One more reconcile of the DaemonSet, begun after whatever the test did last."""
    seen = reconciles(app)
    await patch_daemonset(kube, "ota", {"metadata": {"annotations": {"example.com/poke": poke}}})
    await eventually(lambda: reconciles(app) > seen + 0.5, what="a reconcile after the poke")


async def upgraded_once(sim: SimCluster, kube: KubeClient, before: JSON, revision: str, image: str) -> JSON:
    async def done() -> JSON | None:
        pod = await pod_on(kube)
        cond = get_condition(pod, CONDITION_IN_PLACE_UPGRADE_REQUESTED) or {}
        ok = (pod["metadata"]["labels"][LABEL_REVISION_HASH] == revision and is_pod_ready(pod)
              and cond.get("status") == "False" and cond.get("reason") == REASON_IN_PLACE_EXECUTED)
        return pod if ok else None

    pod = dict(await eventually(done, timeout=20, what="the pod patched in place and the request answered"))
    assert pod["metadata"]["uid"] == before["metadata"]["uid"]
    assert pod["spec"]["containers"][0]["image"] == image
    assert len(spec_patches(sim, pod)) == 1, spec_patches(sim, pod)
    return pod


async def test_a_request_naming_an_old_revision_is_ignored(sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=2)
    async with admin_client(sim) as kube:
        first = await ota_daemonset(sim, kube)
        second = await new_revision(kube, NEW, first)
        app = await controllers.start(sim)
        await flagged(kube, second)
        third = await new_revision(kube, NEWER, second)
        pod = await flagged(kube, third)
        await ask(sim, pod, second)  # the node asks for a revision the DaemonSet has left behind
        await settle(kube, app, "1")
        await settle(kube, app, "2")
        now = await pod_on(kube)
        assert now["metadata"]["labels"][LABEL_REVISION_HASH] == first
        assert now["spec"]["containers"][0]["image"] == OLD and spec_patches(sim, now) == []
        assert (get_condition(now, CONDITION_IN_PLACE_UPGRADE_REQUESTED) or {}).get("status") == "True"
        await ask(sim, now, third)  # the current one is carried out
        await upgraded_once(sim, kube, pod, third, NEWER)


async def test_a_request_is_executed_once_and_answered(sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=2)
    async with admin_client(sim) as kube:
        first = await ota_daemonset(sim, kube)
        app = await controllers.start(sim)
        revision = await new_revision(kube, NEW, first)
        pod = await flagged(kube, revision)
        await ask(sim, pod, revision)
        done = await upgraded_once(sim, kube, pod, revision, NEW)
        for poke in ("1", "2", "3"):
            await settle(kube, app, poke)
        assert len(spec_patches(sim, done)) == 1
        other = await pod_on(kube, "edge-2")  # its node asked for nothing
        assert other["spec"]["containers"][0]["image"] == OLD and spec_patches(sim, other) == []


async def test_a_restarted_controller_executes_a_request_once(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=2)
    async with admin_client(sim) as kube:
        first = await ota_daemonset(sim, kube)
        app = await controllers.start(sim)
        revision = await new_revision(kube, NEW, first)
        pod = await flagged(kube, revision)
        # Down while the node asks: the request waits on the pod, and the next controller carries it out once.
        await controllers.stop(app)
        await ask(sim, pod, revision)
        app = await controllers.start(sim)
        await upgraded_once(sim, kube, pod, revision, NEW)
        # A controller that stopped after its PATCH and before its answer: the PATCH landed (as the admin makes it
        # here), the request is still open. The next controller answers it and patches nothing again.
        other = await pod_on(kube, "edge-2")
        await controllers.stop(app)
        await ask_on(sim, other, revision)
        await kube.patch(f"/api/v1/namespaces/default/pods/{other['metadata']['name']}", {
            "metadata": {"labels": {LABEL_REVISION_HASH: revision}},
            "spec": {"containers": [{"name": "main", "image": NEW}]}}, CONTENT_STRATEGIC_MERGE_PATCH)
        app = await controllers.start(sim)

        async def answered() -> bool:
            cond = get_condition(await pod_on(kube, "edge-2"), CONDITION_IN_PLACE_UPGRADE_REQUESTED) or {}
            return cond.get("status") == "False" and cond.get("reason") == REASON_IN_PLACE_EXECUTED

        await eventually(answered, what="the done request answered")
        await settle(kube, app, "1")
        # Only the admin's, standing in for the stopped controller's.
        assert [e["userAgent"].split("/")[0] for e in spec_patches(sim, other)] == ["edgeagent-client"]


async def ask_on(sim: SimCluster, pod: JSON, revision: str) -> None:
    """`ask`, with the credential of the pod's own node."""
    async with await KubeClient.connect(sim.node_kubeconfig(pod["spec"]["nodeName"])) as node:
        await node.patch(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/status", {
            "metadata": {"uid": pod["metadata"]["uid"]}, "status": {"conditions": [{
                "type": CONDITION_IN_PLACE_UPGRADE_REQUESTED, "status": "True", "reason": "RequestedByNode",
                "message": version_message(revision)}]}}, CONTENT_STRATEGIC_MERGE_PATCH)


async def test_a_refused_patch_leaves_nothing_half_done(sim_factory: SimFactory, controllers: Controllers,
                                                         tmp_path: Path) -> None:
    sim = await sim_factory(nodes=2)
    async with admin_client(sim) as kube:
        first = await ota_daemonset(sim, kube, gate=True)
        proxy = HookProxy(sim.url)
        await proxy.start()
        try:
            await controllers.start(sim, kubeconfig=write_kubeconfig(tmp_path / "ctl.kubeconfig", proxy.url))
            revision = await new_revision(kube, NEW, first)
            pod = await flagged(kube, revision)
            path = f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}"
            # The API server refuses the image PATCH, every attempt of one execution (the gate's own write goes
            # through): 409, as for a pod changed since it was read.
            refused = proxy.answer(lambda r: r.method == "PATCH" and r.path == path, 409, "Conflict",
                                   f'Operation cannot be fulfilled on pods "{pod["metadata"]["name"]}": the object '
                                   "has been modified; please apply your changes to the latest version and try again",
                                   times=3)
            async with unready_counter(kube, "ota") as seen:
                await ask(sim, pod, revision)
                done = await upgraded_once(sim, kube, pod, revision, NEW)
            assert refused.hits == 3
            mine = [v for v in seen["versions"] if v["metadata"]["uid"] == pod["metadata"]["uid"]]
            gates = [((get_condition(v, CONDITION_IN_PLACE_UPDATE_READY) or {}).get("status"),
                      (get_condition(v, CONDITION_IN_PLACE_UPDATE_READY) or {}).get("message"),
                      v["metadata"]["labels"][LABEL_REVISION_HASH]) for v in mine]
            # The gate closed for the refused execution was opened again before anything else happened, on the
            # old revision; the request stayed open until the executed one.
            reopened = [i for i, g in enumerate(gates) if g == ("True", "in-place upgrade not started", first)]
            assert reopened, gates
            assert all(g[2] == first for g in gates[:reopened[0] + 1]), gates
            before_success = [v for v in mine if v["metadata"]["labels"][LABEL_REVISION_HASH] == first]
            assert all((get_condition(v, CONDITION_IN_PLACE_UPGRADE_REQUESTED) or {}).get("reason")
                       != REASON_IN_PLACE_EXECUTED for v in before_success)
            assert (get_condition(done, CONDITION_IN_PLACE_UPDATE_READY) or {}).get("status") == "True"
        finally:
            await proxy.stop()
