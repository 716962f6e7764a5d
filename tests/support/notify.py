"""systemd's side of the notify protocol, so tests can check what the agent tells its service manager."""

from __future__ import annotations

import socket
from types import TracebackType


class NotifyReceiver:
    """A non-blocking datagram socket at `address`: a path, or b"\\0name" for an abstract one (`@name`)."""

    def __init__(self, address: str | bytes) -> None:
        self.address = address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(address)
        self._sock.setblocking(False)
        self._received: list[str] = []

    def messages(self) -> list[str]:
        """Every datagram received so far, oldest first (never waits: poll it with `eventually`)."""
        while True:
            try:
                self._received.append(self._sock.recv(4096).decode())
            except BlockingIOError:
                return list(self._received)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> NotifyReceiver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
