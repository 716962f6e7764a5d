"""bash completion of DaemonSet names (from the cluster the command line names) and of `-o` values."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.support.fleet_scenario import NS, manifest

BIN = str(Path(sys.executable).parent)


async def complete(*words: str) -> list[str]:
    """What bash offers for the last word of `words`, with the script `edgeagent completion bash` prints."""
    script = await asyncio.create_subprocess_exec(f"{BIN}/edgeagent", "completion", "bash",
                                                  stdout=asyncio.subprocess.PIPE)
    text, _ = await script.communicate()
    probe = text.decode() + """
COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
COMPREPLY=(); _shtab_edgeagent; printf '%s\\n' "${COMPREPLY[@]}"
"""
    proc = await asyncio.create_subprocess_exec("bash", "-c", probe, "bash", *words, stdout=asyncio.subprocess.PIPE,
                                                env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return [line for line in out.decode().splitlines() if line]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
async def test_bash_completes_daemonset_names_and_output_formats(sim: SimCluster, admin: KubeClient) -> None:
    await admin.create(f"/apis/apps/v1/namespaces/{NS}/daemonsets", manifest("web"))
    await admin.create(f"/apis/apps/v1/namespaces/{NS}/daemonsets", manifest("worker"))
    await admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    other = manifest("db")
    other["metadata"]["namespace"] = "other"
    await admin.create("/apis/apps/v1/namespaces/other/daemonsets", other)
    kubeconfig = str(sim.admin_kubeconfig)

    assert await complete("edgeagent", "rollout", "status", "--kubeconfig", kubeconfig, "w") == ["web", "worker"]
    assert await complete("edgeagent", "rollout", "promote", "--kubeconfig", kubeconfig, "-n", "other", "") == ["db"]
    assert await complete("edgeagent", "fleet", "--kubeconfig", kubeconfig, "no") == ["nodes"]
    assert await complete("edgeagent", "fleet", "nodes", "--kubeconfig", kubeconfig, "wo") == ["worker"]
    assert await complete("edgeagent", "fleet", "-o", "") == ["wide", "json", "name"]
