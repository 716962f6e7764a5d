"""The DaemonSet controller of the simulated cluster, after pkg/controller/daemon in kube-controller-manager.

Clients of this project (our agent, the OTA controller, kubectl rollout) read what this controller writes
— ControllerRevisions and their hash labels, pod labels and owner references, status counters — so it
mirrors the real controller's observable behaviour: which pods exist on which node, when they are replaced
under OnDelete and RollingUpdate, and what the status says. It acts only through the Store (in-process),
just as the real controller acts only through the API.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import time
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from edgeagent import log
from edgeagent.contract import ANNOTATION_TEMPLATE_GENERATION, LABEL_REVISION_HASH, LABEL_TEMPLATE_GENERATION
from edgeagent.kube.objects import (
    annotations_of,
    controller_owner,
    get_condition,
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    node_name_of,
    uid_of,
)
from edgeagent.sim.errors import ApiError
from edgeagent.sim.resources import CONTROLLER_REVISIONS, DAEMONSETS, EVENTS, NODES, PODS
from edgeagent.sim.store import NAME_ALPHABET, Store, Subscription, WatchEvent, clone

JSON = dict[str, Any]
Key = tuple[str, str]

DEFAULT_REVISION_HISTORY_LIMIT = 10

# AddOrUpdateDaemonPodTolerations: daemon pods survive node trouble and run on cordoned/pressured nodes.
DAEMON_TOLERATIONS: tuple[JSON, ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION: JSON = {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists",
                                 "effect": "NoSchedule"}

_log = log.get("edgeagent.sim.daemonsets")
# The component the real DaemonSet controller names as the source of its Events.
EVENT_SOURCE = "daemonset-controller"


# Pure helpers --------------------------------------------------------------------------------------------

def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(text: str) -> str:
    """k8s.io/apimachinery/pkg/util/rand.SafeEncodeString: no vowels (no words), no look-alike 0/1/3."""
    return "".join(NAME_ALPHABET[ord(c) % len(NAME_ALPHABET)] for c in text)


def template_hash(template: JSON, collision_count: int = 0) -> str:
    """Stable across runs and processes (unlike Python's hash()); ~10 characters like the real one."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += collision_count.to_bytes(4, "little")
    return safe_encode(str(_fnv32a(data)))


def revision_data(template: JSON) -> JSON:
    """What `kubectl rollout undo` patches back onto the DaemonSet (strategic merge, template replaced)."""
    return {"spec": {"template": {**copy.deepcopy(template), "$patch": "replace"}}}


def _parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def tolerates(toleration: JSON, taint: JSON) -> bool:
    """v1.Toleration.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def daemon_tolerations(spec: JSON) -> list[JSON]:
    tolerations: list[JSON] = [dict(t) for t in spec.get("tolerations") or []]
    extra = list(DAEMON_TOLERATIONS) + ([HOST_NETWORK_TOLERATION] if spec.get("hostNetwork") else [])
    for toleration in extra:
        same = [t for t in tolerations if (t.get("key"), t.get("effect")) == (toleration["key"], toleration["effect"])]
        if not any(t.get("operator") == "Exists" and not t.get("tolerationSeconds") for t in same):
            tolerations = [t for t in tolerations if t not in same]
            tolerations.append(dict(toleration))
    return tolerations


def _match_requirement(req: JSON, value: str | None) -> bool:
    operator = req.get("operator")
    values = [str(v) for v in req.get("values") or []]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _match_term(term: JSON, node: JSON) -> bool:
    """A NodeSelectorTerm: all its requirements hold; an empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = labels_of(node)
    if not all(_match_requirement(r, labels.get(str(r.get("key")))) for r in expressions):
        return False
    return all(_match_requirement(r, name_of(node) if r.get("key") == "metadata.name" else None) for r in fields)


def fits_node(spec: JSON, node: JSON) -> bool:
    """spec.nodeName, spec.nodeSelector and required node affinity of a pod template against a node."""
    if spec.get("nodeName") and spec["nodeName"] != name_of(node):
        return False
    labels = labels_of(node)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None:
        return any(_match_term(t, node) for t in required.get("nodeSelectorTerms") or [])
    return True


def should_run(ds: JSON, node: JSON) -> tuple[bool, bool]:
    """NodeShouldRunDaemonPod: (should run a new pod here, may an existing one keep running)."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return _should_run(spec, daemon_tolerations(spec), node)


def _should_run(spec: JSON, tolerations: list[JSON], node: JSON) -> tuple[bool, bool]:
    """should_run with the tolerations worked out once per DaemonSet rather than once per node."""
    if not fits_node(spec, node):
        return False, False
    untolerated = [t for t in (node.get("spec") or {}).get("taints") or []
                   if t.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(x, t) for x in tolerations)]
    if not untolerated:
        return True, True
    return False, not any(t.get("effect") == "NoExecute" for t in untolerated)


def template_generation(ds: JSON) -> str | None:
    value = annotations_of(ds).get(ANNOTATION_TEMPLATE_GENERATION)
    return str(value) if value not in (None, "") else None


def is_pod_updated(pod: JSON, hash_: str, generation: str | None) -> bool:
    labels = labels_of(pod)
    return (generation is not None and labels.get(LABEL_TEMPLATE_GENERATION) == generation) or (
        bool(hash_) and labels.get(LABEL_REVISION_HASH) == hash_)


def available_in(pod: JSON, min_ready_seconds: int, now: float) -> float | None:
    """None if not Ready; else seconds until it counts as available (≤ 0: available now)."""
    ready = get_condition(pod, "Ready")
    if ready is None or ready.get("status") != "True":
        return None
    if min_ready_seconds <= 0:
        return 0.0
    since = _parse_time(ready.get("lastTransitionTime"))
    return 0.0 if since is None else since + min_ready_seconds - now


def scaled_value(value: Any, total: int, default: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent rounding up."""
    if value is None:
        return default
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        return math.ceil(int(text[:-1]) * total / 100)
    return int(text)


def owner_reference(ds: JSON) -> JSON:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name_of(ds), "uid": uid_of(ds),
            "controller": True, "blockOwnerDeletion": True}


def new_pod(ds: JSON, node: str, hash_: str) -> JSON:
    """The pod the controller creates for one node, as CreatePodTemplate + node-name affinity + tolerations."""
    template = copy.deepcopy((ds.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    generation = template_generation(ds)
    if generation is not None:
        labels[LABEL_TEMPLATE_GENERATION] = generation
    labels[LABEL_REVISION_HASH] = hash_
    metadata: JSON = {"generateName": f"{name_of(ds)}-", "namespace": namespace_of(ds), "labels": labels,
                      "ownerReferences": [owner_reference(ds)]}
    if tmeta.get("annotations"):
        metadata["annotations"] = dict(tmeta["annotations"])
    spec: JSON = template.get("spec") or {}
    spec["nodeName"] = node
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    affinity["nodeAffinity"] = node_affinity
    spec["affinity"] = affinity
    spec["tolerations"] = daemon_tolerations(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _owned_by(obj: JSON, uid: str) -> bool:
    ref = controller_owner(obj)
    return ref is not None and ref.get("uid") == uid


def _pod_view(pod: JSON) -> tuple[Any, ...]:
    """Everything of a pod a sync reads: a pod event that leaves it alone needs no sync."""
    m = meta(pod)
    ready = get_condition(pod, "Ready") or {}
    return (m.get("labels"), m.get("ownerReferences"), m.get("deletionTimestamp"), m.get("uid"),
            m.get("creationTimestamp"), node_name_of(pod), (pod.get("status") or {}).get("phase"),
            ready.get("status"), ready.get("lastTransitionTime"))


def _oldest_first(pods: Iterable[JSON]) -> list[JSON]:
    return sorted(pods, key=lambda p: (str(meta(p).get("creationTimestamp") or ""), name_of(p)))


def _min_ready_seconds(ds: JSON) -> int:
    return int((ds.get("spec") or {}).get("minReadySeconds") or 0)


def _revision_number(rev: JSON) -> int:
    try:
        return int(rev.get("revision") or 0)
    except (TypeError, ValueError):
        return 0


# The controller ------------------------------------------------------------------------------------------

Share = tuple[int, int, int, int, int, int]  # desired, current, misscheduled, ready, available, updated


class _Tally:
    """What a DaemonSet's last sync found per node, so that the next sync driven by events looks only at the nodes
    that changed since: each node's share of the status counters, and the nodes it left with work to do.

    Nodes are marked (`touch`) when one of the DaemonSet's pods or the Node object changes; `None` means every
    node (a new tally: the first sync, a new template, a resync)."""

    __slots__ = ("manage_dirty", "pending", "shares", "status_dirty", "status_key", "totals")

    def __init__(self) -> None:
        self.manage_dirty: set[str] | None = None
        self.status_dirty: set[str] | None = None
        self.pending: set[str] = set()  # nodes the last look found work on (a pod to create or delete)
        self.status_key: tuple[Any, ...] | None = None  # (hash, template generation, minReadySeconds) counted
        self.shares: dict[str, Share] = {}
        self.totals = [0, 0, 0, 0, 0, 0]

    def touch(self, node: str) -> None:
        if self.manage_dirty is not None:
            self.manage_dirty.add(node)
        if self.status_dirty is not None:
            self.status_dirty.add(node)

    def take_manage(self, every: list[str]) -> list[str]:
        """The nodes to look at for pods to create or delete, in node-name order (`every`: all of them)."""
        dirty, self.manage_dirty = self.manage_dirty, set()
        pending, self.pending = self.pending, set()
        return every if dirty is None else sorted(dirty | pending)

    def take_status(self, every: list[str], key: tuple[Any, ...]) -> list[str]:
        """The nodes whose share of the status to count again, their old shares taken out of the totals.

        Every node when the revision or generation counted as updated changed, and while minReadySeconds is set
        (availability then depends on the clock, not only on events)."""
        dirty, self.status_dirty = self.status_dirty, set()
        if dirty is None or key != self.status_key or key[2] > 0:
            self.status_key = key
            self.shares.clear()
            self.totals = [0, 0, 0, 0, 0, 0]
            return every
        for name in dirty:
            share = self.shares.pop(name, None)
            if share is not None:
                self.totals = [t - v for t, v in zip(self.totals, share, strict=True)]
        return sorted(dirty)

    def add(self, node: str, share: Share) -> None:
        self.shares[node] = share
        self.totals = [t + v for t, v in zip(self.totals, share, strict=True)]


class DaemonSetController:
    """Event-driven with a de-duplicating work queue: a burst of pod events costs one sync per DaemonSet.

    A sync reasons over every node, so it must not cost more than a pass over shared objects: the controller
    keeps its own view of nodes and of each DaemonSet's pods by node, fed from a non-copying subscription
    (stored objects are immutable, and the controller only reads them), and drains that subscription before
    it reads, so the view is exactly the store's state even right after its own writes. Pod events that
    change nothing a sync looks at (another controller's conditions, say) do not queue a sync, and syncs
    are paced in proportion to their cost, so that at fleet scale a stream of pod events is coalesced
    instead of costing one full pass each.

    A sync driven by events looks only at the nodes whose pods (or Node object) changed since the last one
    (a `_Tally` per DaemonSet keeps each node's share of the status counters and the nodes left with work):
    recreating a burst of deleted pods at 100,000 nodes cost one full pass over every node per few pods, so
    the sim recreated ~11 pods/s. A new template, a changed placement input or an explicit `enqueue` (a
    resync, also after a failed sync) still looks at every node.
    """

    # A sync that took t seconds is followed by a pause of PACE * t (at most MAX_PAUSE) before the next round:
    # the controller gets at most 1 / (1 + PACE) of the shared event loop while events keep coming.
    PACE = 3.0
    MAX_PAUSE = 0.05

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: OrderedDict[Key, None] = OrderedDict()
        self._full: set[Key] = set()  # queued DaemonSets (namespace, name) whose next sync looks at every node
        self._wakeup = asyncio.Event()
        self._timers: set[asyncio.TimerHandle] = set()
        self.syncs = 0
        self._last_cost = 0.0
        self._events: Subscription | None = None
        self._nodes: dict[str, JSON] = {}
        self._node_order: list[str] | None = None
        # (namespace, controller uid) -> node name -> pods by name; the shared stored objects, never mutated.
        self._pods: dict[Key, dict[str, list[JSON]]] = {}
        self._pod_home: dict[Key, tuple[Key, str]] = {}
        # DaemonSet uid -> (pod template spec, node name -> (node object, should_run result)).
        self._placements: dict[str, tuple[JSON, dict[str, tuple[JSON, tuple[bool, bool]]]]] = {}
        # (namespace, DaemonSet uid) -> what its last sync found, per node; gone when a full pass is due.
        self._tallies: dict[Key, _Tally] = {}

    # Queue ---------------------------------------------------------------------------------------------

    def enqueue(self, key: Key) -> None:
        """Sync this DaemonSet, looking at every node (a resync: also after a failed sync, or from a test)."""
        self._full.add(key)
        self._enqueue_changed(key)

    def _enqueue_changed(self, key: Key) -> None:
        """Sync this DaemonSet for the events that changed its nodes (the tally says which)."""
        self._queue[key] = None
        self._wakeup.set()

    def enqueue_after(self, key: Key, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self.enqueue(key)

        handle = loop.call_later(max(0.0, delay), fire)
        self._timers.add(handle)

    async def run(self) -> None:
        self._open()
        try:
            self._enqueue_all()
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._watch())
                tg.create_task(self._work())
        finally:
            self._close()
            for handle in self._timers:
                handle.cancel()
            self._timers.clear()

    def _enqueue_all(self) -> None:
        for stored in self.store.list_page(DAEMONSETS).items:
            self.enqueue((namespace_of(stored.obj), name_of(stored.obj)))

    # The controller's view of the store ----------------------------------------------------------------

    def _open(self) -> Subscription:
        """Subscribe, then seed the view from the current state: in one step, so no event falls between."""
        if self._events is not None:
            return self._events
        self._events = self.store.open_subscription([DAEMONSETS, PODS, NODES, CONTROLLER_REVISIONS], copy=False)
        self._nodes = {name_of(s.obj): s.obj for s in self.store.list_page(NODES).items}
        self._node_order = None
        self._pods.clear()
        self._pod_home.clear()
        self._placements.clear()
        self._tallies.clear()
        for stored in self.store.list_page(PODS).items:
            self._index_pod(stored.obj)
        return self._events

    def _close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None

    def _catch_up(self) -> None:
        """Apply every event the store has emitted so far (our own writes included) before reading the view."""
        for event in self._open().drain():
            self._on_event(event)

    async def _watch(self) -> None:
        async for event in self._open():
            self._on_event(event)

    def _on_event(self, event: WatchEvent) -> None:
        plural = event.resource.plural
        if plural == PODS.plural:
            self._unindex_pod(event.object)
            if event.type != "DELETED":
                self._index_pod(event.object)
        elif plural == NODES.plural:
            name = name_of(event.object)
            for tally in self._tallies.values():
                tally.touch(name)
            if event.type == "DELETED":
                self._nodes.pop(name, None)
                self._node_order = None
            else:
                if name not in self._nodes:
                    self._node_order = None
                self._nodes[name] = event.object
        elif plural == DAEMONSETS.plural and event.type == "DELETED":
            self._placements.pop(uid_of(event.object), None)
            self._tallies.pop((namespace_of(event.object), uid_of(event.object)), None)
        self.handle_event(event)

    def _index_pod(self, pod: JSON) -> None:
        ref = controller_owner(pod)
        if ref is None:
            return
        key = (namespace_of(pod), name_of(pod))
        owner = (key[0], str(ref.get("uid") or ""))
        node = node_name_of(pod)
        on_node = self._pods.setdefault(owner, {}).setdefault(node, [])
        on_node.append(pod)
        tally = self._tallies.get(owner)
        if tally is not None:
            tally.touch(node)
        if len(on_node) > 1:
            on_node.sort(key=name_of)  # the order a list gives (a node rarely holds more than one)
        self._pod_home[key] = (owner, node)

    def _unindex_pod(self, pod: JSON) -> None:
        key = (namespace_of(pod), name_of(pod))
        home = self._pod_home.pop(key, None)
        if home is None:
            return
        owner, node = home
        tally = self._tallies.get(owner)
        if tally is not None:
            tally.touch(node)
        by_node = self._pods[owner]
        on_node = [p for p in by_node[node] if name_of(p) != key[1]]
        if on_node:
            by_node[node] = on_node
        else:
            del by_node[node]
            if not by_node:
                del self._pods[owner]

    def _owned_by_node(self, ds: JSON) -> dict[str, list[JSON]]:
        """The DaemonSet's pods (controller reference to its uid, in its namespace) by spec.nodeName.

        The view itself, not a copy: valid until the next _catch_up, and callers must not change it.
        """
        return self._pods.get((namespace_of(ds), uid_of(ds))) or {}

    def _sorted_node_names(self) -> list[str]:
        """Nodes in the store's (name) order, the order a list would give."""
        if self._node_order is None:
            self._node_order = sorted(self._nodes)
        return self._node_order

    def _tally(self, ds: JSON, full: bool) -> _Tally:
        """The DaemonSet's tally, a new one (every node looked at) for a resync or a template that changed."""
        key = (namespace_of(ds), uid_of(ds))
        tally = self._tallies.get(key)
        if tally is None or full or self._placement_results(ds)[1]:
            tally = self._tallies[key] = _Tally()
        return tally

    def _placement_results(self, ds: JSON) -> tuple[JSON, bool]:
        """The DaemonSet's template spec and whether its placement cache was just emptied (the spec changed)."""
        spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        uid = uid_of(ds)
        cached = self._placements.get(uid)
        if cached is None or cached[0] != spec:
            self._placements[uid] = (spec, {})
            return spec, True
        return spec, False

    def _placement(self, ds: JSON) -> list[tuple[str, bool, bool]]:
        """(node, should run, may keep running) for every node; recomputed only for nodes or templates that changed."""
        out = self._placement_of(ds, self._sorted_node_names())
        results = self._placements[uid_of(ds)][1]
        if len(results) > len(out):
            for name in [n for n in results if n not in self._nodes]:
                del results[name]
        return out

    def _placement_of(self, ds: JSON, names: list[str]) -> list[tuple[str, bool, bool]]:
        """(node, should run, may keep running) for these nodes (those that exist), from the cache where it holds."""
        spec, _ = self._placement_results(ds)
        results = self._placements[uid_of(ds)][1]
        tolerations: list[JSON] | None = None
        out: list[tuple[str, bool, bool]] = []
        for name in names:
            node = self._nodes.get(name)
            if node is None:
                results.pop(name, None)
                continue
            hit = results.get(name)
            if hit is None or hit[0] is not node:
                if tolerations is None:
                    tolerations = daemon_tolerations(spec)
                hit = (node, _should_run(spec, tolerations, node))
                results[name] = hit
            out.append((name, *hit[1]))
        return out

    def handle_event(self, event: WatchEvent) -> None:
        obj, plural = event.object, event.resource.plural
        if plural == DAEMONSETS.plural:
            # A deleted DaemonSet's dependents are the garbage collector's (the Store's cascade) business.
            if event.type != "DELETED" and (event.old is None or self._spec_changed(event.old, obj)):
                self._enqueue_changed((namespace_of(obj), name_of(obj)))
        elif plural in (PODS.plural, CONTROLLER_REVISIONS.plural):
            if plural == PODS.plural and event.type == "MODIFIED" and event.old is not None \
                    and _pod_view(event.old) == _pod_view(obj):
                return
            ref = controller_owner(obj)
            if ref is not None and ref.get("kind") == "DaemonSet":
                self._enqueue_changed((namespace_of(obj), str(ref.get("name"))))
        elif plural == NODES.plural:
            old = event.old
            if old is None or event.type == "DELETED" or labels_of(old) != labels_of(obj) \
                    or old.get("spec") != obj.get("spec"):
                for stored in self.store.list_page(DAEMONSETS).items:  # (_on_event marked the node changed)
                    self._enqueue_changed((namespace_of(stored.obj), name_of(stored.obj)))

    @staticmethod
    def _spec_changed(old: JSON, new: JSON) -> bool:
        """Our own status writes come back as MODIFIED events; they need no sync."""
        def strip(obj: JSON) -> JSON:
            m = {k: v for k, v in meta(obj).items() if k not in ("resourceVersion", "managedFields")}
            return {"metadata": m, "spec": obj.get("spec")}
        return strip(old) != strip(new)

    async def _work(self) -> None:
        while True:
            await self._wakeup.wait()
            if self._last_cost:
                # Let the events of a burst gather; a cheap sync (small cluster) waits next to nothing.
                await asyncio.sleep(min(self.MAX_PAUSE, self.PACE * self._last_cost))
            self._wakeup.clear()
            while self._queue:
                key, _ = self._queue.popitem(last=False)
                full = key in self._full
                self._full.discard(key)
                started = time.perf_counter()
                try:
                    self.sync(*key, full=full)
                except ApiError as exc:
                    # Conflicts and races with other writers: the world moved, look again shortly.
                    _log.debug("daemonset_sync_retry", daemonset=f"{key[0]}/{key[1]}", error=repr(exc))
                    self.enqueue_after(key, 0.05 if exc.code == 409 else 0.5)
                except Exception:
                    _log.exception("daemonset_sync_failed", daemonset=f"{key[0]}/{key[1]}")
                    self.enqueue_after(key, 1.0)
                self._last_cost = time.perf_counter() - started
                await asyncio.sleep(0)  # let writers and watchers run between syncs

    # Sync ----------------------------------------------------------------------------------------------

    def sync(self, namespace: str, name: str, *, full: bool = True) -> None:
        """One pass for one DaemonSet; `full=False` looks only at the nodes that changed since the last pass."""
        self.syncs += 1
        self._catch_up()
        try:
            ds = self.store.get(DAEMONSETS, namespace, name)
        except ApiError as exc:
            if exc.code == 404:
                return
            raise
        if is_terminating(ds):
            return
        hash_, collision_count = self._sync_revisions(ds)
        self._catch_up()
        tally = self._tally(ds, full)
        pods = self._owned_by_node(ds)
        if self._manage(ds, self._placement_of(ds, tally.take_manage(self._sorted_node_names())), pods, hash_):
            self._catch_up()
            pods = self._owned_by_node(ds)
        if self._strategy(ds) == "RollingUpdate" and self._rolling_update(ds, self._placement(ds), pods, hash_):
            self._catch_up()
            pods = self._owned_by_node(ds)
        self._cleanup_history(ds, pods, hash_)
        status_key = (hash_, template_generation(ds), _min_ready_seconds(ds))
        names = tally.take_status(self._sorted_node_names(), status_key)
        self._update_status(ds, self._placement_of(ds, names), pods, hash_, collision_count, tally)

    @staticmethod
    def _strategy(ds: JSON) -> str:
        return str(((ds.get("spec") or {}).get("updateStrategy") or {}).get("type") or "RollingUpdate")

    def _owned_revisions(self, ds: JSON) -> list[JSON]:
        uid = uid_of(ds)
        return [s.obj for s in self.store.list_page(CONTROLLER_REVISIONS, namespace_of(ds)).items
                if _owned_by(s.obj, uid)]

    def _sync_revisions(self, ds: JSON) -> tuple[str, int]:
        """Find or create the revision of the current template; returning to an old template renumbers it."""
        namespace = namespace_of(ds)
        template = (ds.get("spec") or {}).get("template") or {}
        data = revision_data(template)
        revisions = self._owned_revisions(ds)
        collision_count = int((ds.get("status") or {}).get("collisionCount") or 0)
        matches = sorted((r for r in revisions if r.get("data") == data), key=_revision_number)
        if matches:
            current = matches[-1]
            others_max = max((_revision_number(r) for r in revisions if r.get("data") != data), default=0)
            if _revision_number(current) <= others_max:
                current = clone(current)
                current["revision"] = others_max + 1
                current = self.store.update(CONTROLLER_REVISIONS, current)
            return str(labels_of(current).get(LABEL_REVISION_HASH) or ""), collision_count
        next_revision = max((_revision_number(r) for r in revisions), default=0) + 1
        while True:
            hash_ = template_hash(template, collision_count)
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            labels[LABEL_REVISION_HASH] = hash_
            revision = {
                "apiVersion": "apps/v1",
                "kind": "ControllerRevision",
                "metadata": {"name": f"{name_of(ds)}-{hash_}", "namespace": namespace, "labels": labels,
                             "ownerReferences": [owner_reference(ds)]},
                "data": data,
                "revision": next_revision,
            }
            try:
                self.store.create(CONTROLLER_REVISIONS, revision, namespace=namespace)
            except ApiError as exc:
                if exc.code != 409:
                    raise
                collision_count += 1  # someone else's object has our name: hash again with a new salt
                continue
            return hash_, collision_count

    def _manage(self, ds: JSON, placement: list[tuple[str, bool, bool]], by_node: dict[str, list[JSON]],
                hash_: str) -> bool:
        """Per node of `placement` (those looked at): create the missing pod, delete failed, duplicate and
        misplaced ones. True if it wrote. The nodes with work stay in the tally's look until a sync finds none."""
        to_create: list[str] = []
        to_delete: list[JSON] = []
        for node_name, run, keep in placement:
            on_node = by_node.get(node_name)
            if not on_node:
                # Only when nothing is left: a terminating (or just deleted failed) pod still holds the node.
                if run:
                    to_create.append(node_name)
                continue
            active = [p for p in on_node if not is_terminating(p)]
            if keep:
                finished = [p for p in active if (p.get("status") or {}).get("phase") in ("Failed", "Succeeded")]
                running = [p for p in active if p not in finished]
                to_delete.extend(finished)
                if len(running) > 1:
                    to_delete.extend(_oldest_first(running)[1:])
            else:
                to_delete.extend(active)
        tally = self._tallies.get((namespace_of(ds), uid_of(ds)))
        if tally is not None:
            tally.pending.update(to_create)
            tally.pending.update(node_name_of(p) for p in to_delete)
        for node_name in to_create:
            created = self.store.create(PODS, new_pod(ds, node_name, hash_), namespace=namespace_of(ds))
            self._record(ds, "SuccessfulCreate", f"Created pod: {name_of(created)}")
            _log.debug("daemon_pod_created", daemonset=name_of(ds), node=node_name, hash=hash_)
        self._delete_pods(ds, to_delete)
        return bool(to_create or to_delete)

    def _delete_pods(self, ds: JSON, pods: list[JSON]) -> None:
        for pod in pods:
            try:
                self.store.delete(PODS, namespace_of(pod), name_of(pod), {"preconditions": {"uid": uid_of(pod)}})
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
                continue
            self._record(ds, "SuccessfulDelete", f"Deleted pod: {name_of(pod)}")

    def _record(self, ds: JSON, reason: str, message: str) -> None:
        """A core/v1 Event as the real controller's recorder writes it (`kubectl describe ds` lists them)."""
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name_of(ds)}.{time.time_ns():x}", "namespace": namespace_of(ds)},
            "involvedObject": {
                "kind": "DaemonSet",
                "namespace": namespace_of(ds),
                "name": name_of(ds),
                "uid": uid_of(ds),
                "apiVersion": "apps/v1",
                "resourceVersion": str((ds.get("metadata") or {}).get("resourceVersion") or ""),
            },
            "reason": reason,
            "message": message,
            "source": {"component": EVENT_SOURCE},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": "Normal",
            "eventTime": None,
            "reportingComponent": "",
            "reportingInstance": "",
        }
        try:
            self.store.create(EVENTS, event, namespace=namespace_of(ds))
        except ApiError as exc:  # events are best effort, as the recorder's are
            _log.debug("event_not_recorded", daemonset=name_of(ds), reason=reason, error=str(exc))

    def _rolling_update(self, ds: JSON, placement: list[tuple[str, bool, bool]], pods: dict[str, list[JSON]],
                        hash_: str) -> bool:
        """rollingUpdate without surge: delete old pods while the unavailable count stays within budget."""
        now = time.time()
        min_ready = _min_ready_seconds(ds)
        generation = template_generation(ds)
        by_node = dict(pods)
        desired = 0
        for node_name, run, _ in placement:
            if run:
                desired += 1
                by_node.setdefault(node_name, [])
        rolling = (((ds.get("spec") or {}).get("updateStrategy") or {}).get("rollingUpdate") or {})
        max_unavailable = scaled_value(rolling.get("maxUnavailable"), desired, 1)
        if desired > 0 and max_unavailable == 0:
            max_unavailable = 1
        unavailable = 0
        replace: list[JSON] = []
        candidates: list[JSON] = []
        for node_name in sorted(by_node):
            live = [p for p in by_node[node_name] if not is_terminating(p)]
            new = [p for p in live if is_pod_updated(p, hash_, generation)]
            old = [p for p in live if not is_pod_updated(p, hash_, generation)]
            if len(new) > 1 or len(old) > 1 or (new and old) or (not new and not old):
                unavailable += 1  # the manage step sorts these nodes out
            elif new:
                wait = available_in(new[0], min_ready, now)
                if wait is None or wait > 0:
                    unavailable += 1
            else:
                wait = available_in(old[0], min_ready, now)
                if wait is None or wait > 0:
                    replace.append(old[0])  # not available anyway: replacing it costs nothing
                elif unavailable < max_unavailable:
                    candidates.append(old[0])
        budget = max(0, max_unavailable - unavailable)
        doomed = replace + candidates[:budget]
        self._delete_pods(ds, doomed)
        return bool(doomed)

    def _cleanup_history(self, ds: JSON, pods: dict[str, list[JSON]], hash_: str) -> None:
        limit = (ds.get("spec") or {}).get("revisionHistoryLimit")
        limit = DEFAULT_REVISION_HISTORY_LIMIT if limit is None else int(limit)
        revisions = self._owned_revisions(ds)
        if len(revisions) <= limit:
            return  # nothing could be over the limit: spare the pass over the pods
        live = {labels_of(p).get(LABEL_REVISION_HASH) for on_node in pods.values() for p in on_node} | {hash_}
        old = sorted((r for r in revisions if labels_of(r).get(LABEL_REVISION_HASH) not in live),
                     key=_revision_number)
        for revision in old[:max(0, len(old) - limit)]:
            try:
                self.store.delete(CONTROLLER_REVISIONS, namespace_of(ds), name_of(revision))
            except ApiError as exc:
                if exc.code != 404:
                    raise

    def _update_status(self, ds: JSON, placement: list[tuple[str, bool, bool]], by_node: dict[str, list[JSON]],
                       hash_: str, collision_count: int, tally: _Tally) -> None:
        """Count the shares of the nodes in `placement` (those that changed) into the tally, write its totals."""
        now = time.time()
        min_ready = _min_ready_seconds(ds)
        generation = template_generation(ds)
        recheck: float | None = None
        for node_name, run, _ in placement:
            scheduled = by_node.get(node_name)
            if not run:
                if scheduled:
                    tally.add(node_name, (0, 0, 1, 0, 0, 0))
                continue
            if not scheduled:
                tally.add(node_name, (1, 0, 0, 0, 0, 0))
                continue
            pod = scheduled[0] if len(scheduled) == 1 else _oldest_first(scheduled)[0]
            wait = available_in(pod, min_ready, now)
            ready = available = 0
            if wait is not None:
                ready = 1
                if wait <= 0:
                    available = 1
                else:
                    recheck = wait if recheck is None else min(recheck, wait)
            tally.add(node_name, (1, 1, 0, ready, available, int(is_pod_updated(pod, hash_, generation))))
        desired, current, misscheduled, ready, available, updated = tally.totals
        if recheck is not None:
            self.enqueue_after((namespace_of(ds), name_of(ds)), recheck + 0.01)
        old_status: JSON = ds.get("status") or {}
        status: JSON = dict(old_status)
        status.update(desiredNumberScheduled=desired, currentNumberScheduled=current,
                      numberMisscheduled=misscheduled, numberReady=ready,
                      observedGeneration=int(meta(ds).get("generation") or 0))
        # omitempty fields, as the real API serialises them
        for field, value in (("numberAvailable", available), ("numberUnavailable", desired - available),
                             ("updatedNumberScheduled", updated), ("collisionCount", collision_count)):
            if value:
                status[field] = value
            else:
                status.pop(field, None)
        if status == old_status:
            return
        ds["status"] = status
        self.store.update(DAEMONSETS, ds, subresource="status")
