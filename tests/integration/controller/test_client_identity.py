"""Issue 14.6: the controller's calls are audited as `edgeagent-controller/<version>`, its deletes typed."""

from __future__ import annotations

from edgeagent import __version__
from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    daemonset_manifest,
    set_image,
)
from tests.support.waiting import eventually

CONTROLLER_UA = f"edgeagent-controller/{__version__}"


async def test_controller_calls_name_the_controller_and_deletes_are_typed(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await controllers.start(sim)
    manifest = daemonset_manifest("web", strategy="AdvancedRollingUpdate",
                                  annotations={"apps.openyurt.io/max-unavailable": "100%"})
    await create_daemonset(admin, manifest)
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    await set_image(admin, "web", "nginx:1.20")

    def controller_deletes() -> list[dict[str, object]]:
        return [e for e in sim.audit.find("DELETE", "/api/v1/namespaces/default/pods/")
                if e["userAgent"] == CONTROLLER_UA]

    deletes = await eventually(controller_deletes, what="the controller's deletions")
    assert all(d["requestObject"] == {"apiVersion": "v1", "kind": "DeleteOptions"} for d in deletes)
    watches = [e for e in sim.audit.find("GET", "/apis/apps/v1/daemonsets") if "watch=" in str(e["query"])]
    assert watches and {e["userAgent"] for e in watches} == {CONTROLLER_UA}
