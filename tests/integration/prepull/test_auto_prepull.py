"""`edgeagent run --auto-prepull`: asks once per pod and revision, remembers it across restarts, and asks
when the link returns — an agent against the sim over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from edgeagent.agent.app import Agent
from edgeagent.kube.objects import get_condition
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api import conftest as agent_api
from tests.integration.agent_api.conftest import NODE, AgentFactory, World, set_condition, wait_connected
from tests.support.waiting import eventually


@pytest.fixture
async def world(sim: SimCluster) -> AsyncIterator[World]:
    async with agent_api.make_world(sim) as w:
        yield w


def image_ready(pod: dict[str, object]) -> tuple[str, str, str] | None:
    cond = get_condition(pod, "PodImageReady")
    return (str(cond.get("status")), str(cond.get("reason")), str(cond.get("message"))) if cond else None


async def test_asks_once_and_not_again_after_a_restart(world: World, agent_factory: AgentFactory,
                                                       tmp_path: Path) -> None:
    state = tmp_path / "auto-state"
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), auto_prepull=True, state_dir=state)

    async def asked() -> bool:
        return image_ready(await world.pod()) == ("False", "WaitPullImage", f"controllerrevision: {world.new_hash}")

    await eventually(asked, what="the agent asked for the new revision")
    assert agent.auto_prepull is not None
    await eventually(lambda: agent.auto_prepull is not None and agent.auto_prepull.passes >= 2, what="another pass")
    assert agent.auto_prepull.asks == 1
    # Other pods (other nodes) are not this agent's business.
    assert image_ready(await world.pod("edge-2")) is None

    # OpenYurt's controller drops the version from the message when a pull fails: the condition no longer
    # says the agent asked. Only the agent's own memory can keep it from asking again.
    pod = await world.pod()
    await world.admin.patch(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/status", {"status": {
        "conditions": [{"type": "PodImageReady", "status": "False", "reason": "PullImageFail", "message": ""}]}})
    restarted = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), auto_prepull=True, state_dir=state)
    await wait_connected(restarted)

    async def seen_by_restarted() -> bool:
        cached = restarted.cache.get("default", pod["metadata"]["name"]) if restarted.cache else None
        return cached is not None and image_ready(cached) == ("False", "PullImageFail", "")

    await eventually(seen_by_restarted, what="the restarted agent sees the dropped condition")
    assert restarted.auto_prepull is not None
    before = restarted.auto_prepull.passes
    # Any change of the pod wakes a pass, which now surely sees the dropped condition.
    await world.admin.patch(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}",
                            {"metadata": {"annotations": {"poke": "1"}}}, "application/merge-patch+json")
    await eventually(lambda: restarted.auto_prepull is not None and restarted.auto_prepull.passes > before,
                     what="a pass over it")
    assert restarted.auto_prepull is not None and restarted.auto_prepull.asks == 0
    assert image_ready(await world.pod()) == ("False", "PullImageFail", "")

    # A newer revision is a new question.
    await world.admin.patch("/apis/apps/v1/namespaces/default/daemonsets/edge-app", {"spec": {"template": {
        "spec": {"containers": [{"name": "app", "image": "registry.local/app:3"}]}}}})
    newest = await eventually(lambda: _newer(world), what="a third revision")
    await set_condition(world.admin, await world.pod(), "PodNeedUpgrade", "True", f"controllerrevision: {newest}")

    async def asked_newest() -> bool:
        return image_ready(await world.pod()) == ("False", "WaitPullImage", f"controllerrevision: {newest}")

    await eventually(asked_newest, what="asked for the newest revision")
    assert restarted.auto_prepull.asks == 1


async def test_offline_asks_when_the_link_returns(world: World, agent_factory: AgentFactory) -> None:
    await world.sim.disconnect(NODE, "refuse")
    agent: Agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), auto_prepull=True)
    await wait_connected(agent, False)
    assert agent.auto_prepull is not None and agent.auto_prepull.asks == 0
    assert image_ready(await world.pod()) is None
    await world.sim.connect(NODE)

    async def asked() -> bool:
        return image_ready(await world.pod()) == ("False", "WaitPullImage", f"controllerrevision: {world.new_hash}")

    await eventually(asked, timeout=20, what="asked once the link returned")
    assert agent.auto_prepull.asks == 1


async def _newer(world: World) -> str | None:
    revisions = (await world.admin.get("/apis/apps/v1/namespaces/default/controllerrevisions"))["items"]
    newest = max(revisions, key=lambda r: int(r.get("revision", 0)))
    found = str(newest["metadata"]["labels"]["controller-revision-hash"])
    return found if found not in (world.new_hash, world.old_hash) else None
