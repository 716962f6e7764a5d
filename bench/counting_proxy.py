"""A loopback TCP proxy that counts the bytes a client and its server exchange, and the requests sent.

Put in front of a node's link (the agent's kubeconfig points here, this forwards to the link), it
measures what the edge link would carry: application payload in both directions (HTTP headers,
bodies, chunk framing; not TCP/IP headers). It also notes each HTTP/1.1 request line it sees, so a
test can tell probe requests from watch requests without a server-side request log.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from edgeagent.aio import cancel_and_wait

_REQUEST_LINE = re.compile(rb"(GET|POST|PUT|PATCH|DELETE|HEAD) (/\S*) HTTP/1\.[01]\r\n")
_CHUNK = 64 * 1024


@dataclass
class Counts:
    up: int = 0  # client → server
    down: int = 0  # server → client
    requests: list[str] = field(default_factory=list)  # "GET /path?query", in order

    @property
    def total(self) -> int:
        return self.up + self.down

    def matching(self, fragment: str) -> list[str]:
        return [r for r in self.requests if fragment in r]


class CountingProxy:
    """`await start()`, point a client at `url`; `counts` grows; `reset()` starts a new window."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._host = upstream_host
        self._port = upstream_port
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts = Counts()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> Counts:
        """Start a new window; returns the one that ends."""
        ended, self.counts = self.counts, Counts()
        return ended

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            await cancel_and_wait(task)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            # HTTP clients speak first: count what they send even when the upstream refuses the connection.
            first = await reader.read(_CHUNK)
            if not first:
                return
            self._count_up(first)
            up_reader, upstream = await asyncio.open_connection(self._host, self._port)
            upstream.write(first)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._pump(reader, upstream, up=True))
                tg.create_task(self._pump(up_reader, writer, up=False))
        except* (OSError, asyncio.IncompleteReadError):
            pass  # one side went away: close both
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()

    def _count_up(self, data: bytes) -> None:
        self.counts.up += len(data)
        self.counts.requests += [f"{m[1].decode()} {m[2].decode()}" for m in _REQUEST_LINE.finditer(data)]

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, up: bool) -> None:
        try:
            while data := await src.read(_CHUNK):
                if up:
                    self._count_up(data)
                else:
                    self.counts.down += len(data)
                dst.write(data)
                await dst.drain()
        finally:
            if dst.can_write_eof():
                with contextlib.suppress(OSError):
                    dst.write_eof()


@dataclass
class CountedNode:
    """An agent synced to `NODE`'s pods, talking to the sim through a CountingProxy, its link monitor idle."""

    sim: Any
    agent: Any
    proxy: CountingProxy

    async def link_idle(self) -> bool:
        link = (await self.agent.readyz())["link"]
        return bool(link["connected"]) and link["probe"].get("active") is False


@contextlib.asynccontextmanager
async def counted_idle_node(tag: str, node: str, pod_names: list[str]) -> AsyncIterator[CountedNode]:
    """The set-up the link-cost benches share (idle_link_cost.py, reconnect_cost.py): sim with the real server's
    bookmark cadence, the node's pods running, the agent behind the proxy synced, and every start-up write (the
    kubelet's statuses, the agent's UpgradeHeld patches) over before anything is counted."""
    from bench.common import Agent, Sim, bench_pod, proxied_kubeconfig, realistic_bookmark_args, server_of, workdir

    async with workdir(tag) as work:
        sim = Sim(work, extra=realistic_bookmark_args())
        await sim.start()
        host, port = server_of(sim.kubeconfig(node))
        proxy = CountingProxy(host, port)
        await proxy.start()
        kubeconfig = proxied_kubeconfig(sim.kubeconfig(node), work / "counted.kubeconfig", proxy.url)
        agent = Agent(work, sim, node, kubeconfig=kubeconfig)
        counted = CountedNode(sim, agent, proxy)
        try:
            await sim.create_pods([bench_pod(name, node, owner="edge-app") for name in pod_names])
            await sim.wait_running(node, len(pod_names))  # the kubelet's status writes are not idle traffic
            await agent.start()
            await agent.wait_pods(len(pod_names))
            await agent.wait_for("the link monitor idle (connected, not probing)", counted.link_idle, timeout=60,
                                 interval=0.1)
            # Once per start the agent publishes UpgradeHeld on every DaemonSet pod (a PATCH each): not idle cost.
            await sim.wait_quiet(node)
            await agent.wait_for("the link monitor still idle", counted.link_idle, timeout=60, interval=0.1)
            yield counted
        finally:
            await agent.stop()
            await proxy.close()
            await sim.stop()
