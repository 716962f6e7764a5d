"""systemd notify protocol: datagrams on NOTIFY_SOCKET (path or @abstract), no-op without it."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeagent.agent.sdnotify import SdNotifier
from tests.waiting import eventually


def _receiver(address: str | bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.setblocking(False)
    return sock


def _drain(sock: socket.socket) -> list[str]:
    out: list[str] = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


@pytest.fixture
def path_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify.sock")
    sock = _receiver(path)
    yield path, sock
    sock.close()


def test_ready_status_and_stopping_reach_a_path_socket(path_socket: tuple[str, socket.socket]) -> None:
    path, sock = path_socket
    notifier = SdNotifier({"NOTIFY_SOCKET": path})
    assert notifier.enabled
    assert notifier.ready("serving 0 pods")
    assert notifier.stopping()
    notifier.close()
    assert _drain(sock) == ["READY=1\nSTATUS=serving 0 pods", "STOPPING=1\nSTATUS=stopping"]


def test_abstract_socket_name() -> None:
    name = f"edgeagent-test-{uuid.uuid4().hex}"
    sock = _receiver(b"\0" + name.encode())
    try:
        notifier = SdNotifier({"NOTIFY_SOCKET": f"@{name}"})
        assert notifier.ready()
        notifier.close()
        assert _drain(sock) == ["READY=1"]
    finally:
        sock.close()


def test_without_notify_socket_everything_is_a_no_op() -> None:
    notifier = SdNotifier({"WATCHDOG_USEC": "1000000"})
    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    assert not notifier.ready()


def test_missing_receiver_is_logged_not_raised(tmp_path: Path) -> None:
    notifier = SdNotifier({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock")})
    assert notifier.ready() is False


def test_watchdog_pid_of_another_process_disables_pings(path_socket: tuple[str, socket.socket]) -> None:
    path, _ = path_socket
    notifier = SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid() + 1)})
    assert notifier.watchdog_interval is None
    mine = SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid())})
    assert mine.watchdog_interval == pytest.approx(0.1)


async def test_watchdog_pings_repeatedly_until_cancelled(path_socket: tuple[str, socket.socket]) -> None:
    path, sock = path_socket
    notifier = SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "40000"})
    received: list[str] = []
    task = asyncio.create_task(notifier.run_watchdog())
    try:
        await eventually(lambda: received.extend(_drain(sock)) or received.count("WATCHDOG=1") >= 3,
                         timeout=5, what="three WATCHDOG=1 pings")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        notifier.close()
    assert set(received) == {"WATCHDOG=1"}
