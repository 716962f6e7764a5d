"""Issue 35, must-show 4 (and round 3's "agent-reported failure once", with the plan a RolloutPlan): a failure
counts only when the failed pod's own node reports it on the pod's status (`contract.reported_failure`), once,
whatever is repeated and across a controller restart. Events never count: a forged `UpgradeFailed` Event created
with node B's credential about node C's pod naming C as its source, or naming a node that does not exist,
changes nothing; node B cannot write the failure onto C's pod status (403, `--authorization rbac`)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from edgeagent.contract import CONDITION_UPGRADE_FAILED, failure_message
from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient, Timeouts
from edgeagent.kube.errors import Forbidden
from edgeagent.kube.objects import is_terminating
from edgeagent.kube.timeutil import format_micro_time, format_time
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    patch_daemonset,
    pods_of,
    set_image,
)
from tests.support.rollout_plans import (
    create_plan,
    documented_order,
    install_plan_crd,
    new_hash,
    plan_events_through,
    plan_state,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
NEW = "nginx:crashing"
SPEC = {"steps": [3, "100%"], "bake": "1h", "maxFailed": 3}


async def node_client(sim: SimCluster, node: str) -> KubeClient:
    return await KubeClient.connect(sim.node_kubeconfig(node), Timeouts(connect=2, request=5))


async def new_pod_on(admin: KubeClient, node: str, revision: str) -> JSON:
    """The node's pod of `revision`, once the DaemonSet controller made it (its old one deleted as an agent would)."""
    async def found() -> JSON | None:
        return next((p for p in await pods_of(admin, "ota") if p["spec"].get("nodeName") == node
                     and not is_terminating(p) and p["metadata"]["labels"].get("controller-revision-hash") == revision),
                    None)

    old = next(p for p in await pods_of(admin, "ota") if p["spec"].get("nodeName") == node and not is_terminating(p))
    if old["metadata"]["labels"].get("controller-revision-hash") != revision:
        await admin.delete(f"/api/v1/namespaces/default/pods/{old['metadata']['name']}")
    return dict(await eventually(found, what=f"the new pod on {node}"))


async def report(client: KubeClient, pod: JSON, revision: str, text: str) -> None:
    """The agent's write: the `edgeagent.io/UpgradeFailed` condition on the pod's status (agent/requests)."""
    condition = {"type": CONDITION_UPGRADE_FAILED, "status": "True", "reason": "CrashLoopBackOff",
                 "message": failure_message(revision, text), "lastTransitionTime": format_time(time.time())}
    await client.patch(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/status",
                       {"status": {"conditions": [condition]}}, CONTENT_STRATEGIC_MERGE_PATCH)


async def forge_event(client: KubeClient, pod: JSON, host: str, revision: str, seq: int) -> None:
    """An `UpgradeFailed` Event as the agent words it, about `pod`, naming `host` as its source."""
    now = time.time()
    name = pod["metadata"]["name"]
    await client.create("/api/v1/namespaces/default/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{name}.forged{seq}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": "default",
                           "uid": pod["metadata"]["uid"]},
        "type": "Warning", "reason": "UpgradeFailed", "source": {"component": "edgeagent", "host": host},
        "reportingComponent": "edgeagent", "reportingInstance": host,
        "message": f"upgrade request r-{seq}: replacement pod did not become Ready on revision {revision} within "
                   "30s: CrashLoopBackOff",
        "firstTimestamp": format_time(now), "lastTimestamp": format_time(now), "eventTime": format_micro_time(now),
        "count": 1})


async def failed_count(admin: KubeClient) -> int | None:
    state = await plan_state(admin, "ota")
    return int(state["counts"]["failed"]) if state else None


def reconciles(app: ControllerApp) -> float:
    return sum(s.value for m in app.metrics.reconciles.collect() for s in m.samples if s.name.endswith("_total"))


async def settled(admin: KubeClient, app: ControllerApp, poke: str) -> None:
    """One more reconcile of the DaemonSet, begun after whatever the test did last (a harmless annotation)."""
    seen = reconciles(app)
    await patch_daemonset(admin, "ota", {"metadata": {"annotations": {"example.com/poke": poke}}})
    await eventually(lambda: reconciles(app) > seen, what="a reconcile after the poke")


async def test_only_the_nodes_own_report_on_its_pod_status_counts_and_once(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=5, authorization="rbac")
    sim.set_image(NEW, crash=True)
    n1, n2, n3, _, _ = documented_order(list(sim.node_names))
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA"))
        await install_plan_crd(admin)
        await create_plan(admin, "ota", SPEC)
        await eventually(lambda: all_running(admin, "ota", 5), timeout=20, what="5 pods running")
        app = await controllers.start(sim)
        await eventually(lambda: plan_state(admin, "ota"), what="initial status")
        old = await current_hash(admin, "ota")
        await set_image(admin, "ota", NEW)
        revision = await new_hash(admin, "ota", old)

        async def rolling() -> bool:
            state = await plan_state(admin, "ota")
            return state is not None and state["revision"] == revision

        await eventually(rolling, what="wave 1 started")
        c_pod = await new_pod_on(admin, n1, revision)  # node C = n1, node B = n2
        b, c = await node_client(sim, n2), await node_client(sim, n1)
        try:
            # Forged: B's credential, about C's pod, naming C as the source; and naming a node that does not exist.
            await forge_event(b, c_pod, n1, revision, 1)
            await forge_event(b, c_pod, "edge-ghost", revision, 2)
            # B cannot write the failure onto C's pod status.
            with pytest.raises(Forbidden):
                await report(b, c_pod, revision, "forged by B")
            await settled(admin, app, "1")
            assert await failed_count(admin) == 0
            assert (await plan_state(admin, "ota") or {})["phase"] == "progressing"

            # C's own report on its pod's status: counted, once, however often it is written again.
            await report(c, c_pod, revision, "upgrade request r-1: not Ready within 30s")

            async def count_is(n: int) -> bool:
                return await failed_count(admin) == n

            await eventually(lambda: count_is(1), what="C's reported failure counted")
            state = await plan_state(admin, "ota")
            assert state is not None and [f["node"] for f in state["failures"]] == [n1], state
            assert "CrashLoopBackOff" in state["failures"][0]["reason"], state
            await report(c, c_pod, revision, "upgrade request r-1: not Ready within 30s (again)")
            await forge_event(b, c_pod, n1, revision, 3)
            await settled(admin, app, "2")
            assert await failed_count(admin) == 1

            # A restarted controller counts from the status and the same pods: still 1.
            await controllers.stop(app)
            app = await controllers.start(sim)
            await eventually(lambda: reconciles(app) > 0, what="the new controller reconciled")
            await settled(admin, app, "3")
            assert await failed_count(admin) == 1
            assert (await plan_state(admin, "ota") or {})["phase"] == "progressing"

            # Two more nodes of wave 1 report theirs: max-failed (3) stops the rollout (onFailure Pause).
            for node in (n2, n3):
                pod = await new_pod_on(admin, node, revision)
                own = await node_client(sim, node)
                try:
                    await report(own, pod, revision, "upgrade request r-2: not Ready within 30s")
                finally:
                    await own.close()
        finally:
            await b.close()
            await c.close()

        async def aborted() -> JSON | None:
            state = await plan_state(admin, "ota")
            return state if state and state["phase"] == "aborted" else None

        state = await eventually(aborted, what="the rollout stopped at max-failed")
        assert state["counts"]["failed"] == 3 and sorted(f["node"] for f in state["failures"]) == sorted([n1, n2, n3])
        events = [e for e in await plan_events_through(admin, "ota", "RolloutAborted")
                  if e["reason"] == "RolloutAborted"]
        assert len(events) == 1 and "3 failure(s), maxFailed is 3" in events[0]["message"]
        assert all(n in events[0]["message"] for n in (n1, n2, n3))
