"""Cuttable node links: what a client on the node sees in each mode, through the real kubeconfig files."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest

from edgeagent.kube.client import KubeClient, KubeUnreachable, Timeouts
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.links import Link
from tests.conftest import SimFactory
from tests.support.waiting import eventually

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "probe"},
    "spec": {"nodeName": "edge-2", "containers": [{"name": "c", "image": "busybox:1"}]},
}


@contextlib.asynccontextmanager
async def node_client(sim: SimCluster, node: str, timeouts: Timeouts) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(sim.node_kubeconfig(node), timeouts)
    try:
        yield client
    finally:
        await client.close()


async def _collect(client: KubeClient, path: str, into: asyncio.Queue[dict[str, object]]) -> None:
    async for event in client.watch(path, query={"resourceVersion": "0"}, idle_timeout=60):
        await into.put(event)


async def test_refused_link_fails_fast_with_a_connection_error(sim: SimCluster) -> None:
    await sim.disconnect("edge-1", "refuse")
    # Generous deadlines: if the link merely hung, this would take 30 s and end as a timeout, not a refusal.
    async with node_client(sim, "edge-1", Timeouts(connect=30, request=30)) as client:
        with pytest.raises(KubeUnreachable) as caught:
            await client.get("/api/v1/nodes")
    assert isinstance(caught.value.__cause__, aiohttp.ClientConnectorError)
    assert isinstance(caught.value.__cause__.os_error, ConnectionRefusedError)


async def test_blackholed_link_times_out_instead_of_failing_fast(sim: SimCluster) -> None:
    await sim.disconnect("edge-1", "blackhole")
    async with node_client(sim, "edge-1", Timeouts(connect=0.5, request=0.5)) as client:
        with pytest.raises(KubeUnreachable) as caught:
            await client.get("/api/v1/nodes")
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert not isinstance(caught.value.__cause__, aiohttp.ClientConnectorError)


async def test_same_kubeconfig_works_again_after_connect(sim: SimCluster) -> None:
    async with node_client(sim, "edge-1", Timeouts(connect=0.5, request=0.5)) as client:
        assert len((await client.get("/api/v1/nodes"))["items"]) == 3
        for mode in ("refuse", "blackhole"):
            await sim.disconnect("edge-1", mode)
            with pytest.raises(KubeUnreachable):
                await client.get("/api/v1/nodes")
            await sim.connect("edge-1")
            assert sim.link_mode("edge-1") == "connected"
            nodes = await client.get("/api/v1/nodes")
            assert [n["metadata"]["name"] for n in nodes["items"]] == ["edge-1", "edge-2", "edge-3"]


async def test_other_nodes_and_admin_unaffected_by_a_cut(sim: SimCluster) -> None:
    await sim.disconnect("edge-1", "refuse")
    async with node_client(sim, "edge-2", Timeouts(connect=1, request=2)) as client:
        assert (await client.get("/api/v1/namespaces/default"))["metadata"]["name"] == "default"
    admin = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=1, request=2))
    try:
        assert (await admin.get("/api/v1/nodes/edge-1"))["metadata"]["name"] == "edge-1"
    finally:
        await admin.close()


async def test_refuse_resets_an_open_watch(sim: SimCluster) -> None:
    events: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    async with node_client(sim, "edge-1", Timeouts(connect=1, request=2)) as client:
        watch = asyncio.create_task(_collect(client, "/api/v1/nodes", events))
        try:
            await eventually(lambda: events.qsize() >= 3, what="initial ADDED events")
            await sim.disconnect("edge-1", "refuse")
            await eventually(watch.done, what="the watch to break")
            assert isinstance(watch.exception(), KubeUnreachable)
        finally:
            watch.cancel()


async def test_blackhole_holds_an_open_watch_and_delivers_after_connect(sim: SimCluster) -> None:
    events: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    async with node_client(sim, "edge-1", Timeouts(connect=1, request=2)) as client:
        watch = asyncio.create_task(_collect(client, "/api/v1/namespaces/default/pods", events))
        try:
            # An empty namespace gives no initial events: create one pod to know the stream is up.
            await client.create("/api/v1/namespaces/default/pods", {**POD, "metadata": {"name": "first"}})
            first = await asyncio.wait_for(events.get(), 5)
            assert first["type"] == "ADDED"
            while not events.empty():
                events.get_nowait()

            await sim.disconnect("edge-1", "blackhole")
            admin = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=1, request=2))
            try:
                await admin.create("/api/v1/namespaces/default/pods", POD)
            finally:
                await admin.close()
            # The server has sent the event; the partition must swallow it (the stream neither moves nor breaks).
            with pytest.raises(TimeoutError):
                while True:
                    event = await asyncio.wait_for(events.get(), 0.5)
                    assert event["object"]["metadata"]["name"] != "probe"  # type: ignore[index]
            assert not watch.done()

            await sim.connect("edge-1")

            async def delivered() -> bool:
                while not events.empty():
                    event = events.get_nowait()
                    if event["object"]["metadata"]["name"] == "probe":  # type: ignore[index]
                        return True
                return False

            await eventually(delivered, what="the held event after the link returned")
        finally:
            watch.cancel()


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def test_link_bounds_connections_by_dropping_the_oldest() -> None:
    upstream = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    link = Link("n", "127.0.0.1", port, max_connections=2)
    await link.start()
    clients: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        await link.disconnect("blackhole")
        for expected in (1, 2, 2):
            clients.append(await asyncio.open_connection("127.0.0.1", link.port))

            def proxied(n: int = expected) -> bool:
                return link.open_connections == n

            await eventually(proxied, what=f"{expected} proxied connections")
        oldest_reader = clients[0][0]

        async def oldest_was_dropped() -> bool:
            try:
                return await asyncio.wait_for(oldest_reader.read(1), 0.1) == b""
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False

        await eventually(oldest_was_dropped, what="the oldest connection to be reset")
        # The newest connection still works once the link returns.
        await link.connect()
        reader, writer = clients[-1]
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
    finally:
        for _, writer in clients:
            writer.close()
        await link.close()
        upstream.close()
        await upstream.wait_closed()


async def test_closed_link_refuses_and_holds_nothing() -> None:
    upstream = await asyncio.start_server(_echo, "127.0.0.1", 0)
    link = Link("n", "127.0.0.1", upstream.sockets[0].getsockname()[1])
    await link.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
        writer.write(b"x")
        assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
        await link.close()
        assert link.open_connections == 0
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", link.port)
        writer.close()
    finally:
        await link.close()
        upstream.close()
        await upstream.wait_closed()


async def test_unknown_modes_are_rejected() -> None:
    link = Link("n", "127.0.0.1", 1)
    await link.start()
    try:
        with pytest.raises(ValueError, match="unknown disconnect mode 'sideways'"):
            await link.disconnect("sideways")
        with pytest.raises(ValueError, match="unknown link mode"):
            await link.set_mode("off")
        assert link.mode == "connected"
    finally:
        await link.close()


async def test_without_node_links_nodes_run_pods_but_have_no_link_or_kubeconfig(sim_factory: SimFactory) -> None:
    """`--no-node-links` (benchmarks at 100,000 nodes): one socket per node would exceed the fd limit."""
    cluster = await sim_factory(node_links=False)
    assert cluster.links == {}
    assert not cluster.dir.joinpath("edge-1.kubeconfig").exists()
    with pytest.raises(RuntimeError, match="no link: the cluster runs without node links"):
        cluster.node_url("edge-1")
    async with await KubeClient.connect(cluster.admin_kubeconfig, Timeouts(connect=2, request=5)) as admin:
        await admin.create("/api/v1/namespaces/default/pods", POD)

        async def running() -> bool:
            pod = await admin.get("/api/v1/namespaces/default/pods/probe")
            return (pod.get("status") or {}).get("phase") == "Running"

        await eventually(running, what="the pod Running on a node without a link")
