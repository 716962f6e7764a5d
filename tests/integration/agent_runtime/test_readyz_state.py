"""`/readyz` says `degraded` while the state store is unusable (issue 22 item 5).

With its state dir under a regular file the agent serves its cache but cannot queue, hold or record anything
(`POST /v1/hold` answers 503), yet `/readyz` said `ok`: only the JSON's `state.available` told. Now the reason
is a readyz problem, as rejected credentials and an unknown node are.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.integration.agent_runtime.conftest import AgentFactory


async def test_readyz_is_degraded_with_the_reason_while_the_state_store_is_unusable(
        start_agent: AgentFactory, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    agent = await start_agent(state_dir=blocker / "state")

    async with http.get(agent.url + "/v1/readyz", headers={"Accept": "application/json"}) as response:
        assert response.status == 200  # the cache still serves: degraded, not down
        body = await response.json()
    assert body["state"]["available"] is False
    assert body["status"] == "degraded", body
    problem = next(p for p in body["problems"] if p.startswith("state store unusable"))
    assert str(blocker / "state") in problem and "NotADirectoryError" in problem, problem
    assert problem in body["message"]

    async with http.get(agent.url + "/v1/readyz") as response:
        text = await response.text()
    assert text.startswith("degraded: state store unusable"), text
    async with http.post(agent.url + "/v1/hold", json={"reason": "x"}) as response:
        assert response.status == 503


async def test_readyz_is_ok_with_a_usable_state_store(start_agent: AgentFactory, http: aiohttp.ClientSession) -> None:
    agent = await start_agent()
    async with http.get(agent.url + "/v1/readyz", headers={"Accept": "application/json"}) as response:
        body = await response.json()
    assert (body["status"], body["problems"], body["state"]["available"]) == ("ok", [], True), body
