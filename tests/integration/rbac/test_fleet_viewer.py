"""The fleet views with a viewer's rights: list and watch only (issue 36).

On a sim in `--authorization rbac`, a ServiceAccount bound to the ClusterRole docs/fleet.md shows (read from
the doc, so the doc stays true) runs `fleet`, `fleet nodes DS` and the dashboard over the mixed fleet, and
gets the same answers as the admin. A role without `pods` gets a 403 that names the missing permission and
never reads as rejected credentials.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.fleet.test_fleet_command import fleet
from tests.support.dashboard_server import dashboard
from tests.support.fleet_scenario import EXPECTED, NODES, mixed_fleet
from tests.support.identities import identity_kubeconfig, mint_token
from tests.support.waiting import eventually

JSON = dict[str, Any]
DOC = Path(__file__).resolve().parents[3] / "docs" / "fleet.md"
NS = "default"


def viewer_role() -> JSON:
    (block,) = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    role = yaml.safe_load(block)
    assert role["kind"] == "ClusterRole"
    return dict(role)


async def viewer(sim: SimCluster, admin: KubeClient, tmp_path: Path, name: str, role: JSON) -> Path:
    """A ServiceAccount bound to `role` at cluster scope, and a kubeconfig with its token."""
    role = copy.deepcopy(role)
    role["metadata"]["name"] = name
    await admin.create(f"/api/v1/namespaces/{NS}/serviceaccounts",
                       {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
    await admin.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    await admin.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]})
    token = await mint_token(admin, name, NS)
    assert sim.tls is not None  # rbac mode serves TLS
    return identity_kubeconfig(tmp_path / f"{name}.kubeconfig", sim.url, token, sim.tls.ca_file)


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def test_fleet_fleet_nodes_and_the_dashboard_work_with_list_and_watch_only(sim_factory: SimFactory,
                                                                              tmp_path: Path) -> None:
    sim = await sim_factory(node_names=NODES, authorization="rbac")
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await mixed_fleet(sim, admin)
        kubeconfig = await viewer(sim, admin, tmp_path, "fleet-viewer", viewer_role())
        blind = viewer_role()
        for rule in blind["rules"]:
            rule["resources"] = [r for r in rule["resources"] if r != "pods"]
        no_pods = await viewer(sim, admin, tmp_path, "no-pods", blind)
        leaseless = viewer_role()
        leaseless["rules"] = [r for r in leaseless["rules"] if "leases" not in r["resources"]]
        no_leases = await viewer(sim, admin, tmp_path, "no-leases", leaseless)
    expected = dict(Counter(EXPECTED.values()))

    code, out, err = await fleet("-o", "json", "--kubeconfig", str(kubeconfig))
    assert code == 0, err
    assert {k: v for k, v in json.loads(out)["items"][0]["states"].items() if v} == expected

    code, out, err = await fleet("nodes", "web", "-o", "json", "--kubeconfig", str(kubeconfig))
    assert code == 0, err
    items = json.loads(out)["items"]
    assert {n["node"]: n["state"] for n in items} == EXPECTED
    assert all(n["lastSeen"] for n in items)  # the Leases are listed too

    code, out, err = await fleet("nodes", "web", "--kubeconfig", str(no_pods))
    assert (code, out) == (1, "")
    assert err == (f'edgeagent: error: not allowed to list pods in namespace "{NS}": the API server accepted your '
                   "credentials but refused this (403): " + err.split("(403): ", 1)[1])
    assert "rejected" not in err and err.count("\n") == 1

    # Without the Leases the states are the same; LAST SEEN is unknown, and a warning names the permission.
    code, out, err = await fleet("nodes", "web", "-o", "json", "--kubeconfig", str(no_leases))
    assert code == 0, err
    assert {n["node"]: (n["state"], n["lastSeen"]) for n in json.loads(out)["items"]} == \
        {node: (state, None) for node, state in EXPECTED.items()}
    assert err.startswith('edgeagent: warning: LAST SEEN unknown: not allowed to list leases.coordination.k8s.io '
                          'in namespace "kube-node-lease"') and err.count("\n") == 1

    async with dashboard(kubeconfig) as url:
        async def settled() -> JSON | None:
            snapshot: JSON = await get_json(url + "api/snapshot")
            ok = snapshot["health"]["state"] == "ok" and len(snapshot["nodes"]) == len(NODES)
            return snapshot if ok and snapshot["daemonsets"] else None

        snapshot = await eventually(settled, timeout=30, what="the viewer's dashboard live")
        assert sum(snapshot["daemonsets"][0]["s"]) == len(NODES)
        detail = await get_json(url + "api/nodes/edge-1")
        assert detail["lastSeen"] and detail["state"] == "held"

    async with dashboard(no_pods) as url:
        async def forbidden() -> JSON | None:
            health: JSON = (await get_json(url + "api/snapshot"))["health"]
            return health if health["state"] == "forbidden" else None

        health = await eventually(forbidden, timeout=30, what="the dashboard to name the missing permission")
        assert "list and watch pods at cluster scope" in health["problem"]
        assert "accepted the credentials" in health["problem"]

    # Not one `get` of a single object by either viewer: every request was a list or a watch of a collection.
    # (Only the viewers ran `fleet` and the dashboard here: their user agents mark their requests.)
    collections = {"daemonsets", "controllerrevisions", "pods", "nodes", "events", "leases", "rolloutplans"}
    theirs = [e for e in sim.audit.entries if str(e["userAgent"]).startswith(("edgeagent-fleet/",
                                                                             "edgeagent-dashboard/"))]
    assert len(theirs) > 10
    for entry in theirs:
        assert entry["verb"] == "GET" and str(entry["path"]).rsplit("/", 1)[-1] in collections, entry
