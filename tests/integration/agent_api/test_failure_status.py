"""Issue 35: a failed upgrade is reported on the failed pod's status (`edgeagent.io/UpgradeFailed`), the one
channel the API server lets only the pod's node write; Events stay for people.

Against the simulated cluster over real HTTP: the agent with its node's credential (rbac mode where the
credential matters), the kubelet's crash loop, a link cut, and the sim's audit log counting the PATCHes.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgeagent.agent.app import Agent
from edgeagent.contract import CONDITION_UPGRADE_FAILED, failure_message, reported_failure
from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient, Timeouts
from edgeagent.kube.errors import Forbidden
from edgeagent.kube.objects import get_condition
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    make_world,
    wait_cached,
    wait_connected,
    write_kubeconfig,
)
from tests.support.agent_outcomes import (
    cached,
    final_entry,
    request_entry,
    set_image,
    upgrade_json,
    waiting_reason,
)
from tests.support.fleet_scenario import post_sim
from tests.support.hook_proxy import HookProxy
from tests.support.waiting import eventually

JSON = dict[str, Any]
NODES = ["edge-1", "edge-2", "edge-3"]


def status_patches(sim: SimCluster, pod: JSON) -> list[JSON]:
    """The PATCHes of this pod's status the sim's audit log recorded (the kubelet writes in-process, not here)."""
    path = f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/status"
    return [e for e in sim.audit.find("PATCH", path) if e["path"] == path]


def restarts(pod: JSON | None) -> int:
    return max((int(s.get("restartCount") or 0) for s in ((pod or {}).get("status") or {})
                .get("containerStatuses") or []), default=0)


async def failed_upgrade(world: World, agent: Agent, http: aiohttp.ClientSession) -> tuple[JSON, JSON, JSON]:
    """(the request's final entry, the old pod, the replacement) of an upgrade to a crash-looping version."""
    old = await world.pod()
    await wait_cached(agent, old)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body
    done = await final_entry(http, agent, body["id"])
    assert (done["state"], done["reason"]) == ("failed", "CrashLoopBackOff"), done
    new = await world.replaced(old)
    assert new is not None and done["replacement"] == f"default/{new['metadata']['name']}"
    return done, old, new


async def test_an_online_failure_is_written_on_the_replacement_once_with_its_revision(
        sim_factory: SimFactory, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    sim = await sim_factory(node_names=NODES, authorization="rbac")
    async with make_world(sim) as world:
        await set_image(world.admin, crash=True)
        agent = await agent_factory(kubeconfig=sim.node_kubeconfig(NODE), ready_timeout=2)
        await wait_connected(agent)
        done, old, new = await failed_upgrade(world, agent, http)

        async def reported() -> JSON | None:
            pod = await world.admin.get(f"/api/v1/namespaces/default/pods/{new['metadata']['name']}")
            return pod if reported_failure(pod) is not None else None

        pod = await eventually(reported, what="the failure on the replacement's status")
        found = reported_failure(pod)
        assert found is not None and (found.revision, found.reason) == (world.new_hash, "CrashLoopBackOff")
        assert found.message == f"upgrade request {done['id']}: {done['message']}"
        assert get_condition(pod, CONDITION_UPGRADE_FAILED)["message"] == failure_message(  # type: ignore[index]
            world.new_hash, found.message)
        assert get_condition(old, CONDITION_UPGRADE_FAILED) is None

        # The kubelet goes on posting the crash loop: every post wakes the publisher, none sends it again.
        seen = restarts(pod)
        # At least 10 s and 20 s apart (the kubelet's back-off doubles from 10 s): 30 s was the floor, not room.
        await eventually(lambda: restarts(cached(agent, new)) >= seen + 2, timeout=90,
                         what="two more crash-loop restarts in the agent's cache")
        assert agent.outcomes is not None and agent.outcomes.failures.patches == 1
        # In the audit log: the one UpgradeHeld (Open) of the new pod, and this one; both answered 200.
        assert [e["code"] for e in status_patches(sim, new)] == [200, 200]


async def test_a_failure_decided_while_its_write_cannot_get_through_is_written_when_the_link_returns(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    hook = HookProxy(world.sim.node_url(NODE))
    await hook.start()
    try:
        await set_image(world.admin, crash=True)
        agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "hook.kubeconfig", hook.url),
                                    ready_timeout=3)
        await wait_connected(agent)
        old = await world.pod()
        await wait_cached(agent, old)
        status, body = await upgrade_json(http, agent, old)
        assert status == 200, body
        new = await eventually(lambda: world.replaced(old), what="replacement created")
        await eventually(lambda: get_condition(cached(agent, new) or {}, "UpgradeHeld") is not None,
                         what="the replacement's UpgradeHeld published")
        # From now on no status write of the replacement gets through (a partition mid-request).
        cut = hook.hang(lambda r: r.method == "PATCH" and r.path.endswith(f"/pods/{new['metadata']['name']}/status"))
        done = await final_entry(http, agent, body["id"])
        assert done["state"] == "failed", done
        await eventually(lambda: cut.hits >= 1, what="the failure's PATCH tried")
        assert reported_failure(await world.pod()) is None  # recorded on the node, not in the cloud yet

        await post_sim(world.sim, f"/sim/v1/nodes/{NODE}/disconnect?mode=refuse")
        await wait_connected(agent, False)
        cut.times = 0  # the partition heals with the link
        await post_sim(world.sim, f"/sim/v1/nodes/{NODE}/connect")
        await wait_connected(agent)
        pod = await eventually(lambda: _reported_on(world, new), timeout=20,
                               what="the failure on the replacement's status after the link returned")
        found = reported_failure(pod)
        assert found is not None and found.revision == world.new_hash and done["id"] in found.message
    finally:
        await hook.stop()


async def test_a_failure_judged_after_the_link_returns_is_written_then(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    """The deadline passes while the link is cut (POST /sim/v1/nodes/NODE/disconnect): no verdict from a frozen
    cache, nothing written; once it returns (connect), the verdict is `failed` and the condition follows."""
    await set_image(world.admin, crash=True)
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=3)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body
    new = await eventually(lambda: world.replaced(old), what="replacement created")
    await eventually(lambda: waiting_reason(cached(agent, new)) == "CrashLoopBackOff",
                     what="the replacement crash-looping in the agent's cache")
    await post_sim(world.sim, f"/sim/v1/nodes/{NODE}/disconnect")
    await wait_connected(agent, False)
    deadline = datetime.fromisoformat((await request_entry(http, agent, body["id"]))["deadline"]).timestamp()
    await eventually(lambda: time.time() > deadline + 1.0, timeout=30, what="the deadline passed offline")
    assert (await request_entry(http, agent, body["id"]))["state"] == "verifying"
    assert await _reported_on(world, new) is None

    await post_sim(world.sim, f"/sim/v1/nodes/{NODE}/connect")
    done = await final_entry(http, agent, body["id"], timeout=30)
    assert (done["state"], done["reason"]) == ("failed", "CrashLoopBackOff"), done
    pod = await eventually(lambda: _reported_on(world, new), timeout=20, what="the failure written after the cut")
    found = reported_failure(pod)
    assert found is not None and found.revision == world.new_hash and done["id"] in found.message


async def test_a_failure_recorded_before_a_restart_is_written_by_the_next_agent(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    """Durable: the outcome is in SQLite, the write is reloaded from it (no write got through before the stop)."""
    hook = HookProxy(world.sim.node_url(NODE))
    await hook.start()
    try:
        await set_image(world.admin, crash=True)
        state_dir = tmp_path / "kept"
        first = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "hook.kubeconfig", hook.url),
                                    ready_timeout=2, state_dir=state_dir)
        await wait_connected(first)
        hook.answer(lambda r: r.method == "PATCH" and r.path.endswith("/status"), 503, "ServiceUnavailable",
                    "the cloud is overloaded")
        done, _old, new = await failed_upgrade(world, first, http)
        assert reported_failure(await world.pod()) is None
        assert first.outcomes is not None and first.outcomes.failures.patches == 0
    finally:
        await hook.stop()  # the first agent's link is gone with it
    again = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=2, state_dir=state_dir)
    await wait_connected(again)
    pod = await eventually(lambda: _reported_on(world, new), timeout=20, what="the failure written after a restart")
    found = reported_failure(pod)
    assert found is not None and done["id"] in found.message


async def _reported_on(world: World, pod: JSON) -> JSON | None:
    current = await world.admin.get(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}")
    return current if reported_failure(current) is not None else None


async def test_another_node_cannot_write_the_failure_onto_a_pod_of_this_node(sim_factory: SimFactory) -> None:
    """Node B's credential (the kubelet identity `system:node:edge-2`) PATCHing node C's pod status: 403, as the
    Node authorizer and NodeRestriction answer, so a node cannot make another node's pod count as failed."""
    sim = await sim_factory(node_names=NODES, authorization="rbac")
    async with make_world(sim) as world:
        victim = await world.pod("edge-3")
        b = await KubeClient.connect(sim.node_kubeconfig("edge-2"), Timeouts(connect=2, request=5))
        own_revision = victim["metadata"]["labels"]["controller-revision-hash"]
        forged = {"type": CONDITION_UPGRADE_FAILED, "status": "True", "reason": "CrashLoopBackOff",
                  "message": failure_message(own_revision, "forged by edge-2")}
        try:
            with pytest.raises(Forbidden) as refused:
                await b.patch(f"/api/v1/namespaces/default/pods/{victim['metadata']['name']}/status",
                              {"status": {"conditions": [forged]}}, CONTENT_STRATEGIC_MERGE_PATCH)
            assert refused.value.code == 403
            assert 'node "edge-2" can only update pod status for pods with spec.nodeName set to itself' \
                in refused.value.message
            # Its own pod, the same write: allowed (the refusal is about whose pod, not about the condition).
            mine = await world.pod("edge-2")
            forged_own = {**forged, "message": failure_message(
                mine["metadata"]["labels"]["controller-revision-hash"], "its own")}
            await b.patch(f"/api/v1/namespaces/default/pods/{mine['metadata']['name']}/status",
                          {"status": {"conditions": [forged_own]}}, CONTENT_STRATEGIC_MERGE_PATCH)
        finally:
            await b.close()
        assert reported_failure(await world.pod("edge-3")) is None
        assert reported_failure(await world.pod("edge-2")) is not None


async def test_the_kubelet_keeps_the_agents_condition_when_it_posts_the_pods_status(world: World) -> None:
    """A real kubelet merges its own conditions by type and keeps the others: so does the sim's."""
    await set_image(world.admin, crash=True)
    old = await world.pod()
    await world.admin.delete(f"/api/v1/namespaces/default/pods/{old['metadata']['name']}")
    new = await eventually(lambda: world.replaced(old), what="replacement created")
    await eventually(lambda: _crash_looping(world, new), what="the replacement crash-looping")
    report = {"type": CONDITION_UPGRADE_FAILED, "status": "True", "reason": "CrashLoopBackOff",
              "message": failure_message(world.new_hash, "upgrade request x: did not become Ready")}
    path = f"/api/v1/namespaces/default/pods/{new['metadata']['name']}"
    written = await world.admin.patch(f"{path}/status", {"status": {"conditions": [report]}},
                                      CONTENT_STRATEGIC_MERGE_PATCH)
    seen = restarts(written)

    async def posted_again() -> JSON | None:
        pod = await world.admin.get(path)
        return pod if restarts(pod) >= seen + 2 else None

    # The kubelet's back-off doubles from 10 s: the next two restarts come 10 s and 20 s apart at the least, 30 s
    # in all, which was also the deadline (CI failed it once). A deadline, not a wait: it ends when they come.
    pod = await eventually(posted_again, timeout=90, what="the kubelet's next two crash-loop posts")
    kept = get_condition(pod, CONDITION_UPGRADE_FAILED)
    assert kept is not None and {k: kept.get(k) for k in report} == report
    assert get_condition(pod, "Ready") is not None  # the kubelet's own conditions are there too


async def _crash_looping(world: World, pod: JSON) -> bool:
    current = await world.admin.get(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}")
    return waiting_reason(current) == "CrashLoopBackOff"
