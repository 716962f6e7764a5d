"""Audit addition (issue 4 Scope: `--lease-namespace NS`): the controller holds its Lease in the namespace it
is given, so two deployments in different namespaces do not fight over one Lease."""

from __future__ import annotations

from edgeagent.kube.client import KubeClient, KubeError
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import Controllers
from tests.support.waiting import eventually

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/edgeagent-controller"


async def test_lease_lives_in_the_configured_namespace(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    await admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "edge-system"}})
    app = await controllers.start(sim, leader_elect=True, lease_namespace="edge-system")
    await eventually(lambda: app.is_leader, what="leader")
    lease = await admin.get(LEASES.format(ns="edge-system"))
    assert lease["spec"]["holderIdentity"] == app.identity
    try:
        await admin.get(LEASES.format(ns="kube-system"))
    except KubeError as exc:
        assert exc.code == 404
    else:
        raise AssertionError("a Lease was also written to kube-system")


async def test_default_lease_namespace_is_the_one_deploy_grants(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    """Issue 14.5: without `--lease-namespace` (and outside a cluster) the Lease goes to edgeagent-system, where
    deploy/controller-rbac.yaml grants Leases; the old kube-system default never became leader there."""
    await admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "edgeagent-system"}})
    app = await controllers.start(sim, leader_elect=True, lease_namespace="")  # "": the flag's default
    await eventually(lambda: app.is_leader, what="leader")
    lease = await admin.get(LEASES.format(ns="edgeagent-system"))
    assert lease["spec"]["holderIdentity"] == app.identity
