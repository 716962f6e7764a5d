"""A bounded request log, like the API server's audit log at `Request` level.

Tests and operators ask "who called what, with which body kind": an agent's DELETE must carry a typed
`DeleteOptions` (audit shows `requestObject: null` otherwise) and each component must be told apart by its
User-Agent. Kept in memory only, bounded, and never holding credentials (the Authorization header is not
recorded; bodies are reduced to their `apiVersion`/`kind`).

Each entry gets the answer's status `code` when the request completes (a watch's when it ends), and a pod
DELETE gets the store's record of it (`delete`: outcome, UID precondition and, when the store captures it,
the pod's state at that instant); a PATCH of a pod's spec (an in-place upgrade) gets the same record as
`patch`. With a `path`, completed entries are also appended to that file as JSON
lines (like kube-apiserver's `--audit-log-path`): it outlives the process, so a history spanning restarts
of the sim can be checked afterwards.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any

from aiohttp import web
from aiohttp.typedefs import Middleware

JSON = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The entry of the request being handled in this task, so that the server can add what the store recorded.
_CURRENT: ContextVar[JSON | None] = ContextVar("edgeagent_sim_audit_entry", default=None)


def note_delete(record: JSON) -> None:
    """Attach the store's record of this request's DELETE (outcome, precondition, pod state) to its entry."""
    entry = _CURRENT.get()
    if entry is not None:
        entry["delete"] = record

def note_patch(record: JSON) -> None:
    """Attach the store's record of this request's in-place pod PATCH (delete_context.patch_record)."""
    entry = _CURRENT.get()
    if entry is not None:
        entry["patch"] = record


_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class AuditLog:
    """The last `limit` requests, oldest first."""

    def __init__(self, limit: int = 10_000, path: Path | None = None) -> None:
        self.entries: deque[JSON] = deque(maxlen=limit)
        self._ids = itertools.count(1)
        self._file: IO[str] | None = path.open("a", encoding="utf-8") if path is not None else None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def middleware(self) -> Middleware:
        @web.middleware
        async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
            entry: JSON = {
                "id": next(self._ids),
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
            _CURRENT.set(entry)
            code = 500  # what the client sees when the handler raises something unexpected
            try:
                response = await handler(request)
                code = response.status
                return response
            except web.HTTPException as exc:
                code = exc.status
                raise
            except asyncio.CancelledError:
                code = 499  # the client went away first (nginx's name for it)
                raise
            finally:
                entry["code"] = code
                entry["completed"] = time.time()
                self._write(entry)

        return record

    def _write(self, entry: JSON) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
            self._file.flush()
        except (OSError, ValueError):  # a full disk must not take the API server down with it
            pass

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
