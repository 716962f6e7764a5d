"""How the agent's routes answer without an app middleware (issue 15).

`GET /pods` is served by its own handler and every other route is wrapped one by one, so that an app
middleware's two extra coroutines per request stay off the hot path (bench/agent_http.py measures
it). What the middleware did must still happen everywhere: 404/405 as API answers before any token
check, handler failures as 500 answers, and every answer counted under its route pattern.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from edgeagent.agent.api.http import create_app
from edgeagent.agent.metrics import AgentMetrics
from tests.integration.agent_api.conftest import AgentFactory, ds_pod, seed_snapshot

TOKEN = "routing-token"
UPGRADE = "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/upgrade"
JSON_ACCEPT = {"Accept": "application/json"}


def test_the_app_has_no_middleware() -> None:
    """Any middleware at all costs every `GET /pods` about 5 % of its throughput under wrk, ours 13 %."""
    none: Any = None
    app = create_app(cache=none, upgrades=none, state=none, link=none, metrics=AgentMetrics(), token=TOKEN,
                     max_body_bytes=1)
    assert not app.middlewares


async def test_unrouted_answers_come_before_the_token_and_are_counted(
        tmp_path: Path, offline_kubeconfig: Path, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    await seed_snapshot(tmp_path / "state-0", [ds_pod("a")])
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    url = (await agent_factory(kubeconfig=offline_kubeconfig, token_file=token_file, max_body_bytes=64)).url
    # No token and a body past the limit: the 405 comes first, as aiohttp's routing answered it.
    async with http.post(f"{url}/pods", data=b"x" * 1000) as resp:
        assert resp.status == 405 and resp.headers["Allow"] == "GET, HEAD"
        assert await resp.text() == "method POST is not allowed on /pods; allowed: GET, HEAD\n"
    async with http.put(f"{url}/openyurt.io/v1/namespaces/default/pods/a/upgrade", headers=JSON_ACCEPT) as resp:
        assert resp.status == 405 and resp.headers["Allow"] == "POST"
        assert (await resp.json())["status"] == "MethodNotAllowed"
    async with http.delete(f"{url}/no/such/path", data=b"x" * 1000) as resp:
        assert resp.status == 404
        assert await resp.text() == "not found: DELETE /no/such/path is not an endpoint of the edgeagent API\n"
    async with http.post(f"{url}/openyurt.io/v1/namespaces/default/pods/a/upgrade") as resp:
        assert resp.status == 401  # a routed mutating request still needs the token
    async with http.head(f"{url}/pods") as resp:
        assert resp.status == 200 and resp.content_type == "application/json"
        assert int(resp.headers["Content-Length"]) > 0
    async with http.get(f"{url}/pods", data=b"ignored") as resp:  # a read: its body is never read
        assert resp.status == 200 and (await resp.json())["items"][0]["metadata"]["name"] == "a"
    async with http.get(f"{url}/metrics") as resp:
        text = await resp.text()
    for series in ('code="405",method="POST",path="unmatched"', 'code="405",method="PUT",path="unmatched"',
                   'code="404",method="DELETE",path="unmatched"', f'code="401",method="POST",path="{UPGRADE}"',
                   'code="200",method="HEAD",path="/pods"', 'code="200",method="GET",path="/pods"'):
        assert f"edgeagent_http_requests_total{{{series}}} 1.0" in text, series
    assert 'edgeagent_http_request_duration_seconds_count{method="GET",path="/pods"} 1.0' in text


class _BrokenCache:
    def podlist_bytes(self) -> bytes:
        raise RuntimeError("encoder exploded")


class _BrokenUpgrades:
    async def upgrade(self, namespace: str, name: str) -> Any:
        raise RuntimeError(f"cannot upgrade {namespace}/{name}")


async def test_handler_failures_are_500_answers_and_counted(http: aiohttp.ClientSession) -> None:
    none: Any = None
    metrics = AgentMetrics()
    app = create_app(cache=_BrokenCache(), upgrades=_BrokenUpgrades(), state=none,  # type: ignore[arg-type]
                     link=none, metrics=metrics, token=None, max_body_bytes=1024)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        url = f"http://127.0.0.1:{port}"
        async with http.get(f"{url}/pods") as resp:
            assert resp.status == 500
            assert await resp.text() == "internal error: RuntimeError: encoder exploded\n"
        async with http.post(f"{url}/openyurt.io/v1/namespaces/default/pods/a/upgrade", headers=JSON_ACCEPT) as resp:
            assert resp.status == 500
            assert await resp.json() == {"status": "InternalError",
                                         "message": "internal error: RuntimeError: cannot upgrade default/a"}
    finally:
        await runner.cleanup()
    text = metrics.render()[0].decode()
    assert 'edgeagent_http_requests_total{code="500",method="GET",path="/pods"} 1.0' in text
    assert f'edgeagent_http_requests_total{{code="500",method="POST",path="{UPGRADE}"}} 1.0' in text
