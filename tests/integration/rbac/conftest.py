"""An rbac-mode simulated cluster, and the agent and controller run under deploy/'s identities on it.

`agent_scenario` and `controller_scenario` make every kind of API call the component makes (the agent: its pod
cache's list and watch, the link probe's Lease read, image pre-pull's status patch, an upgrade's read and
delete; the controller: leader election, every informer, OTA status patches, a pre-pull Job created and
deleted, AdvancedRollingUpdate deletes, events and the auto-pause patch). A call someone adds to the agent or
controller belongs here too, or the rule-drop test reports its new deploy/ grant as unexercised.
"""

from __future__ import annotations

import base64
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from edgeagent.agent.app import Agent
from edgeagent.config import AgentConfig
from edgeagent.contract import ANNOTATION_UPDATE_TYPE, UPDATE_TYPE_IN_PLACE_IF_POSSIBLE
from edgeagent.kube.client import KubeClient, KubeError, Timeouts
from edgeagent.kube.objects import get_condition
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.files import write_private
from tests.conftest import SimFactory
from tests.integration.agent_api.conftest import FAST_AGENT, make_world, set_condition, wait_cached, wait_connected
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    events_for,
    get_daemonset,
    need_upgrade,
    pods_of,
    set_image,
)
from tests.integration.controller.test_auto_pause_and_warnings import BAD, pods_never_ready
from tests.support.identities import (
    AGENT_SA,
    CONTROLLER_SA,
    apply_deploy,
    controller_args,
    identity_kubeconfig,
    load_deploy,
    mint_token,
)
from tests.support.inprocess_agent import start_in_process
from tests.support.rollout_plans import plan_state
from tests.support.rolloutplan_crd import create_plan, install_crd, write_status
from tests.support.rolloutplan_crd import status as plan_status
from tests.support.waiting import eventually

JSON = dict[str, Any]
NODE = "edge-1"
TIMEOUTS = Timeouts(connect=2, request=5)


async def rbac_sim(sim_factory: SimFactory, nodes: int = 2) -> SimCluster:
    return await sim_factory(nodes=nodes, authorization="rbac")


@contextlib.asynccontextmanager
async def admin_of(sim: SimCluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(sim.admin_kubeconfig, TIMEOUTS)
    try:
        yield client
    finally:
        await client.close()


@dataclass
class Identities:
    """Kubeconfigs for deploy/'s two ServiceAccounts: the agent's through NODE's link, the controller's direct."""

    agent: Path
    controller: Path
    args: dict[str, str]


def write_token(path: Path, token: str) -> None:
    """Atomically, as the kubelet swaps a projected token: the agent never reads half of one."""
    write_private(path, token)


async def revoke(sim: SimCluster, token: str) -> None:
    """`POST /sim/v1/tokens/revoke`, over the sim's https as in rbac mode: the token is refused (401) from now on."""
    assert sim.tls is not None
    async with aiohttp.ClientSession() as http, http.post(
            sim.url + "/sim/v1/tokens/revoke", json={"token": token},
            ssl=ssl.create_default_context(cafile=str(sim.tls.ca_file))) as resp:
        assert resp.status == 200, await resp.text()


async def rotatable_agent_credential(sim: SimCluster, directory: Path) -> tuple[str, str, Path, Path]:
    """deploy/'s objects applied, two tokens of the agent's ServiceAccount, the first in a token file, and a
    kubeconfig for `NODE` that reads that file (as a deployed agent does, so a rotation is a file swap):
    (old token, new token, token file, kubeconfig)."""
    assert sim.tls is not None
    async with admin_of(sim) as admin:
        await apply_deploy(admin, load_deploy())
        old_token, new_token = await mint_token(admin, AGENT_SA), await mint_token(admin, AGENT_SA)
    token_file = directory / "token"
    write_token(token_file, old_token)
    kubeconfig = directory / "agent.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": sim.node_url(NODE), "certificate-authority-data":
                                               base64.b64encode(sim.tls.ca_file.read_bytes()).decode()}}],
        "users": [{"name": "u", "user": {"tokenFile": str(token_file)}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return old_token, new_token, token_file, kubeconfig


async def deploy_identities(sim: SimCluster, docs: list[JSON], directory: Path) -> Identities:
    async with admin_of(sim) as admin:
        await apply_deploy(admin, docs)
        agent_token = await mint_token(admin, AGENT_SA)
        controller_token = await mint_token(admin, CONTROLLER_SA)
    ca = sim.tls.ca_file if sim.tls is not None else None
    return Identities(
        agent=identity_kubeconfig(directory / "agent-sa.kubeconfig", sim.node_url(NODE), agent_token, ca),
        controller=identity_kubeconfig(directory / "controller-sa.kubeconfig", sim.url, controller_token, ca),
        args=controller_args(docs),
    )


# These tests are about what the API server allows, not about timing: FAST_AGENT's sub-second call budgets
# (an upgrade's DELETE queued after 0.8 s, a probe failed after 0.3 s) turned a 200 into a 202, or the link
# into "disconnected", when a loaded machine slowed the RBAC-checking sim down (issue 38 item 13). Only the
# budgets grow: the agent still probes every 0.1 s, and a call that is answered returns at once.
PATIENT_CALLS = {"request_timeout": 10.0, "upgrade_timeout": 10.0, "probe_timeout": 5.0}


@contextlib.asynccontextmanager
async def running_agent(kubeconfig: Path, state_dir: Path) -> AsyncIterator[Agent]:
    cfg = AgentConfig(node_name=NODE, kubeconfig=kubeconfig, bind="127.0.0.1", port=0, state_dir=state_dir,
                      **{**FAST_AGENT, **PATIENT_CALLS})
    handle = await start_in_process(Agent(cfg))
    try:
        yield handle.agent
    finally:
        await handle.stop()


async def _post(agent: Agent, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, \
            http.post(agent.url + path) as resp:
        return resp.status, await resp.text()


async def make_plan_pod(admin: KubeClient, pod: JSON, new_hash: str, old_hash: str) -> None:
    """The pod's DaemonSet gets a RolloutPlan with a current status and the pod `PodNeedUpgrade` reason
    `WaveReached`, as the controller writes them: the agent then reads the DaemonSet and the namespace's
    RolloutPlans before the delete."""
    namespace, owner = pod["metadata"]["namespace"], pod["metadata"]["ownerReferences"][0]["name"]
    path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{owner}"
    generation = (await admin.get(path))["metadata"]["generation"]
    await install_crd(admin)
    await create_plan(admin, daemonset=owner, namespace=namespace, steps=["100%"])
    await write_status(admin, owner, plan_status(new_hash, phase="Progressing", wave=1, waves=1,
                                                 stableRevision=old_hash, observedGeneration=generation),
                       namespace=namespace)
    await admin.patch(
        f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status",
        {"status": {"conditions": [{"type": "PodNeedUpgrade", "status": "True", "reason": "WaveReached",
                                    "message": f"controllerrevision: {new_hash}"}]}})


async def agent_scenario(sim: SimCluster, kubeconfig: Path, state_dir: Path) -> None:
    """The agent's calls, in the order a node sees them; raises if any step does not work."""
    async with make_world(sim) as world, running_agent(kubeconfig, state_dir) as agent:
        await wait_connected(agent)  # the link probe read the node's Lease
        old = await world.pod()
        await wait_cached(agent, old)  # list + watch of the node's pods
        ns, name = old["metadata"]["namespace"], old["metadata"]["name"]
        await make_plan_pod(world.admin, old, world.new_hash, world.old_hash)
        status, body = await _post(agent, f"/openyurt.io/v1/namespaces/{ns}/pods/{name}/imagepull")
        assert status == 200, (status, body)  # PodImageReady patched on pods/status
        # The kubelet reports the image pulled; then the upgrade may go ahead.
        await set_condition(world.admin, old, "PodImageReady", "True", f"controllerrevision: {world.new_hash}")
        status, body = await _post(agent, f"/openyurt.io/v1/namespaces/{ns}/pods/{name}/upgrade")
        assert status == 200, (status, body)  # a fresh read, then the delete
        await eventually(lambda: world.replaced(old), what="the upgraded pod replaced")


async def controller_scenario(sim: SimCluster, kubeconfig: Path, args: dict[str, str]) -> None:
    """The controller's calls: leader election, informers, OTA patches under a RolloutPlan (its status written),
    an image pre-pull Job, and an AdvancedRollingUpdate that pauses."""
    nodes = len(sim.node_names)
    annotations = {"apps.openyurt.io/max-unavailable": "1", "edgeagent.io/max-failed": "1",
                   "edgeagent.io/progress-deadline-seconds": "1"}
    controllers = Controllers()
    async with admin_of(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("ota", strategy="OTA"))
        await install_crd(admin)
        await create_plan(admin, daemonset="ota", steps=["100%"])
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                                         annotations=annotations, min_ready=3))
        await eventually(lambda: all_running(admin, "ota", nodes), what="ota pods running")
        await create_daemonset(admin, daemonset_manifest("inplace", strategy="AdvancedRollingUpdate", annotations={
            "apps.openyurt.io/max-unavailable": "1", ANNOTATION_UPDATE_TYPE: UPDATE_TYPE_IN_PLACE_IF_POSSIBLE}))
        await eventually(lambda: all_running(admin, "web", nodes), what="web pods running")
        await eventually(lambda: all_running(admin, "inplace", nodes), what="inplace pods running")
        in_place_uids = {p["metadata"]["uid"] for p in await pods_of(admin, "inplace")}
        lease_ns, lease_name = args["--lease-namespace"], args["--lease-name"]
        try:
            await controllers.start(sim, kubeconfig=kubeconfig, leader_elect=args.get("--leader-elect") == "true",
                                    lease_namespace=lease_ns, lease_name=lease_name)
            lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{lease_ns}/leases/{lease_name}"

            async def lease_rv() -> str | None:
                try:
                    return str((await admin.get(lease_path))["metadata"]["resourceVersion"])
                except KubeError as exc:
                    if exc.code == 404:
                        return None
                    raise

            first = await eventually(lease_rv, what="the leader Lease created (get, create)")

            async def renewed() -> bool:
                return await lease_rv() not in (None, first)

            await eventually(renewed, what="the leader renewed its Lease (update)")
            await eventually(lambda: plan_state(admin, "ota"),
                             what="the plan's status written (rolloutplans list/watch, rolloutplans/status update)")
            async with pods_never_ready(sim, BAD):
                await set_image(admin, "ota", "nginx:1.19.5")
                await set_image(admin, "web", BAD)
                await set_image(admin, "inplace", "nginx:1.19.5")

                async def patched_in_place() -> bool:
                    pods = await pods_of(admin, "inplace")
                    return {p["metadata"]["uid"] for p in pods} == in_place_uids and all(
                        p["spec"]["containers"][0]["image"] == "nginx:1.19.5" for p in pods)

                await eventually(patched_in_place, what="the in-place DaemonSet's pods patched (pods patch)")

                async def flagged() -> bool:
                    pods = await pods_of(admin, "ota")
                    return len(pods) == nodes and all((need_upgrade(p) or ("", ""))[0] == "True" for p in pods)

                await eventually(flagged, what="OTA pods flagged PodNeedUpgrade (pods/status patch)")
                await _pre_pull(admin, await current_hash(admin, "ota"))

                async def paused() -> bool:
                    ds = await get_daemonset(admin, "web")
                    return bool(ds["metadata"].get("annotations", {}).get("edgeagent.io/paused") == "true")

                await eventually(paused, timeout=15, what="the bad roll paused itself (daemonsets patch)")
                reasons = {e["reason"] for e in await events_for(admin, "web")}
                assert {"UpgradingPods", "RolloutAutoPaused"} <= reasons, reasons  # events create; pods delete
        finally:
            await controllers.stop_all()


async def _pre_pull(admin: KubeClient, hash_: str | None) -> None:
    """What the agent's /imagepull writes; the controller answers with a Job (create, list, watch), marks the
    pod PullImageSuccess and deletes the finished Job (delete)."""
    assert hash_ is not None
    pod = next(p for p in await pods_of(admin, "ota") if p["spec"].get("nodeName") == NODE)
    name = pod["metadata"]["name"]
    await admin.patch(f"/api/v1/namespaces/default/pods/{name}/status", {
        "metadata": {"uid": pod["metadata"]["uid"]},
        "status": {"conditions": [{"type": "PodImageReady", "status": "False", "reason": "WaitPullImage",
                                   "message": f"controllerrevision: {hash_}"}]}})

    async def pulled() -> bool:
        current = await admin.get(f"/api/v1/namespaces/default/pods/{name}")
        cond = get_condition(current, "PodImageReady") or {}
        return cond.get("status") == "True" and cond.get("reason") == "PullImageSuccess"

    await eventually(pulled, timeout=20, what="the pre-pull Job ran and the pod is PullImageSuccess")

    async def jobs_gone() -> bool:
        return not (await admin.get("/apis/batch/v1/jobs"))["items"]

    await eventually(jobs_gone, what="the finished pre-pull Job deleted")


Scenario = Callable[[], Awaitable[None]]


@pytest.fixture
def rbac_dir(tmp_path: Path) -> Path:
    path = tmp_path / "identities"
    path.mkdir()
    return path
