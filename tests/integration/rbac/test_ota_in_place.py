"""Issue 37, must-show 3: OTA in place with the node's own credential, on a sim in rbac mode with deploy/'s
identities and deploy/k8s-1.30's admission policy. The agent (its ServiceAccount token bound to its pod, so to its
node) may write only its node's pods' status: it records the node's request on its pod's status
(`edgeagent.io/InPlaceUpgradeRequested`), the controller (deploy/'s identity, which may patch pods) carries it out.
Online 200 and offline 202 drained on the link's return, the pod kept (same UID, restartCount 1, new image,
Ready); a request for another node's pod refused, and another node writing the request onto this pod's status
refused by the API server; a change that is not image-only recreated, with the Event."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgeagent.agent.app import Agent
from edgeagent.contract import (
    CONDITION_IN_PLACE_UPGRADE_REQUESTED,
    LABEL_REVISION_HASH,
    REASON_IN_PLACE_EXECUTED,
    version_message,
)
from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient
from edgeagent.kube.errors import Forbidden
from edgeagent.kube.objects import get_condition, is_pod_ready, is_terminating
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.agent_api.conftest import wait_cached, wait_connected
from tests.integration.controller.conftest import (
    Controllers,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    patch_daemonset,
    pods_of,
    set_image,
)
from tests.integration.rbac.conftest import NODE, TIMEOUTS, admin_of, deploy_identities, running_agent
from tests.integration.rbac.test_admission_policy_on_sim import DOCS, _agent_token_bound_to_its_pod
from tests.support.waiting import eventually

JSON = dict[str, Any]
OTHER = "edge-2"
OLD, NEW = "nginx:1.19.4", "nginx:1.19.5"
IN_PLACE = {"edgeagent.io/update-type": "InPlaceIfPossible"}
UPGRADE = "/openyurt.io/v1/namespaces/default/pods/{name}/upgrade"


@pytest.fixture
async def controllers() -> AsyncIterator[Controllers]:
    running = Controllers()
    try:
        yield running
    finally:
        await running.stop_all()


@dataclass
class Site:
    sim: SimCluster
    admin: KubeClient
    agent: Agent
    agent_kubeconfig: Path


@contextlib.asynccontextmanager
async def ota_in_place_site(sim_factory: SimFactory, controllers: Controllers, rbac_dir: Path,
                            tmp_path: Path) -> AsyncIterator[Site]:
    """deploy/ with the admission policy, an OTA `InPlaceIfPossible` DaemonSet `ota` on both nodes, the controller
    under its ServiceAccount and NODE's agent under its pod-bound token; nothing upgraded yet."""
    sim = await sim_factory(nodes=2, authorization="rbac")
    identities = await deploy_identities(sim, DOCS, rbac_dir)
    async with admin_of(sim) as admin:
        agent_kubeconfig = await _agent_token_bound_to_its_pod(sim, admin, rbac_dir)
        await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA", image=OLD, annotations=IN_PLACE))

        async def running() -> bool:
            pods = await pods_of(admin, "ota")
            return len(pods) == 2 and all(is_pod_ready(p) for p in pods)

        await eventually(running, what="the ota pods Ready")
        await controllers.start(sim, kubeconfig=identities.controller, lease_namespace=identities.args[
            "--lease-namespace"], lease_name=identities.args["--lease-name"])
        async with running_agent(agent_kubeconfig, tmp_path / "state") as agent:
            await wait_connected(agent)
            yield Site(sim, admin, agent, agent_kubeconfig)


async def pod_on(admin: KubeClient, node: str) -> JSON:
    return next(p for p in await pods_of(admin, "ota") if p["spec"].get("nodeName") == node and not is_terminating(p))


async def flagged(site: Site, image: str = NEW) -> tuple[JSON, str]:
    """The new template applied; NODE's pod once the controller says it needs the upgrade and the agent sees it."""
    old_hash = await current_hash(site.admin, "ota")
    await set_image(site.admin, "ota", image)

    async def needs() -> tuple[JSON, str] | None:
        revision = await current_hash(site.admin, "ota")
        pod = await pod_on(site.admin, NODE)
        cond = get_condition(pod, "PodNeedUpgrade") or {}
        ok = revision != old_hash and cond.get("status") == "True" and cond.get("message") == version_message(
            str(revision))
        return (pod, str(revision)) if ok else None

    pod, revision = await eventually(needs, what="PodNeedUpgrade True for the new revision")
    await wait_cached(site.agent, pod)
    return pod, revision


async def post(agent: Agent, path: str) -> tuple[int, JSON]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http, \
            http.post(agent.url + path, headers={"Accept": "application/json"}) as resp:
        return resp.status, await resp.json()


async def request_state(agent: Agent, request_id: str) -> JSON:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, \
            http.get(f"{agent.url}/openyurt.io/v1/upgrades/{request_id}") as resp:
        assert resp.status == 200
        return dict(await resp.json())


def main_status(pod: JSON) -> JSON:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == "main")


async def kept_and_upgraded(site: Site, before: JSON, revision: str, request_id: str) -> JSON:
    """Until the request succeeded; then the pod is the same one, restarted once on the new image, Ready."""
    async def succeeded() -> bool:
        return bool((await request_state(site.agent, request_id))["state"] == "succeeded")

    await eventually(succeeded, timeout=30, what="the request verified succeeded")
    pod = await pod_on(site.admin, NODE)
    assert pod["metadata"]["uid"] == before["metadata"]["uid"]
    assert pod["metadata"]["labels"][LABEL_REVISION_HASH] == revision
    assert pod["spec"]["containers"][0]["image"] == NEW and is_pod_ready(pod)
    status, was = main_status(pod), main_status(before)
    assert status["restartCount"] == was["restartCount"] + 1 == 1
    assert status["containerID"] != was["containerID"] and status["imageID"] != was["imageID"]
    assert [d for d in site.sim.store.deletes if d["resource"] == "pods" and d.get("name") == pod["metadata"]["name"]
            ] == []

    async def answered() -> bool:
        cond = get_condition(await pod_on(site.admin, NODE), CONDITION_IN_PLACE_UPGRADE_REQUESTED) or {}
        return cond.get("status") == "False" and cond.get("reason") == REASON_IN_PLACE_EXECUTED

    await eventually(answered, what="the request answered by the controller")
    return pod


async def test_online_ota_in_place_keeps_the_pod(sim_factory: SimFactory, controllers: Controllers,
                                                 rbac_dir: Path, tmp_path: Path) -> None:
    async with ota_in_place_site(sim_factory, controllers, rbac_dir, tmp_path) as site:
        other_before = await pod_on(site.admin, OTHER)
        before, revision = await flagged(site)
        code, body = await post(site.agent, UPGRADE.format(name=before["metadata"]["name"]))
        assert (code, body["status"]) == (200, "Started"), body
        assert body["message"] == f"Start updating pod default/{before['metadata']['name']}"
        await kept_and_upgraded(site, before, revision, body["id"])
        other = await pod_on(site.admin, OTHER)  # nobody asked for edge-2's pod: untouched
        assert other["metadata"]["uid"] == other_before["metadata"]["uid"]
        assert other["spec"]["containers"][0]["image"] == OLD


async def test_offline_ota_in_place_is_queued_and_drained_keeping_the_pod(
        sim_factory: SimFactory, controllers: Controllers, rbac_dir: Path, tmp_path: Path) -> None:
    async with ota_in_place_site(sim_factory, controllers, rbac_dir, tmp_path) as site:
        before, revision = await flagged(site)
        await site.sim.disconnect(NODE, "refuse")
        await wait_connected(site.agent, False)
        code, body = await post(site.agent, UPGRADE.format(name=before["metadata"]["name"]))
        assert (code, body["status"]) == (202, "Queued"), body
        assert (await request_state(site.agent, body["id"]))["state"] == "queued"
        assert get_condition(await pod_on(site.admin, NODE), CONDITION_IN_PLACE_UPGRADE_REQUESTED) is None
        await site.sim.connect(NODE)
        await kept_and_upgraded(site, before, revision, body["id"])


async def test_no_node_can_ask_for_another_nodes_pod(sim_factory: SimFactory, controllers: Controllers,
                                                     rbac_dir: Path, tmp_path: Path) -> None:
    async with ota_in_place_site(sim_factory, controllers, rbac_dir, tmp_path) as site:
        await flagged(site)
        theirs = await pod_on(site.admin, OTHER)
        # Through NODE's agent: refused by its checks.
        code, body = await post(site.agent, UPGRADE.format(name=theirs["metadata"]["name"]))
        assert (code, body["status"]) == (403, "Forbidden"), body
        # Written directly onto the other node's pod status, with NODE's credentials: refused by the API server.
        request = {"metadata": {"uid": theirs["metadata"]["uid"]}, "status": {"conditions": [{
            "type": CONDITION_IN_PLACE_UPGRADE_REQUESTED, "status": "True", "reason": "RequestedByNode",
            "message": version_message(await current_hash(site.admin, "ota") or "")}]}}
        path = f"/api/v1/namespaces/default/pods/{theirs['metadata']['name']}/status"
        for kubeconfig in (site.agent_kubeconfig, site.sim.node_kubeconfig(NODE)):
            async with await KubeClient.connect(kubeconfig, TIMEOUTS) as node_b:
                with pytest.raises(Forbidden):
                    await node_b.patch(path, request, CONTENT_STRATEGIC_MERGE_PATCH)
        # Nothing moved it: a reconcile after the attempts (an annotation poke) leaves it on the old image.
        await patch_daemonset(site.admin, "ota", {"metadata": {"annotations": {"example.com/poke": "1"}}})
        now = await pod_on(site.admin, OTHER)
        assert now["metadata"]["uid"] == theirs["metadata"]["uid"]
        assert now["spec"]["containers"][0]["image"] == OLD
        assert get_condition(now, CONDITION_IN_PLACE_UPGRADE_REQUESTED) is None


async def test_a_change_beyond_images_is_recreated_with_the_event(
        sim_factory: SimFactory, controllers: Controllers, rbac_dir: Path, tmp_path: Path) -> None:
    async with ota_in_place_site(sim_factory, controllers, rbac_dir, tmp_path) as site:
        old_hash = await current_hash(site.admin, "ota")
        await patch_daemonset(site.admin, "ota", {"spec": {"template": {"spec": {"containers": [
            {"name": "main", "image": NEW, "env": [{"name": "MODE", "value": "b"}]}]}}}})

        async def needs() -> JSON | None:
            revision = await current_hash(site.admin, "ota")
            pod = await pod_on(site.admin, NODE)
            ok = revision != old_hash and (get_condition(pod, "PodNeedUpgrade") or {}).get("message") == \
                version_message(str(revision))
            return pod if ok and (get_condition(pod, "PodNeedUpgrade") or {}).get("status") == "True" else None

        before = await eventually(needs, what="PodNeedUpgrade True")
        await wait_cached(site.agent, before)
        code, body = await post(site.agent, UPGRADE.format(name=before["metadata"]["name"]))
        assert (code, body["status"]) == (200, "Started"), body

        async def succeeded() -> bool:
            return bool((await request_state(site.agent, body["id"]))["state"] == "succeeded")

        await eventually(succeeded, timeout=30, what="the recreated pod verified")
        pod = await pod_on(site.admin, NODE)
        assert pod["metadata"]["uid"] != before["metadata"]["uid"]
        assert pod["spec"]["containers"][0].get("env") == [{"name": "MODE", "value": "b"}]
        events = [e for e in (await site.admin.get("/api/v1/namespaces/default/events"))["items"]
                  if e["reason"] == "InPlaceUpdateFallback"
                  and e["involvedObject"]["uid"] == before["metadata"]["uid"]]
        assert len(events) == 1 and events[0]["type"] == "Warning", events
        assert "env of container main changed" in events[0]["message"], events[0]["message"]
