"""`kubectl edgeagent ...`: the package installs a `kubectl-edgeagent` executable, which the real kubectl (1.32)
finds on PATH and runs as a plugin (issue 35): the same commands, the same output, KUBECONFIG honoured."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.integration.rollout_cli.conftest import edgeagent
from tests.support.fleet_scenario import live_pods, manifest
from tests.support.kubectl import KUBECTL
from tests.support.rolloutplan_crd import create_plan, install_crd, read_plan
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (needed for the kubectl e2e tests)"),
]

BIN = Path(sys.executable).parent


def plugin_env(kubeconfig: Path) -> dict[str, str]:
    """PATH with the venv's bin (where pip put kubectl-edgeagent) and kubectl's directory, nothing else."""
    assert KUBECTL is not None
    return {"PATH": f"{BIN}{os.pathsep}{Path(KUBECTL).parent}", "KUBECONFIG": str(kubeconfig),
            "HOME": os.environ.get("HOME", "/tmp")}


async def test_kubectl_edgeagent_is_a_plugin(sim: SimCluster) -> None:
    assert (BIN / "kubectl-edgeagent").is_file() and os.access(BIN / "kubectl-edgeagent", os.X_OK)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await install_crd(admin)
        await admin.create("/apis/apps/v1/namespaces/default/daemonsets", manifest())
        await eventually(lambda: _three(admin), timeout=30, what="3 web pods")
        await create_plan(admin)
        env = plugin_env(sim.admin_kubeconfig)
        listed = await edgeagent("plugin", "list", program=(str(KUBECTL),), env=env)
        assert f"{BIN}/kubectl-edgeagent" in listed.out, listed.out + listed.err

        by_plugin = await edgeagent("edgeagent", "rollout", "status", "web", program=(str(KUBECTL),), env=env)
        direct = await edgeagent("rollout", "status", "web", "--kubeconfig", str(sim.admin_kubeconfig))
        assert by_plugin.code == direct.code == 0, by_plugin.err
        assert by_plugin.out.splitlines()[:2] == direct.out.splitlines()[:2]
        assert by_plugin.out.splitlines()[0].startswith("DaemonSet default/web: OTA, revision ")

        ran = await edgeagent("edgeagent", "rollout", "pause", "web", program=(str(KUBECTL),), env=env)
        assert (ran.code, ran.out) == (0, 'rolloutplan "web" in namespace "default" paused (spec.paused: true): '
                                          "no pod moves and no wave starts until resumed\n"), ran.err
        assert (await read_plan(admin, "web"))["spec"]["paused"] is True


async def _three(admin: KubeClient) -> bool:
    return len(await live_pods(admin)) == 3

