"""A timed hold ends at most 366 days ahead, also through the HTTP API (issue 22 item 8).

`edgeagent hold --for 100000d` held the node until the year 2300; the command now refuses it (exit 2, see
tests/unit/test_cli_usage_errors.py), and the agent refuses such an `until` from any client with a 400.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aiohttp

from tests.integration.agent_runtime.conftest import AgentFactory


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_a_hold_until_more_than_366_days_ahead_is_refused(start_agent: AgentFactory,
                                                                  http: aiohttp.ClientSession) -> None:
    agent = await start_agent()
    async with http.post(agent.url + "/v1/hold", json={"until": "2300-01-01T00:00:00Z"},
                         headers={"Accept": "application/json"}) as response:
        body = await response.json()
        assert response.status == 400, body
    assert "more than 366 days ahead" in body["message"], body
    async with http.get(agent.url + "/v1/hold") as response:
        assert (await response.json())["held"] is False

    within = stamp(datetime.now(UTC) + timedelta(days=365))
    async with http.post(agent.url + "/v1/hold", json={"until": within}) as response:
        assert response.status == 200, await response.text()
