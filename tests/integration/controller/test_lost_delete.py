"""A DELETE whose answer was lost (a 503 from an overloaded API server) does not stall the roll for good.

Found by the soak (issue 23): the controller waits a while for the cache to show a deletion whose outcome it
could not know (a repeat could delete twice), but nothing woke it when that wait ended: a delete that never
happened brings no event, so with every pod steady the DaemonSet stayed at 0 up to date until something
unrelated touched it. Now the reconcile is queued for the moment the wait ends. Slow: that wait is 30 s.
"""

from __future__ import annotations

import aiohttp
import pytest

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

OLD, NEW = "nginx:1.19.4", "nginx:1.20"


@pytest.mark.slow(seconds=30)
@pytest.mark.timeout(180)
async def test_a_refused_delete_of_unknown_outcome_is_retried_after_the_wait(
        sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=OLD,
                                                     annotations={"apps.openyurt.io/max-unavailable": "1"}))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    async with aiohttp.ClientSession() as http, http.post(f"{sim.url}/sim/v1/faults", json={
            "codes": [503], "durationSeconds": 3, "verbs": ["DELETE"], "path": "/api/v1/namespaces/default/pods/",
            "userAgent": "edgeagent-controller/"}) as resp:
        assert resp.status == 201
    await controllers.start(sim)
    await set_image(admin, "web", NEW)
    await eventually(lambda: [e for e in sim.audit.find("DELETE", "/api/v1/namespaces/default/pods/")
                              if e.get("code") == 503], timeout=10, what="a DELETE refused with 503")
    # Nothing else changes from here on: only the controller's own wake-up can finish the roll.
    await eventually(lambda: all_running(admin, "web", 3, NEW), timeout=90, interval=0.5,
                     what="the roll finished after the lost delete")
