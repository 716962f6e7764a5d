"""Process plumbing shared by the long-running commands (`edgeagent run`, `edgeagent controller`).

Both stop the same way on SIGTERM/SIGINT (set an event the service waits on, so it can shut down in
its own order instead of being cancelled mid-write) and report failures the same way; keeping that in
one place means the agent and the controller cannot drift apart in how they end.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def run_until_signalled(run: Callable[[asyncio.Event], Awaitable[None]], logger: Any) -> None:
    """Await `run(stop)`, where `stop` is set by SIGTERM or SIGINT (logged on `logger`)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        logger.info("signal_received_shutting_down", signal=sig.name)
        stop.set()

    for sig in _SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await run(stop)
    finally:
        for sig in _SIGNALS:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)


def describe(exc: BaseException) -> str:
    """One line for an unexpected failure; a TaskGroup's ExceptionGroup lists every member."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def bound_port(runner: web.AppRunner, configured: int) -> int:
    """The port actually listened on, which differs from the configured one when that is 0 (ephemeral)."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return configured
