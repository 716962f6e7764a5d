"""The real kubectl as a subprocess, against a simulated cluster, for tests that compare what it prints.

kubectl runs through asyncio.create_subprocess_exec because the sim serves from the test's own event loop
(a blocking call would freeze the server kubectl is talking to). Each Kubectl has its own `--cache-dir`,
so no discovery or OpenAPI cache is shared between tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

KUBECTL = shutil.which("kubectl")


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


class Kubectl:
    def __init__(self, kubeconfig: Path, cache_dir: Path) -> None:
        self.base = [str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache_dir),
                     "--request-timeout", "20s"]

    async def run(self, *args: str, stdin: str | None = None, timeout: float = 30) -> Result:
        proc = await asyncio.create_subprocess_exec(
            *self.base, *args, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode is not None
        return Result(proc.returncode, out.decode(), err.decode())

    async def __call__(self, *args: str, stdin: str | None = None, timeout: float = 30) -> str:
        """stdout of a command that must succeed."""
        result = await self.run(*args, stdin=stdin, timeout=timeout)
        assert result.code == 0, f"kubectl {' '.join(args)} exited {result.code}: {result.err}"
        return result.out

    @contextlib.asynccontextmanager
    async def stream(self, *args: str) -> AsyncIterator[asyncio.StreamReader]:
        proc = await asyncio.create_subprocess_exec(*self.base, *args, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL)
        assert proc.stdout is not None
        try:
            yield proc.stdout
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


def table(text: str) -> tuple[list[str], list[list[str]]]:
    """kubectl's column output → (header, rows), split on runs of 2+ spaces (cells like `NOMINATED NODE`
    and `Ready,SchedulingDisabled` keep their single spaces/commas)."""
    lines = [line for line in text.splitlines() if line.strip()]
    split = [re.split(r"\s{2,}", line.strip()) for line in lines]
    return split[0], split[1:]
