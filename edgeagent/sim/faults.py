"""Injected API server faults: bursts of 429 and 5xx, slow answers, and answers lost after the commit.

A real API server under load sheds requests with `429 Too Many Requests` and a `Retry-After` header
(priority and fairness), fails with `500`/`503` while etcd or a webhook is unwell, answers slowly, and
sometimes commits a write whose answer never reaches the client (a timeout after the commit). Clients
must survive all of these without losing work or doing it twice, and a test can only show that if the sim
can be told to misbehave on cue: `POST /sim/v1/faults` adds a rule for a while, scoped to a client (a
User-Agent substring, e.g. one node's `(edge-3)`), a path prefix and verbs.

Rules live in memory only: a restarted sim starts healthy. The `/sim/...` paths are never faulted, so the
test that injects faults can always reach the switch.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from edgeagent.sim import errors

JSON = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CODES = (429, 500, 503, 504)
MAX_DURATION = 24 * 3600.0
MAX_LATENCY = 300.0
_EXEMPT_PREFIX = "/sim/"


def error_for(code: int, retry_after: int) -> errors.ApiError:
    """The Status the real server sends for each injected code (reasons as apimachinery names them)."""
    if code == 429:
        return errors.too_many_requests("Too many requests, please try again later.", retry_after)
    if code == 500:
        return errors.internal_error("injected fault")
    if code == 503:
        return errors.service_unavailable("injected fault: the server is currently unable to handle the request")
    return errors.timeout("injected fault: request did not complete within the allowed duration", retry_after)


@dataclass
class FaultRule:
    """One injected misbehaviour; a request it matches is hit with probability `rate`."""

    id: int
    rate: float
    codes: tuple[int, ...]
    latency: float
    until: float  # time.monotonic() deadline
    retry_after: int = 1
    user_agent: str = ""
    path: str = ""
    verbs: frozenset[str] = frozenset()
    after: bool = False  # commit the request, then replace its answer with the error (a lost answer)
    injected: dict[str, int] = field(default_factory=dict)

    def matches(self, request: web.Request, now: float) -> bool:
        if now >= self.until:
            return False
        if self.verbs and request.method not in self.verbs:
            return False
        if self.path and not request.path.startswith(self.path):
            return False
        return not self.user_agent or self.user_agent in request.headers.get("User-Agent", "")

    def count(self, what: str) -> None:
        self.injected[what] = self.injected.get(what, 0) + 1

    def as_json(self, now: float) -> JSON:
        return {
            "id": self.id,
            "rate": self.rate,
            "codes": list(self.codes),
            "retryAfterSeconds": self.retry_after,
            "latencySeconds": self.latency,
            "remainingSeconds": round(max(0.0, self.until - now), 3),
            "userAgent": self.user_agent,
            "path": self.path,
            "verbs": sorted(self.verbs),
            "after": self.after,
            "injected": dict(self.injected),
        }


def parse_rule(body: object, rule_id: int, now: float) -> FaultRule:
    """Validate a `POST /sim/v1/faults` body; ValueError names the field and what it accepts."""
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    known = {"rate", "codes", "retryAfterSeconds", "latencySeconds", "durationSeconds", "userAgent", "path",
             "verbs", "after"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}: expected {', '.join(sorted(known))}")

    def number(name: str, default: float, low: float, high: float) -> float:
        value = body.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise ValueError(f"{name} must be a number from {low:g} to {high:g}, not {value!r}")
        return float(value)

    rate = number("rate", 1.0, 0.0, 1.0)
    duration = number("durationSeconds", 0.0, 0.0, MAX_DURATION)
    if duration <= 0:
        raise ValueError("durationSeconds must be given, a number above 0 (faults always end by themselves)")
    latency = number("latencySeconds", 0.0, 0.0, MAX_LATENCY)
    retry_after = int(number("retryAfterSeconds", 1, 0, 3600))
    codes = body.get("codes", [])
    if not isinstance(codes, list) or any(c not in CODES or isinstance(c, bool) for c in codes):
        raise ValueError(f"codes must be a list of {', '.join(map(str, CODES))}, not {codes!r}")
    if not codes and latency == 0:
        raise ValueError("a fault needs codes, latencySeconds or both")
    verbs = body.get("verbs", [])
    if not isinstance(verbs, list) or not all(isinstance(v, str) and v.isalpha() for v in verbs):
        raise ValueError(f"verbs must be a list of HTTP methods such as [\"POST\", \"DELETE\"], not {verbs!r}")
    user_agent = body.get("userAgent", "")
    path = body.get("path", "")
    if not isinstance(user_agent, str) or not isinstance(path, str):
        raise ValueError("userAgent and path must be strings")
    if path and not path.startswith("/"):
        raise ValueError(f"path must be a URL path prefix starting with /, not {path!r}")
    after = body.get("after", False)
    if not isinstance(after, bool):
        raise ValueError(f"after must be true or false, not {after!r}")
    if after and not codes:
        raise ValueError("after: true needs codes (the error that replaces the committed request's answer)")
    return FaultRule(id=rule_id, rate=rate, codes=tuple(int(c) for c in codes), latency=latency,
                     until=now + duration, retry_after=retry_after, user_agent=user_agent, path=path,
                     verbs=frozenset(v.upper() for v in verbs), after=after)


class FaultInjector:
    """The active rules, and the middleware that applies them to every API request."""

    def __init__(self, seed: int | None = None) -> None:
        self.rules: list[FaultRule] = []
        self._ids = itertools.count(1)
        self._random = random.Random(seed)
        self.totals: dict[str, int] = {}

    def add(self, body: object) -> FaultRule:
        rule = parse_rule(body, next(self._ids), time.monotonic())
        self.rules.append(rule)
        return rule

    def clear(self, rule_id: int | None = None) -> int:
        before = len(self.rules)
        self.rules = [r for r in self.rules if rule_id is not None and r.id != rule_id]
        return before - len(self.rules)

    def active(self) -> list[FaultRule]:
        now = time.monotonic()
        self.rules = [r for r in self.rules if r.until > now]
        return list(self.rules)

    def _pick(self, request: web.Request) -> FaultRule | None:
        if not self.rules or request.path.startswith(_EXEMPT_PREFIX):
            return None
        now = time.monotonic()
        for rule in self.rules:
            if rule.matches(request, now) and (rule.rate >= 1.0 or self._random.random() < rule.rate):
                return rule
        return None

    def _count(self, rule: FaultRule, what: str) -> None:
        rule.count(what)
        self.totals[what] = self.totals.get(what, 0) + 1

    def middleware(self) -> Middleware:
        @web.middleware
        async def inject(request: web.Request, handler: Handler) -> web.StreamResponse:
            rule = self._pick(request)
            if rule is None:
                return await handler(request)
            if rule.latency > 0:
                self._count(rule, "slow")
                await asyncio.sleep(rule.latency)
            if not rule.codes:
                return await handler(request)
            code = self._random.choice(rule.codes)
            if rule.after:
                response = await handler(request)
                if response.prepared:  # a watch stream already went out: nothing left to replace
                    return response
                self._count(rule, f"{code}-after")
            else:
                self._count(rule, str(code))
            exc = error_for(code, rule.retry_after)
            headers = {"Retry-After": str(rule.retry_after)} if code in (429, 504) and rule.retry_after else {}
            return web.json_response(exc.status, status=exc.code, headers=headers)

        return inject

    def as_json(self) -> JSON:
        now = time.monotonic()
        return {"items": [r.as_json(now) for r in self.active()], "injected": dict(self.totals)}
