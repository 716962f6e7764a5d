"""The server and docs/openapi.yaml agree: same routes and methods, documented codes, valid bodies."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgeagent.agent.api.http import HTTP_STATUS, create_app
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.agent.state.store import RUNNING, StateStore
from tests.integration.agent_api.conftest import AgentFactory, ds_pod, seed_snapshot
from tests.support import openapi

TOKEN = "conformance-token"
UPGRADE = "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/upgrade"
IMAGEPULL = "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/imagepull"
UPGRADES = "/openyurt.io/v1/upgrades"
ONE_UPGRADE = "/openyurt.io/v1/upgrades/{id}"


def server_operations() -> set[tuple[str, str]]:
    none: Any = None
    app = create_app(cache=none, upgrades=none, state=none, link=none, metrics=AgentMetrics(), token=None,
                     max_body_bytes=1)
    # `*` routes answer 404 and 405 (http._answer_unrouted); they are not operations.
    return {(route.method, resource.canonical) for resource in app.router.resources() for route in resource
            if route.method not in ("HEAD", "*")}


def test_document_is_openapi_3_1_with_resolvable_refs() -> None:
    doc = openapi.spec()
    assert doc["openapi"].startswith("3.1")

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in refs(v)]
        if isinstance(node, list):
            return [r for v in node for r in refs(v)]
        return []

    for ref in refs(doc):
        target: Any = doc
        for part in ref.lstrip("#/").split("/"):
            assert part in target, f"unresolvable $ref {ref}"
            target = target[part]


def test_routes_and_methods_agree() -> None:
    assert server_operations() == openapi.documented_operations()


def test_every_upgrade_outcome_code_is_documented() -> None:
    codes = set(HTTP_STATUS.values())
    assert codes <= openapi.documented_statuses("POST", UPGRADE)
    assert codes - {202} <= openapi.documented_statuses("POST", IMAGEPULL)


class Recorder:
    """Sends requests, checks every answer against the document, remembers which codes were seen."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http = http
        self.base = base
        self.seen: set[tuple[str, str, int]] = set()

    async def call(self, method: str, route: str, path: str, *, as_json: bool = False, token: bool = True,
                   data: bytes | None = None) -> tuple[int, Any]:
        headers = {"Accept": "application/json"} if as_json else {}
        if token:
            headers["Authorization"] = f"Bearer {TOKEN}"
        async with self.http.request(method, self.base + path, headers=headers, data=data) as resp:
            body = await resp.read()
            content_type = resp.content_type
            status = resp.status
        if route:
            openapi.check_response(method, route, status, content_type, body)
            self.seen.add((method, route, status))
        else:
            openapi.check_error_body(content_type, body)
        return status, body


@pytest.mark.parametrize("as_json", [False, True])
async def test_real_responses_match_the_document(tmp_path: Path, offline_kubeconfig: Path,
                                                 agent_factory: AgentFactory, http: aiohttp.ClientSession,
                                                 as_json: bool) -> None:
    state_dir = tmp_path / "state-0"
    await seed_snapshot(state_dir, [ds_pod("a"), ds_pod("b"), ds_pod("c"), ds_pod("plain", owner="Job"),
                                    ds_pod("old", need_upgrade="False")])
    store = await StateStore.open(state_dir)
    try:
        running, _ = await store.enqueue("default", "c", "uid-c", "edge-1")
        await store.set_state(running.id, RUNNING)
    finally:
        await store.close()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    agent = await agent_factory(kubeconfig=offline_kubeconfig, token_file=token_file, max_body_bytes=256)
    r = Recorder(http, agent.url)
    j = as_json

    assert (await r.call("GET", "/pods", "/pods", as_json=j))[0] == 200
    status, body = await r.call("POST", UPGRADE, "/openyurt.io/v1/namespaces/default/pods/a/upgrade", as_json=True)
    assert status == 202
    queued_id = json.loads(body)["id"]
    for name, code in (("a", 202), ("b", 202), ("ghost", 404), ("plain", 400), ("old", 403), ("Bad_", 400)):
        assert (await r.call("POST", UPGRADE, f"/openyurt.io/v1/namespaces/default/pods/{name}/upgrade",
                             as_json=j))[0] == code
    assert (await r.call("POST", UPGRADE, "/openyurt.io/v1/namespaces/default/pods/a/upgrade", as_json=j,
                         token=False))[0] == 401
    assert (await r.call("POST", UPGRADE, "/openyurt.io/v1/namespaces/default/pods/a/upgrade", as_json=j,
                         data=b"z" * 1000))[0] == 413
    for name, code in (("a", 503), ("Bad_", 400)):
        assert (await r.call("POST", IMAGEPULL, f"/openyurt.io/v1/namespaces/default/pods/{name}/imagepull",
                             as_json=j))[0] == code
    assert (await r.call("POST", IMAGEPULL, "/openyurt.io/v1/namespaces/default/pods/a/imagepull", as_json=j,
                         token=False))[0] == 401
    assert (await r.call("GET", UPGRADES, UPGRADES, as_json=j))[0] == 200
    assert (await r.call("GET", ONE_UPGRADE, f"{UPGRADES}/{queued_id}", as_json=j))[0] == 200
    assert (await r.call("GET", ONE_UPGRADE, f"{UPGRADES}/nope", as_json=j))[0] == 404
    assert (await r.call("DELETE", ONE_UPGRADE, f"{UPGRADES}/{queued_id}", as_json=j, token=False))[0] == 401
    assert (await r.call("DELETE", ONE_UPGRADE, f"{UPGRADES}/{queued_id}", as_json=j))[0] == 200
    assert (await r.call("DELETE", ONE_UPGRADE, f"{UPGRADES}/{queued_id}", as_json=j))[0] == 409
    assert (await r.call("DELETE", ONE_UPGRADE, f"{UPGRADES}/{running.id}", as_json=j))[0] == 409
    assert (await r.call("DELETE", ONE_UPGRADE, f"{UPGRADES}/nope", as_json=j))[0] == 404
    hold = "/v1/hold"
    assert (await r.call("GET", hold, hold, as_json=j))[0] == 200
    # A timed hold ends at most 366 days ahead (a year 2999 `until` is a 400 since issue 22).
    until = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = json.dumps({"reason": "audit", "until": until}).encode()
    assert (await r.call("POST", hold, hold, as_json=j, data=body))[0] == 200
    far = b'{"reason": "audit", "until": "2999-01-01T00:00:00Z"}'
    assert (await r.call("POST", hold, hold, as_json=j, data=far))[0] == 400
    assert (await r.call("POST", hold, hold, as_json=j, data=b'{"until": "soon"}'))[0] == 400
    assert (await r.call("POST", hold, hold, as_json=j, data=b"[]"))[0] == 400
    assert (await r.call("POST", hold, hold, as_json=j, token=False))[0] == 401
    assert (await r.call("POST", hold, hold, as_json=j, data=b"z" * 1000))[0] == 413
    assert (await r.call("DELETE", hold, hold, as_json=j, token=False))[0] == 401
    assert (await r.call("DELETE", hold, hold, as_json=j))[0] == 200
    for path in ("/v1/healthz", "/healthz", "/v1/readyz", "/readyz", "/metrics"):
        assert (await r.call("GET", path, path, as_json=j))[0] == 200
    assert (await r.call("GET", "", "/no/such/path", as_json=j))[0] == 404
    assert (await r.call("PUT", "", "/pods", as_json=j))[0] == 405

    # Every operation of the document was exercised at least once.
    assert {(m, route) for m, route, _ in r.seen} == openapi.documented_operations()
