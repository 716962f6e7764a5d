"""Verified outcomes (issue 12): every request recorded; `succeeded` only once the replacement is Ready on the
new revision, `failed` with the replacement's reason; verification survives restarts and offline periods.

Against the simulated cluster over real HTTP. The new version's behaviour comes from the sim's registry
(`POST /sim/v1/images`): a missing image leaves the replacement in ErrImagePull/ImagePullBackOff, a crashing
one in CrashLoopBackOff, as a real kubelet reports them.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import aiohttp

from tests.conftest import SimFactory
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    make_world,
    orphan_ds_pod,
    wait_cached,
    wait_connected,
)
from tests.support.agent_outcomes import (
    cached,
    final_entry,
    request_entry,
    running_agent,
    set_image,
    upgrade_json,
    waiting_reason,
)
from tests.support.waiting import eventually


async def test_online_request_is_verifying_until_the_replacement_is_ready_then_succeeded(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    await set_image(world.admin, missing=True)
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=60)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)

    status, body = await upgrade_json(http, agent, old)
    assert status == 200 and body["status"] == "Started" and body["id"], body
    entry = await request_entry(http, agent, body["id"])
    assert (entry["state"], entry["origin"]) == ("verifying", "online"), entry
    assert (entry["revision"], entry["target"]) == (world.old_hash, world.new_hash)
    assert entry["deadline"] is not None

    # The replacement exists, on the new revision, but cannot pull its image: verifying, not succeeded.
    new = await eventually(lambda: world.replaced(old), what="replacement created")
    await eventually(lambda: waiting_reason(cached(agent, new)) == "ImagePullBackOff",
                     what="the replacement in ImagePullBackOff in the agent's cache")
    assert (await request_entry(http, agent, body["id"]))["state"] == "verifying"

    await set_image(world.admin, missing=False)  # the registry has it now: the kubelet's retry pulls it
    done = await final_entry(http, agent, body["id"])
    assert done["state"] == "succeeded", done
    assert done["replacement"] == f"default/{new['metadata']['name']}"
    assert f"Ready on revision {world.new_hash}" in done["message"]
    ready = cached(agent, new)
    assert ready is not None and any(c["type"] == "Ready" and c["status"] == "True"
                                     for c in ready["status"]["conditions"])


async def test_replacement_in_image_pull_backoff_ends_failed_with_that_reason(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    await set_image(world.admin, missing=True)
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=2)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body

    done = await final_entry(http, agent, body["id"])
    assert (done["state"], done["reason"]) == ("failed", "ImagePullBackOff"), done
    new = await world.replaced(old)
    assert new is not None and done["replacement"] == f"default/{new['metadata']['name']}"
    assert done["updated"] >= done["deadline"]  # judged at the deadline, not when the pull first failed


async def test_crashing_replacement_ends_failed_with_crash_loop_back_off(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    await set_image(world.admin, crash=True)
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=2)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body
    done = await final_entry(http, agent, body["id"])
    assert (done["state"], done["reason"]) == ("failed", "CrashLoopBackOff"), done


async def test_no_replacement_ends_failed_with_no_replacement_pod_appeared(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    orphan = await orphan_ds_pod(world.admin, "lonely")  # its DaemonSet is gone: nobody replaces it
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=1)
    await wait_connected(agent)
    await wait_cached(agent, orphan)
    status, body = await upgrade_json(http, agent, orphan)
    assert status == 200, body
    done = await final_entry(http, agent, body["id"])
    assert (done["state"], done["reason"]) == ("failed", "no replacement pod appeared"), done


async def test_verification_resumes_after_a_restart(
        tmp_path: Path, world: World, http: aiohttp.ClientSession) -> None:
    await set_image(world.admin, missing=True)
    state_dir = tmp_path / "kept-state"
    kubeconfig = world.sim.node_kubeconfig(NODE)
    async with running_agent(kubeconfig, state_dir, ready_timeout=60) as first:
        await wait_connected(first)
        old = await world.pod()
        await wait_cached(first, old)
        status, body = await upgrade_json(http, first, old)
        assert status == 200, body
        before = await request_entry(http, first, body["id"])
        assert before["state"] == "verifying"
    # While no agent runs, the replacement comes up; the next agent finds the request and judges it.
    await set_image(world.admin, missing=False)

    async def ready_in_cloud() -> bool:
        new = await world.replaced(old)
        return new is not None and any(c["type"] == "Ready" and c["status"] == "True"
                                       for c in new["status"].get("conditions", []))

    await eventually(ready_in_cloud, what="replacement Ready while no agent runs")
    async with running_agent(kubeconfig, state_dir, ready_timeout=60) as again:
        done = await final_entry(http, again, body["id"])
    assert done["state"] == "succeeded", done
    assert done["deadline"] == before["deadline"]  # resumed with the stored deadline, not a new one


async def test_deadline_passing_offline_waits_for_the_link_and_the_returning_kubelet(
        sim_factory: SimFactory, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    # A returning kubelet re-reports its pods 2 s after its node is back (the real order,
    # measured on kube-apiserver v1.24): the verdict must wait for that, not judge the moment the link returns.
    sim = await sim_factory(pod_resync_delay=2.0)
    async with make_world(sim) as world:
        await set_image(world.admin, missing=True)
        agent = await agent_factory(kubeconfig=sim.node_kubeconfig(NODE), ready_timeout=6)
        await wait_connected(agent)
        old = await world.pod()
        await wait_cached(agent, old)
        status, body = await upgrade_json(http, agent, old)
        assert status == 200, body
        await eventually(lambda: world.replaced(old), what="replacement created")
        await sim.disconnect(NODE, "blackhole")
        await wait_connected(agent, False)
        await set_image(world.admin, missing=False)  # fixed meanwhile; the cut-off kubelet cannot say so
        deadline = datetime.fromisoformat((await request_entry(http, agent, body["id"]))["deadline"]).timestamp()
        await eventually(lambda: time.time() > deadline + 1.0, timeout=30, what="the deadline passed offline")
        # A frozen cache proves nothing: no verdict while the link is down.
        assert (await request_entry(http, agent, body["id"]))["state"] == "verifying"

        await sim.connect(NODE)
        done = await final_entry(http, agent, body["id"], timeout=30)
        assert done["state"] == "succeeded", done
