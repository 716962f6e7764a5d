"""The simulated API server's HTTP surface: Kubernetes REST paths over the in-process Store.

All semantics live in the Store; this module maps URLs and query parameters onto it, frames watch
streams the way client-go and kubernetes_asyncio read them (one compact JSON event per line, chunked),
and turns ApiError into real Status bodies. Lists and watch events are serialised once per stored
version / event and shared by every reader, which keeps 110-pod lists and 50-watcher fan-out cheap.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import yaml
from aiohttp import web
from aiohttp.typedefs import Middleware

from edgeagent.kube.selectors import FieldSelector, LabelSelector
from edgeagent.sim import (
    admission_policy,
    custom_printers,
    custom_scale,
    custom_writes,
    discovery,
    errors,
    events_v1,
    openapi,
    printers,
    protobuf,
)
from edgeagent.sim.audit import AuditLog, note_delete, note_patch
from edgeagent.sim.auth_http import AuthLayer
from edgeagent.sim.delete_context import patch_record, touches_spec
from edgeagent.sim.errors import ApiError
from edgeagent.sim.faults import FaultInjector
from edgeagent.sim.patch import APPLY_PATCH, STRATEGIC_MERGE_PATCH, PatchError, apply_patch, media_type
from edgeagent.sim.patch import CONTENT_TYPES as PATCH_CONTENT_TYPES
from edgeagent.sim.protobuf import ProtobufError
from edgeagent.sim.resources import EVENTS, EVENTS_V1, PODS, Registry, Resource
from edgeagent.sim.store import Store, StoredObject, Subscription, WatchEvent, dumps, parse_resource_version

JSON = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})  # Go's strconv.ParseBool
_BODY_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# What a custom object's PATCH accepts (no strategic merge: a CRD's schema carries no patch strategies).
CUSTOM_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


@dataclass
class ServerSettings:
    # How often a watch that asked for bookmarks gets one (the real server: about a minute).
    bookmark_interval: float = 60.0
    # How long a list/watch asking for an RV the store has not reached waits before 504 (real: 3 s).
    too_large_rv_wait: float = 3.0
    # Watches without timeoutSeconds end after a random time in this range (the real server: 30-60 min).
    watch_timeout_range: tuple[float, float] = (1800.0, 3600.0)
    # A watcher this far behind is dropped (its client re-lists) instead of buffering without bound.
    watch_queue_limit: int = 100_000
    # How often an idle watch checks whether its client went away.
    disconnect_poll: float = 0.5


@dataclass
class _ServerState:
    store: Store
    settings: ServerSettings
    watches: set[Subscription] = field(default_factory=set)
    stopping: bool = False


STATE: web.AppKey[_ServerState] = web.AppKey("edgeagent_sim_state", _ServerState)


def create_app(
    store: Store,
    *,
    extra_routes: Callable[[web.Application], None] | None = None,
    settings: ServerSettings | None = None,
    audit: AuditLog | None = None,
    auth: AuthLayer | None = None,
    faults: FaultInjector | None = None,
) -> web.Application:
    """The full REST surface; `extra_routes` may add more (e.g. `/sim/v1/...`) before the 404 fallback.

    `auth` (sim/auth_http.py) authenticates and authorizes every request and serves TokenRequest and the
    access reviews; without it every request may do everything. `faults` (sim/faults.py) injects errors and
    latency; it sits inside the audit log, so audit records what the client really got.
    """
    middlewares: list[Middleware] = [_errors_middleware, _request_user_middleware]
    if faults is not None:
        middlewares.insert(0, faults.middleware())
    if audit is not None:
        middlewares.insert(0, audit.middleware())
    if auth is not None and auth.enforcing:
        middlewares.append(auth.middleware)
    app = web.Application(middlewares=middlewares, client_max_size=64 * 1024 * 1024)
    app[STATE] = _ServerState(store, settings or ServerSettings())
    for path in ("/healthz", "/livez", "/readyz"):
        app.router.add_get(path, _ok)
        app.router.add_get(path + "/{check:.*}", _ok)
    app.router.add_get("/version", _version)
    app.router.add_get("/api", _api_versions)
    app.router.add_get("/api/", _api_versions)
    app.router.add_get("/apis", _api_groups)
    app.router.add_get("/apis/", _api_groups)
    app.router.add_get("/openapi/v2", _openapi_v2)
    app.router.add_get("/openapi/v3", _openapi_index)
    app.router.add_get("/openapi/v3/{path:.*}", _openapi_document)
    if auth is not None:
        auth.add_routes(app)
    app.router.add_route("*", "/api/{version}", _core_root)
    app.router.add_route("*", "/api/{version}/{tail:.*}", _core)
    app.router.add_route("*", "/apis/{group}", _group_root)
    app.router.add_route("*", "/apis/{group}/{version}", _group_version_root)
    app.router.add_route("*", "/apis/{group}/{version}/{tail:.*}", _grouped)
    if extra_routes is not None:
        extra_routes(app)
    app.router.add_route("*", "/{tail:.*}", _unknown)
    app.on_shutdown.append(_end_watches)
    return app


async def _end_watches(app: web.Application) -> None:
    """Let open watch streams finish at once so the runner's cleanup does not wait for their deadlines."""
    state = app[STATE]
    state.stopping = True
    for sub in list(state.watches):
        sub.close()


# ---------------------------------------------------------------------------------------------- plumbing


def _json_response(body: JSON | bytes, status: int = 200) -> web.Response:
    data = body if isinstance(body, bytes) else dumps(body)
    return web.Response(body=data, status=status, content_type="application/json")


@web.middleware
async def _errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return _json_response(exc.status, exc.code)
    except web.HTTPException:
        raise
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as exc:  # the server must answer with a Status, never a stack trace
        err = errors.internal_error(f"{type(exc).__name__}: {exc}")
        return _json_response(err.status, err.code)


@web.middleware
async def _request_user_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Marks the writes of this request as a client's, for admission (the auth layer names the user when it
    authenticates; without authorization every request is anonymous, as on an apiserver that allows all)."""
    token = admission_policy.REQUEST_USER.set(admission_policy.ANONYMOUS_USER)
    try:
        return await handler(request)
    finally:
        admission_policy.REQUEST_USER.reset(token)


@dataclass
class _TableRequest:
    """A GET that asked for server-side printing (kubectl get): answer a Table instead of the objects."""

    version: str  # of meta.k8s.io: v1 or v1beta1
    include: str  # includeObject: None | Metadata | Object
    columns_sent: bool = False  # a watch sends the column definitions with its first event only

    def render(self, res: Resource, objects: list[JSON], list_meta: JSON) -> JSON:
        return printers.table(res.kind, objects, version=self.version, include=self.include, list_meta=list_meta,
                              printer=custom_printers.printer_for_resource(res))

    def watch_line(self, res: Resource, line: bytes) -> bytes:
        """One watch event with its object as a one-row Table; ERROR and BOOKMARK events pass unchanged."""
        event = json.loads(line)
        if event.get("type") in ("ERROR", "BOOKMARK"):
            return line
        obj = event["object"]
        meta = {"resourceVersion": str((obj.get("metadata") or {}).get("resourceVersion", ""))}
        event["object"] = printers.table(
            res.kind, [obj], version=self.version, include=self.include, list_meta=meta, columns=not self.columns_sent,
            printer=custom_printers.printer_for_resource(res),
        )
        self.columns_sent = True
        return dumps(event) + b"\n"


class _LineView(Protocol):
    """Rewrites each watch event line of a stream (server-side printing, another group's view)."""

    def watch_line(self, res: Resource, line: bytes) -> bytes: ...


def _table_request(request: web.Request) -> _TableRequest | None:
    version = printers.table_version(request.headers.get("Accept"))
    if version is None:
        return None
    include = request.query.get("includeObject") or "Metadata"
    if include not in printers.INCLUDE_OBJECT:
        raise errors.bad_request(
            f'includeObject: Unsupported value: "{include}": supported values: "None", "Metadata", "Object"'
        )
    return _TableRequest(version, include)


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok", content_type="text/plain")


async def _version(request: web.Request) -> web.Response:
    return _json_response(discovery.version_info())


async def _api_versions(request: web.Request) -> web.Response:
    return _json_response(discovery.api_versions(request.host))


def _registry(request: web.Request) -> Registry:
    return request.app[STATE].store.registry


async def _api_groups(request: web.Request) -> web.Response:
    return _json_response(discovery.api_group_list(_registry(request)))


async def _openapi_index(request: web.Request) -> web.Response:
    # Built once per process (about half a second), and again for the groups of CRDs when those change; a thread
    # keeps the event loop serving meanwhile.
    registry = _registry(request)
    await asyncio.to_thread(openapi.v3_documents, registry)
    return _json_response(openapi.v3_index(registry))


async def _openapi_document(request: web.Request) -> web.Response:
    found = (await asyncio.to_thread(openapi.v3_documents, _registry(request))).get(request.match_info["path"])
    if found is None:
        raise errors.not_found_path()
    return _json_response(found[0])


async def _openapi_v2(request: web.Request) -> web.Response:
    """client-go asks for gnostic protobuf; anyone else (`kubectl get --raw`, curl) gets JSON."""
    accept = request.headers.get("Accept", "")
    registry = _registry(request)
    if any(media in accept for media in openapi.V2_PROTOBUF_ACCEPTED):
        body = await asyncio.to_thread(openapi.v2_protobuf, registry)
        return web.Response(body=body, content_type=openapi.V2_PROTOBUF)
    return _json_response(await asyncio.to_thread(openapi.v2_json, registry))


async def _unknown(request: web.Request) -> web.Response:
    raise errors.not_found_path()


async def _core_root(request: web.Request) -> web.Response:
    doc = discovery.api_resource_list(_registry(request), "", request.match_info["version"])
    if doc is None or request.method != "GET":
        raise errors.not_found_path()
    return _json_response(doc)


def _page_not_found() -> web.Response:
    """What Go's http.NotFound answers for a path no API group registered (kube-apiserver v1.24 answers so)."""
    return web.Response(status=404, text="404 page not found\n", content_type="text/plain")


def _group_served(request: web.Request, group: str) -> bool:
    return group in _registry(request).groups


async def _group_root(request: web.Request) -> web.Response:
    group = request.match_info["group"]
    if not _group_served(request, group):
        return _page_not_found()
    doc = discovery.api_group(_registry(request), group)
    if doc is None or request.method != "GET":
        raise errors.not_found_path()
    return _json_response(doc)


async def _group_version_root(request: web.Request) -> web.Response:
    if not _group_served(request, request.match_info["group"]):
        return _page_not_found()
    doc = discovery.api_resource_list(_registry(request), request.match_info["group"], request.match_info["version"])
    if doc is None or request.method != "GET":
        raise errors.not_found_path()
    return _json_response(doc)


async def _core(request: web.Request) -> web.StreamResponse:
    return await _dispatch(request, "", request.match_info["version"], request.match_info["tail"])


async def _grouped(request: web.Request) -> web.StreamResponse:
    info = request.match_info
    if not _group_served(request, info["group"]):
        return _page_not_found()
    return await _dispatch(request, info["group"], info["version"], info["tail"])


@dataclass(frozen=True)
class _Target:
    res: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool  # the deprecated `/watch/` prefix


def _parse_path(registry: Registry, group: str, version: str, tail: str) -> _Target:
    segments = [s for s in tail.split("/") if s]
    watch_path = bool(segments) and segments[0] == "watch"
    if watch_path:
        segments = segments[1:]
    namespace: str | None = None
    if len(segments) >= 3 and segments[0] == "namespaces" and segments[2] not in ("status", "finalize"):
        namespace, segments = segments[1], segments[2:]
    if not segments or len(segments) > 3:
        raise errors.not_found_path()
    res = registry.resource_for(group, version, segments[0])
    if res is None or (namespace is not None and not res.namespaced):
        raise errors.not_found_path()
    name = segments[1] if len(segments) > 1 else None
    if name is not None and res.namespaced and namespace is None:
        raise errors.not_found_path()
    subresource = segments[2] if len(segments) > 2 else None
    if subresource is not None and subresource not in res.subresources:
        raise errors.not_found_path()
    return _Target(res, namespace, name, subresource, watch_path)


async def _dispatch(request: web.Request, group: str, version: str, tail: str) -> web.StreamResponse:
    state = request.app[STATE]
    target = _parse_path(state.store.registry, group, version, tail)
    if request.method in ("POST", "PUT", "PATCH") and target.res is not EVENTS_V1:
        return await _field_validated_write(request, state, target)
    return await _serve(request, state, target)


async def _field_validated_write(request: web.Request, state: _ServerState, target: _Target) -> web.StreamResponse:
    """A write of any kind's object: its `fieldValidation` (default Warn) decides what unknown fields earn; the
    warnings go back as `Warning: 299 - "…"` headers, which kubectl prints. (events.k8s.io Events are converted
    to core ones by the sim, so their fields are not checked.)"""
    directive = custom_writes.parse_field_validation(request.method, request.query.get("fieldValidation"))
    write = custom_writes.WriteRequest(directive)
    token = custom_writes.WRITE.set(write)
    try:
        response = await _serve(request, state, target)
    finally:
        custom_writes.WRITE.reset(token)
    for text in write.warnings:
        response.headers.add("Warning", f"299 - {json.dumps(text)}")
    return response


async def _serve(request: web.Request, state: _ServerState, target: _Target) -> web.StreamResponse:
    if target.res is EVENTS_V1:
        return await _events_v1(request, state, target)
    method = request.method
    query = request.query
    if target.name is None:
        if method == "GET":
            if target.watch_path or query.get("watch", "") in _TRUE:
                return await _watch(request, state, target, _version_view(target.res))
            return await _list(state, target, query, _table_request(request))
        if method == "POST":
            return await _create(request, state, target)
        if method == "DELETE":
            return await _delete_collection(request, state, target)
        raise errors.method_not_allowed(method.lower(), target.res.plural, target.res.group)
    if target.watch_path and method == "GET":
        return await _watch(request, state, target, _version_view(target.res))
    if target.subresource == "scale":
        return await _scale(request, state, target)
    store = state.store
    res = target.res
    dry_run = "All" in query.getall("dryRun", [])
    if method == "GET":
        entry = store.entry(res, target.namespace, target.name)
        table = _table_request(request)
        if table is not None:
            rv = str((entry.obj.get("metadata") or {}).get("resourceVersion", ""))
            return _json_response(table.render(res, [entry.obj], {"resourceVersion": rv}))
        if _converts(res):
            return _json_response(_in_version(res, entry.obj))
        return _json_response(entry.json())
    if method == "PUT":
        obj = await _read_object(request)
        if res.custom is not None:
            custom_writes.check_decodable(res, obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be a JSON object")
        if meta.setdefault("name", target.name) != target.name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({target.name})"
            )
        if res.namespaced and meta.setdefault("namespace", target.namespace) != target.namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        return _json_response(_in_version(res, store.update(res, obj, subresource=target.subresource,
                                                            dry_run=dry_run)))
    if method == "PATCH":
        body = await request.read()
        content_type = request.headers.get("Content-Type", "")
        patch_media = media_type(content_type)
        if patch_media not in PATCH_CONTENT_TYPES:
            # go-restful refuses a Content-Type the route does not consume before the handler runs: plain text.
            return web.Response(status=415, text="415: Unsupported Media Type", content_type="text/plain")
        if patch_media == STRATEGIC_MERGE_PATCH and res.custom is not None:
            # Custom kinds have no patch strategies: kubectl patch must say --type merge or json.
            raise errors.unsupported_media_type(content_type, CUSTOM_PATCH_TYPES)
        if patch_media == APPLY_PATCH and not query.get("fieldManager"):
            cause = errors.field_required("fieldManager", "is required for apply patch")
            raise errors.invalid("PatchOptions", "", [cause], "meta.k8s.io")
        existed = _exists(store, target)
        before = _in_place_context(store, target, body, dry_run)
        outcome, code = "error", 500
        try:
            patched = store.patch(
                res, target.namespace, target.name, body, content_type, subresource=target.subresource,
                dry_run=dry_run
            )
            outcome, code = "patched", 200
        except ApiError as exc:
            code = exc.code
            outcome = {409: "conflict", 422: "invalid", 404: "not_found"}.get(exc.code, "error")
            raise
        finally:
            if before is not None:
                note_patch(patch_record(target.namespace, str(target.name), before[0], before[1], outcome, code,
                                        time.time()))
        return _json_response(_in_version(res, patched), 200 if existed else 201)
    if method == "DELETE" and target.subresource is None:
        options = await _delete_options(request)
        recorded = len(store.deletes)
        try:
            return _json_response(_in_version(res, store.delete(res, target.namespace, target.name, options,
                                                                dry_run=dry_run)))
        finally:
            if len(store.deletes) > recorded:  # store.delete records synchronously: this call's own record
                note_delete(store.deletes[recorded])
    raise errors.method_not_allowed(method.lower(), res.plural, res.group)


def _in_place_context(store: Store, target: _Target, body: bytes, dry_run: bool) -> tuple[JSON, JSON] | None:
    """(the pod, its state) before a PATCH of a pod's spec, when the store records states (an audit log is kept):
    the audit judges an in-place upgrade as it judges a deletion."""
    if (target.res is not PODS or target.subresource is not None or dry_run or store.delete_context is None
            or not target.name or not touches_spec(body)):
        return None
    try:
        pod = store.entry(PODS, target.namespace, target.name).obj
    except ApiError:
        return None
    return pod, store.delete_context(pod)


async def _scale(request: web.Request, state: _ServerState, target: _Target) -> web.Response:
    """`<kind>/scale` of a custom kind: GET, PUT and JSON/merge PATCH of its autoscaling/v1 Scale."""
    store, res, method = state.store, target.res, request.method
    name = target.name or ""
    current = store.entry(res, target.namespace, name).obj
    if method == "GET":
        return _json_response(custom_scale.scale_of(res, current))
    if method == "PUT":
        scale = await _read_object(request)
    elif method == "PATCH":
        content_type = request.headers.get("Content-Type", "")
        if media_type(content_type) not in ("application/json-patch+json", "application/merge-patch+json"):
            raise errors.unsupported_media_type(content_type, CUSTOM_PATCH_TYPES[:2])
        try:
            scale = apply_patch(custom_scale.scale_of(res, current), await request.read(), content_type, "Scale")
        except PatchError as exc:
            raise exc.to_api_error() from exc
    else:
        raise errors.method_not_allowed(method.lower(), f"{res.plural}/scale", res.group)
    dry_run = "All" in request.query.getall("dryRun", [])
    updated = store.update(res, custom_scale.apply_scale(res, current, scale), dry_run=dry_run)
    return _json_response(custom_scale.scale_of(res, updated))


def _converts(res: Resource) -> bool:
    """A custom kind served through a version other than its CRD's storage version."""
    return res.custom is not None and res.version != res.custom.storage_version


def _in_version(res: Resource, obj: JSON) -> JSON:
    """A custom object as the version it is read through shows it: with the CRD's `None` conversion, the stored
    object with that version's apiVersion."""
    if not _converts(res) or obj.get("kind") != res.kind:
        return obj
    return {**obj, "apiVersion": res.api_version}


class _VersionView:
    """Watch events of a custom kind read through a version other than its storage version."""

    def watch_line(self, res: Resource, line: bytes) -> bytes:
        event = json.loads(line)
        if isinstance(event.get("object"), dict) and event.get("type") != "ERROR":
            event["object"]["apiVersion"] = res.api_version
        return dumps(event) + b"\n"


def _version_view(res: Resource) -> _LineView | None:
    return _VersionView() if _converts(res) else None


def _exists(store: Store, target: _Target) -> bool:
    try:
        store.entry(target.res, target.namespace, target.name or "")
    except ApiError:
        return False
    return True


async def _read_object(request: web.Request) -> JSON:
    """A request body in JSON, YAML or (for what kubectl's typed clients send) protobuf; anything else is
    415, undecodable is 400."""
    media = request.headers.get("Content-Type", "application/json").split(";", 1)[0].strip().lower()
    raw = await request.read()
    if media == protobuf.MEDIA_TYPE:
        try:
            return protobuf.decode_object(raw)
        except ProtobufError as exc:
            raise errors.bad_request(f"the body of the request could not be decoded: {exc}") from exc
    try:
        if media in ("application/json", ""):
            decoded = json.loads(raw)
        elif media == "application/yaml":
            decoded = yaml.safe_load(raw.decode())
        else:
            raise errors.unsupported_media_type(media, _BODY_TYPES)
    except (ValueError, yaml.YAMLError) as exc:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc
    if not isinstance(decoded, dict):
        raise errors.bad_request(
            f"couldn't get version/kind; json parse error: expected a JSON object, got {type(decoded).__name__}"
        )
    return decoded


async def _delete_options(request: web.Request) -> JSON:
    """DeleteOptions from the body, or from query parameters when the body is empty (as the apiserver does)."""
    raw = await request.read()
    if raw.strip():
        try:
            options = json.loads(raw)
        except ValueError as exc:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc
        if not isinstance(options, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        return options
    query = request.query
    options = {}
    if "gracePeriodSeconds" in query:
        options["gracePeriodSeconds"] = _int_param(query, "gracePeriodSeconds")
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if "orphanDependents" in query:
        options["orphanDependents"] = query["orphanDependents"] in _TRUE
    if "dryRun" in query:
        options["dryRun"] = query.getall("dryRun")
    return options


def _int_param(query: Any, name: str) -> int | None:
    text = query.get(name)
    if text in (None, ""):
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise errors.bad_request(f'invalid value for {name}: "{text}" is not an integer') from exc


def _list_options_invalid(field_path: str, detail: str) -> ApiError:
    return errors.invalid("ListOptions", "", [errors.field_forbidden(field_path, detail)], "meta.k8s.io")


# ---------------------------------------------------------------------------------------------- verbs


async def _list(state: _ServerState, target: _Target, query: Any, table: _TableRequest | None = None) -> web.Response:
    store, res = state.store, target.res
    labels, fields = store.parse_selectors(res, query.get("labelSelector"), query.get("fieldSelector"))
    rv_text = query.get("resourceVersion")
    rv_match = query.get("resourceVersionMatch") or None
    if rv_match is not None:
        if rv_match not in ("Exact", "NotOlderThan"):
            cause = errors.field_not_supported("resourceVersionMatch", rv_match, ["Exact", "NotOlderThan"])
            raise errors.invalid("ListOptions", "", [cause], "meta.k8s.io")
        if not rv_text:
            raise _list_options_invalid(
                "resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        if rv_match == "Exact" and rv_text == "0":
            raise _list_options_invalid(
                "resourceVersionMatch", 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
            )
    if query.get("sendInitialEvents"):
        raise _list_options_invalid("sendInitialEvents", "sendInitialEvents is forbidden for list")
    limit = _int_param(query, "limit")
    continue_token = query.get("continue") or None
    if rv_text not in (None, "", "0") and not continue_token:
        await _wait_for_rv(state, parse_resource_version(rv_text))
    page = store.list_page(
        res,
        target.namespace,
        labels=labels,
        fields=fields,
        resource_version=rv_text,
        resource_version_match=rv_match,
        limit=limit if limit and limit > 0 else None,
        continue_token=continue_token,
    )
    if table is not None:
        return _json_response(
            table.render(res, [item.obj for item in page.items],
                         _list_meta(page.resource_version, page.continue_token, page.remaining))
        )
    return _json_response(_list_body(res, page.items, page.resource_version, page.continue_token, page.remaining))


def _list_meta(rv: int, continue_token: str | None, remaining: int | None) -> JSON:
    meta: JSON = {"resourceVersion": str(rv)}
    if continue_token:
        meta["continue"] = continue_token
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    return meta


def _list_body(
    res: Resource, items: list[StoredObject], rv: int, continue_token: str | None, remaining: int | None
) -> bytes:
    meta = _list_meta(rv, continue_token, remaining)
    head = b'{"kind":"%s","apiVersion":"%s","metadata":%s,"items":[' % (
        res.list_kind.encode(),
        res.api_version.encode(),
        dumps(meta),
    )
    return head + b",".join(item.item_json() for item in items) + b"]}"


async def _wait_for_rv(state: _ServerState, rv: int) -> None:
    if rv > state.store.resource_version and not await state.store.wait_for_resource_version(
        rv, state.settings.too_large_rv_wait
    ):
        raise errors.too_large_rv(rv, state.store.resource_version)


async def _create(request: web.Request, state: _ServerState, target: _Target) -> web.Response:
    res = target.res
    if res.namespaced and target.namespace is None:
        raise errors.method_not_allowed("create", res.plural, res.group)
    obj = await _read_object(request)
    dry_run = "All" in request.query.getall("dryRun", [])
    created = state.store.create(res, obj, namespace=target.namespace, dry_run=dry_run)
    return _json_response(_in_version(res, created), 201)


async def _delete_collection(request: web.Request, state: _ServerState, target: _Target) -> web.Response:
    store, res = state.store, target.res
    labels, fields = store.parse_selectors(res, request.query.get("labelSelector"), request.query.get("fieldSelector"))
    options = await _delete_options(request)
    dry_run = "All" in request.query.getall("dryRun", [])
    page = store.list_page(res, target.namespace, labels=labels, fields=fields)
    deleted: list[JSON] = []
    for item in page.items:
        meta = item.obj["metadata"]
        try:
            result = store.delete(res, meta.get("namespace"), meta["name"], options, dry_run=dry_run)
        except ApiError as exc:
            if exc.code == 404:  # went away meanwhile (e.g. as another item's dependent)
                continue
            raise
        deleted.append(result if result.get("kind") == res.kind else item.obj)
    body = {
        "kind": res.list_kind,
        "apiVersion": res.api_version,
        "metadata": {"resourceVersion": str(store.resource_version)},
        "items": [{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")} for obj in deleted],
    }
    return _json_response(body)


# ---------------------------------------------------------------------------------------------- events.k8s.io/v1


class _EventsV1View:
    def watch_line(self, res: Resource, line: bytes) -> bytes:
        event = json.loads(line)
        obj = event.get("object") or {}
        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            event["object"] = events_v1.to_v1(obj)
        elif event.get("type") == "BOOKMARK":
            obj["apiVersion"] = events_v1.API_VERSION
        return dumps(event) + b"\n"


def _v1_item(obj: JSON) -> JSON:
    return {k: v for k, v in events_v1.to_v1(obj).items() if k not in ("kind", "apiVersion")}


def _v1_list(response: web.Response) -> web.Response:
    assert isinstance(response.body, bytes)
    body = json.loads(response.body)
    body["apiVersion"] = events_v1.API_VERSION
    body["items"] = [_v1_item(item) for item in body.get("items") or []]
    return _json_response(body, response.status)


async def _events_v1(request: web.Request, state: _ServerState, target: _Target) -> web.StreamResponse:
    """events.k8s.io/v1: the stored core/v1 Events, converted on the way in and out (sim/events_v1.py)."""
    core = replace(target, res=EVENTS)
    store, method, query = state.store, request.method, request.query
    dry_run = "All" in query.getall("dryRun", [])
    table = _table_request(request) if method == "GET" else None
    if target.watch_path or (target.name is None and method == "GET" and query.get("watch", "") in _TRUE):
        return await _watch(request, state, core, _EventsV1View())
    if target.name is None:
        if method == "GET":
            listed = await _list(state, core, query, table)
            return listed if table is not None else _v1_list(listed)
        if method == "POST":
            if target.namespace is None:
                raise errors.method_not_allowed("create", EVENTS_V1.plural, EVENTS_V1.group)
            obj = await _read_object(request)
            events_v1.validate_create(obj)
            created = store.create(EVENTS, events_v1.to_core(obj), namespace=target.namespace, dry_run=dry_run)
            return _json_response(events_v1.to_v1(created), 201)
        if method == "DELETE":
            return _v1_list(await _delete_collection(request, state, core))
        raise errors.method_not_allowed(method.lower(), EVENTS_V1.plural, EVENTS_V1.group)
    name = target.name
    if method == "GET":
        entry = store.entry(EVENTS, target.namespace, name)
        if table is not None:
            rv = str((entry.obj.get("metadata") or {}).get("resourceVersion", ""))
            return _json_response(table.render(EVENTS, [entry.obj], {"resourceVersion": rv}))
        return _json_response(events_v1.to_v1(entry.obj))
    if method in ("PUT", "PATCH"):
        if method == "PUT":
            new = await _read_object(request)
        else:
            current = events_v1.to_v1(store.get(EVENTS, target.namespace, name))
            try:
                new = apply_patch(current, await request.read(), request.headers.get("Content-Type", ""), "Event")
            except PatchError as exc:
                raise exc.to_api_error() from exc
        meta = new.setdefault("metadata", {})
        if meta.setdefault("name", name) != name or meta.setdefault("namespace", target.namespace) != target.namespace:
            raise errors.bad_request("the name or namespace of the object does not match the URL")
        updated = store.update(EVENTS, events_v1.to_core(new), dry_run=dry_run)
        return _json_response(events_v1.to_v1(updated))
    if method == "DELETE":
        result = store.delete(EVENTS, target.namespace, name, await _delete_options(request), dry_run=dry_run)
        return _json_response(events_v1.to_v1(result) if result.get("kind") == "Event" else result)
    raise errors.method_not_allowed(method.lower(), EVENTS_V1.plural, EVENTS_V1.group)


# ---------------------------------------------------------------------------------------------- watch


@dataclass
class _WatchFilter:
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector

    def __post_init__(self) -> None:
        self.trivial = self.namespace is None and self.labels.empty and self.fields.empty
        self.only_namespace = self.labels.empty and self.fields.empty
        # Watchers with equal filters share one verdict per event (a fleet of agents watching alike).
        self.key = f"?{self.namespace or ''}|{self.labels}|{self.fields}"

    def matches(self, obj: JSON) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if not self.labels.empty and not self.labels.matches(meta.get("labels") or {}):
            return False
        return self.fields.empty or self.fields.matches(obj)


def _event_line(event: WatchEvent, type_: str, use_old: bool = False) -> bytes:
    """`{"type":T,"object":{…}}\\n`, built once per event and variant and shared by all watchers."""
    key = type_ + ("/old" if use_old else "")
    line = event.cache.get(key)
    if line is None:
        if use_old:
            assert event.old is not None
            # An object that stops matching leaves as DELETED: its previous state at this event's RV.
            old = event.old
            obj = {**old, "metadata": {**(old.get("metadata") or {}), "resourceVersion": str(event.rv)}}
            obj_json = dumps(obj)
        else:
            obj_json = event.object_json()
        line = b'{"type":"%s","object":%s}\n' % (type_.encode(), obj_json)
        event.cache[key] = line
    return line


def _translate(event: WatchEvent, flt: _WatchFilter) -> bytes | None:
    """What one watcher sees of an event: selectors turn matching transitions into ADDED/DELETED."""
    if flt.trivial:
        return _event_line(event, event.type)
    line = event.cache.get(flt.key)
    if line is None:
        line = _translate_filtered(event, flt) or b""
        event.cache[flt.key] = line
    return line or None


def _translate_filtered(event: WatchEvent, flt: _WatchFilter) -> bytes | None:
    now = flt.matches(event.object)
    if event.type == "MODIFIED" and not flt.only_namespace:
        before = event.old is not None and flt.matches(event.old)
        if now and before:
            return _event_line(event, "MODIFIED")
        if now:
            return _event_line(event, "ADDED")
        if before:
            return _event_line(event, "DELETED", use_old=True)
        return None
    # A namespace never changes, so with no other selector the event type stands as it is.
    return _event_line(event, event.type) if now else None


def _bookmark_line(res: Resource, rv: int, annotations: dict[str, str] | None = None) -> bytes:
    meta: JSON = {"resourceVersion": str(rv)}
    if annotations:
        meta["annotations"] = annotations
    obj = {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}
    return b'{"type":"BOOKMARK","object":%s}\n' % dumps(obj)


def _error_line(status: JSON) -> bytes:
    return b'{"type":"ERROR","object":%s}\n' % dumps(status)


def _watch_timeout(state: _ServerState, query: Any) -> float:
    text = query.get("timeoutSeconds")
    if text not in (None, ""):
        try:
            value = float(text)
        except ValueError as exc:
            raise errors.bad_request(f'invalid value for timeoutSeconds: "{text}"') from exc
        if value > 0:
            return value
    low, high = state.settings.watch_timeout_range
    return random.uniform(low, high)


async def _error_stream(request: web.Request, line: bytes) -> web.StreamResponse:
    """A watch answered with one error line. The client may have gone while the sim waited for a resourceVersion
    (or a slow-answer fault held the request): then there is no one to tell, as for a watch's live events."""
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        await response.write(line)
    except ConnectionError:
        pass
    return response


async def _watch(
    request: web.Request, state: _ServerState, target: _Target, view: _LineView | None = None
) -> web.StreamResponse:
    store, res, query = state.store, target.res, request.query
    field_text = query.get("fieldSelector") or ""
    if target.name is not None:  # `/watch/.../pods/<name>` watches one object
        field_text = ",".join(t for t in (field_text, f"metadata.name={target.name}") if t)
    labels, fields = store.parse_selectors(res, query.get("labelSelector"), field_text)
    flt = _WatchFilter(target.namespace, labels, fields)
    table: _LineView | None = _table_request(request) or view  # a Table prints the stored (core) form
    bookmarks = query.get("allowWatchBookmarks", "") in _TRUE
    send_initial_text = query.get("sendInitialEvents")
    rv_match = query.get("resourceVersionMatch") or None
    rv_text = query.get("resourceVersion") or ""
    if send_initial_text:
        if rv_match != "NotOlderThan":
            raise _list_options_invalid(
                "resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
            )
        if send_initial_text in _TRUE and not bookmarks:
            raise _list_options_invalid(
                "allowWatchBookmarks", "sendInitialEvents requires setting allowWatchBookmarks to true"
            )
    elif rv_match is not None:
        raise _list_options_invalid(
            "resourceVersionMatch", "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
        )
    timeout = _watch_timeout(state, query)
    deadline = time.monotonic() + timeout
    send_initial = send_initial_text in _TRUE if send_initial_text else rv_text in ("", "0")
    since: int | None = None
    if rv_text not in ("", "0"):
        since = parse_resource_version(rv_text)
        if since > store.resource_version and not await store.wait_for_resource_version(
            since, state.settings.too_large_rv_wait
        ):
            return await _error_stream(request, _error_line(errors.too_large_rv(since, store.resource_version).status))
    if send_initial:
        since = None  # initial events carry the current state; live events follow from now on
    try:
        sub = store.open_subscription([res], since_rv=since, max_queue=state.settings.watch_queue_limit)
    except ApiError as exc:
        if exc.code != 410:
            raise
        assert since is not None
        return await _error_stream(
            request, _error_line(errors.expired_watch_event(since, store.oldest_resource_version)["object"]))
    # No await between subscribing and the snapshot: initial events and live events cannot overlap or miss.
    initial: list[bytes] = []
    snapshot_rv = store.resource_version
    if send_initial:
        page = store.list_page(res, target.namespace, labels=labels, fields=fields)
        initial = [b'{"type":"ADDED","object":%s}\n' % item.json() for item in page.items]
        if send_initial_text in _TRUE:
            initial.append(_bookmark_line(res, snapshot_rv, {INITIAL_EVENTS_END: "true"}))
    state.watches.add(sub)
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        if initial:
            if table is not None:
                initial = [table.watch_line(res, line) for line in initial]
            await response.write(b"".join(initial))
        start_rv = since if since is not None and not send_initial else snapshot_rv
        await _pump(request, response, state, sub, res, flt, deadline, bookmarks, start_rv, table)
    except (ConnectionResetError, ConnectionError):
        pass  # the client went away; nothing to tell it
    finally:
        sub.close()
        state.watches.discard(sub)
    return response


async def _pump(
    request: web.Request,
    response: web.StreamResponse,
    state: _ServerState,
    sub: Subscription,
    res: Resource,
    flt: _WatchFilter,
    deadline: float,
    bookmarks: bool,
    start_rv: int,
    table: _LineView | None = None,
) -> None:
    """Forward events until the deadline, the client leaving, or the server stopping.

    Bookmarks follow the real cacher: one every `bookmark_interval` (about a minute) and one 2 s before the
    deadline (none when the watch is shorter than that), and only once the RV has moved past the one the
    watch started from, since a bookmark that tells the client nothing new is never sent.
    """
    settings = state.settings
    next_bookmark = time.monotonic() + settings.bookmark_interval
    final_bookmark = deadline - 2.0
    final_sent = final_bookmark <= time.monotonic()
    while True:
        now = time.monotonic()
        if now >= deadline or state.stopping:
            return
        wake = min(deadline, settings.disconnect_poll + now)
        if bookmarks:
            wake = min(wake, next_bookmark, final_bookmark if not final_sent else deadline)
        await sub.wait(max(0.0, wake - now))
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        lines = [line for event in sub.drain() if (line := _translate(event, flt)) is not None]
        now = time.monotonic()
        if bookmarks and (now >= next_bookmark or (not final_sent and now >= final_bookmark)):
            next_bookmark = now + settings.bookmark_interval
            final_sent = final_sent or now >= final_bookmark
            rv = state.store.resource_version
            if rv > start_rv:
                # Everything up to the store's RV has been forwarded above, so the bookmark is truthful.
                lines.append(_bookmark_line(res, rv))
        if lines:
            if table is not None:
                lines = [table.watch_line(res, line) for line in lines]
            await response.write(b"".join(lines))
        if sub.closed:
            return  # dropped as too slow, or the server is shutting down
