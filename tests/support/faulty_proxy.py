"""A real HTTP proxy in front of the simulated API server that answers chosen requests itself.

The sim has no RBAC and never fails on purpose; a cloud that refuses (403) or is overloaded (503) is
put between the agent and the sim here, over real HTTP, so the agent's client code runs unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from tests.support.forwarding import forward, listen


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    code: int
    message: str
    times: int = -1  # -1: for ever
    hits: int = 0

    def status(self) -> dict[str, object]:
        reasons = {403: "Forbidden", 500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests",
                   422: "Invalid", 400: "BadRequest"}
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
                "reason": reasons.get(self.code, "Unknown"), "code": self.code}


@dataclass
class FaultyProxy:
    upstream: str
    faults: list[Fault] = field(default_factory=list)
    # Headers added to a forwarded answer (e.g. the `Warning` headers an API server sends), per request.
    add_headers: Callable[[web.Request], list[tuple[str, str]]] | None = None
    url: str = ""
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None

    def fail(self, method: str, path_regex: str, code: int, message: str, times: int = -1) -> Fault:
        fault = Fault(method, re.compile(path_regex), code, message, times)
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self._runner, self.url = await listen(self._handle, client_max_size=64 * 1024 * 1024)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        for fault in self.faults:
            if fault.method == request.method and fault.path.search(request.path) and fault.times != 0:
                fault.hits += 1
                if fault.times > 0:
                    fault.times -= 1
                return web.Response(body=json.dumps(fault.status()).encode(), status=fault.code,
                                    content_type="application/json")
        assert self._session is not None
        extra = self.add_headers(request) if self.add_headers is not None else []
        return await forward(self._session, self.upstream, request, extra_headers=extra)
