"""Issue 19, must-show 5: a failure reported only by an agent (its `UpgradeFailed` Event for the new revision,
e.g. after an upgrade it did while offline) counts toward `max-failed` exactly once: repeats of the Event, a
second Event about the same node, Events about another revision or from another component, and a controller
restart do not count it again."""

from __future__ import annotations

import time
from typing import Any

from edgeagent.agent.requests.events import PendingEvent, event_object
from edgeagent.controller.app import ControllerApp
from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient
from edgeagent.kube.objects import get_condition, is_terminating
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
from tests.support.rollout_plans import (
    documented_order,
    new_hash,
    plan_events_through,
    plan_state,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
NEW = "nginx:1.20"
PLAN = {"edgeagent.io/rollout-steps": "3,100%", "edgeagent.io/rollout-bake": "1h", "edgeagent.io/max-failed": "3"}


async def report_failure(sim: SimCluster, admin: KubeClient, node: str, revision: str, *, seq: int,
                         component: str = "edgeagent") -> JSON:
    """The Event an agent on `node` sends when its upgrade's replacement never became Ready (agent/requests)."""
    pod = next(p for p in await pods_of(admin, "ota") if p["spec"]["nodeName"] == node and not is_terminating(p))
    message = (f"upgrade request r-{seq}: replacement pod default/ota-x{seq} did not become Ready on revision "
               f"{revision} within 30s: CrashLoopBackOff")
    now = time.time()
    pending = PendingEvent(seq=seq, namespace="default", pod=pod["metadata"]["name"], pod_uid=pod["metadata"]["uid"],
                           type="Warning", reason="UpgradeFailed", message=message, first=now, last=now, count=1)
    event = event_object(pending, node, name=f"{pod['metadata']['name']}.{seq:x}", count=1)
    event["source"]["component"] = component
    event["reportingComponent"] = component
    return await admin.create("/api/v1/namespaces/default/events", event)


async def failed_count(admin: KubeClient) -> int | None:
    state = await plan_state(admin, "ota")
    return int(state["counts"]["failed"]) if state else None


def reconciles(app: ControllerApp) -> float:
    return sum(s.value for m in app.metrics.reconciles.collect() for s in m.samples if s.name.endswith("_total"))


async def test_an_agent_reported_failure_counts_once(sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=5)
    order = documented_order(list(sim.node_names))
    n1, n2, n3, n4, n5 = order
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA", annotations=PLAN))
        await eventually(lambda: all_running(admin, "ota", 5), timeout=20, what="5 pods running")
        app = await controllers.start(sim)
        await eventually(lambda: plan_state(admin, "ota"), what="initial state")
        old = await current_hash(admin, "ota")
        await set_image(admin, "ota", NEW)
        revision = await new_hash(admin, "ota", old)

        async def rolling() -> bool:
            state = await plan_state(admin, "ota")
            return state is not None and state["revision"] == revision

        await eventually(rolling, what="wave 1 started")

        first = await report_failure(sim, admin, n1, revision, seq=1)

        async def count_is(n: int) -> bool:
            return await failed_count(admin) == n

        await eventually(lambda: count_is(1), what="the agent's failure counted")
        state = await plan_state(admin, "ota")
        assert state is not None and state["phase"] == "progressing"
        assert [f["node"] for f in state["failures"]] == [n1] and "CrashLoopBackOff" in state["failures"][0]["reason"]

        # The same failure again: the Event's count raised (the agent's aggregation), and a second Event about the
        # same node. Not failures: one about another revision, and one from another component.
        await admin.patch(f"/api/v1/namespaces/default/events/{first['metadata']['name']}", {"count": 2},
                          CONTENT_MERGE_PATCH)
        await report_failure(sim, admin, n1, revision, seq=2)
        await report_failure(sim, admin, n4, "0123456789", seq=3)
        await report_failure(sim, admin, n5, revision, seq=4, component="someone-else")
        # A real second failure: seen after the ones above (one watch stream, in order).
        await report_failure(sim, admin, n2, revision, seq=5)
        await eventually(lambda: count_is(2), what="the second node's failure counted")

        # A restarted controller counts from the state and the same Events: still 2.
        await controllers.stop(app)
        app = await controllers.start(sim)
        # Its first reconcile runs after all its caches (the Events' too) have synced.
        await eventually(lambda: reconciles(app) > 0, what="the new controller reconciled")
        assert await failed_count(admin) == 2
        assert (await plan_state(admin, "ota") or {})["phase"] == "progressing"

        # The third failure reaches max-failed (3): the rollout stops (on-failure pause: no rollback).
        await report_failure(sim, admin, n3, revision, seq=6)

        async def aborted() -> JSON | None:
            state = await plan_state(admin, "ota")
            return state if state and state["phase"] == "aborted" else None

        state = await eventually(aborted, what="the rollout stopped at max-failed")
        assert state["counts"]["failed"] == 3 and sorted(f["node"] for f in state["failures"]) == sorted([n1, n2, n3])
        events = [e for e in await plan_events_through(admin, "ota", "RolloutAborted")
                  if e["reason"] == "RolloutAborted"]
        assert len(events) == 1 and "3 failure(s), max-failed is 3" in events[0]["message"]
        assert all(n in events[0]["message"] for n in (n1, n2, n3))

        # Stopped means no pod is asked to upgrade any more.
        async def none_asked() -> bool:
            pods = [p for p in await pods_of(admin, "ota") if not is_terminating(p)]
            return all((get_condition(p, "PodNeedUpgrade") or {}).get("status") == "False" for p in pods)

        await eventually(none_asked, what="PodNeedUpgrade False everywhere once aborted")
