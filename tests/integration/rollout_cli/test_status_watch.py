"""`rollout status --watch` prints the table once, then only what changes, and ends with the verdict when the
rollout ends (issue 36: at scale it used to print the whole table every second)."""

from __future__ import annotations

import asyncio

from tests.integration.rollout_cli.conftest import EDGEAGENT, World
from tests.support.fleet_scenario import current_hash, live_pods, manifest
from tests.support.rolloutplan_crd import create_plan, status, write_status
from tests.support.waiting import eventually


async def test_watch_prints_changes_then_the_verdict(world: World) -> None:
    await world.admin.create("/apis/apps/v1/namespaces/default/daemonsets", manifest())

    async def two_pods() -> str | None:
        return await current_hash(world.admin) if len(await live_pods(world.admin)) == 2 else None

    revision = await eventually(two_pods, timeout=30, what="web on both nodes")
    await create_plan(world.admin, steps=[1, "100%"])
    await write_status(world.admin, "web", status(revision, phase="Baking", wave=1, waves=2,
                                                  bakeStartedAt="2026-01-01T00:00:00Z"))
    proc = await asyncio.create_subprocess_exec(*EDGEAGENT, "rollout", "status", "web", "--watch", "--kubeconfig",
                                                str(world.sim.admin_kubeconfig), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    lines: list[str] = []

    async def read_until(text: str) -> None:
        while not any(text in line for line in lines):
            line = await asyncio.wait_for(proc.stdout.readline(), 30)  # type: ignore[union-attr]
            assert line, f"the watch ended before printing {text!r}: {lines}"
            lines.append(line.decode().rstrip("\n"))

    try:
        await read_until("rollout in progress")
        first = len(lines)
        assert sum(line.startswith("NODE ") for line in lines) == 1
        await write_status(world.admin, "web", status(revision, phase="Progressing", wave=2, waves=2))
        await read_until("wave 2/2: Progressing")
        await write_status(world.admin, "web", status(revision, phase="Complete", wave=2, waves=2))
        await read_until("rollout complete")
        code = await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 0
    later = lines[first:]
    assert later == ["wave 2/2: Progressing; 2 node(s): 2 up to date", "wave 2/2: Complete; 2 node(s): 2 up to date",
                     "rollout complete"]
