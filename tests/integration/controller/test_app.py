"""The controller process surface: metrics and health endpoints, start-up errors, exit codes."""

from __future__ import annotations

import gc
from pathlib import Path

import aiohttp
import pytest

from edgeagent.config import ControllerConfig
from edgeagent.controller.app import ControllerApp, ControllerError
from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    daemonset_manifest,
    set_image,
)
from tests.support.gc_watch import collections, heavy_step, tracked
from tests.support.waiting import eventually


async def test_metrics_and_health_endpoints(sim: SimCluster, admin: KubeClient, controllers: Controllers) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate"))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    app = await controllers.start(sim, serve_metrics=True)
    assert app.metrics_port
    base = f"http://127.0.0.1:{app.metrics_port}"
    await set_image(admin, "web", "nginx:2")
    await eventually(lambda: all_running(admin, "web", 3, "nginx:2"), timeout=10, what="roll done")
    async with aiohttp.ClientSession() as http:
        for path in ("/healthz", "/v1/healthz", "/readyz", "/v1/readyz"):
            async with http.get(base + path) as response:
                assert response.status == 200, path
        async with http.get(base + "/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
    assert 'edgeagent_controller_api_writes_total{kind="pod_delete"} 3.0' in text
    assert 'edgeagent_controller_rollout_nodes{daemonset="web",namespace="default",state="updated"} 3.0' in text
    assert "edgeagent_controller_leader 1.0" in text


async def test_missing_kubeconfig_is_a_clear_start_up_error(tmp_path: Path) -> None:
    missing = tmp_path / "absent.kubeconfig"
    with pytest.raises(ControllerError) as caught:
        await ControllerApp(ControllerConfig(kubeconfig=missing, metrics_port=0)).run()
    assert str(caught.value) == f"kubeconfig not found: {missing}"
    assert caught.value.exit_code == 2  # like a missing --token-file (issue 22 item 7)


async def test_a_running_controller_does_full_collections_between_steps_only(
        sim: SimCluster, controllers: Controllers) -> None:
    """At 100,000 nodes a full collection takes a second; the controller's own task does them (gc_schedule.py),
    never CPython in the middle of a planning step, and gives the collector back when it stops."""
    before = gc.get_threshold()
    app = await controllers.start(sim)
    with collections() as seen:
        kept = heavy_step()
    assert 2 not in seen.seen, seen.seen
    with collections() as later:
        await eventually(lambda: 2 in later.seen, what="the controller's full collection, after the step")
    assert not tracked(kept)
    await controllers.stop(app)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
