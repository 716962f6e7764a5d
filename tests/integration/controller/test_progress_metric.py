"""`edgeagent_controller_rollout_nodes` for OTA DaemonSets: the fleet dashboard's progress panel draws both models
from this one series, so an OTA DaemonSet must report it too."""

from __future__ import annotations

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    NS,
    Controllers,
    all_running,
    create_daemonset,
    current_hash,
    daemonset_manifest,
    set_image,
)
from tests.support.waiting import eventually


def _nodes(app_metrics: bytes, daemonset: str) -> dict[str, float]:
    """The state series, and `desired` from its own gauge (issue 38 item 12: a `total` state beside its parts
    made `sum by (state)` count every node twice)."""
    found: dict[str, float] = {}
    desired = f'edgeagent_controller_rollout_desired_nodes{{daemonset="{daemonset}",namespace="{NS}"}} '
    for line in app_metrics.decode().splitlines():
        prefix = f'edgeagent_controller_rollout_nodes{{daemonset="{daemonset}",namespace="{NS}",state="'
        if line.startswith(prefix):
            state, value = line[len(prefix):].split('"} ')
            found[state] = float(value)
        elif line.startswith(desired):
            found["desired"] = float(line[len(desired):])
    return found


async def test_ota_daemonset_reports_updated_and_outdated_nodes(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    await create_daemonset(admin, daemonset_manifest("nginx", strategy="OTA"))
    await eventually(lambda: all_running(admin, "nginx", 3), what="3 pods running")
    app = await controllers.start(sim)
    first = await eventually(lambda: current_hash(admin, "nginx"), what="first revision")

    async def counts(expected: dict[str, float]) -> bool:
        return _nodes(app.metrics.render()[0], "nginx") == expected

    await eventually(lambda: counts({"desired": 3, "updated": 3, "outdated": 0, "unavailable": 0}),
                     what="3 of 3 nodes up to date")
    await set_image(admin, "nginx", "nginx:1.19.5")

    async def new_hash() -> str | None:
        found = await current_hash(admin, "nginx")
        return found if found != first else None

    await eventually(new_hash, what="second revision")
    await eventually(lambda: counts({"desired": 3, "updated": 0, "outdated": 3, "unavailable": 0}),
                     what="3 of 3 nodes outdated after the template change")
