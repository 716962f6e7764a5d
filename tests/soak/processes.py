"""The soak's real processes (sim, controllers, agents): started, killed and restarted by the schedule, and
watched, so that an exit nobody asked for is recorded as a violation instead of passing unnoticed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

JSON = dict[str, Any]


def clean_env() -> dict[str, str]:
    """No EDGEAGENT_* or KUBECONFIG from the caller's shell may change what the processes do."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEAGENT_")}
    env.pop("KUBECONFIG", None)
    return env


class Proc:
    """One named process, restartable; every exit is recorded with whether the schedule caused it."""

    def __init__(self, name: str, argv: list[str], log: Path, exits: list[JSON],
                 on_unexpected: Callable[[Proc], None] | None = None, prefix: list[str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.prefix = prefix or []
        self.log = log
        self.exits = exits
        self.on_unexpected = on_unexpected
        self.proc: asyncio.subprocess.Process | None = None
        self._expected = False
        self._watch: asyncio.Task[None] | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    async def start(self) -> None:
        if self.running:
            return
        self._expected = False
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.prefix, sys.executable, "-m", "edgeagent.cli", *self.argv, stdin=asyncio.subprocess.DEVNULL,
                stdout=out, stderr=asyncio.subprocess.STDOUT, env=clean_env(), start_new_session=True)
        self.starts += 1
        self._watch = asyncio.create_task(self._watch_exit(self.proc), name=f"watch-{self.name}")

    async def _watch_exit(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        expected = self._expected
        self.exits.append({"name": self.name, "code": code, "expected": expected, "t": time.time()})
        if not expected and self.on_unexpected is not None:
            self.on_unexpected(self)

    async def signal(self, sig: int, wait: float = 15.0) -> int | None:
        """Send `sig` (the exit it causes is expected) and wait for the exit; SIGKILL after `wait`."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return None
        self._expected = True
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            async with asyncio.timeout(wait):
                return await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return await proc.wait()

    async def kill9(self) -> int | None:
        return await self.signal(signal.SIGKILL)

    async def stop(self) -> int | None:
        return await self.signal(signal.SIGTERM)

    async def close(self) -> None:
        """End the process (expected) and its watcher."""
        await self.stop()
        if self._watch is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
