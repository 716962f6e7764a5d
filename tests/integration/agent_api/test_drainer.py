"""The drainer: queued requests are re-checked against fresh cloud state and applied when the link returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgeagent.agent.app import Agent
from edgeagent.agent.state.store import RUNNING, StateStore
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    orphan_ds_pod,
    set_condition,
    wait_cached,
    wait_connected,
    write_kubeconfig,
)
from tests.support.faulty_proxy import FaultyProxy
from tests.support.hook_proxy import HookProxy, method_on
from tests.support.waiting import eventually


async def queue(http: aiohttp.ClientSession, agent: Agent, pod: dict[str, Any]) -> str:
    url = f"{agent.url}/openyurt.io/v1/namespaces/default/pods/{pod['metadata']['name']}/upgrade"
    async with http.post(url, headers={"Accept": "application/json"}) as resp:
        body = await resp.json()
        assert resp.status == 202, body
        request_id: str = body["id"]
        return request_id


async def entry(http: aiohttp.ClientSession, agent: Agent, request_id: str) -> dict[str, Any]:
    async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}") as resp:
        assert resp.status == 200
        result: dict[str, Any] = await resp.json()
        return result


async def finished(http: aiohttp.ClientSession, agent: Agent, request_id: str) -> dict[str, Any]:
    """The entry once it reached a final state."""
    async def probe() -> dict[str, Any] | None:
        e = await entry(http, agent, request_id)
        return e if e["state"] in ("succeeded", "failed", "cancelled", "obsolete") else None

    return await eventually(probe, what=f"request {request_id} finished")


async def applied(http: aiohttp.ClientSession, agent: Agent, request_id: str) -> dict[str, Any]:
    """The entry once the drainer is done with it: its pod deleted (`verifying`, the verifier's turn) or final."""
    async def probe() -> dict[str, Any] | None:
        e = await entry(http, agent, request_id)
        return e if e["state"] in ("verifying", "succeeded", "failed", "cancelled", "obsolete") else None

    return await eventually(probe, what=f"request {request_id} applied")


async def offline_agent_with(world: World, agent_factory: AgentFactory, pods: list[dict[str, Any]],
                             **fields: Any) -> Agent:
    """A connected agent that has cached `pods`, then loses its link."""
    agent = await agent_factory(kubeconfig=fields.pop("kubeconfig", world.sim.node_kubeconfig(NODE)), **fields)
    await wait_connected(agent)
    for pod in pods:
        await wait_cached(agent, pod)
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    return agent


async def test_entry_for_a_replaced_pod_ends_obsolete_and_the_new_pod_is_not_deleted(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    old = await world.pod()
    agent = await offline_agent_with(world, agent_factory, [old])
    request_id = await queue(http, agent, old)

    # Meanwhile, in the cloud, someone else replaces the pod.
    await world.admin.delete(f"/api/v1/namespaces/default/pods/{old['metadata']['name']}", {"gracePeriodSeconds": 0})
    new = await eventually(lambda: world.replaced(old), what="replacement pod")
    await set_condition(world.admin, new, "PodNeedUpgrade", "True", "controllerrevision: even-newer")
    deletes_before = len(world.sim.store.deletes)

    await world.sim.connect(NODE)
    done = await finished(http, agent, request_id)
    assert done["state"] == "obsolete"
    assert "no longer exists" in done["message"] or "replaced" in done["message"]
    assert world.sim.store.deletes[deletes_before:] == []  # the agent sent no DELETE at all
    assert (await world.pod())["metadata"]["uid"] == new["metadata"]["uid"]


async def test_entry_for_a_pod_replaced_under_the_same_name_ends_obsolete(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    old = await orphan_ds_pod(world.admin, "fixed-name")
    agent = await offline_agent_with(world, agent_factory, [old])
    request_id = await queue(http, agent, old)
    path = "/api/v1/namespaces/default/pods/fixed-name"
    await world.admin.delete(path, {"gracePeriodSeconds": 0})
    await eventually(lambda: _gone(world, path), what="old pod removed")
    new = await orphan_ds_pod(world.admin, "fixed-name")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    deletes_before = len(world.sim.store.deletes)

    await world.sim.connect(NODE)
    done = await finished(http, agent, request_id)
    assert done["state"] == "obsolete" and "was replaced" in done["message"]
    assert new["metadata"]["uid"] in done["message"]
    assert [d for d in world.sim.store.deletes[deletes_before:] if d["name"] == "fixed-name"] == []
    assert (await world.admin.get(path))["metadata"]["uid"] == new["metadata"]["uid"]


async def test_a_pod_replaced_between_the_drainers_get_and_delete_ends_obsolete_and_survives(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        hook_proxy: HookProxy) -> None:
    """The race the UID precondition exists for, on the drainer's path: its GET sees the queued pod, then
    the DaemonSet controller replaces it under the same name before the DELETE; the 409 ends `obsolete`."""
    old = await orphan_ds_pod(world.admin, "raced-queued")
    path = "/api/v1/namespaces/default/pods/raced-queued"

    async def replace_pod() -> None:
        await world.admin.delete(path, {"gracePeriodSeconds": 0})
        await orphan_ds_pod(world.admin, "raced-queued")

    agent = await offline_agent_with(world, agent_factory, [old],
                                     kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", hook_proxy.url))
    request_id = await queue(http, agent, old)
    hook = hook_proxy.before(method_on("DELETE", "/pods/raced-queued"), replace_pod)
    await world.sim.connect(NODE)
    done = await finished(http, agent, request_id)
    assert hook.hits == 1
    assert done["state"] == "obsolete" and "was replaced" in done["message"], done
    new = await world.admin.get(path)
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and not new["metadata"].get("deletionTimestamp")
    [refused] = [d for d in world.sim.store.deletes if d["name"] == "raced-queued"
                 and d.get("precondition_uid") == old["metadata"]["uid"]]
    assert refused["code"] == 409


@pytest.mark.parametrize(("condition", "status", "revision", "state", "why"), [
    # The controller no longer asks for an upgrade of this pod.
    ("PodNeedUpgrade", "False", "old_hash", "obsolete", "no longer needs an upgrade"),
    # A pre-pull of the version to upgrade to was asked for meanwhile and has not finished.
    ("PodImageReady", "False", "new_hash", "failed", "image of the current version is not ready"),
])
async def test_entry_is_rechecked_against_the_pods_conditions_when_the_link_returns(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        condition: str, status: str, revision: str, state: str, why: str) -> None:
    pod = await world.pod()
    agent = await offline_agent_with(world, agent_factory, [pod])
    request_id = await queue(http, agent, pod)
    await set_condition(world.admin, pod, condition, status, f"controllerrevision: {getattr(world, revision)}")
    await world.sim.connect(NODE)
    done = await finished(http, agent, request_id)
    assert done["state"] == state and why in done["message"]
    assert world.agent_deletes() == []


async def test_cloud_4xx_fails_the_entry_with_its_message_without_retry(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        proxy: FaultyProxy) -> None:
    message = 'pods "x" is forbidden: node edge-1 may not delete this pod'
    fault = proxy.fail("DELETE", r"/pods/", 403, message)
    pod = await world.pod()
    agent = await offline_agent_with(world, agent_factory, [pod],
                                     kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", proxy.url))
    request_id = await queue(http, agent, pod)
    await world.sim.connect(NODE)
    done = await finished(http, agent, request_id)
    assert done["state"] == "failed" and message in done["message"] and "403" in done["message"]
    assert done["attempts"] == 1 and fault.hits == 1
    assert (await world.pod())["metadata"]["uid"] == pod["metadata"]["uid"]


async def test_cloud_5xx_is_retried_with_backoff_until_it_succeeds(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        proxy: FaultyProxy) -> None:
    fault = proxy.fail("DELETE", r"/pods/", 503, "etcd leader changed", times=1)
    pod = await world.pod()
    agent = await offline_agent_with(world, agent_factory, [pod],
                                     kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", proxy.url))
    request_id = await queue(http, agent, pod)
    await world.sim.connect(NODE)
    done = await finished(http, agent, request_id)
    assert done["state"] == "succeeded"
    assert done["attempts"] == 2 and fault.hits == 1
    await eventually(lambda: world.replaced(pod), what="pod replaced")


async def test_entry_left_running_by_a_crash_is_rechecked_on_restart(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    pod = await world.pod()
    gone = await orphan_ds_pod(world.admin, "already-deleted")
    state_dir = tmp_path / "state-0"
    store = await StateStore.open(state_dir)
    try:
        # Two crashes mid-apply: one before the DELETE reached the cloud, one after.
        before, _ = await store.enqueue("default", pod["metadata"]["name"], pod["metadata"]["uid"], NODE)
        after, _ = await store.enqueue("default", "already-deleted", gone["metadata"]["uid"], NODE)
        for e in (before, after):
            await store.set_state(e.id, RUNNING, "deleting", attempts=1)
    finally:
        await store.close()
    await world.admin.delete("/api/v1/namespaces/default/pods/already-deleted", {"gracePeriodSeconds": 0})

    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    first = await finished(http, agent, before.id)
    assert first["state"] == "succeeded" and first["attempts"] == 2
    second = await finished(http, agent, after.id)
    assert second["state"] == "obsolete"
    await eventually(lambda: world.replaced(pod), what="pod replaced")
    # The agent's delete comes first (the kubelet's final removal carries the same UID precondition).
    delete = next(d for d in world.agent_deletes() if d["precondition_uid"] == pod["metadata"]["uid"])
    assert delete["code"] == 200 and delete["outcome"] == "graceful"


async def test_cancelled_entry_is_not_applied(world: World, agent_factory: AgentFactory,
                                              http: aiohttp.ClientSession) -> None:
    keep = await world.pod()
    other = await orphan_ds_pod(world.admin, "other")
    agent = await offline_agent_with(world, agent_factory, [keep, other])
    cancelled = await queue(http, agent, keep)
    other_id = await queue(http, agent, other)
    async with http.delete(f"{agent.url}/openyurt.io/v1/upgrades/{cancelled}") as resp:
        assert resp.status == 200
    await world.sim.connect(NODE)
    # The drainer has run: the orphan pod is deleted; nobody replaces it, so it stays verifying.
    assert (await applied(http, agent, other_id))["state"] == "verifying"
    assert (await entry(http, agent, cancelled))["state"] == "cancelled"
    assert (await world.pod())["metadata"]["uid"] == keep["metadata"]["uid"]
    assert {d["name"] for d in world.agent_deletes() if d["precondition_uid"]} == {"other"}


async def test_a_hundred_entries_drain_oldest_first(world: World, agent_factory: AgentFactory,
                                                    http: aiohttp.ClientSession) -> None:
    pods = [await orphan_ds_pod(world.admin, f"p{i:03d}") for i in range(100)]
    agent = await offline_agent_with(world, agent_factory, pods)
    ids = [await queue(http, agent, p) for p in pods]
    await world.sim.connect(NODE)

    async def all_done() -> bool:
        async with http.get(f"{agent.url}/openyurt.io/v1/upgrades") as resp:
            items = (await resp.json())["items"]
        # Deleted (orphans get no replacement, so the verifier keeps them `verifying`).
        return all(i["state"] == "verifying" for i in items) and len(items) == 100

    await eventually(all_done, timeout=30, what="100 entries applied")
    # First delete per pod is the agent's (the kubelet's final removal follows it).
    order = list(dict.fromkeys(d["name"] for d in world.agent_deletes() if d["precondition_uid"]))
    assert sorted(order) == [f"p{i:03d}" for i in range(100)]
    # Bounded concurrency starts them in queue order: the first few deletes are the oldest entries.
    assert set(order[:4]) <= {f"p{i:03d}" for i in range(8)}
    assert len(set(ids)) == 100


async def _gone(world: World, path: str) -> bool:
    try:
        await world.admin.get(path)
    except Exception as exc:
        return "404" in str(exc)
    return False
