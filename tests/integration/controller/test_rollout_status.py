"""`edgeagent rollout status` against the simulated cluster (main() run in a thread, as the CLI runs it)."""

from __future__ import annotations

import asyncio
import io

import pytest

from edgeagent.cli import main as cli_main
from edgeagent.config import RolloutConfig
from edgeagent.kube.client import KubeClient
from edgeagent.rollout import command as rollout
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    create_daemonset,
    daemonset_manifest,
    node_ready,
    set_image,
)
from tests.support.waiting import eventually


async def status(sim: SimCluster, name: str = "web", **kw: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    cfg = RolloutConfig(daemonset=name, namespace="default", kubeconfig=sim.admin_kubeconfig, **kw)  # type: ignore[arg-type]
    code = await asyncio.to_thread(rollout.main, cfg, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_status_shows_each_node_and_exits_0_only_when_complete(
    sim: SimCluster, admin: KubeClient, controllers: Controllers
) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate"))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    await sim.disconnect("edge-3")
    await eventually(lambda: _not_ready(admin, "edge-3"), what="edge-3 NotReady")
    await set_image(admin, "web", "nginx:2")

    code, out, _ = await status(sim)
    assert code == 3  # in progress, not an error
    assert "edge-3  offline" in out and "upgrading" in out
    assert out.rstrip().endswith("rollout in progress")

    await controllers.start(sim)
    await sim.connect("edge-3")
    code, out, _ = await status(sim, watch=True, timeout=20.0)
    assert code == 0, out
    assert out.rstrip().endswith("rollout complete")
    assert "3 node(s): 3 up to date\n" in out


async def test_watch_gives_up_at_the_timeout(sim: SimCluster, admin: KubeClient) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate"))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    await set_image(admin, "web", "nginx:2")  # no controller runs: the roll cannot finish
    code, out, _ = await status(sim, watch=True, timeout=0.5)
    assert code == 3
    assert "timed out after 0.5s" in out


async def test_unknown_daemonset_is_one_clear_error(sim: SimCluster) -> None:
    code, out, err = await status(sim, "nope")
    assert code == 1 and out == ""
    assert err == 'edgeagent: error: daemonset "nope" not found in namespace "default"\n'


async def test_cli_dispatches_to_rollout_status(sim: SimCluster, admin: KubeClient) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="OTA"))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    argv = ["rollout", "status", "web", "-n", "default", "--kubeconfig", str(sim.admin_kubeconfig)]
    code = await asyncio.to_thread(cli_main, argv)
    assert code == 0


async def test_kubectl_form_ds_slash_name_reads_the_same_daemonset(
        sim: SimCluster, admin: KubeClient, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38 item 7: `rollout status ds/NAME` (kubectl's form) is NAME."""
    await create_daemonset(admin, daemonset_manifest("web", strategy="OTA"))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    outputs = []
    for name in ("web", "ds/web", "daemonset.apps/web"):
        argv = ["rollout", "status", name, "--kubeconfig", str(sim.admin_kubeconfig)]
        assert await asyncio.to_thread(cli_main, argv) == 0
        out = capsys.readouterr().out  # (the in-process sim logs here too: the status is its last part)
        assert "DaemonSet default/web:" in out
        outputs.append(out[out.index("DaemonSet default/web:"):])
    assert outputs[1] == outputs[0] == outputs[2]


async def _not_ready(kube: KubeClient, node: str) -> bool:
    return not await node_ready(kube, node)
