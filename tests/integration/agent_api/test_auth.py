"""Bearer-token rules: mutating endpoints need the token when one is configured; reads stay open."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.integration.agent_api.conftest import AgentFactory, ds_pod, seed_snapshot

TOKEN = "s3cr3t-t0ken-value-4f8a"
WRONG = "guess-0000-wrong-token"


@pytest.fixture
async def guarded_agent(tmp_path: Path, offline_kubeconfig: Path, agent_factory: AgentFactory) -> str:
    await seed_snapshot(tmp_path / "state-0", [ds_pod("a"), ds_pod("b")])
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    return (await agent_factory(kubeconfig=offline_kubeconfig, token_file=token_file)).url


def upgrade(url: str, name: str) -> str:
    return f"{url}/openyurt.io/v1/namespaces/default/pods/{name}/upgrade"


async def queue_ids(http: aiohttp.ClientSession, url: str) -> list[str]:
    async with http.get(f"{url}/openyurt.io/v1/upgrades") as resp:  # no token: reads are open
        assert resp.status == 200
        return [e["id"] for e in (await resp.json())["items"]]


@pytest.mark.parametrize("authorization", [None, f"Bearer {WRONG}", f"Basic {TOKEN}", "Bearer", TOKEN,
                                           f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"])
async def test_mutations_without_the_right_token_are_401(guarded_agent: str, http: aiohttp.ClientSession,
                                                         authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    for action in ("upgrade", "imagepull"):
        async with http.post(f"{guarded_agent}/openyurt.io/v1/namespaces/default/pods/a/{action}",
                             headers=headers) as resp:
            assert resp.status == 401
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
            assert "Authorization: Bearer" in await resp.text()
    assert await queue_ids(http, guarded_agent) == []


async def test_right_token_is_accepted_and_scheme_is_case_insensitive(guarded_agent: str,
                                                                      http: aiohttp.ClientSession) -> None:
    async with http.post(upgrade(guarded_agent, "a"), headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
        assert resp.status == 202
    async with http.post(upgrade(guarded_agent, "b"), headers={"Authorization": f"bearer {TOKEN}"}) as resp:
        assert resp.status == 202
    assert len(await queue_ids(http, guarded_agent)) == 2


async def test_cancel_needs_the_token_reads_do_not(guarded_agent: str, http: aiohttp.ClientSession) -> None:
    async with http.post(upgrade(guarded_agent, "a"), headers={"Authorization": f"Bearer {TOKEN}",
                                                               "Accept": "application/json"}) as resp:
        request_id = (await resp.json())["id"]
    async with http.delete(f"{guarded_agent}/openyurt.io/v1/upgrades/{request_id}",
                           headers={"Accept": "application/json"}) as resp:
        assert resp.status == 401
        assert (await resp.json())["status"] == "Unauthorized"
    for path in ("/pods", f"/openyurt.io/v1/upgrades/{request_id}", "/v1/healthz", "/readyz", "/metrics"):
        async with http.get(f"{guarded_agent}{path}") as resp:
            assert resp.status == 200, path
    async with http.delete(f"{guarded_agent}/openyurt.io/v1/upgrades/{request_id}",
                           headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
        assert resp.status == 200


async def test_no_token_configured_means_open(tmp_path: Path, offline_kubeconfig: Path,
                                              agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    await seed_snapshot(tmp_path / "state-0", [ds_pod("a")])
    url = (await agent_factory(kubeconfig=offline_kubeconfig)).url
    async with http.post(upgrade(url, "a"), headers={"Authorization": f"Bearer {WRONG}"}) as resp:
        assert resp.status == 202


async def test_tokens_never_reach_the_logs(guarded_agent: str, http: aiohttp.ClientSession,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    for value in (TOKEN, WRONG):
        async with http.post(upgrade(guarded_agent, "a"), headers={"Authorization": f"Bearer {value}"}):
            pass
    out = capsys.readouterr()
    logs = out.out + out.err
    assert "upgrade_request" in logs  # the accepted request was logged...
    assert TOKEN not in logs and WRONG not in logs  # ...without either token
