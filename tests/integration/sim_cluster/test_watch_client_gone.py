"""Issue 23 (a 300 s soak, seed 31): a watch whose client went away before its error line was written is ended
quietly -- no traceback in the sim's log (the soak's `processes` invariant fails on any traceback).

The soak's agent gave up on a watch (a slow-answer burst held it) and closed the connection; the sim then
answered the too-old resourceVersion with a stream it could no longer start. The same holds for a
resourceVersion not reached yet, which the sim waits for before answering: that wait is what this test uses to
close the connection first, deterministically.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from urllib.parse import urlsplit

import pytest

from edgeagent.sim.cluster import SimCluster
from tests.support.waiting import eventually

PODS = "/api/v1/namespaces/default/pods"


async def test_a_watch_whose_client_left_during_the_wait_ends_without_a_traceback(
        sim: SimCluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    url = urlsplit(sim.url)
    assert url.hostname is not None and url.port is not None
    _reader, writer = await asyncio.open_connection(url.hostname, url.port)
    query = f"watch=1&resourceVersion={sim.store.resource_version + 1_000_000}"
    writer.write(f"GET {PODS}?{query} HTTP/1.1\r\nHost: {url.netloc}\r\nUser-Agent: client-gone\r\n\r\n".encode())
    await writer.drain()

    def waiting() -> bool:
        return any(e["userAgent"] == "client-gone" for e in sim.audit.find("GET", PODS))

    await eventually(waiting, what="the watch waiting for its resourceVersion")
    # Reset the connection (linger 0): the server's transport is closed before the answer is written.
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()

    def answered() -> bool:
        return all("completed" in e for e in sim.audit.find("GET", PODS) if e["userAgent"] == "client-gone")

    await eventually(answered, timeout=15, what="the watch handler done")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [f"{r.name}: {r.getMessage()} {r.exc_info}" for r in errors]
