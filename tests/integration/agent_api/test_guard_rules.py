"""Rules of the guarded delete and the drainer that no test held (issue 38 item 5: mutation testing showed
that nothing failed without them).

- After a `409` on the guarded DELETE the pod is read again before the next try: a harmless change between the
  GET and the DELETE (a label) must not turn an answered upgrade (200) into a queued one (202).
- An online request for a pod replaced since a request was queued for it (new UID, still needing an upgrade) is a
  new request, not "already queued" for the old UID.
- Entries a drain pass had not started when the link dropped keep attempt 0, and are drained at once when it
  returns (no backoff: they never failed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from edgeagent.agent.app import Agent
from edgeagent.kube.errors import NotFound
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    orphan_ds_pod,
    wait_cached,
    wait_connected,
    write_kubeconfig,
)
from tests.support.hook_proxy import HookProxy, Match, method_on
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods/"


async def _post(http: aiohttp.ClientSession, agent: Agent, name: str, query: str = "") -> tuple[int, JSON]:
    async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/default/pods/{name}/upgrade{query}",
                         headers={"Accept": "application/json"}) as resp:
        return resp.status, await resp.json()


async def _entry(http: aiohttp.ClientSession, agent: Agent, request_id: str) -> JSON:
    async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}") as resp:
        assert resp.status == 200
        body: JSON = await resp.json()
        return body


async def test_a_harmless_change_between_get_and_delete_is_read_again_and_the_upgrade_answers_200(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        hook_proxy: HookProxy) -> None:
    pod = await orphan_ds_pod(world.admin, "relabelled")

    async def relabel() -> None:  # between the agent's GET and its DELETE: a new resourceVersion, nothing else
        await world.admin.patch(PODS + "relabelled", {"metadata": {"labels": {"team": "edge"}}})

    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", hook_proxy.url))
    await wait_connected(agent)
    await wait_cached(agent, pod)
    hook = hook_proxy.before(method_on("DELETE", "/pods/relabelled"), relabel)
    status, body = await _post(http, agent, "relabelled")
    assert (status, body["status"]) == (200, "Started"), body
    assert hook.hits == 1
    deletes = [d for d in world.sim.store.deletes if d["name"] == "relabelled"]
    # Refused on the resourceVersion read first, then, read again, deleted on the new one.
    assert [d["code"] for d in deletes] == [409, 200], deletes
    assert deletes[1]["precondition_rv"] != deletes[0]["precondition_rv"]


async def test_an_online_request_for_a_replaced_pod_is_a_new_request_not_the_queued_one(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    old = await orphan_ds_pod(world.admin, "fixed-name")
    await wait_cached(agent, old)
    # Held, so the queued request stays queued while the link is up.
    async with http.post(f"{agent.url}/v1/hold", json={"reason": "test"}) as resp:
        assert resp.status == 200
    status, queued = await _post(http, agent, "fixed-name", "?when=open")
    assert status == 202, queued
    await world.admin.delete(PODS + "fixed-name", {"gracePeriodSeconds": 0})

    async def gone() -> bool:
        try:
            await world.admin.get(PODS + "fixed-name")
        except NotFound:
            return True
        return False

    await eventually(gone, what="the old pod removed")
    new = await orphan_ds_pod(world.admin, "fixed-name")  # same name, new UID, needs an upgrade too
    await wait_cached(agent, new)
    status, body = await _post(http, agent, "fixed-name")
    assert (status, body["status"]) == (200, "Started"), body
    assert body["id"] != queued["id"]
    assert (await _entry(http, agent, body["id"]))["uid"] == new["metadata"]["uid"]
    agents = [d for d in world.sim.store.deletes if d["name"] == "fixed-name" and d.get("precondition_uid")]
    assert [(d["precondition_uid"], d["code"]) for d in agents] == [(new["metadata"]["uid"], 200)], agents


async def test_entries_a_pass_had_not_started_when_the_link_dropped_keep_attempt_0_and_drain_on_its_return(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        hook_proxy: HookProxy) -> None:
    names = [f"drain-{i}" for i in range(6)]
    pods = [await orphan_ds_pod(world.admin, name) for name in names]
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", hook_proxy.url))
    await wait_connected(agent)
    for pod in pods:
        await wait_cached(agent, pod)
    await world.sim.disconnect(NODE, "refuse")
    await wait_connected(agent, False)
    ids = []
    for name in names:
        status, body = await _post(http, agent, name)
        assert status == 202, body
        ids.append(body["id"])

    # The drainer runs 4 entries at once, oldest first: the first four's reads hang, the last two wait their turn.
    def hung_read(name: str) -> Match:
        return lambda request: request.method == "GET" and request.path == PODS + name

    hangs = [hook_proxy.hang(hung_read(name), times=1) for name in names[:4]]
    await world.sim.connect(NODE)
    await eventually(lambda: all(h.hits == 1 for h in hangs), timeout=60, what="the first four reads under way")
    await world.sim.disconnect(NODE, "refuse")  # mid-pass

    async def pass_over() -> list[JSON] | None:
        entries = [await _entry(http, agent, request_id) for request_id in ids]
        return entries if all(e["attempts"] == 1 and e["state"] == "queued" for e in entries[:4]) else None

    # The hung reads end by the agent's own call timeout: a loaded machine may take a while (a deadline, not a budget).
    entries = await eventually(pass_over, timeout=60, what="the four started entries back in the queue")
    assert [(e["state"], e["attempts"]) for e in entries[4:]] == [("queued", 0), ("queued", 0)], entries

    await world.sim.connect(NODE)

    async def applied() -> list[JSON] | None:
        last = [await _entry(http, agent, request_id) for request_id in ids[4:]]
        return last if all(e["state"] not in ("queued", "running") for e in last) else None

    # The four that failed wait out their backoff; the two that never started go at once, on their first attempt.
    last = await eventually(applied, timeout=60, what="the two untouched entries applied")
    assert [e["attempts"] for e in last] == [1, 1], last
