"""A revoked token met by `--auto-upgrade` (issue 23, found by the soak's real credential rotation).

The soak revokes an agent's token and writes its successor to the token file a few seconds later. An automatic
upgrade that met the 401 in between was answered 502 and skipped for the whole revision, so the node never
caught up and the fleet did not converge. A 401 is about our credential, not the request: the auto-upgrader
must ask again once the new token is there. Against the sim in rbac mode, under deploy/'s agent identity.
"""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from edgeagent.agent.app import Agent
from edgeagent.config import AgentConfig
from tests.conftest import SimFactory
from tests.integration.agent_api.conftest import FAST_AGENT, make_world, set_condition, wait_cached, wait_connected
from tests.integration.rbac.conftest import NODE, rbac_sim, revoke, rotatable_agent_credential, write_token
from tests.support.inprocess_agent import start_in_process
from tests.support.waiting import eventually


async def test_auto_upgrade_that_meets_a_revoked_token_asks_again_once_the_new_one_is_there(
        sim_factory: SimFactory, tmp_path: Path) -> None:
    sim = await rbac_sim(sim_factory)
    old_token, new_token, token_file, kubeconfig = await rotatable_agent_credential(sim, tmp_path)
    async with make_world(sim) as world:
        old = await world.pod()
        await set_condition(world.admin, old, "PodNeedUpgrade", "False", "")
        cfg = AgentConfig(node_name=NODE, kubeconfig=kubeconfig, bind="127.0.0.1", port=0, state_dir=tmp_path / "s",
                          auto_upgrade=True, **FAST_AGENT)
        with capture_logs() as logs:
            handle = await start_in_process(Agent(cfg))
            try:
                agent = handle.agent
                await wait_connected(agent)
                await wait_cached(agent, old, need_upgrade="False")
                # The token is revoked; then the pod needs an upgrade (the open watch still delivers it).
                await revoke(sim, old_token)
                await set_condition(world.admin, old, "PodNeedUpgrade", "True", f"controllerrevision: {world.new_hash}")
                tried = await eventually(
                    lambda: [e for e in logs if e.get("event") in ("auto_upgrade_waits", "auto_upgrade_skipped")],
                    timeout=20, what="the automatic upgrade met the revoked token")
                assert "(401)" in tried[0]["message"], tried
                assert not world.agent_deletes()
                # The new token arrives: the agent re-reads it and upgrades the pod after all.
                write_token(token_file, new_token)
                await eventually(lambda: world.replaced(old), timeout=30, what="the pod upgraded with the new token")
                # One DELETE by the agent (the sim's kubelet finishes the graceful one).
                assert [d["name"] for d in world.agent_deletes() if d["outcome"] == "graceful"] == \
                    [old["metadata"]["name"]]
            finally:
                await handle.stop()
