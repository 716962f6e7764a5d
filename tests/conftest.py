"""Shared fixtures: a started simulated cluster with fast timings, for every integration and e2e test.

`sim` is a 3-node cluster (edge-1..edge-3). `sim_factory` builds more, or differently configured, clusters:
`await sim_factory(nodes=1, node_grace=0.5)` or `await sim_factory(node_names=["a", "b"])`; all are stopped
at the end of the test. `admin` is a KubeClient on `sim`'s admin URL (never cut), over real HTTP.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import structlog
from hypothesis import settings

from edgeagent.config import SimConfig
from edgeagent.kube.client import KubeClient, Timeouts

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

# Hypothesis' default 200 ms deadline per example is a wall-clock budget: on a busy 2-core machine (`make test`
# with its xdist workers, CI) correct properties failed it (issue 38 item 13). What a property test checks is
# the property, not the speed of the machine, so the suite runs without deadlines: profile "suite" by default,
# "ci" (HYPOTHESIS_PROFILE=ci) the same and printing the blob that reproduces a failure. A test's own
# @settings still sets what it names (max_examples, say).
settings.register_profile("suite", deadline=None)
settings.register_profile("ci", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

def _plain_tracebacks() -> None:
    """structlog's default configuration (what in-process agents and controllers log through, as no command
    configured it) prints an exception with rich, every frame's locals included: under `make test`'s load that
    took seconds of CPU per traceback, during which the test's event loop (the agent's, a proxy's) stood still,
    and a drainer test's request timed out behind four of them. Plain tracebacks, as the product's own
    configuration (edgeagent/log.py) prints them; everything else stays structlog's default."""
    processors = [
        structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
        if isinstance(p, structlog.dev.ConsoleRenderer) else p
        for p in structlog.get_config()["processors"]
    ]
    structlog.configure(processors=processors)


_plain_tracebacks()

# Fast enough for sub-second tests, slow enough that a busy CI machine does not flap nodes to Unknown.
FAST_TIMINGS: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "node_grace": 1.0,
    "pod_startup": 0.1,
    "pod_termination": 0.1,
    # The sim's default pull (0.5 s, what `edgeagent sim` and the demo use) costs every first pod start on a
    # node and every roll: measured +56 s (+60 %) over tests/integration/{controller,agent_api}. Tests that are
    # about pulls set their own.
    "image_pull_seconds": 0.05,
    # Pods re-reported this long after their node returns: the real order, kept short for tests.
    "pod_resync_delay": 0.3,
}

SimFactory = Callable[..., Awaitable["SimCluster"]]


SLOW_DEFAULT_SECONDS = 10


def _expected_seconds(item: pytest.Item) -> float:
    slow = item.get_closest_marker("slow")
    return 0.0 if slow is None else float(slow.kwargs.get("seconds", SLOW_DEFAULT_SECONDS))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `slow` run first, longest first (`slow(seconds=N)`), then the rest in their usual order.

    `make test` spreads the suite over xdist workers (`--dist loadgroup --no-loadscope-reorder`), which hand out
    tests in collection order: a two-minute soak handed out last would run on alone while the other workers
    idle. Each worker collects, so the order depends on nothing but the collected items (a stable sort)."""
    items.sort(key=lambda item: -_expected_seconds(item))


def fast_sim_config(directory: Path, **overrides: Any) -> SimConfig:
    """A SimConfig with the test timings; `overrides` are SimConfig fields."""
    fields = {f.name for f in dataclasses.fields(SimConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise TypeError(f"unknown SimConfig field(s): {', '.join(unknown)}")
    values = {**FAST_TIMINGS, "dir": directory, **overrides}
    return SimConfig(**values)


def _cluster_class() -> type[SimCluster]:
    # Imported here to keep the sim out of the unit tests' import time; a broken sim must fail every test that
    # needs it (a skip would turn the integration suite green).
    from edgeagent.sim.cluster import SimCluster

    return SimCluster


@pytest.fixture
async def sim_factory(tmp_path: Path) -> AsyncIterator[SimFactory]:
    cluster_class = _cluster_class()
    started: list[SimCluster] = []

    async def factory(*, node_names: list[str] | None = None, **overrides: Any) -> SimCluster:
        directory = overrides.pop("dir", None) or tmp_path / f"sim-{len(started)}"
        config = fast_sim_config(Path(directory), **overrides)
        cluster = cluster_class(config, node_names=node_names)
        await cluster.start()
        started.append(cluster)
        return cluster

    try:
        yield factory
    finally:
        for cluster in reversed(started):
            await cluster.stop()


@pytest.fixture
async def sim(sim_factory: SimFactory) -> SimCluster:
    return await sim_factory()


@pytest.fixture
async def admin(sim: SimCluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=5))
    try:
        yield client
    finally:
        await client.close()
