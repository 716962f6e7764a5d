"""Leader election over a real Lease in the simulated API server."""

from __future__ import annotations

import asyncio
import contextlib
import re

import aiohttp
import pytest

from edgeagent.controller.app import ControllerApp
from edgeagent.controller.leader import LeaderElector
from edgeagent.kube.client import KubeClient, user_agent
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    controller_deletions,
    create_daemonset,
    daemonset_manifest,
    set_image,
)
from tests.support.waiting import eventually

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/edgeagent-controller"
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def elector(kube: KubeClient, identity: str, **kw: float) -> LeaderElector:
    return LeaderElector(kube, namespace="kube-system", name="edgeagent-controller", identity=identity,
                         lease_duration=kw.get("lease_duration", 1.0), renew_interval=0.2)


async def test_first_candidate_creates_the_lease_and_renews_keeping_acquire_time(admin: KubeClient) -> None:
    a = elector(admin, "a")
    assert await a.try_acquire_or_renew()
    first = (await admin.get(LEASE))["spec"]
    assert first["holderIdentity"] == "a" and first["leaseTransitions"] == 0
    assert first["leaseDurationSeconds"] == 1
    assert MICRO.match(first["acquireTime"]) and MICRO.match(first["renewTime"])

    async def renewed() -> dict[str, object] | None:
        assert await a.try_acquire_or_renew()
        spec: dict[str, object] = (await admin.get(LEASE))["spec"]
        return spec if spec["renewTime"] != first["renewTime"] else None

    second = await eventually(renewed, what="renewTime moves")
    assert second["acquireTime"] == first["acquireTime"]
    assert second["leaseTransitions"] == 0


async def test_unexpired_lease_of_another_holder_is_respected_then_taken_over(admin: KubeClient) -> None:
    a, b = elector(admin, "a"), elector(admin, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()  # just observed: valid for a full lease duration from now
    # `a` stops renewing; `b` takes over once the lease has not moved for its duration.
    assert await eventually(b.try_acquire_or_renew, timeout=5, interval=0.1, what="b takes over")
    spec = (await admin.get(LEASE))["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    # The old holder finds out on its next attempt.
    assert not await a.try_acquire_or_renew()


async def test_racing_creations_have_one_winner(admin: KubeClient) -> None:
    results = await asyncio.gather(*(elector(admin, f"c{i}").try_acquire_or_renew() for i in range(5)))
    assert sorted(results) == [False, False, False, False, True]


async def test_released_lease_is_taken_at_once(admin: KubeClient) -> None:
    a, b = elector(admin, "a", lease_duration=30), elector(admin, "b", lease_duration=30)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert (await admin.get(LEASE))["spec"]["holderIdentity"] == ""
    assert await b.try_acquire_or_renew()


async def test_leader_steps_down_when_another_holder_took_the_lease(admin: KubeClient) -> None:
    a = elector(admin, "a")
    stepped_down = asyncio.Event()
    working = asyncio.Event()

    async def lead() -> None:
        working.set()
        try:
            await asyncio.Event().wait()
        finally:
            stepped_down.set()

    task = asyncio.create_task(a.run(lead))
    try:
        await asyncio.wait_for(working.wait(), 5)
        assert a.is_leader
        lease = await admin.get(LEASE)
        lease["spec"]["holderIdentity"] = "intruder"
        await admin.replace(LEASE, lease)
        await asyncio.wait_for(stepped_down.wait(), 5)
        assert not a.is_leader
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def leader_of(apps: list[ControllerApp]) -> list[ControllerApp]:
    return [app for app in apps if app.is_leader]


@pytest.mark.parametrize("crash", [True, False], ids=["killed", "stopped"])
async def test_only_the_leader_acts_and_the_standby_takes_over(
    sim: SimCluster, admin: KubeClient, controllers: Controllers, crash: bool
) -> None:
    annotations = {"apps.openyurt.io/max-unavailable": "100%"}
    await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", annotations=annotations))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    apps = [await controllers.start(sim, leader_elect=True, release_lease=not crash) for _ in range(2)]
    (leader,) = await eventually(lambda: leader_of(apps), what="one leader")
    standby = next(app for app in apps if app is not leader)
    assert (await admin.get(LEASE))["spec"]["holderIdentity"] == leader.identity

    await set_image(admin, "web", "nginx:2")
    await eventually(lambda: all_running(admin, "web", 3, "nginx:2"), timeout=10, what="roll by the leader")
    assert leader.metrics.writes("pod_delete") == 3
    assert standby.metrics.writes() == 0
    assert not standby.is_leader

    await controllers.stop(leader)  # killed: the lease is left to expire; stopped: it is released
    await eventually(lambda: standby.is_leader, timeout=5, what="standby takes over")
    spec = (await admin.get(LEASE))["spec"]
    assert spec["holderIdentity"] == standby.identity and spec["leaseTransitions"] == 1

    deletions_before = len(controller_deletions(sim))
    await set_image(admin, "web", "nginx:3")
    await eventually(lambda: all_running(admin, "web", 3, "nginx:3"), timeout=10, what="roll by the new leader")
    assert standby.metrics.writes("pod_delete") == 3
    assert len(controller_deletions(sim)) == deletions_before + 3


async def test_leader_steps_down_when_it_cannot_renew_in_time(sim_factory: SimFactory) -> None:
    cluster = await sim_factory(nodes=1)
    async with admin_client(cluster) as client:
        a = LeaderElector(client, namespace="kube-system", name="edgeagent-controller", identity="a",
                          lease_duration=1.0, renew_interval=0.1)
        working = asyncio.Event()

        async def lead() -> None:
            working.set()
            await asyncio.Event().wait()

        task = asyncio.create_task(a.run(lead))
        try:
            await asyncio.wait_for(working.wait(), 5)
            await cluster.stop()  # the API server is gone: renewals fail
            # It must stop leading before the lease (1 s) could have expired for anyone else.
            await eventually(lambda: not a.is_leader, timeout=2, what="step down")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_a_leader_whose_renewal_hangs_steps_down_before_a_standby_takes_over(sim: SimCluster) -> None:
    """The API server answers the leader's Lease requests slowly (5 s). It must not keep leading while it waits
    for an answer: a standby takes the Lease once it has not moved for its duration (1 s), and the leader has
    to have stopped by then. Found by the soak: a leader kept leading 2 s after the other had taken over."""
    standby_took_over = asyncio.Event()
    leader_still_leading: list[bool] = []
    async with admin_client(sim) as plain, aiohttp.ClientSession() as http:
        slow = await KubeClient.connect(sim.admin_kubeconfig, agent=user_agent("controller", "slow-leader"))
        try:
            a = elector(slow, "a")
            b = LeaderElector(plain, namespace="kube-system", name="edgeagent-controller", identity="b",
                              lease_duration=1.0, renew_interval=0.2,
                              on_change=lambda leading: leader_still_leading.append(a.is_leader) if leading else None)
            working = asyncio.Event()

            async def lead_a() -> None:
                working.set()
                await asyncio.Event().wait()

            async def lead_b() -> None:
                standby_took_over.set()
                await asyncio.Event().wait()

            task_a = asyncio.create_task(a.run(lead_a))
            await asyncio.wait_for(working.wait(), 5)
            task_b = asyncio.create_task(b.run(lead_b))
            try:
                async with http.post(f"{sim.url}/sim/v1/faults", json={
                        "latencySeconds": 5, "durationSeconds": 30, "userAgent": "(slow-leader)",
                        "path": "/apis/coordination.k8s.io/"}) as resp:
                    assert resp.status == 201
                await asyncio.wait_for(standby_took_over.wait(), 10)
                assert leader_still_leading == [False]
            finally:
                for task in (task_a, task_b):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        finally:
            await slow.close()
