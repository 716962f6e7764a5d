"""systemd's notify protocol (`Type=notify`, `WatchdogSec=`), without libsystemd.

The protocol is one datagram per message on the unix socket named by `NOTIFY_SOCKET` (a leading `@`
means the abstract namespace). READY=1 tells systemd that `GET /pods` already answers; WATCHDOG=1 is
sent from the event loop itself, so a wedged loop stops the pings and systemd restarts the agent.
Without `NOTIFY_SOCKET` (not under systemd) every call is a no-op.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping

from edgeagent import log

_log = log.get("edgeagent.sdnotify")


class SdNotifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        self._address: str | bytes | None = None
        if raw.startswith("@"):
            self._address = b"\0" + raw[1:].encode()
        elif raw.startswith("/"):
            self._address = raw
        elif raw:
            _log.warning("notify_socket_ignored", notify_socket=raw, why="not an absolute path or @abstract name")
        self._watchdog_interval: float | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        # WATCHDOG_PID names the process the watchdog is meant for; a child that inherited it must not ping.
        if usec and (not pid or pid == str(os.getpid())):
            try:
                value = int(usec)
            except ValueError:
                _log.warning("watchdog_usec_ignored", watchdog_usec=usec, why="not an integer")
            else:
                if value > 0:
                    self._watchdog_interval = value / 1e6 / 2
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC, as sd_watchdog_enabled advises)."""
        return self._watchdog_interval if self.enabled else None

    def notify(self, *lines: str) -> bool:
        """Send one message; failures are logged, never raised: systemd's absence must not stop the agent."""
        if self._address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto("\n".join(lines).encode(), self._address)
        except OSError as exc:
            _log.warning("sd_notify_failed", error=str(exc), message=lines[0] if lines else "")
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def stopping(self, status: str = "stopping") -> bool:
        return self.notify("STOPPING=1", f"STATUS={status}")

    async def run_watchdog(self) -> None:
        """Ping every WATCHDOG_USEC/2 until cancelled; returns at once when no watchdog is asked for."""
        interval = self.watchdog_interval
        if interval is None:
            return
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(interval)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
