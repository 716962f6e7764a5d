"""systemd notify protocol: datagrams on NOTIFY_SOCKET (path or @abstract), no-op without it."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeagent.agent.sdnotify import SdNotifier
from tests.support.notify import NotifyReceiver
from tests.support.waiting import eventually


@pytest.fixture
def path_socket(tmp_path: Path) -> Iterator[tuple[str, NotifyReceiver]]:
    path = str(tmp_path / "notify.sock")
    with NotifyReceiver(path) as receiver:
        yield path, receiver


def test_ready_status_and_stopping_reach_a_path_socket(path_socket: tuple[str, NotifyReceiver]) -> None:
    path, receiver = path_socket
    notifier = SdNotifier({"NOTIFY_SOCKET": path})
    assert notifier.enabled
    assert notifier.ready("serving 0 pods")
    assert notifier.stopping()
    notifier.close()
    assert receiver.messages() == ["READY=1\nSTATUS=serving 0 pods", "STOPPING=1\nSTATUS=stopping"]


def test_abstract_socket_name() -> None:
    name = f"edgeagent-test-{uuid.uuid4().hex}"
    with NotifyReceiver(b"\0" + name.encode()) as receiver:
        notifier = SdNotifier({"NOTIFY_SOCKET": f"@{name}"})
        assert notifier.ready()
        notifier.close()
        assert receiver.messages() == ["READY=1"]


def test_without_notify_socket_everything_is_a_no_op() -> None:
    notifier = SdNotifier({"WATCHDOG_USEC": "1000000"})
    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    assert not notifier.ready()


def test_missing_receiver_is_logged_not_raised(tmp_path: Path) -> None:
    notifier = SdNotifier({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock")})
    assert notifier.ready() is False


def test_watchdog_pid_of_another_process_disables_pings(path_socket: tuple[str, NotifyReceiver]) -> None:
    path, _ = path_socket
    notifier = SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid() + 1)})
    assert notifier.watchdog_interval is None
    mine = SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid())})
    assert mine.watchdog_interval == pytest.approx(0.1)


async def test_watchdog_pings_repeatedly_until_cancelled(path_socket: tuple[str, NotifyReceiver]) -> None:
    path, receiver = path_socket
    notifier = SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "40000"})
    task = asyncio.create_task(notifier.run_watchdog())
    try:
        await eventually(lambda: receiver.messages().count("WATCHDOG=1") >= 3,
                         timeout=5, what="three WATCHDOG=1 pings")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        notifier.close()
    assert set(receiver.messages()) == {"WATCHDOG=1"}
