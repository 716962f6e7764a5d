"""deploy/k8s-1.30/'s ValidatingAdmissionPolicy enforced by the sim (issue 22 item 17): the agent's ServiceAccount,
with the token the kubelet projects into its pod (bound to that pod, so carrying the node), can delete and patch
the status of its own node's pods and no other pod; the agent works within it end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from edgeagent.kube.client import KubeClient, KubeError
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.rbac.conftest import (
    NODE,
    TIMEOUTS,
    admin_of,
    agent_scenario,
    deploy_identities,
    rbac_sim,
)
from tests.support.identities import AGENT_SA, DEPLOY, NAMESPACE, identity_kubeconfig, load_deploy, mint_token
from tests.support.waiting import eventually

JSON = dict[str, Any]
POLICY_DOCS = [d for d in yaml.safe_load_all((DEPLOY / "k8s-1.30" / "agent-own-node-pods.yaml").read_text()) if d]
DOCS = load_deploy() + POLICY_DOCS
PODS = "/api/v1/namespaces/default/pods"
STRATEGIC = "application/strategic-merge-patch+json"
DENIED = ("ValidatingAdmissionPolicy 'edgeagent-agent-own-node-pods' with binding 'edgeagent-agent-own-node-pods' "
          "denied request: edgeagent-agent may only delete or update the status of pods bound to the node its "
          "token was issued for")


async def _agent_token_bound_to_its_pod(sim: SimCluster, admin: KubeClient, directory: Path) -> Path:
    async def agent_pod() -> JSON | None:
        pods = (await admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods",
                                query={"fieldSelector": f"spec.nodeName={NODE}"}))["items"]
        return pods[0] if pods else None

    pod = await eventually(agent_pod, what="deploy/'s agent DaemonSet pod on the node")
    token = await mint_token(admin, AGENT_SA, bound_pod=pod)
    assert sim.tls is not None
    return identity_kubeconfig(directory / "bound.kubeconfig", sim.node_url(NODE), token, sim.tls.ca_file)


async def _pod(admin: KubeClient, name: str, node: str) -> JSON:
    return await admin.create(PODS, {"metadata": {"name": name},
                                     "spec": {"nodeName": node, "containers": [{"name": "a", "image": "a:1"}]}})


async def test_agent_identity_cannot_touch_another_nodes_pod(
        sim_factory: SimFactory, tmp_path: Path, rbac_dir: Path) -> None:
    sim = await rbac_sim(sim_factory)
    identities = await deploy_identities(sim, DOCS, rbac_dir)
    async with admin_of(sim) as admin:
        kubeconfig = await _agent_token_bound_to_its_pod(sim, admin, rbac_dir)
        await _pod(admin, "mine", NODE)
        await _pod(admin, "theirs", "edge-2")
        async with await KubeClient.connect(kubeconfig, TIMEOUTS) as agent:
            patch = {"status": {"conditions": [{"type": "PodImageReady", "status": "False"}]}}
            for verb in ("delete", "patch status"):
                with pytest.raises(KubeError) as denied:
                    if verb == "delete":
                        await agent.delete(f"{PODS}/theirs")
                    else:
                        await agent.patch(f"{PODS}/theirs/status", patch, content_type=STRATEGIC)
                assert denied.value.code == 403, verb
                assert denied.value.reason == "Forbidden"
                assert denied.value.message == f'pods "theirs" is forbidden: {DENIED}'
            # Its own node's pod: allowed by RBAC and by the policy.
            await agent.patch(f"{PODS}/mine/status", patch, content_type=STRATEGIC)
            deleted = await agent.delete(f"{PODS}/mine")
            assert deleted["metadata"]["deletionTimestamp"]
        theirs = await admin.get(f"{PODS}/theirs")
        assert "deletionTimestamp" not in theirs["metadata"]
        assert not [c for c in theirs["status"].get("conditions") or [] if c["type"] == "PodImageReady"]
        # A token without a node (`kubectl create token`): the agent's ServiceAccount may change no pod at all.
        async with await KubeClient.connect(identities.agent, TIMEOUTS) as unbound:
            with pytest.raises(KubeError) as denied:
                await unbound.delete(f"{PODS}/theirs")
            assert denied.value.code == 403 and DENIED in denied.value.message


async def test_the_agent_works_under_the_policy(sim_factory: SimFactory, tmp_path: Path, rbac_dir: Path) -> None:
    """Its image pre-pull (a pods/status patch) and its upgrade (a delete) of its own node's pod pass the policy."""
    sim = await rbac_sim(sim_factory)
    await deploy_identities(sim, DOCS, rbac_dir)
    async with admin_of(sim) as admin:
        kubeconfig = await _agent_token_bound_to_its_pod(sim, admin, rbac_dir)
    await agent_scenario(sim, kubeconfig, tmp_path / "state")
