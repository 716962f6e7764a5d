"""The shutdown and failure reporting that `edgeagent run` and `edgeagent controller` share."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

from edgeagent.service import describe, run_until_signalled


class _Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append((event, kw))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_sets_stop_and_the_handlers_are_removed_afterwards(sig: signal.Signals) -> None:
    logger = _Recorder()

    async def service(stop: asyncio.Event) -> None:
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(stop.wait(), 5)

    await run_until_signalled(service, logger)
    assert logger.lines == [("signal_received_shutting_down", {"signal": sig.name})]
    loop = asyncio.get_running_loop()
    assert not loop.remove_signal_handler(signal.SIGTERM)
    assert not loop.remove_signal_handler(signal.SIGINT)


def test_describe_names_every_member_of_a_task_group_failure() -> None:
    group = ExceptionGroup("tasks", [OSError("disk full"), ExceptionGroup("inner", [KeyError("x")])])
    assert describe(group) == "OSError: disk full; KeyError: 'x'"
