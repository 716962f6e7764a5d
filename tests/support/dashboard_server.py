"""`edgeagent dashboard` in the test's event loop on a free loopback port (one copy for every dashboard test)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from edgeagent.fleet.dashboard import serve
from edgeagent.fleet.settings import DashboardConfig


@contextlib.asynccontextmanager
async def dashboard(kubeconfig: Path, *, allow_actions: bool = False) -> AsyncIterator[str]:
    """Serve the dashboard with `kubeconfig`'s credentials (with `--allow-actions`'s buttons when asked); yields
    its URL, stops it on exit."""
    stop = asyncio.Event()
    url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    cfg = DashboardConfig(kubeconfig=kubeconfig, bind="127.0.0.1", port=0, allow_actions=allow_actions)
    task = asyncio.create_task(serve(cfg, ready=url.set_result, stop=stop))
    try:
        yield await asyncio.wait_for(asyncio.shield(url), 20)
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
