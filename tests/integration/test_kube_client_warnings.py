"""The kube client logs each distinct `Warning` header of the API server once (issue 38 item 11).

Kubernetes announces a deprecated API, or a field it dropped (`fieldValidation=Warn`, the default from 1.27
for clients that send none), only in `Warning: 299 - "..."` response headers, which kubectl prints. Unlogged,
a deprecation would go unnoticed until the removal breaks the call. Here a proxy in front of the sim adds them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from edgeagent.kube.client import MAX_LOGGED_WARNINGS, KubeClient, Timeouts, warning_texts
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api.conftest import write_kubeconfig
from tests.support.faulty_proxy import FaultyProxy

DEPRECATED = 'policy/v1beta1 PodDisruptionBudget is deprecated in v1.21+, unavailable in v1.25+; use "policy/v1"'
UNKNOWN = 'unknown field "spec.templat"'


def _header(text: str) -> str:
    """As kube-apiserver writes one: code 299, agent `-`, the text quoted with its quotes escaped."""
    return '299 - "' + text.replace('"', '\\"') + '"'


def _warnings(request: web.Request) -> list[tuple[str, str]]:
    if request.query.get("watch") == "true":
        return [("Warning", _header(UNKNOWN)), ("Warning", _header("watch of pods"))]
    if "/namespaces/default/pods" in request.path:
        return [("Warning", _header(DEPRECATED)), ("Warning", _header(UNKNOWN))]
    if request.path.startswith("/api/v1/nodes/"):
        return [("Warning", _header(f'node {request.path.rsplit("/", 1)[-1]} is special'))]
    return []


@pytest.fixture
async def client(sim: SimCluster, tmp_path: Path) -> AsyncIterator[KubeClient]:
    proxy = FaultyProxy(sim.url, add_headers=_warnings)
    await proxy.start()
    try:
        async with await KubeClient.connect(write_kubeconfig(tmp_path / "kubeconfig", proxy.url),
                                            Timeouts(connect=2, request=5)) as kube:
            yield kube
    finally:
        await proxy.stop()


async def test_each_distinct_warning_is_logged_once_with_the_call_it_came_with(client: KubeClient) -> None:
    with capture_logs() as logs:
        for _ in range(3):
            await client.get("/api/v1/namespaces/default/pods")
        await client.get("/api/v1/namespaces")  # no warning
    warned = [(e["warning"], e["method"], e["path"], e["log_level"]) for e in logs]
    assert warned == [
        (DEPRECATED, "GET", "/api/v1/namespaces/default/pods", "warning"),
        (UNKNOWN, "GET", "/api/v1/namespaces/default/pods", "warning"),
    ]
    with capture_logs() as logs:
        for _ in range(2):
            async for _event in client.watch("/api/v1/namespaces/default/pods", query={"timeoutSeconds": 1}):
                pass
    assert [(e["warning"], e["method"]) for e in logs] == [("watch of pods", "GET")]


async def test_a_server_that_varies_its_warnings_cannot_grow_the_log_without_bound(
        client: KubeClient, sim: SimCluster) -> None:
    with capture_logs() as logs:
        for node in sim.node_names * (MAX_LOGGED_WARNINGS // len(sim.node_names) + 2):
            await client.get(f"/api/v1/nodes/{node}")
    assert len([e for e in logs if e["event"] == "api_server_warning"]) == len(sim.node_names)
    client.warnings.seen.clear()
    client.warnings.seen.update(f"w{i}" for i in range(MAX_LOGGED_WARNINGS))
    with capture_logs() as logs:
        for _ in range(3):
            await client.get(f"/api/v1/nodes/{sim.node_names[0]}")
    assert [e["event"] for e in logs] == ["api_server_warnings_not_logged"]


@pytest.mark.parametrize(("header", "texts"), [
    ('299 - "a"', ["a"]),
    ('299 - "a \\"quoted\\" b"', ['a "quoted" b']),
    ('299 - "a", 299 kube-apiserver "b, c" "Wed, 21 Oct 2015 07:28:00 GMT"', ["a", "b, c"]),
    ("not in the RFC form", ["not in the RFC form"]),
])
def test_warning_header_texts(header: str, texts: list[str]) -> None:
    assert warning_texts([header]) == texts
