"""A `403` is never "credentials rejected" (issue 38 item 3): only a `401` is.

From Kubernetes 1.36 the Node authorizer refuses a kubelet identity's `get` of any pod not bound to its node
(and of a pod that does not exist), and the sim in `--authorization rbac` does the same. An upgrade request for
such a pod answers `403` as for any pod of another node; a kubelet identity's plan check refused `get
daemonsets` logs one `plan_check_skipped` line; a list/watch refused with 403 backs off as far as a refused
401 does, with one log line per episode. None of them marks the credentials rejected (readyz, the
`edgeagent_kube_credentials_rejected` gauge, the alert on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from edgeagent.agent.app import Agent
from edgeagent.fleet.dashboard import Dashboard
from edgeagent.fleet.settings import DashboardConfig
from edgeagent.kube.client import KubeClient
from edgeagent.kube.errors import NotFound
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.agent_api.conftest import make_world, orphan_ds_pod, wait_cached, wait_connected
from tests.integration.rbac.conftest import NODE, admin_of, make_plan_pod, rbac_sim, running_agent
from tests.support.identities import identity_kubeconfig, mint_token
from tests.support.waiting import eventually

JSON = dict[str, Any]
UPGRADE = "/openyurt.io/v1/namespaces/{ns}/pods/{name}/upgrade"


@pytest.fixture
async def sim(sim_factory: SimFactory) -> SimCluster:
    return await rbac_sim(sim_factory)


async def _call(agent: Agent, method: str, path: str) -> tuple[int, JSON]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, \
            http.request(method, agent.url + path, headers={"Accept": "application/json"}) as resp:
        return resp.status, await resp.json()


async def _credentials_accepted(agent: Agent) -> None:
    """readyz ok, the link's credentials not rejected, the gauge 0."""
    status, ready = await _call(agent, "GET", "/v1/readyz")
    assert (status, ready["status"], ready["link"]["credentials"]["rejected"]) == (200, "ok", False), ready
    async with aiohttp.ClientSession() as http, http.get(agent.url + "/metrics") as resp:
        assert "edgeagent_kube_credentials_rejected 0.0" in await resp.text()


async def test_another_nodes_pod_or_a_misspelt_one_is_403_and_the_credentials_stay_accepted(
        sim: SimCluster, tmp_path: Path) -> None:
    async with make_world(sim) as world, running_agent(sim.node_kubeconfig(NODE), tmp_path / "state") as agent:
        await wait_connected(agent)
        mine = await world.pod()
        await wait_cached(agent, mine)
        theirs = await world.pod("edge-2")
        ns = theirs["metadata"]["namespace"]
        with capture_logs() as logs:
            for name in (theirs["metadata"]["name"], "no-such-pod"):
                path = UPGRADE.format(ns=ns, name=name)
                for suffix in ("", "?when=open"):
                    status, body = await _call(agent, "POST", path + suffix)
                    assert (status, body["status"]) == (403, "Forbidden"), (suffix, body)
                    assert f"pod {ns}/{name} is not bound to this node ('{NODE}'), or does not exist" in body["message"]
                    assert "no relationship found between node 'edge-1' and this object" in body["message"]
                status, body = await _call(agent, "POST", path.replace("/upgrade", "/imagepull"))
                assert (status, body["status"]) == (403, "Forbidden"), body
        await _credentials_accepted(agent)
        assert not [e for e in logs if e["log_level"] == "warning"], logs
        # Nothing was queued or deleted for them.
        status, listing = await _call(agent, "GET", "/openyurt.io/v1/upgrades")
        assert listing["items"] == []
        assert [p["metadata"]["uid"] for p in [await world.pod("edge-2")]] == [theirs["metadata"]["uid"]]


async def test_a_refused_plan_check_is_one_info_line_and_the_upgrade_goes_ahead(
        sim: SimCluster, tmp_path: Path) -> None:
    async with make_world(sim) as world, running_agent(sim.node_kubeconfig(NODE), tmp_path / "state") as agent:
        await wait_connected(agent)
        pod = await world.pod()
        await wait_cached(agent, pod)
        await make_plan_pod(world.admin, pod, world.new_hash, world.old_hash)
        with capture_logs() as logs:
            status, body = await _call(agent, "POST", UPGRADE.format(ns=pod["metadata"]["namespace"],
                                                                     name=pod["metadata"]["name"]))
        assert (status, body["status"]) == (200, "Started"), body
        skipped = [e for e in logs if e["event"] == "plan_check_skipped"]
        assert len(skipped) == 1 and skipped[0]["log_level"] == "info", logs
        assert not [e for e in logs if e["log_level"] in ("warning", "error")], logs
        await _credentials_accepted(agent)
        assert sim.audit.find("GET", "/apis/apps/v1/namespaces/default/daemonsets/")[-1]["code"] == 403


async def test_a_forbidden_list_watch_backs_off_to_a_minute_and_says_so_once(
        sim: SimCluster, tmp_path: Path) -> None:
    """An identity with no grant at all (a ServiceAccount nobody bound): every pod list is refused with 403."""
    async with admin_of(sim) as admin:
        await admin.create("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "nobody"}})
        token = await mint_token(admin, "nobody", "default")
    assert sim.tls is not None
    kubeconfig = identity_kubeconfig(tmp_path / "nobody.kubeconfig", sim.node_url(NODE), token, sim.tls.ca_file)
    pods = "/api/v1/pods"

    def lists() -> list[JSON] | None:
        """The refused lists, once there are five."""
        found = [e for e in sim.audit.find("GET", pods) if "watch=" not in e["query"] and e.get("code") == 403]
        return found if len(found) >= 5 else None

    with capture_logs() as logs:
        async with running_agent(kubeconfig, tmp_path / "state") as agent:
            # The link probe's Lease read is answered (403 too): the link counts as up, and the probe must not
            # kick the refused informer out of its backoff (FAST_AGENT probes every 0.1 s).
            await wait_connected(agent)
            tried = await eventually(lists, timeout=30, what="five refused lists")
            _, ready = await _call(agent, "GET", "/v1/readyz")
            problems = " ".join(ready["problems"])
    assert ready["link"]["credentials"]["rejected"] is False, ready
    assert "refuses this node's pod list/watch (403" in problems and "credentials rejected" not in problems, ready
    # Backoff 0.2 s doubling, jittered to between half and all of it: the 4th wait is at least 0.8 s. Kicked by
    # each probe, it would be about the probe interval.
    gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(tried)]
    assert gaps[3] >= 0.8, gaps
    forbidden = [e for e in logs if e["event"] == "list_watch_forbidden"]
    assert len(forbidden) == 1 and forbidden[0]["log_level"] == "warning", forbidden
    assert not [e for e in logs if "credentials" in e["event"]], logs


async def test_a_queued_request_whose_pod_went_away_meanwhile_ends_obsolete(sim: SimCluster, tmp_path: Path) -> None:
    """On 1.36 the pod a queued request names is refused (403), not missing (404), once it is gone: the drainer
    reads that as gone from this node (obsolete), not as the cloud refusing the request (failed)."""
    async with make_world(sim) as world, running_agent(sim.node_kubeconfig(NODE), tmp_path / "state") as agent:
        await wait_connected(agent)
        pod = await orphan_ds_pod(world.admin, "leaving")
        await wait_cached(agent, pod)
        await sim.disconnect(NODE, "refuse")
        await wait_connected(agent, False)
        status, queued = await _call(agent, "POST", UPGRADE.format(ns="default", name="leaving"))
        assert status == 202, queued
        path = "/api/v1/namespaces/default/pods/leaving"
        await world.admin.delete(path, {"gracePeriodSeconds": 0})
        await eventually(lambda: _absent(world.admin, path), what="the pod removed")
        await sim.connect(NODE)

        async def ended() -> JSON | None:
            entry = (await _call(agent, "GET", f"/openyurt.io/v1/upgrades/{queued['id']}"))[1]
            return entry if entry["state"] not in ("queued", "running") else None

        done = await eventually(ended, what="the queued request ended")
        assert done["state"] == "obsolete", done
        assert "is not bound to this node" in done["message"] or "no longer exists" in done["message"], done
        await _credentials_accepted(agent)


async def _absent(admin: KubeClient, path: str) -> bool:
    try:
        await admin.get(path)
    except NotFound:
        return True
    return False


async def test_the_dashboard_says_a_refused_list_is_a_missing_grant_not_an_unreachable_server(
        sim: SimCluster, tmp_path: Path) -> None:
    """Before, a 403 counted as rejected credentials; now it does not, and must not read "Cannot reach"."""
    async with admin_of(sim) as admin:
        await admin.create("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "viewer"}})
        token = await mint_token(admin, "viewer", "default")
    assert sim.tls is not None
    kubeconfig = identity_kubeconfig(tmp_path / "viewer.kubeconfig", sim.url, token, sim.tls.ca_file)
    board = Dashboard(DashboardConfig(kubeconfig=kubeconfig))
    await board.connect()
    assert board.client is not None
    runner = asyncio.create_task(board.run_informers())

    def verdict() -> JSON | None:
        health = board.health()
        return health if health["state"] != "connecting" else None

    try:
        health = await eventually(verdict, what="the dashboard's verdict")
    finally:
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
        await board.client.close()
    assert health["state"] == "forbidden", health
    assert "accepted the credentials" in health["problem"] and "does not allow them to list and watch" in \
        health["problem"], health
    assert not board.client.credentials.rejected
