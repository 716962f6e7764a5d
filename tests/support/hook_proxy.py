"""FaultyProxy plus what a canned answer cannot express: a request that hangs, a status chosen by query,
and a cloud-side change made just before a request is forwarded (a race, made deterministic)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from tests.support.faulty_proxy import FaultyProxy

Match = Callable[[web.Request], bool]


@dataclass
class Rule:
    match: Match
    times: int  # -1: for ever
    hang: bool = False
    code: int = 0
    reason: str = ""
    message: str = ""
    before: Callable[[], Awaitable[None]] | None = None
    hits: int = 0


@dataclass
class HookProxy(FaultyProxy):
    rules: list[Rule] = field(default_factory=list)
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def hang(self, match: Match, times: int = -1) -> Rule:
        """Matching requests get no answer at all (a partition after the connection was made)."""
        return self._add(Rule(match, times, hang=True))

    def answer(self, match: Match, code: int, reason: str, message: str, times: int = -1) -> Rule:
        return self._add(Rule(match, times, code=code, reason=reason, message=message))

    def before(self, match: Match, action: Callable[[], Awaitable[None]], times: int = 1) -> Rule:
        """Run `action` (e.g. replace the pod through the admin API), then forward the request unchanged."""
        return self._add(Rule(match, times, before=action))

    def _add(self, rule: Rule) -> Rule:
        self.rules.append(rule)
        return rule

    async def stop(self) -> None:
        self._released.set()  # hung handlers return, so the runner's cleanup does not wait for them
        await super().stop()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        for rule in self.rules:
            if rule.times != 0 and rule.match(request):
                rule.hits += 1
                if rule.times > 0:
                    rule.times -= 1
                if rule.hang:
                    await self._released.wait()
                    raise web.HTTPServiceUnavailable()
                if rule.code:
                    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": rule.message, "reason": rule.reason, "code": rule.code}
                    return web.Response(body=json.dumps(status).encode(), status=rule.code,
                                        content_type="application/json")
                if rule.before is not None:
                    await rule.before()
                break
        return await super()._handle(request)


def is_watch(request: web.Request) -> bool:
    return request.method == "GET" and request.query.get("watch", "") in ("1", "true", "True")


def method_on(method: str, path_fragment: str) -> Match:
    return lambda request: request.method == method and path_fragment in request.path
