"""The `edgeagent rollout` commands against the sim with deploy/crd-rolloutplan.yaml applied. No controller runs:
the tests write the plan's `status` themselves through `/status` with the admin's credentials, as the
controller would, and read what the commands wrote."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.support.rolloutplan_crd import install_crd

EDGEAGENT = (sys.executable, "-m", "edgeagent.cli")


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


async def edgeagent(*args: str, env: dict[str, str] | None = None, program: tuple[str, ...] = EDGEAGENT) -> Ran:
    """The command as a user runs it: its own process, its exit code, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(*program, *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
                                                env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


@dataclass
class World:
    sim: SimCluster
    admin: KubeClient

    async def rollout(self, *args: str) -> Ran:
        return await edgeagent("rollout", *args, "--kubeconfig", str(self.sim.admin_kubeconfig))


@pytest.fixture
async def world(sim_factory: SimFactory) -> AsyncIterator[World]:
    sim = await sim_factory(nodes=2)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await install_crd(admin)
        yield World(sim, admin)
