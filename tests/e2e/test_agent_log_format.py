"""What `edgeagent run` writes to stderr when nobody chose a log format: JSON lines under a service manager
(stderr is a pipe), readable lines on a terminal; and never the bearer token, right or wrong, at any level."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.agent_api.conftest import closed_port, ds_pod, seed_snapshot, write_kubeconfig
from tests.support.waiting import eventually

NODE = "edge-1"
TOKEN = "tok-9f2c1e7a55d04b3c8e21-secret"
WRONG = "tok-0000-wrong-guess-1111"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGEAGENT_", "NOTIFY_", "WATCHDOG_"))}
    env.pop("KUBECONFIG", None)
    return env


async def _offline_args(tmp_path: Path) -> list[str]:
    """An agent whose cloud is a closed port, with one upgradable pod in its snapshot."""
    state_dir = tmp_path / "state"
    await seed_snapshot(state_dir, [ds_pod("a"), ds_pod("b")])
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed_port()}")
    return [sys.executable, "-m", "edgeagent.cli", "run", "--node-name", NODE, "--kubeconfig", str(kubeconfig),
            "--port", "0", "--state-dir", str(state_dir), "--probe-interval", "0.1", "--probe-timeout", "0.3"]


async def test_json_lines_when_stderr_is_not_a_terminal_and_no_token_in_them(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    args = [*await _offline_args(tmp_path), "--token-file", str(token_file), "--log-level", "debug"]
    proc = await asyncio.create_subprocess_exec(*args, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                                                env=_env())
    lines: list[str] = []

    async def read() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            lines.append(raw.decode(errors="replace").rstrip("\n"))

    reader = asyncio.create_task(read())
    try:
        def listening() -> dict[str, Any] | None:
            for line in lines:
                if line.startswith("{") and json.loads(line).get("event") == "agent_listening":
                    return dict(json.loads(line))
            return None

        record = await eventually(listening, timeout=20, what="the agent to listen")
        url = f"http://127.0.0.1:{record['port']}"
        upgrade = f"{url}/openyurt.io/v1/namespaces/default/pods/a/upgrade"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            for value, code in ((WRONG, 401), (f"{TOKEN}x", 401), (TOKEN, 202)):
                async with http.post(upgrade, headers={"Authorization": f"Bearer {value}",
                                                       "Accept": "application/json"}) as resp:
                    assert resp.status == code
                    if code == 202:
                        request_id = (await resp.json())["id"]
            async with http.delete(f"{url}/openyurt.io/v1/upgrades/{request_id}",
                                   headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
                assert resp.status == 200
        # The link monitor says so in the logs too (the cloud is a closed port).
        await eventually(lambda: any('"cloud_link_not_reachable"' in line for line in lines),
                         what="the offline link logged")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
        await asyncio.wait_for(reader, 5)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    records = [json.loads(line) for line in lines if line]
    assert records and all(isinstance(r, dict) and {"event", "level", "timestamp"} <= r.keys() for r in records)
    assert any(r["event"] == "upgrade_request" for r in records)  # the accepted request was logged...
    text = "\n".join(lines)
    assert TOKEN not in text and WRONG not in text  # ...without any token, even at debug level


async def test_readable_lines_on_a_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = await asyncio.create_subprocess_exec(*await _offline_args(tmp_path), stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=slave, env=_env())
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        await eventually(lambda: b"agent_listening" in b"".join(chunks), timeout=20, what="the agent to listen")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await asyncio.to_thread(reader.join, 5)
        os.close(master)
    lines = [line for line in b"".join(chunks).decode(errors="replace").splitlines() if line.strip()]
    listening = next(line for line in lines if "agent_listening" in line)
    assert not listening.lstrip().startswith("{"), listening
    assert "port=" in listening and "node=" in listening  # key=value pairs for people, not JSON
