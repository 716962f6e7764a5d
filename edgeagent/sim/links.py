"""Cuttable per-node network links: a loopback TCP proxy in front of the API server.

A node's kubeconfig points at its link, so cutting the link partitions exactly that node from the API
while the admin kubeconfig keeps working. The two failure modes are the two a real edge network shows:
`refuse` (the far end is down: connects fail fast, open connections are reset) and `blackhole` (packets
vanish: connects may succeed but nothing moves, so only the client's own deadline ends a call). Bytes held
during a blackhole are delivered when the link returns, like TCP retransmission after a partition heals.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import struct
from collections import OrderedDict
from typing import Literal

from edgeagent import log
from edgeagent.aio import cancel_and_wait
from edgeagent.sim.addresses import client_host, url_host
from edgeagent.sim.ports import bind_stable

Mode = Literal["connected", "refuse", "blackhole"]
MODES: tuple[str, ...] = ("connected", "refuse", "blackhole")
CUT_MODES: tuple[str, ...] = ("refuse", "blackhole")

CHUNK = 64 * 1024
UPSTREAM_CONNECT_TIMEOUT = 5.0

_log = log.get("edgeagent.sim.links")


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with RST rather than FIN, so the peer sees 'connection reset' as after a crashed server."""
    if writer is None:
        return
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class _Conn:
    """One proxied client connection and its upstream twin."""

    __slots__ = ("client", "task", "upstream")

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None

    def reset(self) -> None:
        _reset(self.client)
        _reset(self.upstream)
        if self.task is not None and not self.task.done():
            self.task.cancel()


class Link:
    """One node's link. The listening port stays the same across cuts, so its kubeconfig stays valid."""

    def __init__(self, name: str, upstream_host: str, upstream_port: int, *, bind: str = "127.0.0.1",
                 max_connections: int = 256, scheme: str = "http", port_range: tuple[int, int] | None = None) -> None:
        self.name = name
        self.port_range = port_range  # where a new link's port is drawn from (sim/ports.py)
        self.scheme = scheme  # the proxy copies bytes: https when the API server behind it speaks TLS
        self.bind = bind
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.max_connections = max_connections
        self._mode: Mode = "connected"
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.base_events.Server | None = None
        # Holds the port while the listener is closed (refuse): bound but not listening, so connects
        # get RST (refused) and no other socket can take the port in the meantime.
        self._reservation: socket.socket | None = None
        self._port = 0
        self._conns: OrderedDict[int, _Conn] = OrderedDict()
        self._closed = False

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"{self.scheme}://{url_host(client_host(self.bind))}:{self._port}"

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def connected(self) -> bool:
        return self._mode == "connected"

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def _socket(self, port: int, *, alone: bool = False) -> socket.socket:
        """A socket bound to `port` with SO_REUSEPORT, so that the listener can bind beside the reservation.

        SO_REUSEPORT also lets any other socket of the same user that sets it bind the same port (another sim's
        link: another test, a soak on the same machine), and the kernel then splits the connections between the
        two. `alone` (a link's first bind, and a restart's) first checks that nothing else listens there: a
        probe without SO_REUSEPORT fails on such a port (SO_REUSEADDR: a previous life's TIME_WAIT is no
        obstacle)."""
        if alone:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((self.bind, port))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((self.bind, port))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        return sock

    async def start(self, port: int = 0) -> None:
        """Listen on `port` (0: a free one below the ephemeral range, see sim/ports.py; a restarted sim passes
        the port its node kubeconfig names)."""
        sock = self._socket(port, alone=True) if port else bind_stable(functools.partial(self._socket, alone=True),
                                                                           span=self.port_range)
        self._port = int(sock.getsockname()[1])
        self._server = await asyncio.start_server(self._accept, sock=sock, backlog=128)

    async def _listen(self) -> None:
        if self._server is not None:
            return
        sock = self._socket(self._port)
        self._server = await asyncio.start_server(self._accept, sock=sock, backlog=128)
        # The listener holds the port now: one descriptor per link while connected (a 10,000-node sim
        # would otherwise need two each and run out of them).
        if self._reservation is not None:
            self._reservation.close()
            self._reservation = None

    async def _unlisten(self) -> None:
        """Stop listening and reset every connection (in this order: no new one can slip in between)."""
        server, self._server = self._server, None
        if server is not None:
            if self._reservation is None and not self._closed:
                self._reservation = self._socket(self._port)  # bound, not listening: connects are refused
            server.close()
        self._reset_all()
        if server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await server.wait_closed()

    async def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown link mode {mode!r}: expected one of {', '.join(MODES)}")
        if self._closed:
            raise RuntimeError(f"link {self.name} is closed")
        previous, self._mode = self._mode, mode  # type: ignore[assignment]
        if mode == "connected":
            await self._listen()
            self._open.set()
        elif mode == "blackhole":
            self._open.clear()
            await self._listen()
        else:
            self._open.clear()
            await self._unlisten()
        if previous != mode:
            _log.info("link_mode", node=self.name, mode=mode, previous=previous)

    async def connect(self) -> None:
        await self.set_mode("connected")

    async def disconnect(self, mode: str = "blackhole") -> None:
        if mode not in CUT_MODES:
            raise ValueError(f"unknown disconnect mode {mode!r}: expected refuse or blackhole")
        await self.set_mode(mode)

    def _reset_all(self) -> None:
        for conn in list(self._conns.values()):
            conn.reset()
        self._conns.clear()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._open.clear()
        tasks = [c.task for c in self._conns.values() if c.task is not None]
        await self._unlisten()
        for task in tasks:
            await cancel_and_wait(task)
        if self._reservation is not None:
            self._reservation.close()
            self._reservation = None

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closed or self._mode == "refuse":
            _reset(writer)
            return
        if len(self._conns) >= self.max_connections:
            # Bounded: the oldest connection is most likely one a client abandoned during a blackhole.
            _, oldest = self._conns.popitem(last=False)
            oldest.reset()
        conn = _Conn(writer)
        self._conns[id(conn)] = conn  # registered at once, so that a cut right now resets it too
        # Our own task rather than the one asyncio.streams makes for a coroutine callback: cutting the link
        # cancels connection tasks, and the streams helper would report each cancellation as an error.
        conn.task = asyncio.create_task(self._handle(conn, reader), name=f"link-{self.name}")

    async def _handle(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        try:
            await self._serve(conn, reader)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            self._conns.pop(id(conn), None)
            if conn.upstream is not None:
                conn.upstream.close()
            conn.client.close()

    async def _serve(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        await self._open.wait()
        async with asyncio.timeout(UPSTREAM_CONNECT_TIMEOUT):
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        conn.upstream = up_writer
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._pump(conn, reader, up_writer))
            tg.create_task(self._pump(conn, up_reader, conn.client))

    async def _pump(self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """Copy one direction; while the link is blackholed, hold the (bounded) chunk instead of sending it."""
        try:
            while True:
                await self._open.wait()
                data = await src.read(CHUNK)
                if not data:
                    break
                await self._open.wait()
                dst.write(data)
                await dst.drain()
            await self._open.wait()
            if dst.can_write_eof():
                dst.write_eof()
        except OSError:
            # One side broke: break the other as well, so that the client sees an error rather than a hang.
            _reset(conn.client)
            _reset(conn.upstream)
