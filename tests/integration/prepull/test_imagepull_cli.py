"""`edgeagent imagepull NS/NAME` as a process, against an agent connected to the sim (and one that is not)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from edgeagent.kube.objects import get_condition
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api import conftest as agent_api
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    closed_port,
    wait_cached,
    write_kubeconfig,
)


@pytest.fixture
async def world(sim: SimCluster) -> AsyncIterator[World]:
    async with agent_api.make_world(sim) as w:
        yield w


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgeagent.cli", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ})
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_imagepull_command_asks_the_agent(world: World, agent_factory: AgentFactory) -> None:
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    pod = await world.pod()
    await wait_cached(agent, pod)
    name = f"default/{pod['metadata']['name']}"
    code, out, err = await run_cli("imagepull", name, "--agent", agent.url)
    assert (code, out, err) == (0, f"Image pre-pull requested for pod {name}\n", "")
    cond = get_condition(await world.pod(), "PodImageReady") or {}
    assert (cond.get("status"), cond.get("reason"), cond.get("message")) == (
        "False", "WaitPullImage", f"controllerrevision: {world.new_hash}")
    code, out, err = await run_cli("imagepull", "default/nope", "--agent", agent.url)
    assert code == 1 and out == ""
    assert err.startswith("edgeagent: error: imagepull default/nope: 404:") and err.count("\n") == 1


async def test_imagepull_command_usage_and_offline(agent_factory: AgentFactory, tmp_path: Path) -> None:
    code, _, err = await run_cli("imagepull", "no-slash")
    assert code == 2 and "NS/NAME" in err
    offline = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed_port()}")
    agent = await agent_factory(kubeconfig=offline)
    code, out, err = await run_cli("imagepull", "default/x", "--agent", agent.url)
    assert code == 1 and out == ""
    assert err.startswith("edgeagent: error: imagepull default/x: 503:") and err.count("\n") == 1
