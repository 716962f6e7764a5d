"""structlog set-up: JSON lines under a service manager, readable lines on a terminal."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from edgeagent.config import LogConfig

_SECRET_KEYS = ("token", "authorization", "password", "secret")


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Never let a credential reach a log line, whoever passed it in."""
    for key in list(event):
        if any(word in key.lower() for word in _SECRET_KEYS):
            event[key] = "[redacted]"
    return event


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


def get(name: str) -> Any:
    return structlog.get_logger(name)
