"""A revoked token met by `--auto-upgrade` (issue 23, found by the soak's real credential rotation).

The soak revokes an agent's token and writes its successor to the token file a few seconds later. An automatic
upgrade that met the 401 in between was answered 502 and skipped for the whole revision, so the node never
caught up and the fleet did not converge. A 401 is about our credential, not the request: the auto-upgrader
must ask again once the new token is there. Against the sim in rbac mode, under deploy/'s agent identity.
"""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import aiohttp
import yaml
from structlog.testing import capture_logs

from edgeagent.agent.app import Agent
from edgeagent.config import AgentConfig
from tests.conftest import SimFactory
from tests.integration.agent_api.conftest import FAST_AGENT, make_world, set_condition, wait_cached, wait_connected
from tests.integration.rbac.conftest import NODE, admin_of, rbac_sim
from tests.support.identities import AGENT_SA, apply_deploy, load_deploy, mint_token
from tests.support.inprocess_agent import start_in_process
from tests.support.waiting import eventually


def write_token(path: Path, token: str) -> None:
    """Atomically, as the kubelet swaps a projected token."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(token)
    fresh.replace(path)


async def test_auto_upgrade_that_meets_a_revoked_token_asks_again_once_the_new_one_is_there(
        sim_factory: SimFactory, tmp_path: Path) -> None:
    sim = await rbac_sim(sim_factory)
    assert sim.tls is not None
    async with admin_of(sim) as admin:
        await apply_deploy(admin, load_deploy())
        old_token, new_token = await mint_token(admin, AGENT_SA), await mint_token(admin, AGENT_SA)
    token_file = tmp_path / "token"
    write_token(token_file, old_token)
    kubeconfig = tmp_path / "agent.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": sim.node_url(NODE), "certificate-authority-data":
                                               base64.b64encode(sim.tls.ca_file.read_bytes()).decode()}}],
        "users": [{"name": "u", "user": {"tokenFile": str(token_file)}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
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
                async with aiohttp.ClientSession() as http, http.post(
                        sim.url + "/sim/v1/tokens/revoke", json={"token": old_token},
                        ssl=ssl.create_default_context(cafile=str(sim.tls.ca_file))) as resp:
                    assert resp.status == 200, await resp.text()
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
