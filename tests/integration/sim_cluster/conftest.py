"""An admin client over real HTTP for the simulated-cluster tests (the `sim` fixture is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from edgeagent.kube.client import KubeClient, Timeouts
from edgeagent.sim.cluster import SimCluster


@pytest.fixture
async def admin(sim: SimCluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=5))
    try:
        yield client
    finally:
        await client.close()
