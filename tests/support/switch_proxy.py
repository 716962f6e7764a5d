"""A TCP proxy whose upstream can be swapped, dropping open connections: an API server restored from backup.

Behind one address, a server is replaced by one whose store starts over (lower resourceVersions, other
objects), as after an etcd restore or a simulated cluster started afresh. Clients keep their address and
their resourceVersion; what they do next is under test.
"""

from __future__ import annotations

import asyncio
import contextlib


class SwitchProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def switch(self, upstream: tuple[str, int]) -> None:
        """New connections go to `upstream`; every open one is cut, as a restarting server cuts them."""
        self.upstream = upstream
        for writer in list(self._writers):
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.switch(self.upstream)
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        pipes = [asyncio.create_task(self._pipe(reader, up_writer)), asyncio.create_task(self._pipe(up_reader, writer))]
        self._tasks.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pipes:
                task.cancel()
            for w in (writer, up_writer):
                w.close()
                self._writers.discard(w)
            self._tasks.difference_update(pipes)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
