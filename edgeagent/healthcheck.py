"""`edgeagent healthcheck`: the container image's HEALTHCHECK, probing what the running process really uses.

A HEALTHCHECK command cannot see the arguments given to `docker run IMAGE --port 13267`, nor tell the agent
from the controller run from the same image. So it finds the edgeagent process in the container (PID 1, or
the only one when an init wraps it; on a host running several, `--pid` names it), parses that process's command
line and environment with the same parser the process used, and probes the address that yields:
`/v1/healthz` on the agent's `--bind`/`--port`, `/healthz` on the controller's `--metrics-bind`/
`--metrics-port`. Standard library only: it runs every 30 s and must stay cheap.

The CLI hands in its own parser (`parse`), so this module does not import the CLI that dispatches to it
(no import cycle).
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1  # the only failure code Docker's HEALTHCHECK defines

_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
_SERVING = ("run", "controller")

# The CLI's parse_args: flags, then the EDGEAGENT_* variables of `environ`; raises on a usage error.
ParseArgs = Callable[..., argparse.Namespace]


@dataclass(frozen=True)
class Target:
    command: str
    url: str | None  # None: the process serves no HTTP endpoint (controller with --metrics-port 0)


def edgeagent_argv(cmdline: list[str]) -> list[str] | None:
    """The arguments after `edgeagent` in a process's argv, or None if it is not an edgeagent command.

    Console script: [python, /…/bin/edgeagent, run, …]; module: [python, -m, edgeagent.cli, run, …].
    """
    for i, part in enumerate(cmdline):
        if Path(part).name == "edgeagent":
            return cmdline[i + 1:]
        if part == "-m" and i + 1 < len(cmdline) and cmdline[i + 1] in ("edgeagent", "edgeagent.cli"):
            return cmdline[i + 2:]
    return None


def _host(address: str) -> str:
    host = _WILDCARDS.get(address, address)
    return f"[{host}]" if ":" in host else host


def target_of(argv: list[str], environ: Mapping[str, str], *, parse: ParseArgs) -> Target | None:
    """What to probe for a process started as `edgeagent ARGV` with `environ`; None if it serves nothing."""
    if not argv or argv[0] not in _SERVING:
        return None
    try:
        args = parse(argv, environ=environ)
    except (Exception, SystemExit):  # a usage error: it cannot be what this process was started with
        return None
    if args.command == "run":
        return Target("run", f"http://{_host(args.bind)}:{args.port}/v1/healthz")
    if args.metrics_port == 0:
        return Target("controller", None)
    return Target("controller", f"http://{_host(args.metrics_bind)}:{args.metrics_port}/healthz")


def _read_nul_separated(path: Path) -> list[str]:
    return [part.decode(errors="replace") for part in path.read_bytes().split(b"\0") if part]


@dataclass(frozen=True)
class Process:
    pid: int
    argv: list[str]  # the arguments after `edgeagent`
    environ: dict[str, str]


def read_process(pid: int, proc: Path = Path("/proc")) -> Process | None:
    """The edgeagent `run`/`controller` process `pid`, or None if it is not one (or cannot be read)."""
    try:
        argv = edgeagent_argv(_read_nul_separated(proc / str(pid) / "cmdline"))
        if argv is None or not argv or argv[0] not in _SERVING:
            return None
        environ = dict(item.partition("=")[::2] for item in _read_nul_separated(proc / str(pid) / "environ"))
    except OSError:
        return None
    return Process(pid, argv, environ)


def edgeagent_processes(proc: Path = Path("/proc"), *, exclude: Iterable[int] = ()) -> list[Process]:
    """Every edgeagent `run`/`controller` process we can read, by pid."""
    skip = set(exclude)
    pids = sorted(int(entry.name) for entry in proc.iterdir() if entry.name.isdigit())
    return [found for pid in pids if pid not in skip and (found := read_process(pid, proc)) is not None]


def choose(found: list[Process]) -> Process | str:
    """The process a HEALTHCHECK means, or why none can be chosen.

    In a container that is PID 1 when edgeagent is the entrypoint, else the only edgeagent process (under an
    init). On a host several may run (an agent, a controller, a demo's): picking one by pid order would probe
    an arbitrary one, so the caller has to name it with --pid.
    """
    if not found:
        return "no edgeagent run/controller process found"
    first = [p for p in found if p.pid == 1]
    if first:
        return first[0]
    if len(found) == 1:
        return found[0]
    listed = ", ".join(f"{p.pid} ({p.argv[0]})" for p in found)
    return f"{len(found)} edgeagent processes run here: {listed}; name one with --pid"


def find_process(proc: Path = Path("/proc"), *, exclude: Iterable[int] = ()) -> tuple[list[str],
                                                                                    dict[str, str]] | None:
    """The edgeagent `run`/`controller` process to probe (see choose): its arguments and environment."""
    chosen = choose(edgeagent_processes(proc, exclude=exclude))
    return None if isinstance(chosen, str) else (chosen.argv, chosen.environ)


def probe(url: str, timeout: float) -> str | None:
    """None when healthy, else why not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            if resp.status == 200:
                return None
            return f"{url}: HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"{url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{url}: {reason}"


def health_of(argv: list[str], environ: Mapping[str, str], timeout: float = 4.0, *,
              parse: ParseArgs) -> tuple[int, str]:
    """Exit code and one line for a process started as `edgeagent ARGV` with `environ`."""
    target = target_of(argv, environ, parse=parse)
    if target is None:
        return EXIT_UNHEALTHY, f"unhealthy: cannot tell what `edgeagent {' '.join(argv)}` serves"
    if target.url is None:
        return EXIT_HEALTHY, f"healthy: {target.command} is running (it serves no health endpoint)"
    problem = probe(target.url, timeout)
    if problem is not None:
        return EXIT_UNHEALTHY, f"unhealthy: {problem}"
    return EXIT_HEALTHY, f"healthy: {target.url}"


def main(parse: ParseArgs, pid: int | None = None) -> int:
    """Probe process `pid`, or the one `choose` picks; print one line, exit 0 healthy, 1 not."""
    if pid is not None:
        chosen: Process | str = read_process(pid) or f"pid {pid} is not an edgeagent run/controller process"
    else:
        chosen = choose(edgeagent_processes(exclude={os.getpid(), os.getppid()}))
    if isinstance(chosen, str):
        code, line = EXIT_UNHEALTHY, f"unhealthy: {chosen}"
    else:
        code, line = health_of(chosen.argv, chosen.environ, parse=parse)
    print(f"edgeagent healthcheck: {line}", file=sys.stdout if code == EXIT_HEALTHY else sys.stderr)
    return code
