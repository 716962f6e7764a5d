"""Two `edgeagent controller --leader-elect` processes: only the Lease holder acts; SIGKILL it (no release,
no goodbye) and the other takes over once the lease expires, then finishes the next roll."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import (
    all_running,
    create_daemonset,
    daemonset_manifest,
    events_for,
    set_image,
)
from tests.support.waiting import eventually

LEASE = "/apis/coordination.k8s.io/v1/namespaces/edgeagent-system/leases/edgeagent-controller"
LEASE_SECONDS = 2


@contextlib.asynccontextmanager
async def controller_process(sim: SimCluster, identity: str, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    args = [sys.executable, "-m", "edgeagent.cli", "controller", "--kubeconfig", str(sim.admin_kubeconfig),
            "--leader-elect", "--identity", identity, "--lease-duration", str(LEASE_SECONDS),
            "--metrics-port", "0", "--log-format", "json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEAGENT_")}
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(*args, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def holder(kube: KubeClient) -> str:
    try:
        return str((await kube.get(LEASE))["spec"].get("holderIdentity") or "")
    except Exception:
        return ""


async def reporters(kube: KubeClient, name: str) -> set[str]:
    return {str(e.get("reportingInstance")) for e in await events_for(kube, name) if e["reason"] == "UpgradingPods"}


@pytest.mark.slow
async def test_killed_leader_is_replaced_by_the_standby(sim: SimCluster, admin: KubeClient, tmp_path: Path) -> None:
    annotations = {"apps.openyurt.io/max-unavailable": "100%"}
    # The controllers run without --lease-namespace: the default is deploy/'s namespace (issue 14.5).
    await admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "edgeagent-system"}})
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", annotations=annotations))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    async with (
        controller_process(sim, "ctl-a", tmp_path / "a.log") as a,
        controller_process(sim, "ctl-b", tmp_path / "b.log") as b,
    ):
        first = await eventually(lambda: holder(admin), timeout=15, what="a leader")
        procs = {"ctl-a": a, "ctl-b": b}
        other = "ctl-b" if first == "ctl-a" else "ctl-a"

        await set_image(admin, "web", "nginx:2")
        await eventually(lambda: all_running(admin, "web", 3, "nginx:2"), timeout=15, what="roll by the leader")
        assert await reporters(admin, "web") == {first}

        procs[first].send_signal(signal.SIGKILL)
        await procs[first].wait()
        # Lease expiry as observed by the standby, plus one retry period.
        async def standby_holds() -> bool:
            return await holder(admin) == other

        await eventually(standby_holds, timeout=LEASE_SECONDS * 3, what="standby holds the lease")
        lease = (await admin.get(LEASE))["spec"]
        assert lease["leaseTransitions"] >= 1

        await set_image(admin, "web", "nginx:3")
        await eventually(lambda: all_running(admin, "web", 3, "nginx:3"), timeout=15, what="roll by the new leader")
        assert await reporters(admin, "web") == {first, other}
        assert procs[other].returncode is None

