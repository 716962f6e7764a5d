"""The agent's HTTP API on a node that boots without its cloud: it answers from the snapshot and queues.

The kubeconfig points at a closed loopback port, so the link never connects; the state dir is seeded
with a pod snapshot before start, as a restarted agent would find it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgeagent.agent.state.store import RUNNING, StateStore
from tests.integration.agent_api.conftest import AgentFactory, ds_pod, seed_snapshot

JSON_ACCEPT = {"Accept": "application/json"}


def upgrade_url(base: str, ns: str, name: str, action: str = "upgrade") -> str:
    return f"{base}/openyurt.io/v1/namespaces/{ns}/pods/{name}/{action}"


async def post(http: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, str]:
    async with http.post(url, **kwargs) as resp:
        return resp.status, await resp.text()


async def post_json(http: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, Any]:
    headers = {**JSON_ACCEPT, **kwargs.pop("headers", {})}
    async with http.post(url, headers=headers, **kwargs) as resp:
        assert resp.content_type == "application/json"
        return resp.status, await resp.json()


async def get_json(http: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with http.get(url, headers=JSON_ACCEPT, **kwargs) as resp:
        return resp.status, await resp.json()


@pytest.fixture
async def offline_agent(tmp_path: Path, offline_kubeconfig: Path, agent_factory: AgentFactory) -> str:
    await seed_snapshot(tmp_path / "state-0", [
        ds_pod("ok"),
        ds_pod("ok-too"),
        ds_pod("no-need", need_upgrade="False"),
        ds_pod("no-condition", need_upgrade=None),
        ds_pod("bare", owner="ReplicaSet"),
        ds_pod("dying", terminating=True),
        ds_pod("image-pulling", image_ready="False"),
        ds_pod("image-old", image_ready="True", image_version="oldhash"),
        ds_pod("image-ready", image_ready="True"),
    ])
    agent = await agent_factory(kubeconfig=offline_kubeconfig)
    return agent.url


async def test_get_pods_answers_from_the_snapshot(offline_agent: str, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{offline_agent}/pods") as resp:
        assert resp.status == 200
        assert resp.content_type == "application/json"
        body = await resp.json()
    assert (body["kind"], body["apiVersion"]) == ("PodList", "v1")
    assert len(body["items"]) == 9
    assert body["metadata"]["resourceVersion"] == "5"


async def test_queued_202_text_names_the_request(offline_agent: str, http: aiohttp.ClientSession) -> None:
    status, text = await post(http, upgrade_url(offline_agent, "default", "ok"))
    assert status == 202
    assert "default/ok" in text and "queued" in text
    status, listing = await get_json(http, f"{offline_agent}/openyurt.io/v1/upgrades")
    [entry] = listing["items"]
    assert entry["id"] in text
    assert (entry["namespace"], entry["name"], entry["uid"], entry["state"]) == ("default", "ok", "uid-ok", "queued")
    assert "cloud link is down" in entry["message"]


async def test_same_pod_twice_gives_the_existing_request(offline_agent: str, http: aiohttp.ClientSession) -> None:
    status1, first = await post_json(http, upgrade_url(offline_agent, "default", "ok"))
    status2, second = await post_json(http, upgrade_url(offline_agent, "default", "ok"))
    assert (status1, status2) == (202, 202)
    assert first["status"] == second["status"] == "Queued"
    assert first["id"] == second["id"]
    assert "already queued" in second["message"]
    _, listing = await get_json(http, f"{offline_agent}/openyurt.io/v1/upgrades")
    assert [e["id"] for e in listing["items"]] == [first["id"]]


async def test_queue_lists_newest_first_and_gets_one(offline_agent: str, http: aiohttp.ClientSession) -> None:
    _, first = await post_json(http, upgrade_url(offline_agent, "default", "ok"))
    _, second = await post_json(http, upgrade_url(offline_agent, "default", "ok-too"))
    _, listing = await get_json(http, f"{offline_agent}/openyurt.io/v1/upgrades")
    assert [e["id"] for e in listing["items"]] == [second["id"], first["id"]]
    status, one = await get_json(http, f"{offline_agent}/openyurt.io/v1/upgrades/{first['id']}")
    assert status == 200 and one["name"] == "ok"
    status, missing = await get_json(http, f"{offline_agent}/openyurt.io/v1/upgrades/nope")
    assert status == 404 and missing["status"] == "NotFound"


@pytest.mark.parametrize(("pod", "code", "fragment"), [
    ("no-need", 403, "does not need an upgrade"),
    ("no-condition", 403, "does not need an upgrade"),
    ("dying", 403, "being deleted"),
    ("bare", 400, "not owned by a DaemonSet"),
    ("image-pulling", 403, "image of the current version is not ready"),
    ("image-old", 403, "image of the current version is not ready"),
])
async def test_checks_on_the_cached_pod(offline_agent: str, http: aiohttp.ClientSession, pod: str, code: int,
                                        fragment: str) -> None:
    status, text = await post(http, upgrade_url(offline_agent, "default", pod))
    assert status == code, text
    assert fragment in text
    status, body = await post_json(http, upgrade_url(offline_agent, "default", pod))
    assert status == code and fragment in body["message"] and "id" not in body
    _, listing = await get_json(http, f"{offline_agent}/openyurt.io/v1/upgrades")
    assert listing["items"] == []


async def test_image_ready_for_the_current_version_is_queued(offline_agent: str,
                                                             http: aiohttp.ClientSession) -> None:
    status, _ = await post(http, upgrade_url(offline_agent, "default", "image-ready"))
    assert status == 202


async def test_pod_in_neither_cache_nor_cloud_is_404(offline_agent: str, http: aiohttp.ClientSession) -> None:
    status, text = await post(http, upgrade_url(offline_agent, "default", "ghost"))
    assert status == 404 and "default/ghost" in text
    status, body = await post_json(http, upgrade_url(offline_agent, "other", "ok"))
    assert status == 404 and body["status"] == "NotFound"


@pytest.mark.parametrize(("ns", "name"), [("Default", "ok"), ("default", "Bad_Name"), ("a" * 64, "ok"),
                                          ("default", "-ok"), ("ns.dot", "ok")])
async def test_invalid_dns1123_names_are_400(offline_agent: str, http: aiohttp.ClientSession, ns: str,
                                             name: str) -> None:
    status, text = await post(http, upgrade_url(offline_agent, ns, name))
    assert status == 400 and "DNS-1123" in text
    status, text = await post(http, upgrade_url(offline_agent, ns, name, "imagepull"))
    assert status == 400 and "DNS-1123" in text


async def test_imagepull_needs_the_cloud(offline_agent: str, http: aiohttp.ClientSession) -> None:
    status, body = await post_json(http, upgrade_url(offline_agent, "default", "ok", "imagepull"))
    assert status == 503 and body["status"] == "ServiceUnavailable" and "cloud" in body["message"]


async def test_cancel_rules(tmp_path: Path, offline_kubeconfig: Path, agent_factory: AgentFactory,
                            http: aiohttp.ClientSession) -> None:
    state_dir = tmp_path / "state-0"
    await seed_snapshot(state_dir, [ds_pod("a"), ds_pod("b")])
    store = await StateStore.open(state_dir)
    try:
        running, _ = await store.enqueue("default", "b", "uid-b", "edge-1")
        await store.set_state(running.id, RUNNING, "was being applied when the agent died")
    finally:
        await store.close()
    url = (await agent_factory(kubeconfig=offline_kubeconfig)).url
    _, queued = await post_json(http, upgrade_url(url, "default", "a"))

    async with http.delete(f"{url}/openyurt.io/v1/upgrades/{queued['id']}") as resp:
        assert resp.status == 200
        assert "cancelled" in await resp.text()
    _, entry = await get_json(http, f"{url}/openyurt.io/v1/upgrades/{queued['id']}")
    assert entry["state"] == "cancelled"
    async with http.delete(f"{url}/openyurt.io/v1/upgrades/{queued['id']}", headers=JSON_ACCEPT) as resp:
        assert resp.status == 409
        body = await resp.json()
        assert body["status"] == "Conflict" and "cancelled" in body["message"]
    async with http.delete(f"{url}/openyurt.io/v1/upgrades/{running.id}") as resp:
        assert resp.status == 409 and "running" in await resp.text()
    async with http.delete(f"{url}/openyurt.io/v1/upgrades/unknown-id") as resp:
        assert resp.status == 404
    # A cancelled request does not block a new one for the same pod.
    status, again = await post_json(http, upgrade_url(url, "default", "a"))
    assert status == 202 and again["id"] != queued["id"]


async def test_health_and_readiness(offline_agent: str, http: aiohttp.ClientSession) -> None:
    for path in ("/v1/healthz", "/healthz", "/v1/readyz", "/readyz"):
        async with http.get(f"{offline_agent}{path}") as resp:
            assert (resp.status, await resp.text()) == (200, "OK")
    status, ready = await get_json(http, f"{offline_agent}/v1/readyz")
    assert status == 200
    assert ready["link"]["connected"] is False
    assert ready["cache"] == {"pods": 9, "synced": True}
    assert ready["queue"]["queued"] == 0
    assert ready["state"]["available"] is True


async def test_unknown_path_404_and_wrong_method_405(offline_agent: str, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{offline_agent}/nope") as resp:
        assert resp.status == 404
        assert "GET /nope is not an endpoint" in await resp.text()
    async with http.get(f"{offline_agent}/nope", headers=JSON_ACCEPT) as resp:
        assert resp.status == 404 and (await resp.json())["status"] == "NotFound"
    async with http.get(upgrade_url(offline_agent, "default", "ok")) as resp:
        assert resp.status == 405
        assert resp.headers["Allow"] == "POST"
        assert "method GET is not allowed" in await resp.text()
    async with http.post(f"{offline_agent}/pods", headers=JSON_ACCEPT) as resp:
        assert resp.status == 405 and (await resp.json())["status"] == "MethodNotAllowed"


async def test_request_bodies_are_capped(tmp_path: Path, offline_kubeconfig: Path, agent_factory: AgentFactory,
                                         http: aiohttp.ClientSession) -> None:
    await seed_snapshot(tmp_path / "state-0", [ds_pod("a")])
    url = (await agent_factory(kubeconfig=offline_kubeconfig, max_body_bytes=1024)).url
    status, text = await post(http, upgrade_url(url, "default", "a"), data=b"x" * 2048)
    assert status == 413 and "1024 bytes" in text

    async def chunked() -> Any:
        for _ in range(4):
            yield b"y" * 512

    status, _ = await post(http, upgrade_url(url, "default", "a"), data=chunked())
    assert status == 413
    _, listing = await get_json(http, f"{url}/openyurt.io/v1/upgrades")
    assert listing["items"] == []
    status, _ = await post(http, upgrade_url(url, "default", "a"), data=b"{}")
    assert status == 202


async def test_metrics_record_requests_by_route(offline_agent: str, http: aiohttp.ClientSession) -> None:
    await post(http, upgrade_url(offline_agent, "default", "ok"))
    await post(http, upgrade_url(offline_agent, "default", "ghost"))
    async with http.get(f"{offline_agent}/pods"):
        pass
    async with http.get(f"{offline_agent}/metrics") as resp:
        assert resp.status == 200
        assert resp.content_type == "text/plain"
        text = await resp.text()
    route = "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/upgrade"
    assert f'edgeagent_http_requests_total{{code="202",method="POST",path="{route}"}} 1.0' in text
    assert f'edgeagent_http_requests_total{{code="404",method="POST",path="{route}"}} 1.0' in text
    assert 'edgeagent_http_requests_total{code="200",method="GET",path="/pods"} 1.0' in text
    assert 'edgeagent_upgrade_queue_entries{state="queued"} 1.0' in text
    assert 'edgeagent_upgrades_total{outcome="queued"} 1.0' in text
    assert "default/ghost" not in text and "/pods/ok/" not in text
