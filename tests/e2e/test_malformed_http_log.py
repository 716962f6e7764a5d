"""Malformed HTTP gets a clean 400 and at most one log line, rate-limited, no traceback (issue 38 item 2).

Any local process can send a 10 KB URL or header, or a request line that is not HTTP, to the agent or the
dashboard. aiohttp answered 400 but wrote a multi-line traceback per request into the JSON log: a flood of them
fills the journal. Both processes are run as a service manager runs them (stderr a pipe, JSON lines), and hit
over raw sockets.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from edgeagent.log import RateLimit
from edgeagent.sim.cluster import SimCluster
from tests.integration.agent_api.conftest import closed_port, write_kubeconfig
from tests.support.waiting import eventually

MALFORMED = [
    b"GET /" + b"a" * 10240 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # a 10 KB URL
    b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 10240 + b"\r\n\r\n",  # a 10 KB header
    b"BLAH\r\n\r\n",  # not a request line
    b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",  # a header line without a colon
]
FLOOD = 20
BURST = RateLimit().burst
_READERS: list[asyncio.Task[None]] = []


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGEAGENT_", "NOTIFY_", "WATCHDOG_"))}
    env.pop("KUBECONFIG", None)
    return env


async def _send(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def _hit(port: int, lines: list[str]) -> None:
    """Every malformed request answered 400; then at most one line each, none a traceback, all JSON."""
    started = time.monotonic()
    for data in MALFORMED + [MALFORMED[2]] * FLOOD:
        answer = await _send(port, data)
        assert answer.startswith(b"HTTP/1.0 400 Bad Request") or answer.startswith(b"HTTP/1.1 400 Bad Request"), \
            answer[:200]
    sent = len(MALFORMED) + FLOOD
    await eventually(lambda: any('"http_request_malformed"' in line for line in lines), what="the first line")
    elapsed = time.monotonic() - started
    assert not [line for line in lines if not line.startswith("{")], lines  # no traceback, no plain text
    records = [json.loads(line) for line in lines]
    malformed = [r for r in records if r["event"] == "http_request_malformed"]
    # Rate-limited: BURST a minute (a slow machine may span a second minute), never one per request.
    assert 1 <= len(malformed) <= BURST * (1 + int(elapsed // 60)) < sent, malformed
    assert all(r["status"] == 400 and "exception" not in r and len(r["error"]) <= 203 for r in malformed)
    assert not [r for r in records if r["level"] == "error"], records


async def _run(args: list[str], listening: str) -> tuple[asyncio.subprocess.Process, list[str], int]:
    proc = await asyncio.create_subprocess_exec(*args, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=_env())
    lines: list[str] = []
    out: list[str] = []

    async def read(stream: asyncio.StreamReader | None, into: list[str]) -> None:
        assert stream is not None
        async for raw in stream:
            into.append(raw.decode(errors="replace").rstrip("\n"))

    # Read until the process ends (the tasks end with their streams; _stop waits for the process).
    _READERS.extend([asyncio.create_task(read(proc.stderr, lines)), asyncio.create_task(read(proc.stdout, out))])

    def port() -> int | None:
        for line in lines + out:
            if line.startswith("{") and json.loads(line).get("event") == listening:
                return int(json.loads(line)["port"])
            if listening in line and "127.0.0.1:" in line:
                return int(line.rsplit(":", 1)[-1].split("/", 1)[0])
        return None

    return proc, lines, await eventually(port, timeout=30, what=f"{args[3]} to listen")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 15)
    while _READERS:
        await asyncio.wait_for(_READERS.pop(), 15)


async def test_the_agent_answers_400_and_logs_one_line_at_most(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed_port()}")
    args = [sys.executable, "-m", "edgeagent.cli", "run", "--node-name", "edge-1", "--kubeconfig", str(kubeconfig),
            "--port", "0", "--state-dir", str(tmp_path / "state"), "--log-level", "debug"]
    proc, lines, port = await _run(args, "agent_listening")
    try:
        await _hit(port, lines)
    finally:
        await _stop(proc)


async def test_the_dashboard_answers_400_and_logs_one_line_at_most(sim: SimCluster) -> None:
    args = [sys.executable, "-m", "edgeagent.cli", "dashboard", "--kubeconfig", str(sim.admin_kubeconfig),
            "--port", "0", "--log-format", "json"]
    proc, lines, port = await _run(args, "edgeagent dashboard: serving")
    try:
        await _hit(port, lines)
    finally:
        await _stop(proc)


@pytest.mark.parametrize("burst", [1, 5])
def test_the_rate_limit_holds_back_past_its_burst_and_counts_what_it_held(burst: int) -> None:
    now = [0.0]
    limit = RateLimit(burst=burst, per=60.0, clock=lambda: now[0])
    assert [limit.allow() for _ in range(burst + 3)] == [0] * burst + [None] * 3
    now[0] = 59.9
    assert limit.allow() is None
    now[0] = 60.0
    assert limit.allow() == 4  # the next window's first line says how many were held back
    assert limit.allow() == (0 if burst > 1 else None)
