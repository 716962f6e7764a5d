"""`/v1/hold`: an operator on the node holds or releases upgrades, and asks when the node is open.

Local only: the hold is written to the agent's state file, never sent to the cloud first, so it works
while the link is down (the `UpgradeHeld` condition follows when it returns). Answers are the policy's
status as JSON (`held`, `reason`, `message`, `hold`, `windows`, `windowOpen`, `nextOpening`, ...),
described in docs/openapi.yaml.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from edgeagent.agent.api.auth import Handler
from edgeagent.agent.api.responses import message_response
from edgeagent.agent.policy.site import InvalidHold, SitePolicy
from edgeagent.agent.policy.times import parse_time
from edgeagent.agent.state.store import StateUnavailable
from edgeagent.agent.text import text_problem

ROUTE_HOLD = "/v1/hold"
_POLICY = web.AppKey("site_policy", SitePolicy)
_FIELDS = ("reason", "until")


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body, separators=(",", ":")).encode(), status=status,
                        content_type="application/json")


def _error(request: web.Request, status: int, message: str) -> web.Response:
    """Errors follow the API's text-or-JSON rule (`Accept: application/json`), like every other error."""
    return message_response(request, status, message)


async def _get(request: web.Request) -> web.Response:
    return _json(request.app[_POLICY].status().to_json())


async def _post(request: web.Request) -> web.Response:
    policy = request.app[_POLICY]
    raw = await request.read()
    body: Any = {}
    if raw.strip():
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(request, 400, f"the body is not JSON: {exc}")
    if not isinstance(body, dict):
        return _error(request, 400, 'the body must be a JSON object: {"reason": "...", "until": "<RFC 3339>"}')
    for key, value in body.items():
        problem = text_problem("a field name", key) or (text_problem(key, value) if isinstance(value, str) else None)
        if problem is not None:
            return _error(request, 400, problem)
    unknown = sorted(set(body) - set(_FIELDS))
    if unknown:
        return _error(request, 400, f"unknown field(s) {', '.join(unknown)}: only reason and until are accepted")
    reason = body.get("reason") or ""
    if not isinstance(reason, str):
        return _error(request, 400, "reason must be a string")
    until_raw = body.get("until")
    until = None
    if until_raw is not None:
        if not isinstance(until_raw, str):
            return _error(request, 400, "until must be an RFC 3339 string such as 2026-11-22T18:00:00Z")
        try:
            until = parse_time(until_raw)
        except ValueError as exc:
            return _error(request, 400, f"until: {exc}")
    try:
        status = await policy.hold(reason, until)
    except InvalidHold as exc:
        return _error(request, 400, str(exc))
    except StateUnavailable as exc:
        return _error(request, 503, f"the hold could not be stored, so it is not set: {exc}")
    return _json(status.to_json())


async def _delete(request: web.Request) -> web.Response:
    try:
        status = await request.app[_POLICY].release()
    except StateUnavailable as exc:
        return _error(request, 503, f"the release could not be stored, so the hold stays: {exc}")
    return _json(status.to_json())


def add_hold_routes(app: web.Application, policy: SitePolicy | None,
                    wrap: Callable[[str, Handler], Handler]) -> None:
    """The routes always exist (the API is the same everywhere); the policy is absent only in route listings.

    `wrap` gives each handler the token check, body bound, error answers and metrics (http._endpoint).
    """
    if policy is not None:
        app[_POLICY] = policy
    app.router.add_get(ROUTE_HOLD, wrap(ROUTE_HOLD, _get))
    app.router.add_post(ROUTE_HOLD, wrap(ROUTE_HOLD, _post))
    app.router.add_delete(ROUTE_HOLD, wrap(ROUTE_HOLD, _delete))
