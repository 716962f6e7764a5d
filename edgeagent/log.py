"""structlog set-up: JSON lines under a service manager, readable lines on a terminal.

aiohttp's own server log (`aiohttp.server`) goes through it too: any local process can send malformed HTTP (a
10 KB URL or header, a request line that is not HTTP), which aiohttp answers 400 and logged as a multi-line
traceback on stderr, one per request. Here each becomes at most one line, rate-limited, without a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import structlog
from aiohttp.http_exceptions import HttpProcessingError

from edgeagent.config import LogConfig

_SECRET_KEYS = ("token", "authorization", "password", "secret")


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Never let a credential reach a log line, whoever passed it in."""
    for key in list(event):
        if any(word in key.lower() for word in _SECRET_KEYS):
            event[key] = "[redacted]"
    return event


class RateLimit:
    """At most `burst` lines per `per` seconds; what was held back is counted and reported with the next one."""

    def __init__(self, burst: int = 5, per: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self._per, self._clock = burst, per, clock
        self._window_start = -math.inf
        self._used = 0
        self.suppressed = 0

    def allow(self) -> int | None:
        """None: hold this one back. Otherwise how many were held back since the last one allowed."""
        now = self._clock()
        if now - self._window_start >= self._per:
            self._window_start, self._used = now, 0
        if self._used >= self.burst:
            self.suppressed += 1
            return None
        self._used += 1
        held, self.suppressed = self.suppressed, 0
        return held


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit] + "..."


class _ServerLog(logging.Handler):
    """aiohttp's server records as structlog lines: a malformed request (its 400 is already answered) as one
    `http_request_malformed` line without a traceback, rate-limited; anything else as one error line."""

    def __init__(self, limit: RateLimit) -> None:
        super().__init__(logging.DEBUG)
        self._limit = limit
        self._log = get("aiohttp.server")

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            held = self._limit.allow()
            if held is not None:
                remote = record.args[0] if isinstance(record.args, tuple) and record.args else None
                self._log.info("http_request_malformed", status=exc.code, remote=remote,
                               error=_first_line(exc.message), suppressed=held)
            return
        self._log.error("aiohttp_server_error", message=record.getMessage(), exc_info=record.exc_info or None)


def configure(config: LogConfig | None = None, stream: Any = None) -> None:
    config = config or LogConfig()
    out = stream or sys.stderr
    level = logging.getLevelNamesMapping().get(config.level.upper(), logging.INFO)
    use_json = config.format == "json" or (config.format == "auto" and not out.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    server = logging.getLogger("aiohttp.server")
    server.handlers = [_ServerLog(RateLimit())]
    server.setLevel(logging.DEBUG)  # aiohttp logs a first request that is not HTTP at debug: one line, like any
    server.propagate = False


@contextlib.contextmanager
def quiet(stream: Any) -> Iterator[None]:
    """Only critical lines, to `stream`, while a command runs; the caller's configuration back afterwards.

    A command's stdout and stderr carry its own lines (the kube client's warnings would mix in), and whoever runs
    it in-process (a test, another command) keeps its own logging: a command that left the log at `critical`
    silenced every later test in the same worker that reads the log."""
    saved = structlog.get_config()
    configure(LogConfig(level="critical"), stream=stream)
    try:
        yield
    finally:
        structlog.configure(**saved)


def get(name: str) -> Any:
    return structlog.get_logger(name)
