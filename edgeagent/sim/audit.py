"""A bounded request log, like the API server's audit log at `Request` level.

Tests and operators ask "who called what, with which body kind": an agent's DELETE must carry a typed
`DeleteOptions` (audit shows `requestObject: null` otherwise) and each component must be told apart by its
User-Agent. Kept in memory only, bounded, and never holding credentials (the Authorization header is not
recorded; bodies are reduced to their `apiVersion`/`kind`).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

JSON = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class AuditLog:
    """The last `limit` requests, oldest first."""

    def __init__(self, limit: int = 10_000) -> None:
        self.entries: deque[JSON] = deque(maxlen=limit)

    def middleware(self) -> Middleware:
        @web.middleware
        async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
            entry: JSON = {
                "time": time.time(),
                "verb": request.method,
                "path": request.path,
                "query": request.query_string,
                "userAgent": request.headers.get("User-Agent", ""),
                "requestObject": None,
            }
            if request.method in _WRITES and request.can_read_body:
                entry["requestObject"] = _kind_of(await request.read())
            self.entries.append(entry)
            return await handler(request)

        return record

    def find(self, verb: str | None = None, path_prefix: str = "") -> list[JSON]:
        return [e for e in self.entries
                if (verb is None or e["verb"] == verb) and str(e["path"]).startswith(path_prefix)]


def _kind_of(raw: bytes) -> JSON | None:
    """The body's type as audit would show it; `None` when it has no apiVersion/kind (an untyped body)."""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(body, dict) or not body.get("kind") or not body.get("apiVersion"):
        return None
    return {"apiVersion": body["apiVersion"], "kind": body["kind"]}
