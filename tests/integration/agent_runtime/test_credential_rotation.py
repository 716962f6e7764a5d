"""Issue 14.1: rotated credentials are picked up; rejected ones are reported, not hidden behind "connected".

Against an HTTPS front of the sim that authenticates per request as kube-apiserver does (tests/support/
tls_apiserver.py), with certificates minted here. The kubelet rotates `kubelet-client-current.pem` by swapping
a symlink; projected service-account tokens are swapped atomically too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from edgeagent.kube.client import KubeClient, KubeError, Timeouts
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_runtime.conftest import NODE, Admin, AgentFactory, get_pods, names
from tests.support.inprocess_agent import RunningAgent
from tests.support.tls_apiserver import CertificateAuthority, TlsApiServer, swap_symlink
from tests.support.waiting import eventually

LEASE = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
# Credential files are never re-checked by stat within these tests: only the 401 path can pick up a change.
NEVER = 3600.0


@pytest.fixture
async def front(sim: SimCluster, tmp_path: Path) -> AsyncIterator[TlsApiServer]:
    server = TlsApiServer(CertificateAuthority(tmp_path), sim.node_url(NODE))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def serial_of(pem: Path) -> int:
    return x509.load_pem_x509_certificate(pem.read_bytes()).serial_number


def rotate(front: TlsApiServer, current: Path, n: int) -> int:
    """The kubelet writes a new certificate and swaps `current` to it; returns the new serial."""
    pem = current.with_name(f"kubelet-client-{n}.pem")
    serial = front.ca.client_pem(f"system:node:{NODE}", pem)
    swap_symlink(current, pem)
    return serial


async def test_a_401_rereads_a_rotated_certificate_once_and_retries(front: TlsApiServer, tmp_path: Path) -> None:
    current = tmp_path / "kubelet-client-current.pem"
    front.accepted_serials = {rotate(front, current, 1)}
    client = await KubeClient.connect(front.kubeconfig(tmp_path / "kc", cert_file=current),
                                      Timeouts(connect=2, request=5), credential_check_interval=NEVER)
    try:
        await client.get(LEASE)
        # The kubelet rotates and the server stops accepting the old certificate at once.
        front.accepted_serials = {rotate(front, current, 2)}
        await client.get(LEASE)  # 401 with the old certificate, re-read, retried on a new connection: 200
        assert front.rejected == 1
        assert not client.credentials.rejected
    finally:
        await client.close()


async def test_a_401_rereads_a_rotated_token_file(front: TlsApiServer, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first")
    front.accepted_tokens = {"first"}
    client = await KubeClient.connect(front.kubeconfig(tmp_path / "kc", token_file=token),
                                      Timeouts(connect=2, request=5), credential_check_interval=NEVER)
    try:
        await client.get(LEASE)
        fresh = tmp_path / "token.new"
        fresh.write_text("second")
        fresh.replace(token)
        front.accepted_tokens = {"second"}
        await client.get(LEASE)
        assert front.rejected == 1
    finally:
        await client.close()


async def test_a_changed_certificate_file_is_used_before_any_401(front: TlsApiServer, tmp_path: Path) -> None:
    current = tmp_path / "kubelet-client-current.pem"
    first = rotate(front, current, 1)
    client = await KubeClient.connect(front.kubeconfig(tmp_path / "kc", cert_file=current),
                                      Timeouts(connect=2, request=5), credential_check_interval=0.0)
    try:
        front.accepted_serials = {first}
        await client.get(LEASE)
        second = rotate(front, current, 2)
        front.accepted_serials.add(second)  # both valid: nothing forces a re-read but the file itself
        await client.get(LEASE)
        assert second in front.seen_serials and front.rejected == 0
    finally:
        await client.close()


async def test_rejected_credentials_fail_after_one_reread_and_are_one_episode(
        front: TlsApiServer, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("revoked")
    client = await KubeClient.connect(front.kubeconfig(tmp_path / "kc", token_file=token),
                                      Timeouts(connect=2, request=5), credential_check_interval=NEVER)
    try:
        for _ in range(3):
            with pytest.raises(KubeError) as caught:
                await client.get(LEASE)
            assert caught.value.code == 401
        assert front.rejected == 6  # each call: the request, and one retry after re-reading the file
        assert client.credentials.rejected and client.credentials.episodes == 1
        assert client.credentials.rejections == 3
        front.accepted_tokens = {"revoked"}
        await client.get(LEASE)
        assert not client.credentials.rejected
    finally:
        await client.close()


async def readyz(http: aiohttp.ClientSession, agent: RunningAgent) -> dict[str, Any]:
    async with http.get(agent.url + "/v1/readyz", headers={"Accept": "application/json"}) as response:
        assert response.status == 200
        body: dict[str, Any] = await response.json()
        return body


async def upgrade_status(http: aiohttp.ClientSession, agent: RunningAgent, name: str) -> int:
    """An upgrade of a plain pod: the agent GETs it from the cloud first (400 = that GET was accepted)."""
    async with http.post(f"{agent.url}/openyurt.io/v1/namespaces/default/pods/{name}/upgrade") as response:
        return response.status


async def test_agent_follows_certificate_rotation_keeps_its_watch_and_reports_rejection(
        front: TlsApiServer, admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession,
        tmp_path: Path) -> None:
    current = tmp_path / "kubelet-client-current.pem"
    front.accepted_serials = {rotate(front, current, 1)}
    agent = await start_agent(kubeconfig=front.kubeconfig(tmp_path / "kc", cert_file=current))

    async def cached(key: str) -> bool:
        return key in names(await get_pods(http, agent))

    await admin.create("before")
    await eventually(lambda: cached("default/before"), what="pod cached through the TLS front")
    informer = agent.agent.informer
    assert informer is not None
    restarts, watches = informer.watch_restarts, front.watches

    # Rotation, and the old certificate stops being accepted at once.
    front.accepted_serials = {new := rotate(front, current, 2)}
    await admin.create("after")
    await eventually(lambda: cached("default/after"), what="pod cached after rotation")
    assert await upgrade_status(http, agent, "after") == 400  # the cloud GET went through, on the new certificate
    assert new in front.seen_serials
    # The watch opened with the old certificate still delivers: a dropped one would be re-opened first.
    await admin.create("after-2")
    await eventually(lambda: cached("default/after-2"), what="pod cached through the same watch")
    assert (informer.watch_restarts, front.watches) == (restarts, watches), "rotation dropped the watch"
    assert (await readyz(http, agent))["status"] == "ok"

    # Revoked with nothing new on disk: the link answers, but readyz says why the cache is frozen.
    front.accepted_serials = set()
    assert await upgrade_status(http, agent, "after") == 502
    body = await readyz(http, agent)
    assert body["status"] == "degraded" and "credentials rejected" in body["message"], body
    assert body["link"]["credentials"]["rejected"] is True
    async with http.get(agent.url + "/v1/readyz") as response:
        assert (await response.text()).startswith("degraded: credentials rejected")
    async with http.get(agent.url + "/metrics") as response:
        assert "edgeagent_kube_credentials_rejected 1.0" in await response.text()

    # The kubelet gets a new certificate: the agent recovers by itself.
    front.accepted_serials = {rotate(front, current, 3)}
    assert await upgrade_status(http, agent, "after") == 400
    assert (await readyz(http, agent))["status"] == "ok"
