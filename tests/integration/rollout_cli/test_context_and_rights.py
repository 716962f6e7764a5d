"""Every command that talks to the cluster honours the kubeconfig context's namespace and `--context` (as kubectl
does), and the rollout verbs need only patch on rolloutplans (issue 35): the CLI never writes a plan's status."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from edgeagent.fleet.dashboard import serve
from edgeagent.fleet.settings import DashboardConfig
from edgeagent.kube.client import KubeClient
from edgeagent.kube.errors import Forbidden
from edgeagent.rollout.steer import ANNOTATION_STEER, plan_path
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.rollout_cli.conftest import World, edgeagent
from tests.support.fleet_scenario import manifest
from tests.support.identities import identity_kubeconfig, mint_token
from tests.support.rolloutplan_crd import create_plan, install_crd, read_plan, status, write_status
from tests.support.waiting import eventually

JSON = dict[str, Any]
REV = "5b4499c6c8"
DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port: a context that cannot work


def contexts_kubeconfig(sim: SimCluster, path: Path) -> Path:
    """The admin's kubeconfig with three contexts: `prod` (namespace prod, the current one), `dev` (namespace
    dev) and `dead` (a server nobody answers on)."""
    doc = yaml.safe_load(sim.admin_kubeconfig.read_text())
    doc["clusters"].append({"name": "dead", "cluster": {"server": DEAD}})
    doc["contexts"] = [{"name": "prod", "context": {"cluster": "sim", "user": "admin", "namespace": "prod"}},
                       {"name": "dev", "context": {"cluster": "sim", "user": "admin", "namespace": "dev"}},
                       {"name": "dead", "context": {"cluster": "dead", "user": "admin"}}]
    doc["current-context"] = "prod"
    path.write_text(yaml.safe_dump(doc))
    return path


async def namespaced_plans(admin: KubeClient) -> None:
    for ns in ("prod", "dev"):
        await admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        await create_plan(admin, namespace=ns)
        await write_status(admin, "web", status(REV), namespace=ns)


async def test_verbs_act_in_the_contexts_namespace_or_the_one_named(world: World, tmp_path: Path) -> None:
    await namespaced_plans(world.admin)
    kubeconfig = str(contexts_kubeconfig(world.sim, tmp_path / "contexts.kubeconfig"))

    ran = await edgeagent("rollout", "pause", "web", "--kubeconfig", kubeconfig)
    assert ran.code == 0, ran.err
    assert ran.out.startswith('rolloutplan "web" in namespace "prod" paused')
    assert (await read_plan(world.admin, "web", "prod"))["spec"]["paused"] is True
    assert (await read_plan(world.admin, "web", "dev"))["spec"].get("paused") is not True

    ran = await edgeagent("rollout", "promote", "web", "--kubeconfig", kubeconfig, "--context", "dev")
    assert ran.code == 0, ran.err
    assert ANNOTATION_STEER in (await read_plan(world.admin, "web", "dev"))["metadata"]["annotations"]
    assert ANNOTATION_STEER not in ((await read_plan(world.admin, "web", "prod"))["metadata"].get("annotations")
                                    or {})

    ran = await edgeagent("rollout", "history", "web", "--kubeconfig", kubeconfig, "-n", "default")
    assert (ran.code, ran.err) == (1, 'edgeagent: error: daemonset "web" not found in namespace "default"\n')

    ran = await edgeagent("rollout", "pause", "web", "--kubeconfig", kubeconfig, "--context", "nope")
    assert ran.code == 1 and ran.err.count("\n") == 1
    assert "context 'nope' not found in 'contexts'" in ran.err


async def test_fleet_and_the_dashboard_use_the_context(sim_factory: SimFactory, tmp_path: Path) -> None:
    sim = await sim_factory(nodes=2)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await install_crd(admin)
        await namespaced_plans(admin)
        ds = manifest()
        ds["metadata"]["namespace"] = "prod"
        await admin.create("/apis/apps/v1/namespaces/prod/daemonsets", ds)
    kubeconfig = contexts_kubeconfig(sim, tmp_path / "contexts.kubeconfig")

    async def listed() -> JSON | None:
        ran = await edgeagent("fleet", "-o", "json", "--kubeconfig", str(kubeconfig))
        assert ran.code == 0, ran.err
        items = json.loads(ran.out)["items"]
        return dict(items[0]) if items and items[0]["nodes"] == 2 else None

    item = await eventually(listed, timeout=30, what="web's pods in prod")
    assert (item["namespace"], item["name"]) == ("prod", "web")
    ran = await edgeagent("fleet", "nodes", "web", "-o", "json", "--kubeconfig", str(kubeconfig))
    assert ran.code == 0, ran.err and len(json.loads(ran.out)["items"]) == 2
    ran = await edgeagent("fleet", "-o", "json", "--kubeconfig", str(kubeconfig), "--context", "dev")
    assert ran.code == 0 and json.loads(ran.out)["items"] == []
    ran = await edgeagent("rollout", "status", "web", "--kubeconfig", str(kubeconfig))
    assert ran.code == 0, ran.err  # every node up to date (the plan's status is about another revision)
    assert ran.out.startswith("DaemonSet prod/web: OTA")

    # The current context cannot work; --context picks one that does, for the dashboard too.
    dead = yaml.safe_load(kubeconfig.read_text())
    dead["current-context"] = "dead"
    kubeconfig.write_text(yaml.safe_dump(dead))
    ran = await edgeagent("fleet", "--kubeconfig", str(kubeconfig))
    assert ran.code == 1 and "cannot reach the API server" in ran.err
    stop = asyncio.Event()
    url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    cfg = DashboardConfig(kubeconfig=kubeconfig, bind="127.0.0.1", port=0, context="prod")
    task = asyncio.create_task(serve(cfg, ready=url.set_result, stop=stop))
    try:
        base = await asyncio.wait_for(asyncio.shield(url), 20)

        async def shown() -> JSON | None:
            async with aiohttp.ClientSession() as session, session.get(base + "api/snapshot") as response:
                snapshot = dict(await response.json())
            return snapshot if [d["k"] for d in snapshot["daemonsets"]] == ["prod/web"] else None

        await eventually(shown, timeout=30, what="the dashboard to show prod/web through --context prod")
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


OPERATOR_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "rollout-operator"},
    "rules": [{"apiGroups": ["edgeagent.io"], "resources": ["rolloutplans"],
               "verbs": ["get", "list", "watch", "update", "patch"]}],
}


async def test_an_operator_with_patch_on_rolloutplans_only_steers(sim_factory: SimFactory, tmp_path: Path) -> None:
    """A role with read and update/patch on `rolloutplans` (not `rolloutplans/status`, nothing else): every
    verb works, so none writes the status (which that role is refused)."""
    sim = await sim_factory(nodes=1, authorization="rbac")
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await install_crd(admin)
        await create_plan(admin, onFailure="Rollback")
        history = [{"revision": "6f4c69dbb4", "images": ["nginx:1.25"], "phase": "Complete"}]
        await write_status(admin, "web", status(REV, stableRevision="6f4c69dbb4", history=history))
        await admin.create("/api/v1/namespaces/default/serviceaccounts",
                           {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator"}})
        await admin.create("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", OPERATOR_ROLE)
        await admin.create("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "operator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rollout-operator"},
            "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": "default"}]})
        token = await mint_token(admin, "operator", "default")
        assert sim.tls is not None
        kubeconfig = str(identity_kubeconfig(tmp_path / "operator.kubeconfig", sim.url, token, sim.tls.ca_file))

        async def handled() -> None:
            plan = await read_plan(admin, "web")
            request = json.loads(plan["metadata"]["annotations"][ANNOTATION_STEER])
            await write_status(admin, "web", {"steer": {"id": request["id"], "verb": request["verb"],
                                                        "result": "Done", "message": ""}})

        for verb in ("pause", "resume", "promote", "abort", "undo"):
            ran = await edgeagent("rollout", verb, "web", "--kubeconfig", kubeconfig)
            assert ran.code == 0, (verb, ran.err)
            if verb not in ("pause", "resume"):
                await handled()
        ran = await edgeagent("rollout", "history", "web", "--kubeconfig", kubeconfig)
        assert ran.code == 0, ran.err
        # The same identity may not write the status: the verbs above did not need to.
        async with await KubeClient.connect(kubeconfig) as operator:
            try:
                await operator.patch(f"{plan_path('default', 'web')}/status", {"status": {"phase": "Complete"}},
                                     "application/merge-patch+json")
            except Forbidden:
                pass
            else:
                raise AssertionError("the operator role wrote rolloutplans/status")
