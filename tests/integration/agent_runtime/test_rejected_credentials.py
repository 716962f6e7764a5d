"""Rejected credentials (issue 22 item 1): the agent backs off instead of hammering, says so once, recovers fast.

With a token the API server rejects, the agent listed its pods and read its Lease every 2 s for as long as it
ran: the link probe counted the 401 as a working link and kicked the pod informer out of its backoff. And an
idle agent did not notice a rotated, invalid token until its watch happened to reconnect (37 s).

Against the HTTPS front of tests/support/tls_apiserver.py, which authenticates each request as kube-apiserver
does and records every request it rejects.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api.conftest import orphan_ds_pod
from tests.integration.agent_runtime.conftest import NODE, Admin, AgentFactory, get_pods, names
from tests.support.inprocess_agent import RunningAgent
from tests.support.tls_apiserver import CertificateAuthority, TlsApiServer
from tests.support.waiting import eventually

LEASE = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
PROBE_INTERVAL = 0.2
# The retry after re-reading the credential files follows its 401 at once; the shortest backoff is 0.1 s.
RETRY_GAP = 0.08


@pytest.fixture
async def front(sim: SimCluster, tmp_path: Path) -> AsyncIterator[TlsApiServer]:
    server = TlsApiServer(CertificateAuthority(tmp_path), sim.node_url(NODE))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def write_token(path: Path, value: str) -> None:
    """Atomically, as the kubelet swaps a projected service-account token."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(value)
    fresh.replace(path)


def _at_least(n: int, times: list[float]) -> list[float] | None:
    return times if len(times) >= n else None


async def readyz(http: aiohttp.ClientSession, agent: RunningAgent) -> dict[str, Any]:
    async with http.get(agent.url + "/v1/readyz", headers={"Accept": "application/json"}) as response:
        assert response.status == 200
        body: dict[str, Any] = await response.json()
        return body


def rejected(front: TlsApiServer, path: str) -> list[float]:
    """When `path` was tried and rejected: one time per attempt, the client's immediate retry after re-reading
    its credential files (documented: once before failing on a 401) folded into the attempt it belongs to."""
    attempts: list[float] = []
    for at, _, seen in front.rejections:
        if seen == path and (not attempts or at - attempts[-1] > RETRY_GAP):
            attempts.append(at)
    return attempts


async def test_rejected_credentials_back_off_are_logged_once_and_a_new_token_is_used_at_once(
        front: TlsApiServer, admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession,
        tmp_path: Path) -> None:
    await admin.create("a")
    token = tmp_path / "token"
    write_token(token, "revoked")
    front.accepted_tokens = {"fresh"}
    with capture_logs() as logs:
        agent = await start_agent(kubeconfig=front.kubeconfig(tmp_path / "kc", token_file=token),
                                  probe_interval=PROBE_INTERVAL)
        lists = await eventually(lambda: _at_least(6, rejected(front, "/api/v1/pods")), timeout=30,
                                 what="six rejected pod lists")
    # Backoff, not a retry per probe: the waits before the 2nd..6th list are at least 0.1, 0.2, 0.4, 0.8, 1.6 s.
    first, sixth = lists[0], lists[5]
    assert sixth - first >= 3.1, [round(t - first, 2) for t in lists]
    # Each wait at least the backoff's lower bound: nothing (such as an answered probe) cut one short.
    gaps = [b - a for a, b in itertools.pairwise(lists[:6])]
    assert all(gap >= 0.1 * 2 ** k - 0.02 for k, gap in enumerate(gaps)), [round(g, 2) for g in gaps]
    # The probe backs off too (it was a Lease read every probe interval: 15 or more in that time).
    leases = [t for t in rejected(front, LEASE) if t <= sixth]
    assert len(leases) <= 8, [round(t - first, 2) for t in leases]
    # One line for the episode, not one per try.
    loud = [e for e in logs if e.get("log_level") in ("warning", "error", "critical")]
    assert [e["event"] for e in loud if "credential" in e["event"] or "401" in str(e)] == [
        "credentials_rejected"], loud
    assert len(loud) <= 3, loud
    body = await readyz(http, agent)
    assert body["status"] == "degraded" and "credentials rejected" in body["message"], body

    # A new token on disk: used within about a second, although the backoff is now longer than that.
    write_token(token, "fresh")
    renewed = time.monotonic()

    async def recovered() -> bool:
        return (await readyz(http, agent))["status"] == "ok" and "default/a" in names(await get_pods(http, agent))

    await eventually(recovered, timeout=2.5, interval=0.05, what="recovery on the new token")
    assert time.monotonic() - renewed < 2.5


async def test_an_idle_agent_notices_a_rotated_token_that_is_rejected(
        front: TlsApiServer, admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession,
        tmp_path: Path) -> None:
    await admin.create("a")
    token = tmp_path / "token"
    write_token(token, "good")
    front.accepted_tokens = {"good"}
    agent = await start_agent(kubeconfig=front.kubeconfig(tmp_path / "kc", token_file=token),
                              probe_interval=PROBE_INTERVAL)
    link = agent.agent.link
    assert link is not None
    await eventually(lambda: link.connected and not link.probing, what="an idle link: the watch alone vouches")
    assert (await readyz(http, agent))["status"] == "ok"

    write_token(token, "not-accepted")  # a rotation to a credential the server does not take
    # Within the file check (1 s) and a probe, not when the watch next reconnects (tens of seconds).
    body = await eventually(lambda: _degraded(http, agent), timeout=1.0 + 1.0 + PROBE_INTERVAL + 0.5,
                            what="readyz degraded after the rotation")
    assert "credentials rejected" in body["message"]


async def test_any_rejected_request_turns_readyz_degraded_at_once(
        front: TlsApiServer, admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession,
        tmp_path: Path) -> None:
    await admin.create("a")
    token = tmp_path / "token"
    write_token(token, "good")
    front.accepted_tokens = {"good"}
    agent = await start_agent(kubeconfig=front.kubeconfig(tmp_path / "kc", token_file=token),
                              probe_interval=PROBE_INTERVAL)
    await eventually(lambda: _cached(http, agent, "default/a"), what="pod cached")
    front.accepted_tokens = set()  # revoked on the server; the idle watch keeps its connection
    async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/default/pods/a/upgrade") as response:
        assert response.status == 502
    body = await readyz(http, agent)
    assert body["status"] == "degraded" and "credentials rejected" in body["message"], body


async def _degraded(http: aiohttp.ClientSession, agent: RunningAgent) -> dict[str, Any] | None:
    body = await readyz(http, agent)
    return body if body["status"] == "degraded" else None


async def _cached(http: aiohttp.ClientSession, agent: RunningAgent, key: str) -> bool:
    return key in names(await get_pods(http, agent))



async def test_a_queued_request_waits_out_rejected_credentials_and_is_applied_with_new_ones(
        front: TlsApiServer, admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession,
        tmp_path: Path) -> None:
    """A rotated credential never loses a stored request: a 401 is no verdict on the request (it was `failed`)."""
    pod = await orphan_ds_pod(admin.client, "app")
    token = tmp_path / "token"
    write_token(token, "good")
    front.accepted_tokens = {"good"}
    agent = await start_agent(kubeconfig=front.kubeconfig(tmp_path / "kc", token_file=token),
                              probe_interval=PROBE_INTERVAL, ready_timeout=1.0)
    await eventually(lambda: _cached(http, agent, "default/app"), what="pod cached")
    async with http.post(f"{agent.url}/v1/hold", json={}) as response:
        assert response.status == 200
    async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/default/pods/app/upgrade?when=open",
                         headers={"Accept": "application/json"}) as response:
        body = await response.json()
        assert response.status == 202, body

    front.accepted_tokens = set()  # revoked; the drainer's re-check of the pod is rejected from now on
    async with http.delete(f"{agent.url}/v1/hold") as response:
        assert response.status == 200
    entry = await eventually(lambda: _entry_after_rejections(http, agent, body["id"], front),
                             what="the drainer rejected at least twice")
    assert entry["state"] in ("queued", "running"), entry

    write_token(token, "renewed")
    front.accepted_tokens = {"renewed"}
    done = await eventually(lambda: _entry_in(http, agent, body["id"], ("verifying", "failed", "succeeded")),
                            timeout=10, what="the request applied with the renewed token")
    # Deleted (verifying, then failed for want of a replacement: its DaemonSet does not exist), not refused.
    assert done["state"] == "verifying" or "no replacement pod appeared" in done["message"], done
    assert done["uid"] == pod["metadata"]["uid"]


async def _entry_after_rejections(http: aiohttp.ClientSession, agent: RunningAgent, request_id: str,
                                  front: TlsApiServer) -> dict[str, Any] | None:
    entry = await _entry(http, agent, request_id)
    rejected_reads = [p for _, m, p in front.rejections if m == "GET" and p.endswith("/pods/app")]
    return entry if len(rejected_reads) >= 2 and int(entry["attempts"]) >= 2 else None


async def _entry_in(http: aiohttp.ClientSession, agent: RunningAgent, request_id: str,
                    states: tuple[str, ...]) -> dict[str, Any] | None:
    entry = await _entry(http, agent, request_id)
    return entry if entry["state"] in states else None


async def _entry(http: aiohttp.ClientSession, agent: RunningAgent, request_id: str) -> dict[str, Any]:
    async with http.get(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}") as response:
        assert response.status == 200
        entry: dict[str, Any] = await response.json()
        return entry
