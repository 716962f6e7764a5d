"""wrk (the Debian package) as the `GET /pods` load generator, pinned to one core, servers to the other.

A load generator in Python needs about a core by itself and saturates before either server does, which
compresses the agent/bare ratio toward 1; wrk (C, epoll) outruns both by a wide margin on one core.
`ensure()` finds it, installs the Debian package when run as root with apt-get (noting so), or stops
with how to install it. `pin()` moves a running process, all its threads, to one core (taskset -a).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from bench.common import note

_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
_TIME_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


class WrkMissing(RuntimeError):
    pass


def ensure() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        note("wrk not found: installing the Debian package (apt-get install -y wrk)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
            subprocess.run(command, env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        found = shutil.which("wrk")
        if found:
            return found
    raise WrkMissing("wrk is needed for the GET /pods throughput figures: install the Debian package "
                     "(`sudo apt-get install wrk`), or run agent_http.py with --generator python")


def cores() -> tuple[int, int] | None:
    """(client core, server core), or None on a one-core machine (then nothing is pinned)."""
    available = sorted(os.sched_getaffinity(0))
    return (available[0], available[-1]) if len(available) >= 2 else None


def pin(pid: int, core: int) -> None:
    """Every thread of `pid` onto `core` (the agent has executor threads besides its event loop)."""
    subprocess.run(["taskset", "-a", "-p", "-c", str(core), str(pid)], check=True, stdout=subprocess.DEVNULL)


@dataclass
class Run:
    requests: int
    seconds: float
    read_bytes: float
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int


def _size(number: str, unit: str) -> float:
    return float(number) * _UNITS[unit.upper()]


def _latency(text: str, percent: str) -> float:
    found = re.search(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.MULTILINE)
    if not found:
        raise RuntimeError(f"no {percent}% latency in wrk output:\n{text}")
    return float(found[1]) * _TIME_UNITS[found[2]]


def parse(text: str) -> Run:
    total = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m), ([\d.]+)([KMGT]?B) read", text)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if not total or not rps:
        raise RuntimeError(f"unexpected wrk output:\n{text}")
    seconds = float(total[2]) * {"ms": 0.001, "s": 1.0, "m": 60.0}[total[3]]
    errors = 0
    for pattern in (r"Non-2xx or 3xx responses: (\d+)", r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                    r"timeout (\d+)"):
        found = re.search(pattern, text)
        if found:
            errors += sum(int(g) for g in found.groups())
    return Run(requests=int(total[1]), seconds=seconds, read_bytes=_size(total[4], total[5]), rps=float(rps[1]),
               p50_ms=_latency(text, "50"), p99_ms=_latency(text, "99"), errors=errors)


async def run(wrk: str, url: str, *, duration: float, connections: int, core: int | None) -> Run:
    command = [wrk, "-t1", f"-c{connections}", f"-d{duration:g}s", "--latency", url]
    if core is not None:
        command = ["taskset", "-c", str(core), *command]
    proc = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}):\n{text}")
    return parse(text)
