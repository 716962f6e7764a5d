"""60 s of a flapping link (connected / refuse / blackhole at random, seeded intervals) under use.

While the link flaps, a client reads `GET /pods` ten times a second and posts an upgrade every second,
and a stand-in for the OTA controller keeps flagging the DaemonSet pods with PodNeedUpgrade (through
the admin API, which is never cut), so upgrades are applied online, queued, drained and made obsolete
in every order the flapping produces. Afterwards: not one read failed, the agent is alive, its cache
equals the sim's truth, every queued request ended, and its RSS grew by less than 5 MiB.

Why the full 60 s in `make test`: a leak or a stuck state shows only after many transitions (about 60
here), and the whole fault suite still stays within a few minutes; FLAP_SECONDS shortens it locally.
The RSS baseline is taken after a warm-up in which every link mode was seen once, so one-time
allocations (first queue write, first timeout path) do not count as growth.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import pytest

from edgeagent.kube.client import KubeClient, KubeError
from tests.faults.conftest import (
    NODE,
    TERMINAL,
    AgentSpawner,
    cache_matches_cloud,
    daemonset,
    live,
    mark_need_upgrade,
    needs_upgrade,
    node_pods,
    requests,
    upgrade,
    wait_link,
)
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

SEED = 60
FLAP_SECONDS = float(os.environ.get("EDGEAGENT_FLAP_SECONDS", "60"))
DAEMONSETS = 5
PLAIN_PODS = 20
MODES = ("connected", "refuse", "blackhole")
# Answers an upgrade may get while the link flaps; 5xx other than "could not be stored" would be a bug.
EXPECTED_UPGRADE_CODES = {200, 202, 403, 404, 409}

pytestmark = [pytest.mark.slow(seconds=70), pytest.mark.timeout(FLAP_SECONDS + 120)]


async def _set_mode(sim: SimCluster, mode: str) -> None:
    if mode == "connected":
        await sim.connect(NODE)
    else:
        await sim.disconnect(NODE, mode)


async def test_link_flapping_under_reads_and_upgrades(sim: SimCluster, admin: KubeClient,
                                                      spawn_agent: AgentSpawner, http: aiohttp.ClientSession,
                                                      tmp_path: Path) -> None:
    rng = random.Random(SEED)
    for i in range(DAEMONSETS):
        await admin.create("/apis/apps/v1/namespaces/default/daemonsets", daemonset(f"flap-{i}"))
    for i in range(PLAIN_PODS):
        await admin.create("/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"plain-{i:02d}"},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "registry.local/plain:1"}]}})
    agent = await spawn_agent(sim.node_kubeconfig(NODE), tmp_path / "state")
    await wait_link(http, agent, True)
    await eventually(lambda: cache_matches_cloud(http, agent, admin), what="first sync")

    stop = asyncio.Event()
    failed_reads: list[str] = []
    reads = 0
    answers: Counter[int] = Counter()
    upgrade_errors: list[str] = []

    async def reader() -> None:
        nonlocal reads
        timeout = aiohttp.ClientTimeout(total=2)
        while not stop.is_set():
            began = time.monotonic()
            try:
                async with http.get(agent.url + "/pods", timeout=timeout) as resp:
                    body = await resp.json()
                    if resp.status != 200 or body.get("kind") != "PodList":
                        failed_reads.append(f"{resp.status}: {str(body)[:200]}")
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                failed_reads.append(f"{type(exc).__name__}: {exc}")
            reads += 1
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - began)))  # pacing: 10 reads/s

    async def upgrader() -> None:
        turn = 0
        while not stop.is_set():
            began = time.monotonic()
            pods = sorted((p for p in live(await node_pods(admin)) if p["metadata"]["name"].startswith("flap-")),
                          key=lambda p: str(p["metadata"]["name"]))
            if pods:
                name = pods[turn % len(pods)]["metadata"]["name"]
                turn += 1
                try:
                    status, body = await upgrade(http, agent, name)
                    answers[status] += 1
                    if status not in EXPECTED_UPGRADE_CODES:
                        upgrade_errors.append(f"{name}: {status} {body}")
                except (aiohttp.ClientError, TimeoutError) as exc:
                    upgrade_errors.append(f"{name}: {type(exc).__name__}: {exc}")
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - began)))  # pacing: 1 upgrade/s

    async def ota_controller() -> None:
        while not stop.is_set():
            for pod in live(await node_pods(admin)):
                if pod["metadata"]["name"].startswith("flap-") and not needs_upgrade(pod):
                    try:
                        await mark_need_upgrade(admin, pod)
                    except KubeError as exc:
                        if exc.code != 404:  # deleted meanwhile
                            raise
            await asyncio.sleep(0.2)  # pacing, as a controller's resync

    async def flapper(seconds: float, modes: list[str] | None = None) -> int:
        transitions = 0
        deadline = time.monotonic() + seconds
        planned = list(modes or [])
        while time.monotonic() < deadline:
            mode = planned.pop(0) if planned else rng.choice(MODES)
            await _set_mode(sim, mode)
            transitions += 1
            await asyncio.sleep(min(rng.uniform(0.1, 2.0), max(0.0, deadline - time.monotonic())))
        return transitions

    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(reader()), tg.create_task(upgrader()), tg.create_task(ota_controller())]
        await flapper(6.0, ["refuse", "connected", "blackhole", "connected"])  # warm-up: every path once
        baseline = agent.rss_mb()
        transitions = await flapper(FLAP_SECONDS)
        await sim.connect(NODE)
        stop.set()
        await asyncio.gather(*tasks)

    assert agent.alive, agent.raw[-20:]
    assert reads >= FLAP_SECONDS * 5, f"only {reads} reads"
    assert failed_reads == [], f"{len(failed_reads)} of {reads} reads failed: {failed_reads[:5]}"
    assert upgrade_errors == [], upgrade_errors[:5]
    assert answers[200] + answers[202] > 0, answers  # upgrades really went through, online or queued
    assert transitions >= 10

    await wait_link(http, agent, True)

    async def queue_done() -> bool:
        # Drained: nothing queued or running. Deleted pods are `verifying` (their template never changed, so
        # no replacement is on a newer revision; they would end failed at --ready-timeout).
        return all(r["state"] in TERMINAL | {"verifying"} for r in await requests(http, agent))

    await eventually(queue_done, timeout=30, what="every queued upgrade finished")
    await eventually(lambda: cache_matches_cloud(http, agent, admin), timeout=15, what="cache equal to the sim")
    growth = agent.rss_mb() - baseline
    print(f"flapping: {transitions} transitions, {reads} reads, upgrades answered {dict(answers)}, "
          f"RSS {baseline:.1f} MiB -> {baseline + growth:.1f} MiB")  # shown with -s, or on failure
    assert growth < 5.0, f"RSS grew by {growth:.1f} MiB over {FLAP_SECONDS:.0f} s of flapping"
