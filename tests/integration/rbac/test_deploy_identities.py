"""deploy/'s RBAC is exactly enough: every call succeeds with it, and each grant in it is needed by some call.

The grants are read from deploy/ at collection time, so a rule someone adds is checked without editing this
file; its call must be made by the scenarios in conftest.py, or the rule-drop case for it fails as unexercised.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from edgeagent.aio import cancel_and_wait
from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.rbac.conftest import (
    NODE,
    admin_of,
    agent_scenario,
    controller_scenario,
    deploy_identities,
    rbac_sim,
)
from tests.support.identities import (
    AGENT_SA,
    AGENT_USER,
    CONTROLLER_USER,
    NAMESPACE,
    RuleAtom,
    identity_kubeconfig,
    load_deploy,
    mint_token,
    rule_atoms,
    without,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
DOCS = load_deploy()
ATOMS = rule_atoms(DOCS)


def denials(sim: SimCluster) -> list[JSON]:
    assert sim.auth is not None
    return list(sim.auth.denials)


async def test_agent_makes_every_call_with_exactly_the_deploy_rules(
        sim_factory: SimFactory, tmp_path: Path, rbac_dir: Path) -> None:
    sim = await rbac_sim(sim_factory)
    identities = await deploy_identities(sim, DOCS, rbac_dir)
    await agent_scenario(sim, identities.agent, tmp_path / "state")
    assert denials(sim) == []


async def test_controller_makes_every_call_with_exactly_the_deploy_rules(
        sim_factory: SimFactory, rbac_dir: Path) -> None:
    sim = await rbac_sim(sim_factory)
    identities = await deploy_identities(sim, DOCS, rbac_dir)
    await controller_scenario(sim, identities.controller, identities.args)
    assert denials(sim) == []


async def test_agent_works_with_the_node_identity(sim_factory: SimFactory, tmp_path: Path) -> None:
    """The kubelet-credential install: `system:node:edge-1`, confined by the Node authorizer and NodeRestriction.
    A node may not read DaemonSets: the plan pod's DaemonSet read is refused and the agent upgrades on
    PodNeedUpgrade alone, as documented (the scenario's upgrade still answers 200)."""
    sim = await rbac_sim(sim_factory)
    await agent_scenario(sim, sim.node_kubeconfig(NODE), tmp_path / "state")
    assert [(d["verb"], d["resource"]) for d in denials(sim)] == [("get", "daemonsets")]


def test_every_role_of_deploy_is_bound_to_a_component_the_tests_run() -> None:
    assert ATOMS, "no Role or ClusterRole found in deploy/"
    unbound = [a.id for a in ATOMS if not {AGENT_USER, CONTROLLER_USER} & set(a.subjects)]
    assert unbound == []


# Each case starts its own rbac-mode sim, applies deploy/ minus one grant and runs the scenario of the identity
# holding it only until the sim records the 403 for it: well under a second per grant (about 8 s for 21).
@pytest.mark.parametrize("atom", [pytest.param(a, id=a.id) for a in ATOMS])
async def test_dropping_any_deploy_rule_makes_a_call_fail_with_403(
        atom: RuleAtom, sim_factory: SimFactory, tmp_path: Path, rbac_dir: Path) -> None:
    sim = await rbac_sim(sim_factory)
    identities = await deploy_identities(sim, without(DOCS, atom), rbac_dir)
    if AGENT_USER in atom.subjects:
        task = asyncio.create_task(agent_scenario(sim, identities.agent, tmp_path / "state"))
    else:
        task = asyncio.create_task(controller_scenario(sim, identities.controller, identities.args))
    found: JSON | None = None
    deadline = time.monotonic() + 60
    try:
        while found is None and not task.done() and time.monotonic() < deadline:
            found = next((d for d in denials(sim) if atom.matches(d)), None)
            if found is None:
                await asyncio.sleep(0.05)
        found = found or next((d for d in denials(sim) if atom.matches(d)), None)
    finally:
        await cancel_and_wait(task)
    failure = task.exception() if task.done() and not task.cancelled() else None
    assert found is not None, (
        f"without {atom.id} no call was refused (scenario {'failed: ' + repr(failure) if failure else 'passed'}; "
        f"denials: {denials(sim)}). If the grant is new, make the call in tests/integration/rbac/conftest.py's "
        f"scenario; if nothing makes it, drop the grant from deploy/.")
    user = AGENT_USER if AGENT_USER in atom.subjects else CONTROLLER_USER
    assert f'User "{user}" cannot {atom.verb} resource "{found["resource"]}"' in found["message"]


async def test_agent_works_with_the_token_the_daemonset_pod_gets(
        sim_factory: SimFactory, tmp_path: Path, rbac_dir: Path) -> None:
    """The DaemonSet install's credential: the agent ServiceAccount's token bound to the agent pod on its node
    (what the kubelet projects), which carries the node name deploy/k8s-1.30's admission policy checks."""
    sim = await rbac_sim(sim_factory)
    await deploy_identities(sim, DOCS, rbac_dir)
    async with admin_of(sim) as admin:

        async def agent_pod() -> JSON | None:
            pods = (await admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods",
                                    query={"fieldSelector": f"spec.nodeName={NODE}"}))["items"]
            return pods[0] if pods else None

        pod = await eventually(agent_pod, what="deploy/'s agent DaemonSet pod on the node")
        token = await mint_token(admin, AGENT_SA, bound_pod=pod)
        assert sim.tls is not None
        kubeconfig = identity_kubeconfig(rbac_dir / "bound.kubeconfig", sim.node_url(NODE), token, sim.tls.ca_file)
    async with await KubeClient.connect(kubeconfig) as agent_client:
        review = await agent_client.create("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                           {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["extra"]["authentication.kubernetes.io/node-name"] == [NODE]
    await agent_scenario(sim, kubeconfig, tmp_path / "state")
    assert denials(sim) == []
