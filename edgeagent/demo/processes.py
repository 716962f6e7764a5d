"""The processes `edgeagent demo` runs: the controller and agents, and the commands it shows.

The controller and the agents run as separate `edgeagent` processes, exactly as an operator starts
them, so that killing an agent with SIGKILL is a real crash and a restart really reads its state
from disk. Their logs go to files in the demo's work directory, keeping the narration readable.
The commands the demo prints (kubectl, curl, `edgeagent pods`, …) really run, as child processes,
and what they print is what the demo shows. Every child is tied to the demo's life (Linux
PR_SET_PDEATHSIG): if the demo process is killed, they get SIGTERM instead of running on.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shlex
import signal
import socket
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

JSON = dict[str, Any]

# Inherited settings must not change what the demo runs (a token file would make upgrades answer 401).
_STRIPPED_ENV_PREFIXES = ("EDGEAGENT_",)
_STRIPPED_ENV = ("KUBECONFIG", "NODE_NAME", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM it when the demo process dies (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)


def free_port(avoid: Collection[int] = ()) -> int:
    """A port nothing listens on right now, so the demo never collides with a real agent on 10267.

    `avoid`: ports already handed out but perhaps not bound yet; the kernel may offer one of them again.
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_STRIPPED_ENV_PREFIXES) and k not in _STRIPPED_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Proc:
    """One `edgeagent` subcommand running as a child process, its output appended to `log_path`."""

    def __init__(self, name: str, args: list[str], log_path: Path) -> None:
        self.name = name
        self.args = args
        self.log_path = log_path
        self._process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        return self._process.pid if self._process is not None else -1

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def command_line(self) -> str:
        return "edgeagent " + " ".join(self.args)

    async def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log_file:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "edgeagent.cli", *self.args,
                stdin=asyncio.subprocess.DEVNULL, stdout=log_file, stderr=log_file, env=child_env(),
                preexec_fn=die_with_parent,
            )

    async def kill(self) -> int:
        """SIGKILL: no shutdown code runs, as in a power cut or an OOM kill."""
        process = self._require()
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
        return await process.wait()

    async def terminate(self, timeout: float) -> int | None:
        """SIGTERM and wait; returns the exit code, or None if it had to be killed after `timeout`."""
        process = self._process
        if process is None:
            return None
        if process.returncode is not None:
            return process.returncode
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
            await process.wait()
            return None

    def log_tail(self, lines: int = 5) -> list[str]:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def _require(self) -> asyncio.subprocess.Process:
        if self._process is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._process


@dataclass(frozen=True)
class Ran:
    """One shown command: what it was, what it printed, how it ended."""

    shown: str  # the command line as printed (program name, shell quoting)
    code: int
    out: str
    err: str


async def run_command(argv: list[str], *, shown: str | None = None, env: dict[str, str] | None = None,
                      timeout: float = 20.0) -> Ran:
    """Run a command the demo prints and capture its output; it is killed after `timeout` seconds."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env if env is not None else child_env(), preexec_fn=die_with_parent)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    code = process.returncode if process.returncode is not None else -9
    return Ran(shown or shlex.join(argv), code, out.decode(errors="replace"), err.decode(errors="replace"))


class AgentHttp:
    """Plain HTTP to one agent, as `curl` on the node would do it; every call has a deadline."""

    def __init__(self, session: aiohttp.ClientSession, port: int, timeout: float = 5.0) -> None:
        self.session = session
        self.base = f"http://127.0.0.1:{port}"
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    async def call(self, method: str, path: str, *, accept_json: bool = False) -> tuple[int, str]:
        headers = {"Accept": "application/json"} if accept_json else {}
        async with self.session.request(method, self.base + path, headers=headers, timeout=self.timeout) as resp:
            return resp.status, await resp.text()

    async def get_json(self, path: str) -> JSON:
        status, text = await self.call("GET", path, accept_json=True)
        if status != 200:
            raise RuntimeError(f"GET {path} answered {status}: {text.strip()}")
        body = json.loads(text)
        if not isinstance(body, dict):
            raise ValueError(f"GET {path} did not answer a JSON object")
        return body

    async def readyz(self) -> JSON:
        return await self.get_json("/v1/readyz")

    async def pods(self) -> list[JSON]:
        return [p for p in (await self.get_json("/pods")).get("items") or [] if isinstance(p, dict)]

    async def upgrades(self) -> list[JSON]:
        return [r for r in (await self.get_json("/openyurt.io/v1/upgrades")).get("items") or []
                if isinstance(r, dict)]

    @staticmethod
    def upgrade_path(namespace: str, name: str) -> str:
        return f"/openyurt.io/v1/namespaces/{namespace}/pods/{name}/upgrade"
