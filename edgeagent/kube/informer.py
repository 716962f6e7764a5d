"""A list+watch cache of raw objects that stays correct across any sequence of watch failures.

Why not kubernetes_asyncio's `Watch`: it retries a 410 once with the same resourceVersion and then
raises, it has no notion of a relist diff, and it builds model objects. Here a stream that ends is
resumed from the last resourceVersion (bookmarks advance it), a `410 Gone`/`Expired` (as HTTP status
or as an in-stream ERROR event) triggers a fresh list whose difference to the cache is handed to the
handlers as ADDED/MODIFIED/DELETED, and every call is bounded so that a blackholed link turns into
`healthy = False` within `idle_timeout` instead of a silent hang.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from edgeagent import backoff, log
from edgeagent.aio import wait_event
from edgeagent.kube import selectors
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.errors import Gone
from edgeagent.kube.objects import key_of, labels_of, meta

JSON = dict[str, Any]
Handler = Callable[[str, JSON, JSON | None], None]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

_LIST_PAGE_SIZE = 500
# Consecutive watches the server answered with an error before a relist from scratch. Resuming is far cheaper
# on an edge link, but a resourceVersion that never works again (a store restored from backup, a server that
# lost its history) must not keep the cache frozen: client-go's reflector relists too. An unreachable server
# says nothing about our resourceVersion, so a partition does not count: after it the watch resumes.
WATCH_FAILURES_BEFORE_RELIST = 3


class _Expired(Exception):
    """The resourceVersion we hold is older than the server's history: only a relist helps."""


def is_too_large_resource_version(exc: KubeError) -> bool:
    """The server has not reached our resourceVersion, and may never (its store was reset or restored).

    kube-apiserver answers `504 Timeout` with `Too large resource version: N, current: M` (as a cause).
    """
    return exc.code == 504 and "too large resource version" in str(exc.status).lower() + exc.message.lower()


def _rv_of(obj: JSON) -> str:
    return str(meta(obj).get("resourceVersion") or "")


class Informer:
    """Keeps `items` equal to the server's objects matching the selectors, and tells handlers about changes."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        name: str = "",
        watch_timeout_seconds: int = 240,
        idle_timeout: float = 60.0,
        backoff_initial: float = 0.2,
        backoff_max: float = 10.0,
        backoff_max_rejected: float = 60.0,
        transform: Callable[[JSON], JSON] | None = None,
        not_served: tuple[str, str] | None = None,
    ) -> None:
        self._client = client
        self._path = path
        self._field_selector = field_selector or ""
        self._label_selector = label_selector or ""
        # Parse up front: a selector typo must fail at start-up, not as a 400 loop in the background.
        # Any field is accepted here: which fields a kind supports is the server's to say.
        self._fields = selectors.parse_field_selector(self._field_selector, allowed=None)
        self._labels = selectors.parse_label_selector(self._label_selector)
        self.name = name or path
        self._watch_timeout_seconds = watch_timeout_seconds
        self._idle_timeout = idle_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        # While the server rejects our credentials (401) or refuses us the list/watch (403), a retry every few
        # seconds only repeats the refusal: back off further; whoever notices new credentials kicks the informer.
        self._backoff_max_rejected = backoff_max_rejected
        # Applied to every object before it is cached (like client-go's TransformFunc): a controller that
        # holds tens of thousands of objects keeps only the fields it reads. Selectors match the full object.
        self._transform = transform
        # (said when the server answers 404: the kind is not served, said when it is served again). A custom
        # resource whose CRD is not installed is answered 404 on every retry, which is a state, not news: said
        # once per episode in the caller's words (`not_served`), the retries themselves at debug level.
        self._not_served = not_served
        self._absent = False
        self._handlers: list[Handler] = []
        self._health_listeners: list[Callable[[bool], None]] = []
        self._kick = asyncio.Event()
        self._log = log.get("informer").bind(informer=self.name)

        self.items: dict[str, JSON] = {}
        self.resource_version: str = ""
        self.synced = asyncio.Event()
        # The server answered the first list, with the objects or with an error status (`last_code`): a caller
        # that can do without this kind (e.g. a custom resource whose CRD is not installed: 404) stops waiting.
        self.answered = asyncio.Event()
        self.healthy: bool = False
        # The last list/watch was refused (401 or 403) and none has worked since: what readyz and the link
        # monitor need to know (a kick repeats the refusal; a 403 is a missing grant, not a dead link).
        self.refused: KubeError | None = None
        self.last_error: str = ""
        # The HTTP status of the last failure (None: none, or no answer): a 403 is a missing permission, which a
        # caller reports differently from a link down or a rejected credential.
        self.last_code: int | None = None
        # Counters for metrics: how often the watch was re-established and how often we had to relist.
        self.watch_restarts: int = 0
        self.relists: int = 0

    # ----------------------------------------------------------------- public API

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def add_health_listener(self, listener: Callable[[bool], None]) -> None:
        """Called with the new value whenever `healthy` flips, so a link monitor can probe at once."""
        self._health_listeners.append(listener)

    def kick(self) -> None:
        """Cut a backoff wait short: someone knows the server is reachable again (e.g. the link monitor)."""
        self._kick.set()

    def matches(self, obj: JSON) -> bool:
        """Whether `obj` belongs in this cache: re-checked locally so a stray object is never served."""
        return self._fields.matches(obj) and self._labels.matches(labels_of(obj))

    def seed(self, items: list[JSON], resource_version: str) -> None:
        """Start from a persisted snapshot so callers can answer before the server is reachable.

        The first list after seeding is diffed against it, so objects deleted while we were away
        are reported as DELETED.
        """
        for obj in items:
            if isinstance(obj, dict) and self.matches(obj):
                key = key_of(obj)
                old = self.items.get(key)
                obj = obj if self._transform is None else self._transform(obj)
                self.items[key] = obj
                self._emit(ADDED if old is None else MODIFIED, obj, old)
        self.resource_version = resource_version
        self.synced.set()

    def watch_timeout(self) -> int:
        """`timeoutSeconds` sent to the server: below `idle_timeout`, so a healthy quiet stream ends by
        itself before our idle deadline would call it dead."""
        below_idle = max(1, math.floor(self._idle_timeout * 0.75))
        return max(1, min(self._watch_timeout_seconds, below_idle))

    async def run(self) -> None:
        """List, then watch from the list's resourceVersion forever; cancel to stop."""
        failures = 0
        answered = 0  # consecutive failures the server answered (an error status, not a dead link)
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                    failures = answered = 0
                await self._watch_once()
                failures = answered = 0
            except _Expired as exc:
                self._log.info("resource_version_expired_relisting", resource_version=self.resource_version,
                               error=str(exc))
                need_list = True
                continue
            except (KubeError, KubeUnreachable) as exc:
                rejected = isinstance(exc, KubeError) and exc.code in (401, 403)
                if rejected and isinstance(exc, KubeError):
                    self._note_refused(exc)
                absent = self._note_absent(exc)
                # A refusal is logged once per episode (a 401 by the client's CredentialHealth, a 403 by
                # _note_refused), and so is a kind not served (`_note_absent`), not per try here.
                self._mark_unhealthy(exc, quiet=rejected or absent)
                if isinstance(exc, KubeError):
                    self.answered.set()
                failures += 1
                answered = answered + 1 if isinstance(exc, KubeError) else 0
                if not need_list and (
                    absent
                    or (isinstance(exc, KubeError) and is_too_large_resource_version(exc))
                    or answered >= WATCH_FAILURES_BEFORE_RELIST
                ):
                    # Our resourceVersion may be one the server will never serve: start over from a fresh list.
                    # (A kind no longer served, said already: only a list shows it back.)
                    if not absent:
                        self._log.warning("watch_keeps_failing_relisting", resource_version=self.resource_version,
                                          error=str(exc), attempt=failures)
                    need_list = True
                delay = self._backoff(failures, rejected=rejected)
                (self._log.debug if rejected or absent else self._log.warning)(
                    "list_watch_failed_backing_off", error=str(exc), attempt=failures, delay=round(delay, 3),
                    listed=not need_list)
                await wait_event(self._kick, delay)
                self._kick.clear()
                continue
            self.watch_restarts += 1

    # ----------------------------------------------------------------- internals

    def _backoff(self, failures: int, *, rejected: bool = False) -> float:
        cap = self._backoff_max_rejected if rejected else self._backoff_max
        ceiling = backoff.exponential(max(1, failures), initial=self._backoff_initial, cap=cap)
        # Jitter so that a fleet of nodes coming back at once does not hit the API server in lock step.
        return backoff.jittered(ceiling, low=0.5, high=1.0)

    def _mark_unhealthy(self, exc: Exception, *, quiet: bool = False) -> None:
        if self.healthy:
            (self._log.info if quiet else self._log.warning)("informer_unhealthy", error=str(exc))
        was = self.healthy
        self.healthy = False
        self.last_error = str(exc)
        self.last_code = exc.code if isinstance(exc, KubeError) else None
        if was:
            self._notify_health(False)

    def _note_refused(self, exc: KubeError) -> None:
        """One line per episode of refusals: a missing grant (403) is the operator's to fix, a minute apart it
        would still fill the journal."""
        if exc.code == 403 and (self.refused is None or self.refused.code != 403):
            self._log.warning("list_watch_forbidden", error=exc.message, code=exc.code,
                              hint="the API server refuses this identity the list/watch; retried every "
                                   f"{self._backoff_max_rejected:g} s at most until a grant allows it")
        self.refused = exc

    def _note_absent(self, exc: Exception) -> bool:
        """Whether `exc` is a 404 told by `not_served`: the first of an episode is said then (a warning), the
        rest are not news."""
        if self._not_served is None or not isinstance(exc, KubeError) or exc.code != 404:
            return False
        if not self._absent:
            self._absent = True
            self._log.warning("resource_not_served", message=self._not_served[0], path=self._path,
                              hint="retried with backoff; no restart needed once it is served")
        return True

    def _mark_healthy(self) -> None:
        if self._absent and self._not_served is not None:
            self._absent = False
            self._log.info("resource_served", message=self._not_served[1], path=self._path)
        if self.refused is not None:
            if self.refused.code == 403:
                self._log.info("list_watch_allowed_again")
            self.refused = None
        if not self.healthy:
            self._log.info("informer_healthy", resource_version=self.resource_version, items=len(self.items))
        was = self.healthy
        self.healthy = True
        self.last_error = ""
        self.last_code = None
        if not was:
            self._notify_health(True)

    def _notify_health(self, healthy: bool) -> None:
        for listener in self._health_listeners:
            try:
                listener(healthy)
            except Exception:
                self._log.exception("informer_health_listener_failed")

    def _base_query(self) -> dict[str, str | int | bool]:
        query: dict[str, str | int | bool] = {}
        if self._field_selector:
            query["fieldSelector"] = self._field_selector
        if self._label_selector:
            query["labelSelector"] = self._label_selector
        return query

    async def _list_all(self) -> tuple[dict[str, JSON], str]:
        """A consistent snapshot, page by page; an expired continue token restarts the whole list."""
        while True:
            fresh: dict[str, JSON] = {}
            token = ""
            list_rv = ""
            try:
                while True:
                    query = self._base_query()
                    query["limit"] = _LIST_PAGE_SIZE
                    if token:
                        query["continue"] = token
                    page = await self._client.get(self._path, query=query)
                    for obj in page.get("items") or []:
                        if isinstance(obj, dict) and self.matches(obj):
                            fresh[key_of(obj)] = obj if self._transform is None else self._transform(obj)
                    page_meta = page.get("metadata") or {}
                    list_rv = str(page_meta.get("resourceVersion") or list_rv)
                    token = str(page_meta.get("continue") or "")
                    if not token:
                        return fresh, list_rv
            except Gone:
                if not token:
                    raise
                self._log.info("list_continue_token_expired")
                continue

    async def _relist(self) -> None:
        fresh, list_rv = await self._list_all()
        self.relists += 1
        old_items = self.items
        # Apply the difference in place so references to `items` held by callers stay current.
        for key in [k for k in old_items if k not in fresh]:
            gone = old_items.pop(key)
            self._emit(DELETED, gone, gone)
        for key, obj in fresh.items():
            old = old_items.get(key)
            if old is None:
                old_items[key] = obj
                self._emit(ADDED, obj, None)
            elif _rv_of(old) != _rv_of(obj) or old != obj:
                old_items[key] = obj
                self._emit(MODIFIED, obj, old)
        self.resource_version = list_rv
        self._log.info("listed", items=len(self.items), resource_version=list_rv)
        self._mark_healthy()
        self.synced.set()
        self.answered.set()

    async def _watch_once(self) -> None:
        """One watch stream from `resource_version`; returns when the server ends it cleanly."""
        query = self._base_query()
        query["resourceVersion"] = self.resource_version
        query["allowWatchBookmarks"] = True
        query["timeoutSeconds"] = self.watch_timeout()
        try:
            async for event in self._client.watch(self._path, query=query, idle_timeout=self._idle_timeout,
                                                  on_open=self._mark_healthy):
                self._handle_event(event)
                self._mark_healthy()
        except Gone as exc:
            raise _Expired(str(exc)) from exc
        # A clean end after `timeoutSeconds` proves the link works even if nothing changed.
        self._mark_healthy()

    def _handle_event(self, event: JSON) -> None:
        etype = str(event.get("type") or "")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise KubeUnreachable(f"watch {self._path}: event without object: {etype}")
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410 or obj.get("reason") in ("Expired", "Gone"):
                raise _Expired(str(obj.get("message") or "resource version too old"))
            raise KubeError(int(code) if isinstance(code, int) else 500, obj)
        rv = _rv_of(obj)
        if etype == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        key = key_of(obj)
        old = self.items.get(key)
        if etype in (ADDED, MODIFIED):
            matches = self.matches(obj)
            if matches and self._transform is not None:
                obj = self._transform(obj)
            if not matches:
                # Stopped matching (the server should have said DELETED): never keep serving it.
                if old is not None:
                    del self.items[key]
                    self._emit(DELETED, obj, old)
            elif old is None:
                self.items[key] = obj
                self._emit(ADDED, obj, None)
            elif old != obj:
                # Replays after a resume arrive as ADDED for objects we hold: report what changed for us.
                self.items[key] = obj
                self._emit(MODIFIED, obj, old)
        elif etype == DELETED:
            if old is not None:
                del self.items[key]
                self._emit(DELETED, obj if self._transform is None else self._transform(obj), old)
        else:
            self._log.warning("unknown_watch_event_type_ignored", type=etype)
        if rv:
            self.resource_version = rv

    def _emit(self, etype: str, obj: JSON, old: JSON | None) -> None:
        for handler in self._handlers:
            try:
                handler(etype, obj, old)
            except Exception:
                # One broken consumer must not stop the cache (and every other consumer) from updating.
                self._log.exception("informer_handler_failed", type=etype, key=key_of(obj))
