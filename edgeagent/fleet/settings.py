"""The dashboard's settings, and what counts as loopback (the only default it serves on)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from edgeagent.config import LogConfig


@dataclass(frozen=True)
class DashboardConfig:
    kubeconfig: Path | None = None
    bind: str = "127.0.0.1"
    port: int = 8080
    log: LogConfig = field(default_factory=LogConfig)
    # Printed on stderr once the page is served (a non-loopback --bind): not before, so that a bind that fails
    # is one line of error and nothing else.
    warning: str = ""
    context: str | None = None  # a kubeconfig context instead of its current-context
    # `--allow-actions`: promote, pause, resume and abort buttons on each rollout's card, writing the plan with
    # the kubeconfig's credentials (edgeagent.fleet.actions); off, the page is read-only and has no such route.
    allow_actions: bool = False


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1 or `localhost`: reachable from this machine only."""
    host = address.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
