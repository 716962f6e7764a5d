"""Issue 14.3: the informer recovers when its resourceVersion will never be served again.

After an API server's store is reset or restored (etcd restore, a simulated cluster started afresh) a watch
from the resourceVersion a client holds answers `504 Too large resource version` for ever; so may any other
persistent error. The informer must relist from scratch instead of retrying the same watch for ever, and
must still resume (not relist) after a mere partition.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient, Timeouts
from edgeagent.kube.informer import Informer
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.support.hook_proxy import HookProxy, is_watch
from tests.support.switch_proxy import SwitchProxy
from tests.support.waiting import eventually

PODS = "/api/v1/namespaces/default/pods"
FAST = Timeouts(connect=0.5, request=1.0)


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}


async def _names(client: KubeClient) -> set[str]:
    return {p["metadata"]["name"] for p in (await client.get(PODS))["items"]}


def _address(sim: SimCluster) -> tuple[str, int]:
    host, port = sim.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    task = asyncio.create_task(informer.run())
    try:
        yield informer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_restored_store_answering_too_large_resource_version_is_relisted(sim_factory: SimFactory) -> None:
    before, after = await sim_factory(nodes=1), await sim_factory(nodes=1)
    admin_before = await KubeClient.connect(before.admin_kubeconfig, FAST)
    admin_after = await KubeClient.connect(after.admin_kubeconfig, FAST)
    proxy = SwitchProxy(_address(before))
    await proxy.start()
    kubeconfig = before.dir / "proxy.kubeconfig"
    kubeconfig.write_text(before.admin_kubeconfig.read_text().replace(before.url, proxy.url))
    client = await KubeClient.connect(kubeconfig, FAST)
    try:
        for i in range(30):  # the old store is far ahead of the restored one
            await admin_before.create(PODS, _pod(f"old-{i}"))
        await admin_after.create(PODS, _pod("restored"))
        informer = Informer(client, PODS, idle_timeout=5.0, backoff_initial=0.05, backoff_max=0.2)
        async with running(informer):
            await eventually(lambda: len(informer.items) == 30, what="the first list")
            old_rv = int(informer.resource_version)
            assert old_rv > int((await admin_after.get(PODS))["metadata"]["resourceVersion"])

            proxy.switch(_address(after))
            truth = await _names(admin_after)
            await eventually(lambda: {k.split("/")[1] for k in informer.items} == truth, timeout=20,
                             what="the cache relisted from the restored store")
            # At once, on the first "Too large resource version": not after the generic failure count.
            stale = [e for e in after.audit.find("GET", PODS) if f"resourceVersion={old_rv}&" in e["query"] + "&"]
            assert len(stale) == 1, stale
            # And it follows the restored store from then on.
            await admin_after.create(PODS, _pod("new"))
            await eventually(lambda: "default/new" in informer.items, what="a change after the relist")
    finally:
        await client.close()
        await proxy.stop()
        await admin_before.close()
        await admin_after.close()


@pytest.fixture
async def hook(sim_factory: SimFactory) -> AsyncIterator[tuple[SimCluster, HookProxy]]:
    sim = await sim_factory(nodes=1)
    proxy = HookProxy(sim.url)
    await proxy.start()
    try:
        yield sim, proxy
    finally:
        await proxy.stop()


async def _informer_behind(sim: SimCluster, proxy: HookProxy) -> tuple[KubeClient, Informer]:
    kubeconfig = sim.dir / "hook.kubeconfig"
    kubeconfig.write_text(sim.admin_kubeconfig.read_text().replace(sim.url, proxy.url))
    client = await KubeClient.connect(kubeconfig, FAST)
    # A hung watch is given up after 1.5 s; a healthy quiet one ends cleanly after 1 s (timeoutSeconds).
    return client, Informer(client, PODS, idle_timeout=1.5, backoff_initial=0.05, backoff_max=0.2)


async def test_repeated_answered_watch_failures_lead_to_a_relist(hook: tuple[SimCluster, HookProxy]) -> None:
    sim, proxy = hook
    client, informer = await _informer_behind(sim, proxy)
    try:
        async with running(informer):
            await eventually(lambda: informer.healthy, what="the first list")
            assert informer.relists == 1
            rule = proxy.answer(is_watch, 500, "InternalError", "etcdserver: request timed out")
            await eventually(lambda: rule.hits >= 3 and informer.relists == 2, timeout=10,
                             what="a relist after three failed watches")
    finally:
        await client.close()


async def test_an_unreachable_server_is_not_a_reason_to_relist(hook: tuple[SimCluster, HookProxy]) -> None:
    """A partition says nothing about our resourceVersion: once it heals, the watch resumes (cheap on the link)."""
    sim, proxy = hook
    client, informer = await _informer_behind(sim, proxy)
    try:
        async with running(informer):
            await eventually(lambda: informer.healthy, what="the first list")
            rule = proxy.hang(is_watch, times=3)
            await eventually(lambda: rule.hits >= 3 and not informer.healthy, timeout=20, what="three hung watches")
            await eventually(lambda: informer.healthy, timeout=15, what="the watch back")
            assert informer.relists == 1
    finally:
        await client.close()
