"""Ports for the simulated cluster's listeners, chosen below the kernel's ephemeral range.

A restarted sim must bind the very ports its kubeconfigs name (running agents keep using them). A port from
the ephemeral range can meanwhile be taken by any outgoing connection, even by one of the agent's own retries
to that closed port (a TCP self-connect keeps it), and the restart then fails with `Address already in use`.
Outgoing connections never use ports below the ephemeral range, so those stay free for the restart.
"""

from __future__ import annotations

import errno
import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 20000  # above well-known service ports (and our own 10267/10268)
_TRIES = 200


def ephemeral_floor() -> int:
    """The first port the kernel hands to outgoing connections (32768 on Linux unless configured)."""
    try:
        low = int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low


def bind_stable(bind: Callable[[int], T], *, rng: random.Random | None = None,
                span: tuple[int, int] | None = None) -> T:
    """`bind(port)` on random ports below the ephemeral range until one is free; the ephemeral range (port 0)
    as the last resort, when the range below is too small or full.

    With `span` (first, last), only ports of that range, and no fallback: the operator chose it so that
    other sims on the machine cannot take the ports this one must bind again after a restart."""
    pick = rng or random.Random()
    if span is not None:
        first, last = span
        for _ in range(_TRIES):
            try:
                return bind(pick.randint(first, last))
            except OSError:
                continue
        raise OSError(errno.EADDRINUSE, f"no free port in --port-range {first}-{last} after {_TRIES} tries")
    top = ephemeral_floor()
    if top - _LOWEST >= 1000:
        for _ in range(_TRIES):
            try:
                return bind(pick.randrange(_LOWEST, top))
            except OSError:
                continue
    return bind(0)


def free_stable_port(host: str, span: tuple[int, int] | None = None) -> int:
    """A port free now below the ephemeral range (for servers that bind it themselves right after)."""

    def probe(port: int) -> int:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            return int(sock.getsockname()[1])

    return bind_stable(probe, span=span)
