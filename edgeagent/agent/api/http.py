"""The agent's HTTP API (YurtHub's OTA endpoints, the upgrade outcomes and the queue API),
described in docs/openapi.yaml and docs/api.md.

Bodies are text by default, as YurtHub answers, so existing OpenYurt scripts keep working; a client
that sends `Accept: application/json` gets `{"status", "message", ...}` objects instead. Data
endpoints (`/pods`, the queue listing) are always JSON. Every answer, errors included, is recorded in
the request metrics under its route pattern (never the raw path, which would grow without bound).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from aiohttp import web

from edgeagent import log
from edgeagent.agent.api import auth
from edgeagent.agent.api.hold_api import add_hold_routes
from edgeagent.agent.api.responses import CONTENT_JSON, message_response, wants_json
from edgeagent.agent.api.responses import json_response as _json
from edgeagent.agent.api.responses import text_response as _text
from edgeagent.agent.link.cache import PodCache
from edgeagent.agent.link.monitor import LinkMonitor
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.agent.policy.site import SitePolicy
from edgeagent.agent.requests.upgrade import Answer, Outcome, UpgradeService
from edgeagent.agent.state.store import InvalidTransition, StateStore, StateUnavailable, UnknownRequest

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

_STATE = web.AppKey("state", StateStore)
_CACHE = web.AppKey("cache", PodCache)
_UPGRADES = web.AppKey("upgrades", UpgradeService)
_LINK = web.AppKey("link", LinkMonitor)
_METRICS = web.AppKey("metrics", AgentMetrics)
_MAX_BODY = web.AppKey("max_body_bytes", int)


# The one place an upgrade or imagepull answer becomes an HTTP status (docs/api.md lists them).
HTTP_STATUS: dict[Answer, int] = {
    Answer.STARTED: 200,
    Answer.IMAGE_PULL_REQUESTED: 200,
    Answer.QUEUED: 202,
    Answer.BAD_REQUEST: 400,
    Answer.FORBIDDEN: 403,
    Answer.NOT_FOUND: 404,
    Answer.CONFLICT: 409,
    Answer.BAD_GATEWAY: 502,
    Answer.UNAVAILABLE: 503,
}


def _outcome_response(request: web.Request, outcome: Outcome) -> web.Response:
    status = HTTP_STATUS[outcome.answer]
    if wants_json(request):
        return _json(outcome.to_json(), status)
    return _text(outcome.message, status, exact=status == 200)


# ---------------------------------------------------------------------- wrapping every route

ROUTE_UNMATCHED = "unmatched"  # the metrics' path label of 404s and 405s: a bounded stand-in for the raw path


def _endpoint(route: str, handler: auth.Handler, metrics: AgentMetrics, token: str | None, *,
              guarded: bool = True) -> auth.Handler:
    """`handler` with what every route needs: the token on mutating methods, a bounded body, errors as
    API answers, and the request metrics under `route` (the pattern, never the raw path).

    Per route rather than an app middleware: any middleware at all puts two more coroutines on every
    request, `GET /pods` included, which `_pods_endpoint` must not pay for (issue 15). `guarded=False`
    is for the 404/405 answers, which come before the token check as aiohttp's own routing did.
    """

    async def endpoint(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            response = await (_guarded(request, handler, token) if guarded else handler(request))
        except web.HTTPException as exc:
            response = _http_error(request, exc)
        except Exception as exc:
            response = _internal_error(request, exc)
        metrics.observe_request(route, request.method, response.status, time.perf_counter() - started)
        return response

    return endpoint


def _pods_endpoint(cache: PodCache, metrics: AgentMetrics) -> auth.Handler:
    """`GET /pods`, which local workloads poll: the cached bytes plus one pre-resolved metrics series.

    A read needs no token and its body is never read, so nothing else of `_endpoint` applies.
    """
    recorder = metrics.requests.recorder(ROUTE_PODS, "GET", 200)

    async def pods(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            body = cache.podlist_bytes()
        except Exception as exc:
            response = _internal_error(request, exc)
            metrics.observe_request(ROUTE_PODS, request.method, response.status, time.perf_counter() - started)
            return response
        response = web.Response(body=body, content_type=CONTENT_JSON)
        recorder.observe(time.perf_counter() - started)
        return response

    return pods


async def _guarded(request: web.Request, handler: auth.Handler, token: str | None) -> web.StreamResponse:
    try:
        auth.check_request(request, token)
    except auth.Unauthorized as exc:
        return message_response(request, 401, str(exc), headers={"WWW-Authenticate": 'Bearer realm="edgeagent"'})
    if request.body_exists:
        await request.read()  # bounded by client_max_size: raises 413 past it
    return await handler(request)


def _internal_error(request: web.Request, exc: Exception) -> web.Response:
    _log.exception("http_handler_failed", method=request.method, path=request.path)
    return message_response(request, 500, f"internal error: {type(exc).__name__}: {exc}")


def _answer_unrouted(app: web.Application, metrics: AgentMetrics) -> None:
    """404 and 405 as API answers (text or JSON, `Allow`), counted under `unmatched`.

    Without a middleware these are routes of their own: a `*` route after each resource's methods
    (aiohttp tries the exact method first), and a catch-all resource, which the router reaches last.
    """
    for resource in list(app.router.resources()):
        assert isinstance(resource, web.Resource), resource  # every route above is a plain or dynamic one
        allowed = frozenset(route.method for route in resource)

        async def not_allowed(request: web.Request, allowed: frozenset[str] = allowed) -> web.StreamResponse:
            raise web.HTTPMethodNotAllowed(request.method, allowed)

        resource.add_route("*", _endpoint(ROUTE_UNMATCHED, not_allowed, metrics, None, guarded=False))

    async def not_found(_request: web.Request) -> web.StreamResponse:
        raise web.HTTPNotFound()

    app.router.add_route("*", "/{path:.*}", _endpoint(ROUTE_UNMATCHED, not_found, metrics, None, guarded=False))


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
        # ?when=open: wait for the site policy (agent/policy/site.py); no query: OpenYurt's "now", hold or not.
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
    state = app[_STATE]
    if not state.available:
        # Nothing can be queued, held or recorded (those answer 503): as much a reason to look as a frozen cache.
        problems.append(f"state store unusable ({state.problem}): upgrade requests and holds cannot be stored")
    if not wants_json(request):
        return _text("OK", exact=True) if not problems else _text("degraded: " + "; ".join(problems))
    cache = app[_CACHE]
    link = app[_LINK].details()
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
    # No middleware: see _endpoint. 404/405 are routes added last by _answer_unrouted.
    app = web.Application(client_max_size=max_body_bytes)
    app[_CACHE] = cache
    app[_UPGRADES] = upgrades
    app[_STATE] = state
    app[_LINK] = link
    app[_METRICS] = metrics
    app[_MAX_BODY] = max_body_bytes
    r = app.router

    def wrap(route: str, handler: auth.Handler) -> auth.Handler:
        return _endpoint(route, handler, metrics, token)

    r.add_get(ROUTE_PODS, _pods_endpoint(cache, metrics), allow_head=False)
    r.add_head(ROUTE_PODS, wrap(ROUTE_PODS, _pods))
    r.add_post(ROUTE_UPGRADE, wrap(ROUTE_UPGRADE, _upgrade))
    r.add_post(ROUTE_IMAGEPULL, wrap(ROUTE_IMAGEPULL, _imagepull))
    r.add_get(ROUTE_UPGRADES, wrap(ROUTE_UPGRADES, _list_upgrades))
    r.add_get(ROUTE_UPGRADE_REQUEST, wrap(ROUTE_UPGRADE_REQUEST, _get_upgrade))
    r.add_delete(ROUTE_UPGRADE_REQUEST, wrap(ROUTE_UPGRADE_REQUEST, _cancel_upgrade))
    for path in HEALTH_ROUTES:
        r.add_get(path, wrap(path, _healthz))
    for path in READY_ROUTES:
        r.add_get(path, wrap(path, _readyz))
    r.add_get(ROUTE_METRICS, wrap(ROUTE_METRICS, _metrics))
    add_hold_routes(app, policy, wrap)
    _answer_unrouted(app, metrics)
    return app
