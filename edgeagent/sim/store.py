"""The simulated cluster's state: versioned objects, one global resourceVersion, bounded event history.

Everything the real apiserver's registry and storage layers decide lives here (not in the HTTP layer), so
the sim's own controllers, which call the Store in-process, get the same semantics as HTTP clients:
optimistic concurrency, status-subresource split, graceful pod deletion, DaemonSet generations, no-op
writes that store nothing.

Stored objects are treated as immutable: a write builds a new dict and replaces the old one, so the event
history, list snapshots and serialisation caches can share them without copying. Public methods copy on
the way in and out because in-process callers may mutate what they hold; the HTTP layer reads the shared
objects through `list_page`/`entry` and watch subscriptions and only serialises them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import random
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from edgeagent.aio import wait_event
from edgeagent.contract import ANNOTATION_TEMPLATE_GENERATION
from edgeagent.kube.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    label_selector_from_dict,
    parse_field_selector,
    parse_label_selector,
)
from edgeagent.sim import crd_schema, custom_writes, errors, stored_kinds
from edgeagent.sim import crds as crds_rules
from edgeagent.sim.admission_policy import PolicyAdmission
from edgeagent.sim.admission_policy import Request as AdmissionRequest
from edgeagent.sim.job_defaults import default_job
from edgeagent.sim.patch import APPLY_PATCH, CONTENT_TYPES, PatchError, apply_patch, media_type
from edgeagent.sim.pod_admission import admit_new_pod, default_pod_only, mirror_service_account
from edgeagent.sim.pod_update import validate_pod_update
from edgeagent.sim.resources import (
    CUSTOM_RESOURCE_DEFINITIONS,
    DAEMONSETS,
    EVENTS,
    JOBS,
    LEASES,
    NAMESPACES,
    PODS,
    SERVICE_ACCOUNTS,
    VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
    Registry,
    Resource,
)

JSON = dict[str, Any]
# Aliases: inside Store, `list` names the method, not the builtin.
_Keys = list[tuple[str, str]]
_Objects = list[JSON]
_Pairs = list[tuple[JSON, JSON]]
_Names = list[str]
_Served = list[Resource]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-node-lease", "kube-public")
# The apiserver's random suffix alphabet for generateName (no vowels, no confusable characters), which
# k8s.io/apimachinery/pkg/util/rand also uses for hashes (sim/daemonsets.py).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_RAW_URL_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


def clone(obj: JSON) -> JSON:
    """Deep copy of a JSON tree; several times faster than copy.deepcopy for plain dicts and lists."""
    return {k: _clone_value(v) for k, v in obj.items()}


def _clone_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clone_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone_value(v) for v in value]
    return value


def dumps(obj: Any) -> bytes:
    """Compact JSON, as the apiserver writes it (kubernetes_asyncio reads watch events line by line)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def timestamp(at: float | None = None) -> str:
    """RFC 3339 with second precision, the wire format of metav1.Time."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if at is None else at))


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _key_string(key: tuple[str, str]) -> str:
    """etcd key order (`<namespace>/<name>`): lists and continue tokens follow it."""
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


class StoredObject:
    """One stored object plus lazily built serialisations, shared by every reader of this version."""

    __slots__ = ("_item_json", "_json", "obj")

    def __init__(self, obj: JSON) -> None:
        self.obj = obj
        self._json: bytes | None = None
        self._item_json: bytes | None = None

    def json(self) -> bytes:
        if self._json is None:
            self._json = dumps(self.obj)
        return self._json

    def item_json(self) -> bytes:
        """The object as a list item: the real server leaves kind/apiVersion off items of typed lists."""
        if self._item_json is None:
            self._item_json = dumps({k: v for k, v in self.obj.items() if k not in ("kind", "apiVersion")})
        return self._item_json


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED
    resource: Resource
    object: JSON  # after the change (DELETED: the last state, carrying the deletion's RV)
    old: JSON | None  # before the change (None for ADDED)
    rv: int
    # Serialised forms, built once per event and shared by every HTTP watcher of it.
    cache: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def object_json(self) -> bytes:
        """The object's JSON, encoded once for the state file and every watcher (at 10,000 nodes encoding it for
        each cost a tenth of the sim's CPU). Not kept on the stored version: a store of that many nodes would
        then hold its JSON twice over."""
        data = self.cache.get("object")
        if data is None:
            data = self.cache["object"] = dumps(self.object)
        return data


@dataclass
class ListPage:
    items: list[StoredObject]
    resource_version: int
    continue_token: str | None = None
    remaining: int | None = None


class Subscription:
    """Events from one Store, in commit order, without ever blocking the writer.

    In-process controllers get deep copies (they may mutate); the HTTP layer asks for the shared objects
    and a bounded queue, since a watcher that cannot keep up is dropped (the client re-lists) rather than
    allowed to grow memory without bound, as the real apiserver does with slow watchers.
    """

    def __init__(
        self, store: Store, plurals: frozenset[str] | None, *, copy: bool, max_queue: int | None = None
    ) -> None:
        self._store = store
        self.plurals = plurals
        self._copy = copy
        self._max_queue = max_queue
        self._buffer: deque[WatchEvent] = deque()
        self._wakeup = asyncio.Event()
        self.closed = False
        self.overflowed = False

    def _push(self, event: WatchEvent) -> None:
        if self.closed:
            return
        if self._max_queue is not None and len(self._buffer) >= self._max_queue:
            self.overflowed = True
            self.close()
            return
        self._buffer.append(event)
        self._wakeup.set()

    def _out(self, event: WatchEvent) -> WatchEvent:
        if not self._copy:
            return event
        old = clone(event.old) if event.old is not None else None
        return WatchEvent(event.type, event.resource, clone(event.object), old, event.rv)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> WatchEvent:
        while not self._buffer:
            if self.closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._out(self._buffer.popleft())

    def drain(self) -> list[WatchEvent]:
        """Everything queued right now, without waiting (lets a watcher batch its writes)."""
        events = [self._out(e) for e in self._buffer]
        self._buffer.clear()
        return events

    async def wait(self, timeout: float | None) -> bool:
        """Wait until an event is queued or the subscription closes; False on timeout."""
        if self._buffer or self.closed:
            return True
        self._wakeup.clear()
        return await wait_event(self._wakeup, timeout)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._store._unsubscribe(self)
            self._wakeup.set()


# Where a new store's resourceVersion starts. A real cluster's history never begins at 1 from a client's view
# (etcd has long been written to and compacted), so `resourceVersion=1` is answered 410 Expired, as there.
FIRST_RESOURCE_VERSION = 1000


class Store:
    def __init__(self, history: int = 10000) -> None:
        self._rv = FIRST_RESOURCE_VERSION
        # The kinds served: the built-in table plus those of Established CRDs (sim/crds.py).
        self.registry = Registry()
        self._objects: dict[str, dict[tuple[str, str], StoredObject]] = {key: {} for key in self.registry.stored}
        self._sorted_keys: dict[str, list[tuple[str, str]]] = {}
        self._history: deque[WatchEvent] = deque()
        self._history_limit = max(0, history)
        # Every event with rv > _compacted_rv is still in _history.
        self._compacted_rv = self._rv
        # Called with each commit before it becomes visible (durable state); raising aborts the write.
        self.persist: Callable[[WatchEvent], None] | None = None
        # Owner UID -> the objects that name it in ownerReferences, so a deletion's cascade visits its
        # dependents instead of every object (at 30,000 pods the scan cost more than the rest of a delete).
        self._dependents: dict[str, set[tuple[str, tuple[str, str]]]] = {}
        self._subscribers: dict[str, set[Subscription]] = {key: set() for key in self.registry.stored}
        self._subscribers_all: set[Subscription] = set()
        self._rv_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.deletes: list[JSON] = []
        # When set, each pod DELETE's record carries what this returns for the pod as it stood (sim/delete_context.py).
        self.delete_context: Callable[[JSON], JSON] | None = None
        self._policies = PolicyAdmission(self._bound_policies, self._namespace_object)
        for name in DEFAULT_NAMESPACES:
            self.create(NAMESPACES, {"metadata": {"name": name}})

    # ------------------------------------------------------------------------------------------ reads

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def oldest_resource_version(self) -> int:
        """Watches and exact lists from an RV below this one are answered with 410 Expired."""
        return self._compacted_rv

    def entry(self, res: Resource, namespace: str | None, name: str) -> StoredObject:
        """The shared stored version (callers must not mutate `.obj`)."""
        found = self._objects[res.key].get(self._key(res, namespace, name))
        if found is None:
            raise errors.not_found(res.plural, name, res.group)
        return found

    def get(self, res: Resource, namespace: str | None, name: str) -> JSON:
        return clone(self.entry(res, namespace, name).obj)

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[_Objects, int]:
        labels, fields = self.parse_selectors(res, label_selector, field_selector)
        page = self.list_page(res, namespace, labels=labels, fields=fields)
        return [clone(item.obj) for item in page.items], page.resource_version

    @staticmethod
    def parse_selectors(
        res: Resource, label_selector: str | None, field_selector: str | None
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            labels, fields = parse_label_selector(label_selector), parse_field_selector(field_selector, None)
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc
        for term in fields.terms:
            if term.field not in res.field_selectors:
                raise errors.bad_request(res.unknown_field_message(term.field))
        return labels, fields

    def list_page(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListPage:
        """A list with the apiserver's resourceVersion/paging rules (the caller already waited for a future RV).

        RV unset or "0": latest. "N" without limit (or NotOlderThan): latest, which is not older than N.
        "N" with limit (or Exact): the state at exactly N, rebuilt from history, or 410 if that is compacted.
        Every page of a paged list is served at the first page's RV.
        """
        start_after: str | None = None
        if continue_token:
            if resource_version not in (None, "", "0"):
                raise errors.bad_request("specifying resource version is not allowed when using continue")
            at_rv, start_after = self._decode_continue(continue_token)
            if at_rv < self._compacted_rv and at_rv != self._rv:
                raise errors.gone(_CONTINUE_TOO_OLD)
        elif resource_version not in (None, "", "0"):
            requested = parse_resource_version(resource_version)
            exact = resource_version_match == "Exact" or (resource_version_match is None and bool(limit))
            if requested > self._rv:
                raise errors.too_large_rv(requested, self._rv)
            at_rv = requested if exact else self._rv
            if at_rv < self._compacted_rv and at_rv != self._rv:
                raise errors.list_too_old()
        else:
            at_rv = self._rv
        objects = self._objects[res.key] if at_rv == self._rv else self._state_at(res, at_rv)
        keys = self._keys_sorted(res) if at_rv == self._rv else sorted(objects, key=_key_string)
        ns = namespace if res.namespaced else None
        items: list[StoredObject] = []
        remaining = 0
        last_key = ""
        for key in keys:
            if ns and key[0] != ns:
                continue
            key_string = _key_string(key)
            if start_after is not None and key_string <= start_after:
                continue
            stored = objects[key]
            obj = stored.obj
            if labels is not None and not labels.empty and not labels.matches(_meta(obj).get("labels") or {}):
                continue
            if fields is not None and not fields.empty and not fields.matches(obj):
                continue
            if limit and len(items) >= limit:
                remaining += 1
                continue
            items.append(stored)
            last_key = key_string
        page = ListPage(items, at_rv)
        if remaining:
            page.continue_token = self._encode_continue(at_rv, last_key)
            if (labels is None or labels.empty) and (fields is None or fields.empty):
                page.remaining = remaining
        return page

    def _state_at(self, res: Resource, at_rv: int) -> dict[tuple[str, str], StoredObject]:
        """The objects of one kind as they were right after RV `at_rv`, by undoing later events."""
        state = dict(self._objects[res.key])
        for event in reversed(self._history):
            if event.rv <= at_rv:
                break
            if event.resource.key != res.key:
                continue
            key = self._key_of(res, event.object)
            if event.type == "ADDED":
                state.pop(key, None)
            elif event.old is not None:
                state[key] = StoredObject(event.old)
        return state

    def _keys_sorted(self, res: Resource) -> _Keys:
        keys = self._sorted_keys.get(res.key)
        if keys is None:
            keys = sorted(self._objects[res.key], key=_key_string)
            self._sorted_keys[res.key] = keys
        return keys

    @staticmethod
    def _encode_continue(at_rv: int, start: str) -> str:
        token = {"v": "meta.k8s.io/v1", "rv": at_rv, "start": start + "\x00"}
        # base64.RawURLEncoding, as the apiserver's tokens: no padding.
        return base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, str]:
        """The apiserver's checks, with its texts: `invalid continue token: continue key is not valid: …`."""

        def bad(reason: str) -> errors.ApiError:
            return errors.bad_request(f"invalid continue token: continue key is not valid: {reason}")

        for position, char in enumerate(token):
            if char not in _RAW_URL_BASE64:
                raise bad(f"illegal base64 data at input byte {position}")
        if len(token) % 4 == 1:
            raise bad(f"illegal base64 data at input byte {len(token) - 1}")
        try:
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        except (ValueError, binascii.Error) as exc:
            raise bad(str(exc)) from exc
        if not isinstance(data, dict):
            raise bad("the continue token is not a JSON object")
        if data.get("v") != "meta.k8s.io/v1":
            raise bad(f'server does not recognize this encoded version "{data.get("v", "")}"')
        try:
            at_rv, start = int(data["rv"]), str(data["start"])
        except (ValueError, KeyError, TypeError) as exc:
            raise bad(f"the continue token lacks {exc}") from exc
        if at_rv <= 0:
            raise bad("incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
        return at_rv, start.rstrip("\x00")

    @property
    def pending_rv_waits(self) -> int:
        """Requests currently blocked on a resourceVersion the store has not reached (tests observe it)."""
        return len(self._rv_waiters)

    async def wait_for_resource_version(self, rv: int, timeout: float) -> bool:
        """Wait (bounded) until the store reaches `rv`: lists and watches ahead of the server block briefly."""
        if self._rv >= rv:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (rv, future)
        self._rv_waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return self._rv >= rv
        finally:
            if waiter in self._rv_waiters:
                self._rv_waiters.remove(waiter)
        return True

    # ------------------------------------------------------------------------------------------ watch

    def subscribe(self, resources: Iterable[Resource] | None = None, *, since_rv: int | None = None) -> Subscription:
        """Events after `since_rv` (replayed from history; 410 if compacted), or from now on when None."""
        return self.open_subscription(resources, since_rv=since_rv, copy=True)

    def open_subscription(
        self,
        resources: Iterable[Resource] | None = None,
        *,
        since_rv: int | None = None,
        copy: bool = False,
        max_queue: int | None = None,
    ) -> Subscription:
        plurals = frozenset(r.key for r in resources) if resources is not None else None
        if since_rv is not None and since_rv < self._compacted_rv:
            raise errors.gone(f"too old resource version: {since_rv} ({self._compacted_rv})")
        sub = Subscription(self, plurals, copy=copy, max_queue=max_queue)
        if since_rv is not None:
            for event in self._history:
                if event.rv > since_rv and (plurals is None or event.resource.key in plurals):
                    sub._push(event)
        if plurals is None:
            self._subscribers_all.add(sub)
        else:
            for plural in plurals:
                self._subscribers.setdefault(plural, set()).add(sub)
        return sub

    @property
    def subscription_count(self) -> int:
        """Open subscriptions (HTTP watches included): lets tests and benchmarks know watchers are attached."""
        return len(self._subscribers_all) + len({s for subs in self._subscribers.values() for s in subs})

    def _unsubscribe(self, sub: Subscription) -> None:
        self._subscribers_all.discard(sub)
        for plural in sub.plurals or ():
            self._subscribers.get(plural, set()).discard(sub)

    def compact(self, keep: int = 0) -> None:
        """Forget all but the newest `keep` events, as etcd compaction does (tests use it to force 410s)."""
        while len(self._history) > max(0, keep):
            self._history.popleft()
        self._compacted_rv = self._history[0].rv - 1 if self._history else self._rv

    # ------------------------------------------------------------------------------------------ writes

    def restore(self, resource_version: int, objects: dict[str, _Objects]) -> None:
        """Replace everything with saved state (a restarted sim): no history before it, so older RVs are 410."""
        if self._subscribers_all or any(self._subscribers.values()):
            raise RuntimeError("restore() must run before anyone watches the store")
        self.registry = Registry()
        self._objects = {key: {} for key in self.registry.stored}
        self._dependents = {}
        crds = objects.get(CUSTOM_RESOURCE_DEFINITIONS.key) or []
        for crd in crds:  # first: they bring the kinds of the other objects
            self.registry.set_custom(crds_rules.name_of(crd), crds_rules.served_resources(crd))
        for stored_key in self.registry.stored:
            self._objects.setdefault(stored_key, {})
            self._subscribers.setdefault(stored_key, set())
        for plural, items in objects.items():
            res = self.registry.stored.get(plural)
            if res is None:
                if items:
                    raise ValueError(f"objects of {plural!r}, which no CustomResourceDefinition defines")
                continue
            for obj in items:
                key = self._key_of(res, obj)
                self._objects[plural][key] = StoredObject(obj)
                self._index_owners(plural, key, None, obj)
        self._sorted_keys.clear()
        self._history.clear()
        self._rv = resource_version
        self._compacted_rv = resource_version

    @staticmethod
    def _owner_uids(obj: JSON | None) -> set[str]:
        if obj is None:
            return set()
        refs = _meta(obj).get("ownerReferences") or []
        return {str(r["uid"]) for r in refs if isinstance(r, dict) and r.get("uid")}

    def _index_owners(self, plural: str, key: tuple[str, str], before: JSON | None, after: JSON | None) -> None:
        was, now = self._owner_uids(before), self._owner_uids(after)
        if was == now:
            return
        entry = (plural, key)
        for uid in was - now:
            dependents = self._dependents.get(uid)
            if dependents is not None:
                dependents.discard(entry)
                if not dependents:
                    del self._dependents[uid]
        for uid in now - was:
            self._dependents.setdefault(uid, set()).add(entry)

    def _commit(self, res: Resource, type_: str, obj: JSON, old: JSON | None) -> WatchEvent:
        rv = self._rv + 1
        if type_ == "DELETED":
            obj = {**obj, "metadata": {**_meta(obj), "resourceVersion": str(rv)}}
        else:
            obj["metadata"]["resourceVersion"] = str(rv)
        event = WatchEvent(type_, res, obj, old, rv)
        if self.persist is not None:
            self.persist(event)  # first: a write that cannot be made durable is not made at all
        self._rv = rv
        table = self._objects[res.key]
        key = self._key_of(res, obj)
        previous = table.get(key)
        if type_ == "DELETED":
            table.pop(key, None)
            self._sorted_keys.pop(res.key, None)
            self._index_owners(res.key, key, previous.obj if previous else None, None)
        else:
            if key not in table:
                self._sorted_keys.pop(res.key, None)
            table[key] = StoredObject(obj)
            self._index_owners(res.key, key, previous.obj if previous else None, obj)
        if self._history_limit:
            self._history.append(event)
            while len(self._history) > self._history_limit:
                self._compacted_rv = self._history.popleft().rv
        else:
            self._compacted_rv = rv
        for sub in list(self._subscribers.get(res.key, ())):
            sub._push(event)
        for sub in list(self._subscribers_all):
            sub._push(event)
        if self._rv_waiters:
            for waited, future in self._rv_waiters:
                if waited <= rv and not future.done():
                    future.set_result(None)
        return event

    def create(self, res: Resource, obj: JSON, *, namespace: str | None = None, dry_run: bool = False) -> JSON:
        new = _own(obj)
        meta = new["metadata"]
        self._check_kind(res, new)
        if res.custom is None:
            custom_writes.decode_builtin(res, new, patched=False)
        ns = self._namespace_for(res, namespace, meta)
        if meta.get("resourceVersion"):
            raise errors.internal_error("resourceVersion should not be set on objects to be created")
        name = meta.get("name") or ""
        # A custom object's metadata causes join its schema's in one 422 (crd_schema.validate), as on the real server.
        meta_causes: list[crd_schema.Cause] = []
        if not name:
            prefix = meta.get("generateName") or ""
            if prefix:
                name = self._generate_name(res, ns, str(prefix))
            elif res.custom is not None:
                meta_causes.append(crd_schema.required("metadata.name", "name or generateName is required"))
            else:
                raise errors.invalid(
                    res.kind, "", [errors.field_required("metadata.name", "name or generateName is required")]
                )
        if name:
            self._validate_name(res, str(name))
        if res is LEASES:
            _check_micro_times(new, str(name), patched=False)
        if res.namespaced:
            ns_entry = self._objects[NAMESPACES.plural].get(("", ns))
            if ns_entry is None:
                raise errors.not_found(NAMESPACES.plural, ns)
            if _meta(ns_entry.obj).get("deletionTimestamp"):
                raise errors.forbidden(
                    res.plural,
                    str(name),
                    f"unable to create new content in namespace {ns} because it is being terminated",
                    res.group,
                )
        if self._key(res, ns, str(name)) in self._objects[res.key]:
            raise errors.already_exists(res.plural, str(name), res.group)
        meta["name"] = name
        if res.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = timestamp()
        meta.pop("deletionTimestamp", None)
        meta.pop("deletionGracePeriodSeconds", None)
        if res.has_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        _default(res, new)
        _validate(res, new)
        if res.custom is not None:
            self._refuse_create_while_terminating(res)
            if res.has_status:
                new.pop("status", None)  # a create through the main endpoint sets no status
            custom_writes.decode(res, new, patched=False)
            custom_writes.validate(res, new, None, meta_causes)
        elif res.kind in stored_kinds.KINDS:
            stored_kinds.default(res.kind, new, [e.obj for e in self._objects[res.key].values()])
        if res is CUSTOM_RESOURCE_DEFINITIONS:
            crds_rules.default(new)
            crds_rules.validate(new, None)
            finalizers = meta.setdefault("finalizers", [])
            if crds_rules.CLEANUP_FINALIZER not in finalizers:
                finalizers.append(crds_rules.CLEANUP_FINALIZER)
            new["status"] = {"acceptedNames": {"plural": "", "kind": ""},
                             "storedVersions": [crds_rules.storage_version(new)]}
        elif res is DAEMONSETS:
            meta.setdefault("annotations", {})[ANNOTATION_TEMPLATE_GENERATION] = "1"
            new["status"] = {
                "currentNumberScheduled": 0,
                "desiredNumberScheduled": 0,
                "numberMisscheduled": 0,
                "numberReady": 0,
            }
        elif res is JOBS:
            new["status"] = {}
        elif res is NAMESPACES:
            labels = meta.setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = name
            new.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            new["status"] = {"phase": "Active"}
        elif res is PODS:
            admit_new_pod(new, self._service_account)
            status = new.setdefault("status", {})
            status.setdefault("phase", "Pending")
        new = _ordered(res, new)
        self._admit("CREATE", res, None, new, None, dry_run)
        if dry_run:
            return new  # nothing stored, so no resourceVersion (as the real dry run answers)
        self._commit(res, "ADDED", new, None)
        if res is CUSTOM_RESOURCE_DEFINITIONS:
            self._sync_crds()  # the naming and establishing controllers' work, done at once
        return clone(new)

    def update(
        self, res: Resource, obj: JSON, *, subresource: str | None = None, dry_run: bool = False
    ) -> JSON:
        """PUT: stale RV → 409; no RV is fine except for kinds that demand it (Leases → 422)."""
        new = _own(obj)
        meta = new["metadata"]
        self._check_kind(res, new)
        name = str(meta.get("name") or "")
        if not name:
            raise errors.invalid(res.kind, "", [errors.field_required("metadata.name", "name is required")])
        ns = str(meta.get("namespace") or "default") if res.namespaced else ""
        stored = self.entry(res, ns, name)
        old = stored.obj
        old_meta = _meta(old)
        rv = meta.get("resourceVersion")
        if rv:
            if str(rv) != old_meta.get("resourceVersion"):
                raise errors.conflict_modified(res.plural, name, res.group)
        elif not res.unconditional_update:
            cause = {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 0x0: must be specified for an update",
                "field": "metadata.resourceVersion",
            }
            raise errors.invalid(res.kind, name, [cause], res.group)
        uid = meta.get("uid")
        if uid and uid != old_meta.get("uid"):
            raise errors.conflict(
                res.plural,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old_meta.get('uid')}",
                res.group,
            )
        if res is LEASES:
            _check_micro_times(new, name, patched=False)
        merged = self._prepare_update(res, old, new, subresource, patched=False)
        self._admit("UPDATE", res, subresource, merged, old, dry_run)
        return self._finish_update(res, old, merged, dry_run)

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: bytes | JSON | _Objects,
        content_type: str,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> JSON:
        """PATCH: unconditional unless the patch carries metadata.resourceVersion; a changed uid is 422."""
        media = media_type(content_type)
        if media not in CONTENT_TYPES:
            raise errors.unsupported_media_type(content_type)
        key = self._key(res, namespace, name)
        stored = self._objects[res.key].get(key)
        try:
            if stored is None:
                if media == APPLY_PATCH and subresource is None:
                    # Server-side apply creates what does not exist yet.
                    return self._apply_create(res, namespace, name, body, dry_run)
                raise errors.not_found(res.plural, name, res.group)
            old = stored.obj
            patched = apply_patch(old, body, media, res.kind)  # leaves `old` untouched
        except PatchError as exc:
            raise exc.to_api_error() from exc
        old_meta = _meta(old)
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch did not produce an object")
        patched = _own(patched)
        meta = patched["metadata"]
        rv = meta.get("resourceVersion")
        if rv and str(rv) != old_meta.get("resourceVersion"):
            raise errors.conflict_modified(res.plural, name, res.group)
        causes: _Objects = []
        for field_name in ("uid", "name", "namespace"):
            value = meta.get(field_name)
            if value and value != old_meta.get(field_name):
                causes.append(errors.field_invalid(f"metadata.{field_name}", value, "field is immutable"))
        if causes:
            # The apiserver checks ObjectMeta twice on an update (the registry's common-field check, then the
            # kind's own ValidateUpdate), so each cause is listed twice; the message dedups them.
            raise errors.invalid(res.kind, name, causes + [dict(c) for c in causes], res.group)
        if res is LEASES:
            _check_micro_times(patched, name, patched=True)
        merged = self._prepare_update(res, old, patched, subresource, patched=True)
        self._admit("UPDATE", res, subresource, merged, old, dry_run)
        return self._finish_update(res, old, merged, dry_run)

    def _apply_create(
        self, res: Resource, namespace: str | None, name: str, body: bytes | JSON | _Objects, dry_run: bool
    ) -> JSON:
        obj = apply_patch({}, body, APPLY_PATCH, res.kind)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be a JSON object")
        if meta.setdefault("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        return self.create(res, obj, namespace=namespace, dry_run=dry_run)

    def _prepare_update(
        self, res: Resource, old: JSON, new: JSON, subresource: str | None, *, patched: bool = False
    ) -> JSON:
        """The object PUT/PATCH would store: system fields kept, status split, kind-specific rules applied."""
        if subresource is not None and subresource not in res.subresources:
            raise errors.not_found_path()
        old_meta = _meta(old)
        if res.custom is not None:
            custom_writes.decode(res, new, patched=patched)
        else:
            custom_writes.decode_builtin(res, new, patched=patched)
        if subresource == "status":
            # Only status is taken from a status write (ResetObjectMetaForStatus and the strategies).
            merged = {k: v for k, v in old.items() if k != "status"}
            merged["metadata"] = dict(old_meta)
            if "status" in new:
                merged["status"] = new["status"]
            if res.custom is not None:
                custom_writes.validate(res, merged, old)
            return _ordered(res, merged)
        meta = new["metadata"]
        for system in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if system in old_meta:
                meta[system] = old_meta[system]
            else:
                meta.pop(system, None)
        meta["name"] = old_meta.get("name")
        if res.namespaced:
            meta["namespace"] = old_meta.get("namespace")
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.invalid(
                    res.kind,
                    str(meta["name"]),
                    [
                        errors.field_forbidden(
                            "metadata.finalizers", "no new finalizers can be added if the object is being deleted"
                        )
                    ],
                    res.group,
                )
        if res.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        _default(res, new)
        _validate(res, new)
        if res is CUSTOM_RESOURCE_DEFINITIONS:
            crds_rules.default(new)
            crds_rules.validate(new, old)
        elif res.custom is None and res.kind in stored_kinds.KINDS:
            stored_kinds.default(res.kind, new, [e.obj for e in self._objects[res.key].values()], old)
        if res is PODS:
            validate_pod_update(old, new)
        if res is NAMESPACES:
            new.setdefault("metadata", {}).setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        if res.has_generation:
            generation = int(old_meta.get("generation") or 1)
            moved = (custom_writes.generation_moves(res, old, new) if res.custom is not None
                     else new.get("spec") != old.get("spec"))
            if moved:
                generation += 1
            meta["generation"] = generation
        if res is DAEMONSETS:
            _daemonset_update(old, new)
        if res.custom is not None:
            custom_writes.validate(res, new, old)
        return _ordered(res, new)

    def _finish_update(self, res: Resource, old: JSON, new: JSON, dry_run: bool) -> JSON:
        if new == old:
            return clone(old)  # a no-op write stores nothing: same RV, no event
        if dry_run:
            return new
        old_meta, meta = _meta(old), _meta(new)
        if (
            meta.get("deletionTimestamp")
            and old_meta.get("finalizers")
            and not meta.get("finalizers")
            and meta.get("deletionGracePeriodSeconds") == 0
        ):
            # The last finalizer of an object being deleted went away: the update completes the deletion.
            event = self._commit(res, "DELETED", new, old)
            if res is CUSTOM_RESOURCE_DEFINITIONS:
                self._sync_crds()
            elif res.custom is not None:
                self._custom_gone(res)
            return clone(event.object)
        self._commit(res, "MODIFIED", new, old)
        if res is CUSTOM_RESOURCE_DEFINITIONS:
            self._sync_crds()
            return self.get(res, None, str(meta.get("name")))
        return clone(new)

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        options: JSON | None = None,
        *,
        dry_run: bool = False,
        admit: bool = True,
    ) -> JSON:
        """DELETE with DeleteOptions; every call (whatever its outcome) is recorded in `deletes`.

        `admit=False`: a deletion the server makes itself (a cascade), which admission never sees."""
        options = options or {}
        preconditions = options.get("preconditions") or {}
        record: JSON = {
            "resource": res.plural,
            "namespace": namespace if res.namespaced else None,
            "name": name,
            "uid": None,
            "precondition_uid": preconditions.get("uid"),
            "precondition_rv": preconditions.get("resourceVersion"),
            "outcome": "not_found",
            "code": 404,
            "rv": self._rv,
            "time": time.time(),
        }
        self.deletes.append(record)
        stored = self._objects[res.key].get(self._key(res, namespace, name))
        if stored is None:
            raise errors.not_found(res.plural, name, res.group)
        old = stored.obj
        old_meta = _meta(old)
        record["uid"] = old_meta.get("uid")
        if self.delete_context is not None and res is PODS:
            record["state"] = self.delete_context(old)
        want_uid = preconditions.get("uid")
        if want_uid is not None and want_uid != old_meta.get("uid"):
            record.update(outcome="conflict", code=409)
            raise errors.precondition_failed_uid(res.kind, name, str(want_uid), str(old_meta.get("uid")), res.group)
        want_rv = preconditions.get("resourceVersion")
        if want_rv is not None and str(want_rv) != old_meta.get("resourceVersion"):
            record.update(outcome="conflict", code=409)
            raise errors.precondition_failed_rv(
                res.kind, name, str(want_rv), str(old_meta.get("resourceVersion")), res.group
            )
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        if admit:
            try:
                self._admit("DELETE", res, None, None, old, dry_run)
            except errors.ApiError as exc:
                record.update(outcome="denied", code=exc.code)
                raise
        record.update(code=200)
        if dry_run:
            record["outcome"] = "dry_run"
            return clone(old) if res is PODS else errors.success_status(res.plural, name, old_meta.get("uid", ""))
        result = self._delete_pod(old, options) if res is PODS else self._delete_other(res, old)
        gone = self._key(res, namespace, name) not in self._objects[res.key]
        record.update(outcome="deleted" if gone else "graceful", rv=self._rv)
        if gone:
            self._cascade(res, old, options)
            if res.custom is not None:
                self._custom_gone(res)
        return result

    def expire(self, res: Resource, namespace: str | None, name: str, resource_version: str) -> bool:
        """Drop an object whose etcd lease ran out, if it is still the version the lease was set for.

        Not a DELETE: no admission, no record in `deletes`, no cascade (only leased kinds, Events, get here);
        watchers see DELETED as they do when etcd expires a key."""
        stored = self._objects[res.key].get(self._key(res, namespace, name))
        if stored is None or _meta(stored.obj).get("resourceVersion") != resource_version:
            return False
        self._commit(res, "DELETED", stored.obj, stored.obj)
        return True

    def _delete_pod(self, old: JSON, options: JSON) -> JSON:
        old_meta = _meta(old)
        spec = old.get("spec") or {}
        grace_option = options.get("gracePeriodSeconds")
        if grace_option is not None:
            grace = int(grace_option)
            if grace < 0:
                grace = 1
        else:
            grace = int(spec.get("terminationGracePeriodSeconds", 30) or 0)
        phase = (old.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            grace = 0
        current = old_meta.get("deletionGracePeriodSeconds")
        if old_meta.get("deletionTimestamp") is not None and current is not None and grace >= int(current):
            return clone(old)  # already terminating at least as fast: nothing changes
        now = time.time()
        new = dict(old)
        new["metadata"] = {
            **old_meta,
            "deletionTimestamp": timestamp(now + grace),
            "deletionGracePeriodSeconds": grace,
        }
        self._commit(PODS, "MODIFIED", new, old)
        if grace == 0 and not old_meta.get("finalizers"):
            event = self._commit(PODS, "DELETED", new, new)
            return clone(event.object)
        return clone(new)

    def _delete_other(self, res: Resource, old: JSON) -> JSON:
        old_meta = _meta(old)
        if res is CUSTOM_RESOURCE_DEFINITIONS:
            return self._delete_crd(old)
        if res is NAMESPACES:
            self._empty_namespace(str(old_meta.get("name")))
        if old_meta.get("finalizers"):
            if old_meta.get("deletionTimestamp"):
                return clone(old)
            new = dict(old)
            new["metadata"] = {**old_meta, "deletionTimestamp": timestamp(), "deletionGracePeriodSeconds": 0}
            self._commit(res, "MODIFIED", new, old)
            return clone(new)
        event = self._commit(res, "DELETED", old, old)
        if res is NAMESPACES:
            return clone(event.object)
        return errors.success_status(res.plural, str(old_meta.get("name")), str(old_meta.get("uid", "")), res.group)

    # ------------------------------------------------------------------------------------------ CRDs

    def _sync_crds(self) -> None:
        """The naming and establishing controllers: each CRD's accepted names and conditions (oldest first, so
        the CRD that had a name keeps it), and the kinds the Established ones serve."""
        table = self._objects[CUSTOM_RESOURCE_DEFINITIONS.key]
        order = sorted(table.values(), key=lambda e: (str(_meta(e.obj).get("creationTimestamp") or ""),
                                                      str(_meta(e.obj).get("name") or "")))
        names = [str(_meta(e.obj).get("name")) for e in order]
        now = timestamp()
        for name in names:
            stored = table.get(("", name))
            if stored is None:
                continue
            crd = stored.obj
            if not _meta(crd).get("deletionTimestamp"):
                others = [e.obj for key, e in table.items() if key[1] != name]
                status = crds_rules.status_for(crd, others, now)
                if status != crd.get("status"):
                    new = {**crd, "metadata": dict(_meta(crd)), "status": status}
                    self._commit(CUSTOM_RESOURCE_DEFINITIONS, "MODIFIED", new, crd)
                    crd = new
            self._serve(name, crds_rules.served_resources(crd))
        for name in [n for n in self._served_crds() if ("", n) not in table]:
            self._serve(name, [])

    def _served_crds(self) -> _Names:
        return sorted({res.custom.crd_name for res in self.registry.custom_resources() if res.custom is not None})

    def _serve(self, crd_name: str, served: _Served) -> None:
        self.registry.set_custom(crd_name, served)
        if served:
            self._objects.setdefault(served[0].key, {})
            self._subscribers.setdefault(served[0].key, set())

    def _delete_crd(self, old: JSON) -> JSON:
        """The apiextensions finalizer's work, done at once: Terminating, every object of the kind deleted (its
        watchers see each DELETED), then the kind and the CRD itself go. Objects with finalizers are only marked
        deleted, and the CRD stays Terminating (its kind still served, creates refused) until the last is gone."""
        crds = CUSTOM_RESOURCE_DEFINITIONS
        old_meta = _meta(old)
        name = str(old_meta.get("name"))
        if not old_meta.get("deletionTimestamp"):
            now = timestamp()
            status = dict(old.get("status") or {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != crds_rules.TERMINATING]
            status["conditions"] = [*conditions, crds_rules.terminating_condition(now)]
            meta = {**old_meta, "deletionTimestamp": now, "deletionGracePeriodSeconds": 0}
            self._commit(crds, "MODIFIED", {**old, "metadata": meta, "status": status}, old)
        served = self.registry.custom(name)
        if served and self._drain_custom(served[0]):
            return self.get(crds, None, name)
        return self._remove_crd(name)

    def _drain_custom(self, storage: Resource) -> int:
        """Delete every object of a custom kind; those with finalizers are marked (how many remain)."""
        table = self._objects.get(storage.key, {})
        held = 0
        for key in list(self._keys_sorted(storage)):
            stored = table.get(key)
            if stored is None:
                continue
            meta = _meta(stored.obj)
            if meta.get("finalizers"):
                held += 1
                if not meta.get("deletionTimestamp"):
                    marked = {**stored.obj, "metadata": {**meta, "deletionTimestamp": timestamp(),
                                                         "deletionGracePeriodSeconds": 0}}
                    self._commit(storage, "MODIFIED", marked, stored.obj)
            else:
                self._commit(storage, "DELETED", stored.obj, stored.obj)
                self._cascade(storage, stored.obj, {})  # the garbage collector's part: their dependents go too
        return held

    def _custom_gone(self, res: Resource) -> None:
        """After a custom object went: the deletion of its Terminating CRD completes with the last one."""
        assert res.custom is not None
        crd = self._objects[CUSTOM_RESOURCE_DEFINITIONS.key].get(("", res.custom.crd_name))
        if crd is not None and _meta(crd.obj).get("deletionTimestamp") and not self._objects.get(res.key):
            self._remove_crd(res.custom.crd_name)

    def _refuse_create_while_terminating(self, res: Resource) -> None:
        assert res.custom is not None
        crd = self._objects[CUSTOM_RESOURCE_DEFINITIONS.key].get(("", res.custom.crd_name))
        if crd is not None and _meta(crd.obj).get("deletionTimestamp"):
            raise crds_rules.terminating_create_error(res)

    def _remove_crd(self, name: str) -> JSON:
        """The kind stops being served (open watches end), the cleanup finalizer goes, and with it the CRD unless
        it has finalizers of its own."""
        crds = CUSTOM_RESOURCE_DEFINITIONS
        served = self.registry.custom(name)
        if served:
            storage = served[0]
            self.registry.remove_custom(name)
            if not any(r.key == storage.key for r in self.registry.custom_resources()):
                self._objects.pop(storage.key, None)
                self._sorted_keys.pop(storage.key, None)
                for sub in list(self._subscribers.pop(storage.key, ())):
                    sub.close()
        current = self._objects[crds.key][("", name)].obj
        remaining = [f for f in _meta(current).get("finalizers") or [] if f != crds_rules.CLEANUP_FINALIZER]
        if remaining:
            if remaining != _meta(current).get("finalizers"):
                kept = {**current, "metadata": {**_meta(current), "finalizers": remaining}}
                self._commit(crds, "MODIFIED", kept, current)
                return clone(kept)
            return clone(current)
        final = {**current, "metadata": {**_meta(current), "finalizers": []}}
        final["metadata"].pop("finalizers")
        event = self._commit(crds, "DELETED", final, current)
        self._sync_crds()  # a name this CRD held may be free for another now
        return clone(event.object)

    def _empty_namespace(self, namespace: str) -> None:
        """The namespace controller's job, done at once: everything in the namespace goes first."""
        for res in list(self.registry.stored.values()):
            if not res.namespaced:
                continue
            for key in [k for k in self._keys_sorted(res) if k[0] == namespace]:
                stored = self._objects[res.key].get(key)
                if stored is None:
                    continue
                obj = stored.obj
                if _meta(obj).get("finalizers"):
                    obj = {**obj, "metadata": {**_meta(obj), "finalizers": []}}
                    self._commit(res, "MODIFIED", obj, stored.obj)
                    stored = self._objects[res.key][key]
                self._commit(res, "DELETED", stored.obj, stored.obj)

    def _cascade(self, res: Resource, owner: JSON, options: JSON) -> None:
        """The garbage collector's job, done at once: dependents of a deleted owner go (or are orphaned)."""
        owner_uid = _meta(owner).get("uid")
        orphan = options.get("propagationPolicy") == "Orphan" or options.get("orphanDependents") is True
        order = {plural: index for index, plural in enumerate(self.registry.stored)}
        dependents = sorted(self._dependents.get(str(owner_uid), ()),
                            key=lambda e: (order.get(e[0], len(order)), _key_string(e[1])))
        for plural, key in dependents:
            dep_res = self.registry.stored.get(plural)
            stored = self._objects.get(plural, {}).get(key)
            if dep_res is None or dep_res is NAMESPACES or stored is None:
                continue
            refs = _meta(stored.obj).get("ownerReferences") or []
            if orphan:
                obj = {**stored.obj, "metadata": dict(_meta(stored.obj))}
                obj["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != owner_uid]
                if not obj["metadata"]["ownerReferences"]:
                    del obj["metadata"]["ownerReferences"]
                self._commit(dep_res, "MODIFIED", obj, stored.obj)
            elif not _meta(stored.obj).get("deletionTimestamp"):
                self.delete(dep_res, key[0] or None, key[1], {"propagationPolicy": "Background"}, admit=False)

    # ------------------------------------------------------------------------------------------ helpers

    @staticmethod
    def _key(res: Resource, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "default") if res.namespaced else "", name)

    @staticmethod
    def _key_of(res: Resource, obj: JSON) -> tuple[str, str]:
        meta = _meta(obj)
        return (str(meta.get("namespace") or "") if res.namespaced else "", str(meta.get("name") or ""))

    @staticmethod
    def _check_kind(res: Resource, obj: JSON) -> None:
        if res.custom is not None:
            custom_writes.check_type_meta(res, obj)
            return
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind not in (None, "", res.kind):
            raise errors.bad_request(f'the kind in the data ({kind}) does not match the expected kind ({res.kind})')
        if api_version not in (None, "", res.api_version):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({res.api_version})"
            )

    @staticmethod
    def _namespace_for(res: Resource, namespace: str | None, meta: JSON) -> str:
        if not res.namespaced:
            return ""
        body_ns = meta.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        return str(namespace or body_ns or "default")

    def _admit(self, operation: str, res: Resource, subresource: str | None, obj: JSON | None, old: JSON | None,
               dry_run: bool) -> None:
        """ValidatingAdmissionPolicies (sim/admission_policy.py); nothing to do, and free, while none is bound."""
        if not self._objects[VALIDATING_ADMISSION_POLICY_BINDINGS.plural]:
            return
        meta = _meta(obj if obj is not None else old or {})
        self._policies.admit(AdmissionRequest(operation, res, subresource, str(meta.get("namespace") or ""),
                                              str(meta.get("name") or ""), obj, old, dry_run))

    def _bound_policies(self) -> _Pairs:
        pairs = []
        policies = self._objects[VALIDATING_ADMISSION_POLICIES.plural]
        for stored in self._objects[VALIDATING_ADMISSION_POLICY_BINDINGS.plural].values():
            name = str((stored.obj.get("spec") or {}).get("policyName") or "")
            policy = policies.get(("", name))
            if policy is not None:
                pairs.append((stored.obj, policy.obj))
        return pairs

    def _namespace_object(self, name: str) -> JSON | None:
        stored = self._objects[NAMESPACES.plural].get(("", name))
        return stored.obj if stored is not None else None

    def _service_account(self, namespace: str, name: str) -> JSON | None:
        stored = self._objects[SERVICE_ACCOUNTS.plural].get((namespace, name))
        return stored.obj if stored is not None else None

    def _generate_name(self, res: Resource, namespace: str, prefix: str) -> str:
        # The apiserver truncates the prefix so the name stays within 63 characters.
        base = prefix[: 63 - 5]
        while True:
            name = base + "".join(random.choices(NAME_ALPHABET, k=5))
            if self._key(res, namespace, name) not in self._objects[res.key]:
                return name

    @staticmethod
    def _validate_name(res: Resource, name: str) -> None:
        if res is NAMESPACES:
            ok = len(name) <= 63 and _DNS_LABEL.fullmatch(name) is not None
            rule = (
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            )
        else:
            ok = len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None
            rule = (
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            )
        if not ok:
            raise errors.invalid(res.kind, name, [errors.field_invalid("metadata.name", name, rule)], res.group)


def parse_resource_version(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise errors.bad_request(f"invalid resource version: {text}")
    return value


def _own(obj: Any) -> JSON:
    """A private deep copy with a metadata dict, so the store can edit it and keep it."""
    if not isinstance(obj, dict):
        raise errors.bad_request(f"the object must be a JSON object, got {type(obj).__name__}")
    own = clone(obj)
    meta = own.get("metadata")
    if meta is None:
        own["metadata"] = {}
    elif not isinstance(meta, dict):
        raise errors.bad_request("metadata must be a JSON object")
    return own


def _ordered(res: Resource, obj: JSON) -> JSON:
    """kind, apiVersion, metadata first, like the real server's JSON."""
    out: JSON = {"kind": res.kind, "apiVersion": res.stored_api_version, "metadata": obj.get("metadata", {})}
    for key, value in obj.items():
        if key not in out:
            out[key] = value
    return out


def _image_pull_policy(image: str) -> str:
    name = image.rsplit("/", 1)[-1]
    if "@" in name:
        return "IfNotPresent"
    tag = name.split(":", 1)[1] if ":" in name else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_pod_spec(spec: JSON) -> None:
    """The defaulting the real server applies, so a re-submitted manifest compares equal to what it stored."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    mirror_service_account(spec)
    for list_name in ("initContainers", "containers"):
        for container in spec.get(list_name) or []:
            if isinstance(container, dict):
                container.setdefault("imagePullPolicy", _image_pull_policy(str(container.get("image", ""))))
                container.setdefault("terminationMessagePath", "/dev/termination-log")
                container.setdefault("terminationMessagePolicy", "File")


def _default(res: Resource, obj: JSON) -> None:
    spec = obj.get("spec")
    if res is PODS and isinstance(spec, dict):
        _default_pod_spec(spec)
        default_pod_only(spec)
    elif res is JOBS and isinstance(spec, dict):
        default_job(obj)
        template_spec = (spec.get("template") or {}).get("spec")
        if isinstance(template_spec, dict):
            _default_pod_spec(template_spec)
    elif res is DAEMONSETS and isinstance(spec, dict):
        strategy = spec.setdefault("updateStrategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", 1)
                    rolling.setdefault("maxSurge", 0)
        spec.setdefault("revisionHistoryLimit", 10)
        template_spec = (spec.get("template") or {}).get("spec")
        if isinstance(template_spec, dict):
            _default_pod_spec(template_spec)


_MICRO_TIME_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
_MICRO_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{6})(Z|[+-]\d{2}:\d{2})")
_SECONDS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


def _micro_time_error(value: str) -> str | None:
    """Go's time.Parse(RFC3339Micro) verdict on a Lease time, in Go's words (None: it parses)."""
    if _MICRO_TIME.fullmatch(value):
        return None
    seconds = _SECONDS.match(value)
    if seconds is None:
        return f'parsing time "{value}" as "{_MICRO_TIME_LAYOUT}": cannot parse "{value}" as "2006"'
    rest = value[seconds.end():]
    return f'parsing time "{value}" as "{_MICRO_TIME_LAYOUT}": cannot parse "{rest}" as ".000000"'


def _check_micro_times(obj: JSON, name: str, *, patched: bool) -> None:
    """Lease acquireTime/renewTime are metav1.MicroTime: exactly six fractional digits (as kube-apiserver v1.24 checks).

    A body that does not decode is 400 (`… cannot be handled as a Lease: …`); inside a patch the same
    failure, and an offset other than Z, are 422 as the real server measured. An offset in a PUT/POST body
    decodes, and the server stores the instant in UTC.
    """
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for field_name in ("acquireTime", "renewTime"):
        value = spec.get(field_name)
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        problem = _micro_time_error(text) if isinstance(value, str) else f"json: cannot unmarshal {text} into MicroTime"
        match = _MICRO_TIME.fullmatch(text) if problem is None else None
        offset = match is not None and match.group(3) != "Z"
        if problem is None and not (offset and patched):
            if match is not None and offset:
                spec[field_name] = _to_utc_micro(text)
            continue
        if patched:
            detail = problem or f'parsing time "{text}": the offset must be Z'
            cause = errors.field_invalid(f"spec.{field_name}", text, detail)
            raise errors.invalid("Lease", name, [cause], "coordination.k8s.io")
        raise errors.bad_request(f'Lease in version "v1" cannot be handled as a Lease: {problem}')


def _to_utc_micro(text: str) -> str:
    return datetime.fromisoformat(text).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _validate_event_namespace(obj: JSON) -> None:
    """An Event lives in its object's namespace; one about a cluster-scoped object in default
    (as kube-apiserver v1.24 checks).

    The apiserver's legacy Event validation; an Event with eventTime set (the newer recorder) may also
    sit in kube-system.
    """
    namespace = str(_meta(obj).get("namespace") or "")
    involved = obj.get("involvedObject")
    involved_ns = str(involved.get("namespace") or "") if isinstance(involved, dict) else ""
    if involved_ns:
        ok = namespace == involved_ns
    else:
        allowed = ("", "default", "kube-system") if obj.get("eventTime") else ("", "default")
        ok = namespace in allowed
    if not ok:
        cause = errors.field_invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
        raise errors.invalid("Event", str(_meta(obj).get("name") or ""), [cause])


def _validate(res: Resource, obj: JSON) -> None:
    name = str(_meta(obj).get("name") or "")
    if res is EVENTS:
        _validate_event_namespace(obj)
    if res is PODS:
        containers = (obj.get("spec") or {}).get("containers")
        if not containers:
            raise errors.invalid(res.kind, name, [errors.field_required("spec.containers")])
    elif res is JOBS:
        policy = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("restartPolicy")
        if policy not in ("OnFailure", "Never"):
            cause = errors.field_not_supported("spec.template.spec.restartPolicy", policy, ["OnFailure", "Never"])
            raise errors.invalid(res.kind, name, [cause], res.group)
    elif res is DAEMONSETS:
        spec = obj.get("spec") or {}
        selector = spec.get("selector")
        if not selector:
            raise errors.invalid(res.kind, name, [errors.field_required("spec.selector")], res.group)
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        try:
            matches = label_selector_from_dict(selector).matches(labels)
        except SelectorError as exc:
            raise errors.invalid(
                res.kind, name, [errors.field_invalid("spec.selector", selector, str(exc))], res.group
            ) from exc
        if not matches:
            cause = errors.field_invalid(
                "spec.template.metadata.labels", labels, "`selector` does not match template `labels`"
            )
            raise errors.invalid(res.kind, name, [cause], res.group)
        strategy = (spec.get("updateStrategy") or {}).get("type")
        if strategy not in ("RollingUpdate", "OnDelete"):
            cause = errors.field_not_supported("spec.updateStrategy.type", strategy, ["OnDelete", "RollingUpdate"])
            raise errors.invalid(res.kind, name, [cause], res.group)


def _daemonset_update(old: JSON, new: JSON) -> None:
    """Selector immutable; a template change bumps the template generation annotation (generation done above)."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    name = str(_meta(old).get("name") or "")
    if new_spec.get("selector") != old_spec.get("selector"):
        cause = errors.field_invalid("spec.selector", new_spec.get("selector"), "field is immutable")
        raise errors.invalid("DaemonSet", name, [cause], "apps")
    old_annotations = _meta(old).get("annotations") or {}
    try:
        template_generation = int(old_annotations.get(ANNOTATION_TEMPLATE_GENERATION, "1"))
    except ValueError:
        template_generation = 1
    if new_spec.get("template") != old_spec.get("template"):
        template_generation += 1
    meta = new["metadata"]
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = {}
    meta["annotations"] = {**annotations, ANNOTATION_TEMPLATE_GENERATION: str(template_generation)}
