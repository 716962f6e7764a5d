"""A hold set while the link is blackholed survives SIGKILL and is published when the link returns.

Real processes: the agent is a child killed with SIGKILL (no shutdown code runs), and the hold and
release are set with the `edgeagent hold` / `edgeagent release` commands, as an operator would.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from edgeagent.agent.policy.held import current
from edgeagent.kube.client import KubeClient
from tests.faults.conftest import NAMESPACE, NODE, AgentSpawner, get_json, orphan_pod, wait_link
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster


async def cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgeagent.cli", *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def held_in_cloud(admin: KubeClient, name: str) -> tuple[str, str, str] | None:
    pod: dict[str, Any] = await admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    return current(pod)


async def test_hold_set_offline_survives_sigkill_and_is_published_when_the_link_returns(
        sim: SimCluster, admin: KubeClient, spawn_agent: AgentSpawner, http: aiohttp.ClientSession,
        tmp_path: Path) -> None:
    await admin.create(f"/api/v1/namespaces/{NAMESPACE}/pods", orphan_pod("site-app"))
    state_dir = tmp_path / "state"
    agent = await spawn_agent(sim.node_kubeconfig(NODE), state_dir)
    await wait_link(http, agent, True)

    async def published(status: str, reason: str) -> tuple[str, str, str] | None:
        found = await held_in_cloud(admin, "site-app")
        return found if found is not None and found[:2] == (status, reason) else None

    await eventually(lambda: published("False", "Open"), what="Open published while connected")

    await sim.disconnect(NODE, "blackhole")
    # An idle agent does not probe (its watch vouches for the link), so it need not know yet: the hold is local.
    code, out, err = await cli("hold", "--agent", agent.url, "--reason", "site audit", "--for", "2h")
    assert code == 0, err
    assert out.startswith("held: HeldByOperator: site audit (until "), out
    await wait_link(http, agent, False)  # the UpgradeHeld patch timed out into the blackhole

    await agent.kill()  # SIGKILL
    agent = await spawn_agent(sim.node_kubeconfig(NODE), state_dir)
    status = await get_json(http, agent, "/v1/hold")
    assert (status["held"], status["reason"], status["hold"]["reason"]) == (True, "HeldByOperator", "site audit")
    # Still blackholed: the cloud has not heard of it.
    assert await held_in_cloud(admin, "site-app") == await published("False", "Open")

    await sim.connect(NODE)
    await wait_link(http, agent, True)
    found = await eventually(lambda: published("True", "HeldByOperator"), timeout=20,
                             what="the hold published after the link returned")
    assert found[2].startswith("site audit (until ")

    code, out, err = await cli("release", "--agent", agent.url)
    assert code == 0, err
    assert out.startswith("open: Open: "), out
    await eventually(lambda: published("False", "Open"), what="the release published")
    code, out, err = await cli("hold", "--agent", agent.url, "--until", "2020-01-01T00:00:00Z")
    assert code == 1 and "not in the future" in err and len(err.strip().splitlines()) == 1, err
    code, out, err = await cli("hold", "--agent", agent.url, "--until", "x", "--for", "1h")
    assert code == 2 and "exclude each other" in err, err
