"""The soak's poke makes a quiet agent meet its revoked token, and has no other consequence (issue 23).

The soak writes a rotated agent's new token only once the sim's audit shows that agent refused with 401
(tests/soak/harness.py, `rotation_step`). An idle agent whose watch is healthy sends almost nothing, so the
harness pokes it with an operator's upgrade request for a pod that does not exist: the agent reads that pod
from the API server and meets the 401. Against the sim in rbac mode, under deploy/'s agent identity.
"""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp

from edgeagent.agent.app import Agent
from edgeagent.config import AgentConfig
from tests.conftest import SimFactory
from tests.integration.agent_api.conftest import FAST_AGENT, make_world, wait_connected
from tests.integration.rbac.conftest import NODE, rbac_sim, revoke, rotatable_agent_credential, write_token
from tests.soak.harness import first_refusal, poke_agent
from tests.support.inprocess_agent import start_in_process
from tests.support.waiting import eventually


async def test_a_poked_agent_meets_its_revoked_token_and_nothing_else_happens(
        sim_factory: SimFactory, tmp_path: Path) -> None:
    sim = await rbac_sim(sim_factory)
    old_token, new_token, token_file, kubeconfig = await rotatable_agent_credential(sim, tmp_path)
    async with make_world(sim) as world:
        cfg = AgentConfig(node_name=NODE, kubeconfig=kubeconfig, bind="127.0.0.1", port=0, state_dir=tmp_path / "s",
                          **FAST_AGENT)
        handle = await start_in_process(Agent(cfg))
        try:
            await wait_connected(handle.agent)
            since = time.time()
            async with aiohttp.ClientSession() as http:
                await revoke(sim, old_token)

                async def refused() -> float | None:
                    await poke_agent(http, handle.url)
                    return first_refusal(list(sim.audit.entries), NODE, since)

                await eventually(refused, timeout=20, interval=1.0, what="the poked agent refused with 401")
                # The new token: the same poke is answered 404 (no such pod), read with it.
                write_token(token_file, new_token)
                assert await eventually(lambda: _answer(http, handle.url, 404), timeout=20,
                                        what="the poke answered 404 with the new token") == 404
                async with http.get(handle.url + "/openyurt.io/v1/upgrades") as resp:
                    assert (await resp.json())["items"] == []  # no request recorded
            assert not world.agent_deletes()
        finally:
            await handle.stop()


async def _answer(http: aiohttp.ClientSession, url: str, wanted: int) -> int | None:
    status = await poke_agent(http, url)
    return status if status == wanted else None
