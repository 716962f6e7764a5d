"""The agent's HTTP API (interfaces.md §1 and §2 plus the queue API), described in docs/openapi.yaml.

Bodies are text by default, as YurtHub answers, so existing OpenYurt scripts keep working; a client
that sends `Accept: application/json` gets `{"status", "message", ...}` objects instead. Data
endpoints (`/pods`, the queue listing) are always JSON. Every answer, errors included, is recorded in
the request metrics under its route pattern (never the raw path, which would grow without bound).
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from aiohttp import web

from edgeagent import log
from edgeagent.agent import auth
from edgeagent.agent.cache import PodCache
from edgeagent.agent.link import LinkMonitor
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.agent.policy import SitePolicy
from edgeagent.agent.state import InvalidTransition, StateStore, StateUnavailable, UnknownRequest
from edgeagent.agent.upgrade import Outcome, UpgradeService

JSON = dict[str, Any]
_log = log.get("edgeagent.http")

ROUTE_PODS = "/pods"
ROUTE_UPGRADE = "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/upgrade"
ROUTE_IMAGEPULL = "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/imagepull"
ROUTE_UPGRADES = "/openyurt.io/v1/upgrades"
ROUTE_UPGRADE_REQUEST = "/openyurt.io/v1/upgrades/{id}"
HEALTH_ROUTES = ("/v1/healthz", "/healthz")
READY_ROUTES = ("/v1/readyz", "/readyz")
ROUTE_METRICS = "/metrics"

CONTENT_JSON = "application/json"

_WORDS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
          409: "Conflict", 413: "RequestEntityTooLarge", 500: "InternalError", 502: "BadGateway",
          503: "ServiceUnavailable"}

_STATE = web.AppKey("state", StateStore)
_CACHE = web.AppKey("cache", PodCache)
_UPGRADES = web.AppKey("upgrades", UpgradeService)
_LINK = web.AppKey("link", LinkMonitor)
_METRICS = web.AppKey("metrics", AgentMetrics)
_MAX_BODY = web.AppKey("max_body_bytes", int)


def wants_json(request: web.Request) -> bool:
    return CONTENT_JSON in request.headers.get("Accept", "")


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=json.dumps(body, separators=(",", ":")).encode(), status=status,
                        content_type=CONTENT_JSON, headers=headers)


def _text(message: str, status: int = 200, headers: dict[str, str] | None = None, *,
          exact: bool = False) -> web.Response:
    """A text body ends with a newline, so `curl` leaves the shell prompt on its own line.

    `exact`: the bodies OpenYurt clients compare byte for byte stay as YurtHub sends them, without one:
    `200 Start updating pod ns/name`, `200 Image pre-pull requested for pod ns/name` and the health `OK`
    (interfaces.md §1).
    """
    return web.Response(text=message if exact else message + "\n", status=status, headers=headers)


def message_response(request: web.Request, status: int, message: str, *, word: str | None = None,
                     extra: JSON | None = None, headers: dict[str, str] | None = None,
                     exact: bool = False) -> web.Response:
    """Text `message` by default; `{"status", "message", ...extra}` for JSON clients."""
    if wants_json(request):
        body: JSON = {"status": word or _WORDS.get(status, "OK" if status < 400 else "Error"), "message": message}
        body.update(extra or {})
        return _json(body, status, headers)
    return _text(message, status, headers, exact=exact)


def _outcome_response(request: web.Request, outcome: Outcome) -> web.Response:
    if wants_json(request):
        return _json(outcome.to_json(), outcome.http_status)
    return _text(outcome.message, outcome.http_status, exact=outcome.http_status == 200)


def _route_of(request: web.Request) -> str:
    info = request.match_info
    if info.http_exception is not None:
        return "unmatched"
    return info.route.resource.canonical if info.route.resource is not None else "unmatched"


# ---------------------------------------------------------------------- middlewares


def _front_middleware(metrics: AgentMetrics, token: str | None) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: auth.Handler) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            if request.method == "GET" and request.match_info.http_exception is None and not request.body_exists:
                # A read of a matched route (GET /pods above all): only mutating methods need the token, and
                # there is no body to bound, so the hot path goes straight to the handler.
                response = await handler(request)
            else:
                response = await _guarded(request, handler, token)
        except web.HTTPException as exc:
            response = _http_error(request, exc)
        except Exception as exc:
            _log.exception("http_handler_failed", method=request.method, path=request.path)
            response = message_response(request, 500, f"internal error: {type(exc).__name__}: {exc}")
        metrics.observe_request(_route_of(request), request.method, response.status, time.perf_counter() - started)
        return response

    return middleware


async def _guarded(request: web.Request, handler: auth.Handler, token: str | None) -> web.StreamResponse:
    if request.match_info.http_exception is not None:
        raise request.match_info.http_exception  # 404/405 before anything else: nothing to protect
    try:
        auth.check_request(request, token)
    except auth.Unauthorized as exc:
        return message_response(request, 401, str(exc), headers={"WWW-Authenticate": 'Bearer realm="edgeagent"'})
    if request.body_exists:
        await request.read()  # bounded by client_max_size: raises 413 past it
    return await handler(request)


def _http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    headers: dict[str, str] = {}
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        headers["Allow"] = allowed
        message = f"method {request.method} is not allowed on {request.path}; allowed: {allowed}"
    elif isinstance(exc, web.HTTPNotFound):
        message = f"not found: {request.method} {request.path} is not an endpoint of the edgeagent API"
    elif isinstance(exc, web.HTTPRequestEntityTooLarge):
        limit = request.app[_MAX_BODY]
        message = f"request body too large: the limit is {limit} bytes"
    else:
        message = exc.text or exc.reason
    return message_response(request, exc.status, message, headers=headers)


# ---------------------------------------------------------------------- handlers


async def _pods(request: web.Request) -> web.Response:
    return web.Response(body=request.app[_CACHE].podlist_bytes(), content_type=CONTENT_JSON)


async def _upgrade(request: web.Request) -> web.Response:
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    when = request.query.get("when")
    if when is not None:
        # ?when=open: wait for the site policy (agent/policy.py); no query: OpenYurt's "now", hold or not.
        if when != "open":
            return message_response(request, 400, f"unknown when={when!r}: the only value is when=open "
                                                  "(apply once the node is open); omit it to upgrade now")
        return _outcome_response(request, await request.app[_UPGRADES].upgrade_when_open(namespace, name))
    outcome = await request.app[_UPGRADES].upgrade(namespace, name)
    return _outcome_response(request, outcome)


async def _imagepull(request: web.Request) -> web.Response:
    outcome = await request.app[_UPGRADES].imagepull(request.match_info["namespace"], request.match_info["name"])
    return _outcome_response(request, outcome)


async def _list_upgrades(request: web.Request) -> web.Response:
    try:
        items = await request.app[_STATE].list_requests()
    except StateUnavailable as exc:
        return message_response(request, 503, f"the upgrade queue cannot be read: {exc}")
    return _json({"items": [r.to_json() for r in items]})


async def _get_upgrade(request: web.Request) -> web.Response:
    request_id = request.match_info["id"]
    try:
        item = await request.app[_STATE].get_request(request_id)
    except StateUnavailable as exc:
        return message_response(request, 503, f"the upgrade queue cannot be read: {exc}")
    if item is None:
        return message_response(request, 404, f"no upgrade request with id {request_id!r}")
    return _json(item.to_json())


async def _cancel_upgrade(request: web.Request) -> web.Response:
    request_id = request.match_info["id"]
    try:
        item = await request.app[_STATE].cancel(request_id)
    except UnknownRequest:
        return message_response(request, 404, f"no upgrade request with id {request_id!r}")
    except InvalidTransition as exc:
        return message_response(request, 409, f"upgrade request {request_id} is {exc.request.state}; only a "
                                              "queued request can be cancelled", extra={"id": request_id})
    except StateUnavailable as exc:
        return message_response(request, 503, f"the cancellation could not be stored: {exc}")
    await _refresh_queue_metrics(request.app)
    return message_response(request, 200, f"Upgrade request {item.id} for pod {item.key} cancelled",
                            word="Cancelled", extra={"id": item.id})


async def _healthz(request: web.Request) -> web.Response:
    """Liveness: answering at all is the proof."""
    return message_response(request, 200, "OK", word="ok", exact=True)


async def _readyz(request: web.Request) -> web.Response:
    """Ready as soon as the server listens: the agent answers from its cache, cloud or no cloud.

    Still 200 when degraded (the cache keeps serving), but the body says what is wrong: rejected credentials
    look like a working link, and a frozen cache must not pass for a healthy one.
    """
    app = request.app
    problems = app[_LINK].problems()
    if not wants_json(request):
        return _text("OK", exact=True) if not problems else _text("degraded: " + "; ".join(problems))
    cache = app[_CACHE]
    link = app[_LINK].details()
    state = app[_STATE]
    try:
        counts = await state.counts()
    except StateUnavailable:
        counts = {}
    watch = link.get("watch") or {}
    return _json({
        "status": "degraded" if problems else "ok",
        "message": "; ".join(problems) if problems else "OK",
        "problems": problems,
        "link": link,
        "cache": {"pods": len(cache.pods()), "synced": bool(watch.get("synced", False))},
        "queue": counts,
        "state": {"available": state.available, "problem": state.problem or None, "path": str(state.path)},
    })


async def _metrics(request: web.Request) -> web.Response:
    await _refresh_queue_metrics(request.app)
    body, content_type = request.app[_METRICS].render()
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type
    return response


async def _refresh_queue_metrics(app: web.Application) -> None:
    with contextlib.suppress(StateUnavailable):
        app[_METRICS].set_queue_counts(await app[_STATE].counts())


def create_app(*, cache: PodCache, upgrades: UpgradeService, state: StateStore, link: LinkMonitor,
               metrics: AgentMetrics, token: str | None, max_body_bytes: int,
               policy: SitePolicy | None = None) -> web.Application:
    app = web.Application(middlewares=[_front_middleware(metrics, token)], client_max_size=max_body_bytes)
    app[_CACHE] = cache
    app[_UPGRADES] = upgrades
    app[_STATE] = state
    app[_LINK] = link
    app[_METRICS] = metrics
    app[_MAX_BODY] = max_body_bytes
    r = app.router
    r.add_get(ROUTE_PODS, _pods)
    r.add_post(ROUTE_UPGRADE, _upgrade)
    r.add_post(ROUTE_IMAGEPULL, _imagepull)
    r.add_get(ROUTE_UPGRADES, _list_upgrades)
    r.add_get(ROUTE_UPGRADE_REQUEST, _get_upgrade)
    r.add_delete(ROUTE_UPGRADE_REQUEST, _cancel_upgrade)
    for path in HEALTH_ROUTES:
        r.add_get(path, _healthz)
    for path in READY_ROUTES:
        r.add_get(path, _readyz)
    r.add_get(ROUTE_METRICS, _metrics)
    from edgeagent.agent.hold_api import add_hold_routes  # it renders its errors with this module's helpers

    add_hold_routes(app, policy)
    return app
