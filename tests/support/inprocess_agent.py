"""An agent run on the test's own event loop, the way `edgeagent run` runs it, up to the moment it listens.

Shared by every fixture that starts agents in-process, so that "ready", "failed to start" and "stopped the
way SIGTERM stops it" mean the same thing in every test directory.
"""

from __future__ import annotations

import asyncio
import contextlib

from edgeagent.agent.app import Agent

START_TIMEOUT = 10.0


class RunningAgent:
    def __init__(self, agent: Agent, stop: asyncio.Event, task: asyncio.Task[None]) -> None:
        self.agent = agent
        self._stop = stop
        self.task = task

    @property
    def url(self) -> str:
        return self.agent.url

    async def stop(self, timeout: float = 10) -> None:
        """SIGTERM's path: set the stop event and wait for the orderly shutdown; its errors fail the test."""
        self._stop.set()
        await asyncio.wait_for(self.task, timeout)


async def start_in_process(agent: Agent) -> RunningAgent:
    """`agent` running and listening. A start-up error is raised as it is; an agent that neither listens nor
    fails within 10 s is stopped and fails the test."""
    ready, stop = asyncio.Event(), asyncio.Event()
    handle = RunningAgent(agent, stop, asyncio.create_task(agent.run(ready=ready, stop=stop)))
    ready_wait = asyncio.create_task(ready.wait())
    await asyncio.wait({ready_wait, handle.task}, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
    if handle.task.done():
        ready_wait.cancel()
        handle.task.result()  # raises the start-up error
        raise AssertionError("agent stopped before it was ready")
    if not ready_wait.done():
        ready_wait.cancel()
        with contextlib.suppress(Exception):  # the timeout is the failure to report
            await handle.stop()
        raise AssertionError(f"agent not ready within {START_TIMEOUT:g} s")
    return handle
