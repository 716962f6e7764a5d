"""The controller proper: informers feed a keyed work queue; each reconcile reads the caches only and
writes only what changed (condition patches, UID-guarded pod deletions, the auto-pause annotation, Events).

Event routing is what makes a roll prompt without polling: a pod or ControllerRevision change enqueues
its owning DaemonSet, and a node whose readiness or labels change enqueues every DaemonSet with a pod on
it — a node returning from a partition is upgraded within one reconcile, not on the next unrelated
DaemonSet change (OpenYurt watches no nodes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from collections.abc import Set as AbstractSet
from typing import Any

from edgeagent import log
from edgeagent.contract import (
    ANNOTATION_ON_FAILURE,
    ANNOTATION_PAUSED,
    ANNOTATION_ROLLED_BACK_FROM,
    ANNOTATION_ROLLOUT_ABORT,
    ANNOTATION_ROLLOUT_BAKE,
    ANNOTATION_ROLLOUT_GROUP_LABEL,
    ANNOTATION_ROLLOUT_PROMOTE,
    ANNOTATION_ROLLOUT_STATE,
    ANNOTATION_ROLLOUT_STEPS,
    ANNOTATION_UPDATE_STRATEGY,
    ANNOTATION_UPDATE_TYPE,
    EVENT_INVALID_ANNOTATION,
    EVENT_INVALID_UPDATE_STRATEGY,
    EVENT_NORMAL,
    EVENT_ROLLOUT_AUTO_PAUSED,
    EVENT_ROLLOUT_PLAN_INVALID,
    EVENT_ROLLOUT_ROLLED_BACK,
    EVENT_UPGRADING_PODS,
    EVENT_WARNING,
    LABEL_PREPULL,
    UPDATE_TYPE_IN_PLACE_IF_POSSIBLE,
    in_place_requested,
)
from edgeagent.controller import trim
from edgeagent.controller.events import EventRecorder
from edgeagent.controller.expectations import Expectations, UnobservedWrites
from edgeagent.controller.inplace_exec import (
    ANSWER,
    EVENT_IN_PLACE_FALLBACK,
    EXECUTE,
    REASON_UPDATED,
    REASON_UPDATING,
    Choice,
    InPlaceRestarts,
    choose,
    container_ids,
    declares_gate,
    gate_patch,
    gate_updates,
    ota_request,
    request_answer,
    still_movable,
)
from edgeagent.controller.metrics import ControllerMetrics
from edgeagent.controller.node_order import NodeOrder
from edgeagent.controller.ota import ConditionChange, OtaFacts
from edgeagent.controller.pod_index import OwnerPods
from edgeagent.controller.pods import node_of
from edgeagent.controller.prepull import PrePuller, PrepullSettings
from edgeagent.controller.revisions import current_hash, revision_hash
from edgeagent.controller.roll_views import RollViews
from edgeagent.controller.rolling import Plan, desired_nodes, plan_step
from edgeagent.controller.settings import Strategy, roll_settings, select
from edgeagent.controller.waves import NodePods, RankCache, node_ready, observe, previous_revision
from edgeagent.controller.workqueue import ShutDown, WorkQueue
from edgeagent.inplace import update_type
from edgeagent.kube.client import CONTENT_JSON_PATCH, CONTENT_MERGE_PATCH, KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.errors import Conflict, Invalid, NotFound, ServerError
from edgeagent.kube.informer import DELETED, Informer
from edgeagent.kube.objects import (
    annotations_of,
    controller_owner,
    get_condition,
    is_terminating,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    uid_of,
)
from edgeagent.kube.timeutil import format_time
from edgeagent.rollout.api import parse_spec
from edgeagent.rollout.machine import (
    STEER_PROMOTE,
    Decision,
    Gate,
    Steering,
    decide,
    settled_gate,
    undo,
)
from edgeagent.rollout.plan import canary_of
from edgeagent.rollout.requests import (
    ANNOTATION_STEER,
    RESULT_DONE,
    RESULT_IGNORED,
    VERB_ABORT,
    VERB_PROMOTE,
    VERB_RETRY,
    VERB_UNDO,
    SteerRequest,
    steer_record,
    steer_request,
)
from edgeagent.rollout.restore import (
    Settled,
    abandon,
    mark_pending,
    pending_condition,
    pending_generation,
    restore_due,
    settle,
)
from edgeagent.rollout.state import (
    PHASE_ABORTED,
    PHASE_COMPLETE,
    RolloutState,
    condition_json,
    rolled_back,
    state_from_status,
)

JSON = dict[str, Any]

# Concurrent API calls within one reconcile (deletions or condition patches of one DaemonSet).
_WRITE_CONCURRENCY = 32
# At most this many PodNeedUpgrade writes per reconcile; the DaemonSet is queued again for the rest (as the DaemonSet
# controller's burst of creates per sync). A new revision at 100,000 nodes, or a plan's late wave (50,000 nodes),
# is written in batches: each pass plans a batch, not every change, and between two batches the controller looks
# again, so an abort (or failures reaching max-failed) seen meanwhile stops the wave before the rest of its nodes
# are told to upgrade.
_CONDITION_BURST = 10_000
# How soon a roll blocked by an unhealthy informer looks again.
_UNHEALTHY_RETRY = 1.0
# Names listed in one Event message before "and N more".
_NAMES_IN_EVENT = 10
# While pods restart in place, look at the roll again this often even if no event comes.
_RESTART_POLL = 1.0
# The image PATCH after our own gate write: the kubelet's answer to the gate may move the pod on in between.
_IN_PLACE_ATTEMPTS = 3
# Warning topics of rollout plans (per annotation), kept apart from the roll settings' own topics.
_PLAN_TOPIC = "plan:"
# Wake-ups at a bake's end or a progress deadline come this much later, so the reconcile sees it passed.
_PLAN_SLACK = 0.05
# A state write refused because the cache was behind is decided again after this long.
_PLAN_CONFLICT_RETRY = 0.05
# How soon a plan held for nodes between pods is looked at again if no pod event comes first.
_PLAN_MISSING_RETRY = 1.0
# The Warning about round-3 plan annotations still on a DaemonSet (once per UID).
_PLAN_ROUND3 = _PLAN_TOPIC + "round3"
# The round-3 plan annotations: no longer read or written (a RolloutPlan object replaces them).
ROUND3_ANNOTATIONS = frozenset({
    ANNOTATION_ROLLOUT_STEPS, ANNOTATION_ROLLOUT_BAKE, ANNOTATION_ROLLOUT_GROUP_LABEL, ANNOTATION_ON_FAILURE,
    ANNOTATION_ROLLOUT_STATE, ANNOTATION_ROLLED_BACK_FROM, ANNOTATION_ROLLOUT_PROMOTE, ANNOTATION_ROLLOUT_ABORT,
})
EVENT_ROLLOUT_ANNOTATIONS_IGNORED = "RolloutAnnotationsIgnored"
# The RolloutPlan API (deploy/crd-rolloutplan.yaml).
PLANS_PATH_PREFIX = "/apis/edgeagent.io/v1alpha1"
PLANS_PATH = PLANS_PATH_PREFIX + "/rolloutplans"
# What the plans informer says, once each, when the API server stops and starts serving RolloutPlans.
PLANS_NOT_SERVED = ("the CustomResourceDefinition rolloutplans.edgeagent.io is not installed; rollout plans are off "
                    "until it is (every DaemonSet is rolled without a plan meanwhile)",
                    "the CustomResourceDefinition rolloutplans.edgeagent.io is installed: rollout plans are on")
# The kind of write counted for each plan status write (`ControllerMetrics.writes`).
WRITE_PLAN_STATUS = "rolloutplan_status"
# A plan that moves nothing says why in this condition (False).
CONDITION_ACCEPTED = "Accepted"
REASON_DAEMONSET_NOT_FOUND = "DaemonSetNotFound"
REASON_DUPLICATE_PLAN = "DuplicatePlan"
REASON_INVALID_SPEC = "InvalidSpec"
# What `_plan_gate` answers when this reconcile must change nothing.
_HOLD = Gate(None, 0, frozen=True)


class ReconcileError(Exception):
    """Some writes of a reconcile failed; the DaemonSet is retried with backoff."""


def _owner_key(obj: JSON) -> str | None:
    """`namespace/name` of the DaemonSet controlling `obj`."""
    ref = controller_owner(obj)
    if ref is None or ref.get("kind") != "DaemonSet" or not str(ref.get("apiVersion", "")).startswith("apps/"):
        return None
    return f"{namespace_of(obj)}/{ref.get('name')}"


def _owner_uid(obj: JSON) -> str:
    ref = controller_owner(obj)
    return str(ref.get("uid") or "") if ref else ""


def _daemonset_changed(old: JSON, new: JSON) -> bool:
    """A change a reconcile depends on: spec, annotations, deletion, or the DaemonSet controller having
    observed a new generation (its revisions are current from then on)."""
    old_meta, new_meta = meta(old), meta(new)
    return (
        old.get("spec") != new.get("spec")
        or old_meta.get("annotations") != new_meta.get("annotations")
        or old_meta.get("deletionTimestamp") != new_meta.get("deletionTimestamp")
        or old_meta.get("uid") != new_meta.get("uid")
        or (old.get("status") or {}).get("observedGeneration") != (new.get("status") or {}).get("observedGeneration")
    )


def _rv(obj: JSON) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def _ready_state(node: JSON | None) -> tuple[str, str]:
    cond = get_condition(node, "Ready") if node else None
    return (str(cond.get("status")), str(cond.get("lastTransitionTime"))) if cond else ("", "")


def _names(pods: Iterable[JSON]) -> str:
    names = [name_of(p) for p in pods]
    shown = ", ".join(names[:_NAMES_IN_EVENT])
    return shown + (f" and {len(names) - _NAMES_IN_EVENT} more" if len(names) > _NAMES_IN_EVENT else "")


def _batch_message(hash_: str, plan: Plan, done: str, pods: list[JSON], how: str = "") -> str:
    """The UpgradingPods Event of one batch of a roll (deleted, or patched in place): which pods, and the budget
    the batch was decided under, so `kubectl describe` shows why that many moved at once."""
    return (f"AdvancedRollingUpdate to revision {hash_}: {done} {len(pods)} outdated pod(s){how} ({_names(pods)}); "
            f"max unavailable {plan.max_unavailable}, unavailable before {plan.unavailable}, "
            f"{plan.updated}/{plan.total} nodes up to date")


class Controller:
    def __init__(
        self,
        client: KubeClient,
        *,
        metrics: ControllerMetrics | None = None,
        events: EventRecorder | None = None,
        identity: str = "edgeagent-controller",
        workers: int = 4,
        resync_period: float = 300.0,
        clock: Callable[[], float] = time.time,
        informer_options: dict[str, Any] | None = None,
        prepull: PrepullSettings | None = None,
    ) -> None:
        self._client = client
        self.metrics = metrics or ControllerMetrics()
        self.events = events or EventRecorder(client, instance=identity, on_write=self.metrics.write)
        self._workers = workers
        self._resync_period = resync_period
        self._clock = clock
        self._log = log.get("edgeagent.controller")
        opts = informer_options or {}
        # Each cache keeps only what the controller reads (edgeagent/controller/trim.py).
        self.daemonsets = Informer(client, "/apis/apps/v1/daemonsets", name="daemonsets",
                                   transform=trim.strip_managed_fields, **opts)
        self.pods = Informer(client, "/api/v1/pods", name="pods", transform=trim.pod, **opts)
        self.nodes = Informer(client, "/api/v1/nodes", name="nodes", transform=trim.node, **opts)
        self.revisions = Informer(client, "/apis/apps/v1/controllerrevisions", name="controllerrevisions",
                                  transform=trim.strip_managed_fields, **opts)
        # RolloutPlans, all namespaces: each names the DaemonSet it rolls (`spec.daemonSet`) and keeps its state
        # in its status. Without the CRD installed (404) the controller rolls every DaemonSet without a plan.
        self.plans = Informer(client, PLANS_PATH, name="rolloutplans", transform=trim.strip_managed_fields,
                              not_served=PLANS_NOT_SERVED, **opts)
        self.queue = WorkQueue()
        self.jobs: Informer | None = None
        self.prepull: PrePuller | None = None
        if prepull is not None and prepull.enabled:
            self.jobs = Informer(client, "/apis/batch/v1/jobs", label_selector=f"{LABEL_PREPULL}=true", name="jobs",
                                 transform=trim.strip_managed_fields, **opts)
            self.prepull = PrePuller(client, prepull, self.events, self.metrics.registry, self.metrics.write,
                                     self.queue.add, self.queue.add_after, clock)
        self.expectations = Expectations()
        self.pause_writes = UnobservedWrites()
        self.restarts = InPlaceRestarts()  # in-place upgrades the roll waits for (controller/inplace_exec.py)
        self.gate_writes = UnobservedWrites()
        # OTA in place: DaemonSet UID -> keys of its pods whose node recorded an open in-place request on the pod's
        # status (`contract.in_place_requested`), kept by the pod handler so a pass looks at those pods only.
        self._in_place_asks: dict[str, set[str]] = {}
        # Rollout plans: the ranking per DaemonSet and revision, state writes not yet seen in the cache, and
        # the gate decided with each (reused while the cache still shows the DaemonSet before the write).
        # Every cached node by the hash of its name, so a ranking after a restart is a filter, not a sort.
        self.node_order = NodeOrder()
        self.ranks = RankCache(self.node_order.names)
        self.plan_writes = UnobservedWrites()
        self._plan_gates: dict[str, Gate] = {}
        # DaemonSet key -> keys of the plans naming it; DaemonSet UID -> its plan (the plan's Events go there too).
        self._plans_by_ds: dict[str, set[str]] = {}
        self._story_plans: dict[str, JSON] = {}
        # Indexes kept by the informer handlers, so a reconcile costs O(its own pods), not O(cluster).
        # Each DaemonSet's pods carry trackers (pod_index.py) fed by `_on_pod`: a pass in which nothing changed
        # reads the pods that changed, not all of them.
        self._pods_by_owner: dict[str, OwnerPods] = {}
        self._owners_by_node: dict[str, dict[str, str]] = {}  # node -> pod key -> DaemonSet key
        self._revisions_by_owner: dict[str, dict[str, JSON]] = {}
        # The cached nodes that are not Ready (`waves.node_ready`): a wave change at 100,000 nodes asks the
        # readiness of every node of the reached waves, a set lookup with this.
        self._not_ready_nodes: set[str] = set()
        # Warnings already reported, per DaemonSet UID and topic, so each distinct bad value is reported once.
        self._warned: dict[str, dict[str, str]] = {}
        self.daemonsets.add_handler(self._on_daemonset)
        self.pods.add_handler(self._on_pod)
        self.nodes.add_handler(self._on_node)
        self.revisions.add_handler(self._on_revision)
        self.plans.add_handler(self._on_plan)
        if self.jobs is not None and self.prepull is not None:
            prepuller = self.prepull
            self.jobs.add_handler(lambda etype, obj, old: prepuller.on_job(etype, obj))
        self.metrics.queue_depth.set_function(lambda: len(self.queue))

    # ------------------------------------------------------------------ informer handlers

    @property
    def informers(self) -> tuple[Informer, ...]:
        core = (self.daemonsets, self.pods, self.nodes, self.revisions, self.plans)
        return core if self.jobs is None else (*core, self.jobs)

    def _on_daemonset(self, etype: str, obj: JSON, old: JSON | None) -> None:
        key = key_of(obj)
        if etype == DELETED:
            self.expectations.forget(key)
            self.restarts.forget(key)
            self.pause_writes.forget(uid_of(obj))
            self._warned.pop(uid_of(obj), None)
            self.metrics.forget_rollout(namespace_of(obj), name_of(obj))
            self.metrics.forget_plan(namespace_of(obj), name_of(obj))
            self.ranks.forget(uid_of(obj))
            self.plan_writes.forget(uid_of(obj))
            self._plan_gates.pop(uid_of(obj), None)
            self._story_plans.pop(uid_of(obj), None)
        elif old is not None and not _daemonset_changed(old, obj):
            # Status counters move with every pod change; those pod events already brought us here.
            return
        self.queue.add(key)

    def _on_pod(self, etype: str, obj: JSON, old: JSON | None) -> None:
        if self.prepull is not None and self.prepull.on_job_pod(etype, obj):
            return
        key = key_of(obj)
        if etype == DELETED and self.prepull is not None:
            self.prepull.forget_pod(uid_of(obj))
        if old is not None:
            # An update of a pod that stays with its owner keeps the mark of a write of ours it may not include yet.
            self._unindex_pod(key, old, updating=etype != DELETED and _owner_uid(obj) == _owner_uid(old))
            self._index_request(key, old, False)
        if etype != DELETED:
            self._index_request(key, obj, in_place_requested(obj) is not None)
            owner_uid = _owner_uid(obj)
            owner_key = _owner_key(obj)
            if owner_uid and owner_key:
                owned = self._pods_by_owner.get(owner_uid)
                if owned is None:
                    owned = self._pods_by_owner[owner_uid] = OwnerPods()
                owned.put(key, obj)
                node = node_of(obj)
                if node:
                    self._owners_by_node.setdefault(node, {})[key] = owner_key
        owner = _owner_key(obj) or (_owner_key(old) if old else None)
        if owner:
            self.queue.add(owner)

    def _index_request(self, key: str, pod: JSON, asks: bool) -> None:
        owner_uid = _owner_uid(pod)
        if not owner_uid:
            return
        if asks:
            self._in_place_asks.setdefault(owner_uid, set()).add(key)
            return
        keys = self._in_place_asks.get(owner_uid)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._in_place_asks[owner_uid]

    def _unindex_pod(self, key: str, pod: JSON, *, updating: bool = False) -> None:
        owner_uid = _owner_uid(pod)
        pods = self._pods_by_owner.get(owner_uid)
        if pods is not None:
            pods.drop(key, updating=updating)
            if not pods and not updating:  # an update puts the pod back at once
                del self._pods_by_owner[owner_uid]
        node = node_of(pod)
        owners = self._owners_by_node.get(node)
        if owners is not None:
            owners.pop(key, None)
            if not owners:
                del self._owners_by_node[node]

    def _on_node(self, etype: str, obj: JSON, old: JSON | None) -> None:
        # First, before anything that could raise: `_not_ready_nodes` must follow every change of the cache.
        if etype == DELETED or node_ready(obj):
            self._not_ready_nodes.discard(key_of(obj))
        else:
            self._not_ready_nodes.add(key_of(obj))
        if self.prepull is not None and etype != DELETED:
            self.prepull.on_node(obj, old)
        if old is None and etype != DELETED:
            # A node's place in every ranking starts with the sha256 of its name, which never changes: worked out
            # (and remembered) as the node arrives, and the node put in the hash order, not by the first ranking
            # after a restart (at 100,000 nodes the hashes took ~60 ms and the sort 80-90 ms of that pass).
            # Interned, as the pods' digests intern their node's name (`pod_index.digest_of`): every ranking, wave
            # map and view by node then holds the one string, and their lookups compare it by identity.
            self.node_order.add(sys.intern(name_of(obj)))
        elif etype == DELETED:
            self.node_order.remove(name_of(obj))
        # Heartbeats rewrite node status every few seconds; only readiness and labels matter to a roll.
        if etype not in (DELETED, "ADDED") and old is not None and (
            _ready_state(obj) == _ready_state(old) and labels_of(obj) == labels_of(old)
        ):
            return
        for owner in set(self._owners_by_node.get(name_of(obj), {}).values()):
            self.queue.add(owner)

    def _on_revision(self, etype: str, obj: JSON, old: JSON | None) -> None:
        owner_uid = _owner_uid(obj)
        key = key_of(obj)
        if owner_uid:
            revisions = self._revisions_by_owner.setdefault(owner_uid, {})
            if etype == DELETED:
                revisions.pop(key, None)
                if not revisions:
                    del self._revisions_by_owner[owner_uid]
            else:
                revisions[key] = obj
        owner = _owner_key(obj)
        if owner:
            self.queue.add(owner)

    def _on_plan(self, etype: str, obj: JSON, old: JSON | None) -> None:
        """A plan's change wakes the DaemonSet it names (and the one it named before)."""
        key = key_of(obj)
        targets = {t for t in (_plan_target(obj), _plan_target(old) if old is not None else None) if t}
        for target in targets:
            keys = self._plans_by_ds.setdefault(target, set())
            if etype == DELETED or target != _plan_target(obj):
                keys.discard(key)
                if not keys:
                    del self._plans_by_ds[target]
            else:
                keys.add(key)
            self.queue.add(target)
        if etype == DELETED:
            self.plan_writes.forget(uid_of(obj))

    def plans_absent(self) -> bool:
        """The API server does not serve RolloutPlans (the CRD is not installed, or was deleted, which deletes the
        plans too): no DaemonSet has a plan."""
        return not self.plans.healthy and self.plans.last_code == 404

    # ------------------------------------------------------------------ reads

    def pods_of(self, ds: JSON) -> list[JSON]:
        owned = self._pods_by_owner.get(uid_of(ds))
        return list(owned.pods.values()) if owned is not None else []

    def _owned(self, ds: JSON) -> OwnerPods:
        return self._pods_by_owner.get(uid_of(ds)) or OwnerPods()

    def revisions_of(self, ds: JSON) -> list[JSON]:
        return list(self._revisions_by_owner.get(uid_of(ds), {}).values())

    def enqueue_all(self) -> None:
        for key in list(self.daemonsets.items):
            self.queue.add(key)

    # ------------------------------------------------------------------ running

    async def run_informers(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                group.create_task(informer.run(), name=f"informer-{informer.name}")

    async def wait_synced(self) -> None:
        for informer in self.informers:
            if informer is self.plans:
                await informer.answered.wait()
                if self.plans_absent():
                    continue
            await informer.synced.wait()

    @property
    def synced(self) -> bool:
        return all(informer.synced.is_set() or (informer is self.plans and self.plans_absent())
                   for informer in self.informers)

    async def run_workers(self) -> None:
        """Reconcile until cancelled; run only while leading. Starts with every DaemonSet queued."""
        await self.wait_synced()
        self.node_order.settle()  # the listed nodes in hash order now, not in the first reconcile
        # A previous term's expectations are kept: a deletion of ours the cache does not show yet (or one cancelled
        # on its way when leadership was lost, which the server may still carry out) keeps its budget spent when
        # leadership comes back; each entry still ends when the cache shows it done, or at its deadline.
        self.enqueue_all()
        async with asyncio.TaskGroup() as group:
            for index in range(self._workers):
                group.create_task(self._worker(), name=f"worker-{index}")
            group.create_task(self._resync(), name="resync")

    async def _resync(self) -> None:
        """Safety net: reconcile everything now and then even if no event arrived."""
        while True:
            await asyncio.sleep(self._resync_period)
            self.node_order.settle()  # nodes added since, which no ranking by name asked about yet
            self.enqueue_all()

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            started = time.perf_counter()
            try:
                await self.reconcile(key)
            except asyncio.CancelledError:
                self.queue.done(key)
                raise
            except Exception as exc:
                delay = self.queue.add_rate_limited(key)
                self.metrics.reconciles.labels("error").inc()
                self._log.warning("reconcile_failed_will_retry", daemonset=key, error=str(exc),
                                  retry_in=round(delay, 3), failures=self.queue.failures(key))
            else:
                self.queue.forget(key)
                self.metrics.reconciles.labels("ok").inc()
            finally:
                self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
            self.queue.done(key)

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> None:
        ds = self.daemonsets.items.get(key)
        if ds is None or is_terminating(ds):
            self.expectations.forget(key)
            if ds is None:
                await self._plans_without_daemonset(key)
            self.restarts.forget(key)
            return
        selection = select(ds)
        if selection.problem:
            await self._warn_once(ds, ANNOTATION_UPDATE_STRATEGY, selection.value, EVENT_INVALID_UPDATE_STRATEGY,
                                  selection.problem)
            return
        self._clear_warning(ds, ANNOTATION_UPDATE_STRATEGY)
        if selection.strategy is None:
            self.metrics.forget_rollout(namespace_of(ds), name_of(ds))
            self.expectations.forget(key)
            self.restarts.forget(key)
            return
        hash_ = current_hash(ds, self.revisions_of(ds))
        if hash_ is None:
            # The DaemonSet controller has not written (or we have not seen) the revision of the present
            # template yet; its ControllerRevision event will bring us back.
            self._log.debug("current_revision_not_known_yet", daemonset=key)
            return
        owned = self._owned(ds)
        # The plan's Events of this reconcile (WaveStarted ...) are recorded after its deletions or condition
        # patches, so the next wave's first DELETE does not wait for an Event's round trip.
        story: list[tuple[str, str, str]] = []
        try:
            gate = await self._plan_gate(key, ds, owned, hash_, story)
            # A hold moves no pod, but may have a story to tell (an undo, a restore done now).
            if gate is not _HOLD:
                await self._act(key, ds, owned, hash_, gate, selection.strategy, story)
        except asyncio.CancelledError:
            raise
        except BaseException:
            await self._tell(ds, story)
            raise
        await self._tell(ds, story)

    async def _tell(self, ds: JSON, story: list[tuple[str, str, str]]) -> None:
        """Record the plan's Events held back for this reconcile, in order, once: on the RolloutPlan and on the
        DaemonSet (`kubectl describe` of either shows the rollout)."""
        plan = self._story_plans.get(uid_of(ds))
        while story:
            event_type, reason, message = story.pop(0)
            if plan is not None:
                await self.events.emit(_as_plan(plan), event_type, reason, message)
            await self.events.emit(ds, event_type, reason, message)

    async def _act(self, key: str, ds: JSON, owned: OwnerPods, hash_: str, gate: Gate | None, strategy: Strategy,
                   story: list[tuple[str, str, str]]) -> None:
        prepull_errors: list[BaseException] = []
        if self.prepull is not None:
            template = (ds.get("spec") or {}).get("template") or {}
            prepull_errors = await self.prepull.sync(ds, owned.pods, hash_, template, self.nodes.items,
                                                     pending=owned.image_pending)
        if strategy is Strategy.OTA:
            await self._sync_conditions(ds, owned, hash_, gate)
            await self._ota_in_place(key, ds, owned, hash_, gate)
        else:
            await self._roll(key, ds, owned, hash_, gate, story)
        await self._open_gates(key, owned)
        if prepull_errors:
            raise ReconcileError(f"{len(prepull_errors)} pre-pull write(s) failed, first: {prepull_errors[0]}")

    async def _warn_once(self, ds: JSON, topic: str, value: str, reason: str, message: str) -> None:
        seen = self._warned.setdefault(uid_of(ds), {})
        if seen.get(topic) == value:
            return
        seen[topic] = value
        await self.events.emit(ds, EVENT_WARNING, reason, message)

    def _clear_warning(self, ds: JSON, topic: str) -> None:
        seen = self._warned.get(uid_of(ds))
        if seen is not None:
            seen.pop(topic, None)

    async def _bounded(self, calls: list[Callable[[], Awaitable[None]]]) -> list[BaseException]:
        semaphore = asyncio.Semaphore(_WRITE_CONCURRENCY)

        async def run(call: Callable[[], Awaitable[None]]) -> None:
            async with semaphore:
                await call()

        results = await asyncio.gather(*(run(call) for call in calls), return_exceptions=True)
        errors: list[BaseException] = []
        for result in results:
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                errors.append(result)
        return errors

    # ------------------------------------------------------------------ OTA

    async def _sync_conditions(self, ds: JSON, owned: OwnerPods, hash_: str, gate: Gate | None = None) -> None:
        started = time.process_time()
        tracker = owned.tracker(OtaFacts)
        changes, counts = tracker.scan(ds, owned.digests, hash_, self._clock(), gate, skip=owned.unobserved.keys(),
                                       limit=_CONDITION_BURST)
        self.metrics.set_rollout(namespace_of(ds), name_of(ds), counts)
        self.metrics.planning_cpu.inc(time.process_time() - started)

        def patcher(change: ConditionChange) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                pod = change.pod
                path = f"/api/v1/namespaces/{namespace_of(pod)}/pods/{name_of(pod)}/status"
                self.metrics.write("condition_patch")
                try:
                    # Built here, as it is sent, not in the planning pass that listed 50,000 of them.
                    answer = await self._client.patch(path, change.patch)
                except (NotFound, Conflict, Invalid):
                    # Gone, or replaced by a same-named pod (UID guard): nothing to do for this one.
                    self.metrics.condition_patches.labels("gone").inc()
                    return
                except KubeError:
                    self.metrics.condition_patches.labels("error").inc()
                    raise
                except KubeUnreachable:
                    self.metrics.condition_patches.labels("error").inc()
                    raise
                owned.wrote(key_of(pod), pod, str(meta(answer).get("resourceVersion") or ""))
                self.metrics.condition_patches.labels("patched").inc()

            return call

        errors = await self._bounded([patcher(c) for c in changes])
        if changes:
            self._log.info("pod_need_upgrade_updated", daemonset=key_of(ds), revision=hash_,
                           patched=len(changes) - len(errors), failed=len(errors), more=tracker.more)
        if tracker.more:
            self.queue.add(key_of(ds))
        if errors:
            raise ReconcileError(f"{len(errors)} condition patch(es) failed, first: {errors[0]}")

    # ------------------------------------------------------------------ AdvancedRollingUpdate

    async def _roll(self, key: str, ds: JSON, owned: OwnerPods, hash_: str, gate: Gate | None = None,
                    story: list[tuple[str, str, str]] | None = None) -> None:
        settings, problems = roll_settings(ds)
        bad = {p.annotation for p in problems}
        for problem in problems:
            await self._warn_once(ds, problem.annotation, problem.value, EVENT_INVALID_ANNOTATION, problem.message)
        for topic in list(self._warned.get(uid_of(ds), {})):
            if topic != ANNOTATION_UPDATE_STRATEGY and not topic.startswith(_PLAN_TOPIC) and topic not in bad:
                self._clear_warning(ds, topic)
        if problems:
            return
        if gate is not None:
            # The plan counts failures and stops the rollout itself (RolloutAborted), instead of the auto-pause.
            settings = dataclasses.replace(settings, max_failed=None)
        stale = [informer.name for informer in self.informers
                 if not informer.healthy and not (informer is self.plans and self.plans_absent())]
        if stale:
            # A broken watch means a cache that may be missing deletions or readiness changes: deciding
            # deletions on it could exceed the budget. Wait for the informers to recover.
            self._log.info("roll_waits_for_healthy_caches", daemonset=key, unhealthy=stale)
            self.queue.add_after(key, _UNHEALTHY_RETRY)
            return
        started = time.process_time()
        prepull = self.prepull if self.prepull is not None and self.prepull.wanted_by(ds) else None
        # The views by node and the live UIDs, kept current from the pods that changed (roll_views.py).
        tracked = owned.tracker(RollViews)
        views = tracked.views(ds, owned.pods, hash_, self.nodes.items)
        restarting = self.restarts.nodes(key, {uid_of(p): p for p in owned.pods.values()}, hash_)
        plan = plan_step(key, ds, owned.pods.values(), self.nodes.items, hash_, settings, self._clock(),
                         self.expectations,
                         pulled=(lambda pod: prepull.pulled(pod, hash_)) if prepull is not None else None,
                         may_move=gate.allows if gate is not None else None, vacated=owned.vacated_nodes(),
                         views=views, live=tracked.live, restarting=restarting)
        self.metrics.planning_cpu.inc(time.process_time() - started)
        if plan is None:
            self._log.debug("waiting_to_observe_earlier_deletions", daemonset=key,
                            pending=self.expectations.pending(key))
            wait = self.expectations.wait_left(key)
            if wait is not None:  # a delete that did not happen shows no event: look again when we stop waiting
                self.queue.add_after(key, wait + _PLAN_SLACK)
            return
        self.metrics.set_rollout(namespace_of(ds), name_of(ds), {
            "total": plan.total, "updated": plan.updated, "outdated": plan.outdated, "unavailable": plan.unavailable,
        })
        if plan.auto_pause:
            if not self.pause_writes.pending(uid_of(ds), _rv(ds)):
                await self._auto_pause(ds, plan, settings.progress_deadline)
                self.pause_writes.record(uid_of(ds), _rv(ds))
            return
        in_place_failed: ReconcileError | None = None
        if plan.delete and update_type(ds) == UPDATE_TYPE_IN_PLACE_IF_POSSIBLE:
            try:
                await self._in_place(key, ds, plan, hash_)
            except ReconcileError as exc:  # the pods that fall back are deleted all the same (their expectations)
                in_place_failed = exc
        if restarting and plan.requeue_after is None:
            plan.requeue_after = _RESTART_POLL  # a kubelet's report on a pod brings us back; this is the fallback
        if plan.delete:
            await self._delete(key, ds, plan, hash_, story if story is not None else [])
        if in_place_failed is not None:
            raise in_place_failed
        if prepull is not None and plan.pull_wanted:
            errors = await prepull.request(list(owned.pods.values()), plan.pull_wanted, hash_)
            if errors:
                raise ReconcileError(f"{len(errors)} pre-pull request(s) failed, first: {errors[0]}")
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after)

    async def _delete(self, key: str, ds: JSON, plan: Plan, hash_: str, story: list[tuple[str, str, str]]) -> None:
        deleted: list[JSON] = []

        def deleter(pod: JSON) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                uid = uid_of(pod)
                self.metrics.write("pod_delete")
                try:
                    # The plan was made from this version of the pod: if it changed since (its node's agent
                    # published UpgradeHeld, it turned Ready or not), the server refuses (409) and the next
                    # plan sees the change. The UID alone would let a decision made on a stale view through.
                    preconditions = {"uid": uid}
                    rv = (pod.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        preconditions["resourceVersion"] = str(rv)
                    await self._client.delete(
                        f"/api/v1/namespaces/{namespace_of(pod)}/pods/{name_of(pod)}",
                        {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions},
                    )
                except NotFound:
                    self.expectations.deletion_observed(key, uid)
                    self.metrics.pod_deletions.labels("gone").inc()
                    return
                except Conflict:  # a precondition: another pod holds the name, or the pod changed since
                    self.expectations.deletion_failed(key, uid)
                    self.metrics.pod_deletions.labels("replaced").inc()
                    return
                except ServerError:
                    self.expectations.deletion_outcome_unknown(key, uid)
                    self.metrics.pod_deletions.labels("error").inc()
                    raise
                except KubeError:
                    self.expectations.deletion_failed(key, uid)
                    self.metrics.pod_deletions.labels("error").inc()
                    raise
                except KubeUnreachable:
                    # Sent or not, we cannot tell: the expectation stays until the cache shows the pod.
                    self.expectations.deletion_outcome_unknown(key, uid)
                    self.metrics.pod_deletions.labels("error").inc()
                    raise
                except asyncio.CancelledError:
                    # Leadership lost (or shutdown) with the request on its way: the server may still carry it out.
                    self.expectations.deletion_outcome_unknown(key, uid)
                    raise
                except BaseException:
                    self.expectations.deletion_failed(key, uid)
                    raise
                self.metrics.pod_deletions.labels("deleted").inc()
                deleted.append(pod)

            return call

        errors = await self._bounded([deleter(pod) for pod in plan.delete])
        await self._tell(ds, story)  # the plan's Events (WaveStarted) before the deletion batch's own
        if deleted:
            await self.events.emit(ds, EVENT_NORMAL, EVENT_UPGRADING_PODS,
                                   _batch_message(hash_, plan, "deleted", deleted))
        if errors:
            raise ReconcileError(f"{len(errors)} pod deletion(s) failed, first: {errors[0]}")

    async def _in_place(self, key: str, ds: JSON, plan: Plan, hash_: str) -> None:
        """Carry out the plan's moves in place where the revision allows (controller/inplace_exec.py); the rest
        stay in `plan.delete`, each with an Event saying why it is not in place."""
        choices = choose(plan.delete, hash_, lambda revision: self._template_of(ds, revision))
        plan.delete = [c.pod for c in choices if c.patch is None]
        for choice in choices:
            if choice.fallback is not None:
                # On the pod (the cache's pods carry no kind: the recorder would name a DaemonSet, which
                # `kubectl describe pod` does not list).
                await self.events.emit({**choice.pod, "apiVersion": "v1", "kind": "Pod"}, EVENT_WARNING,
                                       EVENT_IN_PLACE_FALLBACK,
                                       f"cannot upgrade in place to revision {hash_}: {choice.fallback}; "
                                       "recreating the pod")
        patched: list[JSON] = []

        def patcher(choice: Choice) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                if await self._patch_in_place(key, choice, hash_):
                    patched.append(choice.pod)

            return call

        errors = await self._bounded([patcher(c) for c in choices if c.patch is not None])
        if patched:
            await self.events.emit(ds, EVENT_NORMAL, EVENT_UPGRADING_PODS,
                                   _batch_message(hash_, plan, "patched", patched, " in place"))
        if errors:
            raise ReconcileError(f"{len(errors)} in-place patch(es) failed, first: {errors[0]}")

    async def _patch_in_place(self, key: str, choice: Choice, hash_: str, *, hold_counts: bool = True) -> bool:
        """Gate False (if declared), then the guarded image PATCH. Not a deletion: the expectation the plan
        recorded for the pod is dropped, and the node waits in `restarts` for the kubelet's new containers.
        `hold_counts=False`: a node's own OTA request, which acts hold or not (`still_movable`)."""
        pod, patch = choice.pod, choice.patch
        assert patch is not None
        uid = uid_of(pod)
        path = f"/api/v1/namespaces/{namespace_of(pod)}/pods/{name_of(pod)}"
        body = patch.body()
        before = container_ids(pod, patch.images())
        self.expectations.deletion_failed(key, uid)
        gated = False
        try:
            if declares_gate(pod):
                self.metrics.write("condition_patch")
                answer = await self._client.patch(f"{path}/status", gate_patch(
                    pod, "False", REASON_UPDATING, f"upgrading in place to revision {hash_}"))
                gated = True
                # Our own write moved the resourceVersion; the PATCH is guarded by the version it produced.
                body["metadata"]["resourceVersion"] = _rv(answer)
            for attempt in range(1, _IN_PLACE_ATTEMPTS + 1):
                self.metrics.write("pod_patch")
                try:
                    await self._client.patch(path, body)
                    break
                except Conflict:
                    if not gated or attempt == _IN_PLACE_ATTEMPTS:
                        raise
                fresh = await self._client.get(path)  # the kubelet answered our gate: read again, check again
                if not still_movable(fresh, pod, hold_counts=hold_counts):
                    raise Conflict(409, message=f"pod {name_of(pod)} changed since it was planned")
                body["metadata"]["resourceVersion"] = _rv(fresh)
        except (NotFound, Conflict, Invalid):
            self.metrics.pod_deletions.labels("replaced").inc()  # changed or replaced since planned
            if gated:
                await self._reopen_gate(pod)
            return False
        except (KubeError, KubeUnreachable):
            # Sent or not, we cannot tell: wait for the kubelet's report (or the memory's shorter time for an
            # unconfirmed PATCH) before more.
            self.restarts.record(key, node_of(pod), uid, hash_, before, confirmed=False)
            raise
        self.restarts.record(key, node_of(pod), uid, hash_, before)
        return True

    async def _ota_in_place(self, key: str, ds: JSON, owned: OwnerPods, hash_: str, gate: Gate | None) -> None:
        """OTA in place: execute the in-place requests the DaemonSet's nodes recorded on their own pods' status.

        The agent may not patch a pod's spec; it records the node's request (`contract`
        `CONDITION_IN_PLACE_UPGRADE_REQUESTED`) and this controller carries it out with the PATCH an
        AdvancedRollingUpdate in place makes (`_patch_in_place`: UID and resourceVersion preconditions, the readiness
        gate), after `inplace_exec.ota_request` re-checked it. A revision that is not image-only (`inplace.decide`),
        or a DaemonSet no longer `InPlaceIfPossible`, is recreated instead, as the node's OTA request would have
        done: the guarded delete, and the `InPlaceUpdateFallback` Event saying why. A done request is answered
        (`False`/`Executed`), so it is never carried out twice."""
        asks = self._in_place_asks.get(uid_of(ds))
        if not asks:
            return
        pods = owned.pods
        self.restarts.nodes(key, {uid_of(p): p for p in pods.values()})  # forget the restarts that are done
        may_move = gate.allows if gate is not None else None
        errors: list[BaseException] = []
        for pod_key in sorted(asks):
            pod = pods.get(pod_key)
            if pod is None:
                continue
            verdict = ota_request(pod, hash_, may_move, self.restarts.restarting(key, uid_of(pod)) is not None)
            if verdict is None:
                continue
            try:
                if verdict.action == ANSWER:
                    await self._answer_request(pod, str(in_place_requested(pod)))
                elif verdict.action == EXECUTE:
                    await self._execute_request(key, ds, pod, hash_)
                else:
                    self._log.debug("in_place_request_waits", pod=pod_key, why=verdict.why)
            except (KubeError, KubeUnreachable) as exc:
                errors.append(exc)
        if errors:
            raise ReconcileError(f"{len(errors)} in-place request(s) failed, first: {errors[0]}")

    async def _execute_request(self, key: str, ds: JSON, pod: JSON, hash_: str) -> None:
        try:
            in_place = update_type(ds) == UPDATE_TYPE_IN_PLACE_IF_POSSIBLE
        except ValueError as exc:
            in_place, why = False, str(exc)
        else:
            why = f"the DaemonSet's {ANNOTATION_UPDATE_TYPE} is no longer {UPDATE_TYPE_IN_PLACE_IF_POSSIBLE}"
        choice = (choose([pod], hash_, lambda revision: self._template_of(ds, revision))[0] if in_place
                  else Choice(pod, None, why))
        if choice.patch is not None:
            if await self._patch_in_place(key, choice, hash_, hold_counts=False):
                self._log.info("in_place_request_executed", pod=key_of(pod), revision=hash_)
                await self.events.emit(ds, EVENT_NORMAL, EVENT_UPGRADING_PODS,
                                       f"OTA to revision {hash_}: patched pod {name_of(pod)} in place on the request "
                                       f"of its node {node_of(pod)}")
            return
        await self.events.emit(pod, EVENT_WARNING, EVENT_IN_PLACE_FALLBACK,
                               f"cannot upgrade in place to revision {hash_}: {choice.fallback}; recreating the pod")
        path = f"/api/v1/namespaces/{namespace_of(pod)}/pods/{name_of(pod)}"
        self.metrics.write("pod_delete")
        try:
            # As the agent's guarded delete: this pod, as this controller saw it, or nothing.
            await self._client.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                             "preconditions": {"uid": uid_of(pod), "resourceVersion": _rv(pod)}})
        except (NotFound, Conflict):
            # Gone, or changed since: decided again on the next view.
            self.metrics.pod_deletions.labels("replaced").inc()
            return
        self.metrics.pod_deletions.labels("deleted").inc()
        self._log.info("in_place_request_recreated", pod=key_of(pod), revision=hash_, why=choice.fallback)

    async def _answer_request(self, pod: JSON, revision: str) -> None:
        path = f"/api/v1/namespaces/{namespace_of(pod)}/pods/{name_of(pod)}/status"
        self.metrics.write("condition_patch")
        try:
            await self._client.patch(path, request_answer(pod, revision))
        except (NotFound, Conflict, Invalid):
            return  # gone, or changed since: the next view decides again
        self._log.info("in_place_request_answered", pod=key_of(pod), revision=revision)

    async def _reopen_gate(self, pod: JSON) -> None:
        """The PATCH did not happen: the gate we closed must not keep a running pod out of Services."""
        path = f"/api/v1/namespaces/{namespace_of(pod)}/pods/{name_of(pod)}/status"
        self.metrics.write("condition_patch")
        try:
            await self._client.patch(path, gate_patch(pod, "True", REASON_UPDATED, "in-place upgrade not started"))
        except (KubeError, KubeUnreachable) as exc:  # the next reconcile's _open_gates tries again
            self._log.warning("readiness_gate_reopen_failed", pod=key_of(pod), error=str(exc))

    async def _open_gates(self, key: str, owned: OwnerPods) -> None:
        """Set `edgeagent.io/InPlaceUpdateReady` True on pods whose containers run (new pods, finished restarts)."""
        # Only the pods that declare the gate (`OwnerPods.gated`), not a read of every pod's spec in every pass.
        pods = gate_updates((owned.pods[k] for k in owned.gated), self.restarts, key, self.gate_writes)

        def opener(pod: JSON) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                path = f"/api/v1/namespaces/{namespace_of(pod)}/pods/{name_of(pod)}/status"
                self.metrics.write("condition_patch")
                try:
                    await self._client.patch(path, gate_patch(pod, "True", REASON_UPDATED, ""))
                except (NotFound, Conflict, Invalid):
                    return
                self.gate_writes.record(uid_of(pod), _rv(pod))

            return call

        errors = await self._bounded([opener(p) for p in pods[:_CONDITION_BURST]])
        if errors:
            raise ReconcileError(f"{len(errors)} readiness gate write(s) failed, first: {errors[0]}")

    async def _auto_pause(self, ds: JSON, plan: Plan, deadline: float) -> None:
        # Guarded by the UID: never pause a same-named successor.
        patch = {"metadata": {"uid": uid_of(ds), "annotations": {ANNOTATION_PAUSED: "true"}}}
        path = f"/apis/apps/v1/namespaces/{namespace_of(ds)}/daemonsets/{name_of(ds)}"
        self.metrics.write("daemonset_patch")
        await self._client.patch(path, patch, CONTENT_MERGE_PATCH)
        self.metrics.auto_pauses.inc()
        message = (
            f"{len(plan.failed)} pod(s) of the new version not available within {deadline:g}s "
            f"({', '.join(plan.failed[:_NAMES_IN_EVENT])}), max-failed is {plan.max_failed}: roll paused "
            f"({ANNOTATION_PAUSED}=true). Fix the version, then remove the annotation to resume."
        )
        await self.events.emit(ds, EVENT_WARNING, EVENT_ROLLOUT_AUTO_PAUSED, message)
        self._log.warning("roll_paused_automatically", daemonset=key_of(ds), failed=plan.failed,
                          resource_version=meta(ds).get("resourceVersion"))

    # ------------------------------------------------------------------ rollout plans

    def _plan_of(self, key: str) -> tuple[JSON | None, list[JSON]]:
        """The RolloutPlan that rolls the DaemonSet `key` (`spec.daemonSet` in its namespace), and the other plans
        naming it (rivals: each moves nothing and says so). The oldest plan wins, by creation and then by name, so
        every controller and every restart picks the same one."""
        found = [self.plans.items[k] for k in self._plans_by_ds.get(key, ()) if k in self.plans.items]
        if not found or self.plans_absent():
            return None, []
        found.sort(key=lambda p: (str(meta(p).get("creationTimestamp") or ""), name_of(p)))
        return found[0], found[1:]

    async def _plans_without_daemonset(self, key: str) -> None:
        """Plans naming a DaemonSet that does not exist: a condition saying so, nothing moved."""
        plan, rivals = self._plan_of(key)
        for item in ([plan] if plan is not None else []) + rivals:
            await self._plan_problem(item, REASON_DAEMONSET_NOT_FOUND,
                                     f"DaemonSet {key} does not exist: this plan moves nothing until it does")

    async def _plan_problem(self, plan: JSON, reason: str, message: str) -> None:
        """A condition `Accepted=False` on a plan that moves nothing (its DaemonSet missing, another plan rolling
        it, an invalid spec), written once: the status is otherwise left as it stands."""
        status = dict(plan.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        current = next((c for c in conditions if c.get("type") == CONDITION_ACCEPTED), None)
        if (current is not None and current.get("status") == "False" and current.get("reason") == reason
                and current.get("message") == message):
            return
        if self.plan_writes.pending(uid_of(plan), _rv(plan)):
            return
        condition = {"type": CONDITION_ACCEPTED, "status": "False", "reason": reason, "message": message,
                     "lastTransitionTime": format_time(self._clock())}
        status["conditions"] = [*(c for c in conditions if c.get("type") != CONDITION_ACCEPTED), condition]
        if await self._put_plan_status(plan, status):
            await self.events.emit(_as_plan(plan), EVENT_WARNING, reason, message)

    async def _put_plan_status(self, plan: JSON, status: JSON) -> bool:
        """One write of the plan's `status` subresource, with the plan's resourceVersion as precondition (a PUT
        carries it): a plan changed since our cache saw it (a steering request, another writer) is refused with
        409 and nothing is moved until the next reconcile has re-read it."""
        path = f"{PLANS_PATH_PREFIX}/namespaces/{namespace_of(plan)}/rolloutplans/{name_of(plan)}/status"
        body = {**_as_plan(plan), "status": status}  # a list's items carry no kind, which a PUT needs
        self.metrics.write(WRITE_PLAN_STATUS)
        try:
            await self._client.replace(path, body)
        except (NotFound, Conflict, Invalid) as exc:
            self._log.debug("plan_status_not_written_cache_behind", plan=key_of(plan), code=exc.code)
            return False
        self.plan_writes.record(uid_of(plan), _rv(plan))
        return True

    async def _warn_round3(self, ds: JSON) -> None:
        """A DaemonSet still carrying a round-3 plan annotation: one Warning Event (per UID and controller run),
        naming what replaces it. The annotations are never read."""
        carried = sorted(a for a in annotations_of(ds) if a in ROUND3_ANNOTATIONS)
        if not carried:
            return
        await self._warn_once(ds, _PLAN_ROUND3, "", EVENT_ROLLOUT_ANNOTATIONS_IGNORED,
                              f"annotation(s) {', '.join(carried)} are no longer read: a rollout plan is a RolloutPlan "
                              f"object (edgeagent.io/v1alpha1) naming this DaemonSet in spec.daemonSet; see "
                              "`kubectl explain rolloutplan`")

    async def _plan_gate(self, key: str, ds: JSON, owned: OwnerPods, hash_: str,
                         story: list[tuple[str, str, str]]) -> Gate | None:
        """Moves the DaemonSet's RolloutPlan on (its status, Events, rollback) and says which pods may move now;
        None when no plan names the DaemonSet (rolled as before); `_HOLD` when nothing may be changed in this
        reconcile (the status could not be written, or the plan is unusable)."""
        uid = uid_of(ds)
        await self._warn_round3(ds)
        plan_obj, rivals = self._plan_of(key)
        if plan_obj is None:
            self.metrics.forget_plan(namespace_of(ds), name_of(ds))
            self.ranks.forget(uid)
            self._plan_gates.pop(uid, None)
            self._story_plans.pop(uid, None)
            return None
        for rival in rivals:
            await self._plan_problem(rival, REASON_DUPLICATE_PLAN,
                                     f"DaemonSet {key} is rolled by RolloutPlan {name_of(plan_obj)} already: this "
                                     "plan moves nothing while that one names it")
        self._story_plans[uid] = plan_obj
        spec, errors = parse_spec(plan_obj.get("spec"))
        if spec is None:
            await self._plan_problem(plan_obj, REASON_INVALID_SPEC, "; ".join(str(e) for e in errors))
            return _HOLD
        plan = spec.plan(canary_of(ds))
        plan_uid = uid_of(plan_obj)
        if self.plan_writes.pending(plan_uid, _rv(plan_obj)):
            # Our last status write is not in the cache yet: deciding again on the old status would repeat it.
            return self._plan_gates.get(uid, _HOLD)
        started = time.process_time()
        status = plan_obj.get("status") or {}
        state, unreadable = state_from_status(status) if "phase" in status else (None, None)
        if unreadable:
            await self._warn_once(ds, _PLAN_TOPIC + "state", json.dumps(status, sort_keys=True),
                                  EVENT_ROLLOUT_PLAN_INVALID,
                                  f"RolloutPlan {name_of(plan_obj)}: {unreadable}; the rollout of the current "
                                  "revision starts again from wave 1")
        # The DaemonSet generation the status is decided for (`status.observedGeneration`): the agent's plan check
        # refuses a plan pod's upgrade while it is not the DaemonSet's (a template change not planned yet).
        generation = _generation(ds)
        if pending_generation(state) is not None:
            return await self._finish_restore(key, ds, plan_obj, state, hash_, generation, story)
        request, bad_request = steer_request(plan_obj)
        if request is None and bad_request is not None:
            # Not a request at all (no id to record it under): said once, and the rollout goes on.
            await self._warn_once(ds, _PLAN_TOPIC + "steer", str(annotations_of(plan_obj).get(ANNOTATION_STEER)),
                                  EVENT_ROLLOUT_PLAN_INVALID,
                                  f"RolloutPlan {name_of(plan_obj)}: {bad_request}; the request is ignored")
        elif request is not None and bad_request is None and request.verb == VERB_UNDO:
            return await self._undo(key, ds, plan_obj, state, hash_, request, story)
        elif request is not None and (bad_request is not None or _retry_ignored(request, state, hash_)):
            # Nothing to act on: recorded Ignored (its own status write), nothing moves in this reconcile.
            why = bad_request or (f"retry of revision {request.revision} ignored: the rollout is neither Aborted "
                                  "nor held on it")
            ignored = steer_record(request, RESULT_IGNORED, why, self._clock())
            if not await self._write_status(plan_obj, ds, state, ignored, story, []):
                self.queue.add_after(key, _PLAN_CONFLICT_RETRY)
            return _HOLD
        if request is not None and bad_request is not None:
            request = None
        steering = _steering(spec.paused, request)
        settled = settled_gate(state, hash_, steering)
        if settled is not None:
            # Complete, stopped, or a revision rolled back from: nothing to observe, no O(nodes) work.
            self.metrics.planning_cpu.inc(time.process_time() - started)
            if state is not None and state.generation != generation:
                # The DaemonSet's spec changed without a new revision (or a rollback restored the template): only
                # the generation is new, written so that agents see the status is current again; nothing restarts.
                caught_up = dataclasses.replace(state, generation=generation)
                if not await self._write_status(plan_obj, ds, caught_up, None, story, []):
                    self.queue.add_after(key, _PLAN_CONFLICT_RETRY)
                    return _HOLD
            if state is not None:
                self.metrics.set_plan(namespace_of(ds), name_of(ds), state.wave, state.waves, state.phase)
            self._plan_gates[uid] = settled
            return settled
        settings, _ = roll_settings(ds)
        now = self._clock()
        tracked = owned.tracker(NodePods)
        by_node = tracked.update(ds, owned.digests, hash_)
        obs = observe(ds, (), self.nodes.items, hash_, float(spec.progress_deadline_seconds), now,
                      settings.min_ready_seconds, by_node=by_node, not_ready=self._not_ready_nodes)
        in_flight = self.expectations.in_flight(key)
        joined = tracked.take_joined()

        def names() -> tuple[AbstractSet[str], ...]:
            return obs.pods.new.keys(), obs.pods.old.keys(), in_flight, tracked.dying()

        ranking = self.ranks.get_joined(uid, hash_, plan, None if joined is None else joined | set(in_flight),
                                        names, self.nodes.items)
        missing = desired_nodes(ds) - len(ranking.order)
        if missing > 0:
            # Fewer nodes than the DaemonSet controller says should run a pod: some are between two pods (old one
            # gone, new one not created yet) and this ranking -- a fresh one, after a restart, a change of leader
            # or a new revision -- has never seen them. Each later node would sit one place earlier, possibly in a
            # wave not reached yet: move nothing until their pods are back (their events bring us here again).
            self.metrics.planning_cpu.inc(time.process_time() - started)
            self._log.debug("rollout_plan_waits_for_nodes_between_pods", daemonset=key, missing=missing)
            self.queue.add_after(key, _PLAN_MISSING_RETRY)
            return _HOLD
        total = len(ranking.order)
        decision = decide(plan=plan, state=state, revision=hash_, ranking=ranking, obs=obs, steering=steering,
                          max_failed=spec.max_failed.of(total), now=now,
                          previous=lambda: previous_revision(owned.pods.values(), hash_),
                          images=lambda revision: self._images_of(ds, revision))
        self.metrics.planning_cpu.inc(time.process_time() - started)
        if decision.state is not None:
            decision.state = dataclasses.replace(decision.state, generation=generation)
        elif state is not None and state.generation != generation:
            decision.state = dataclasses.replace(state, generation=generation)
        handled = _steer_outcome(request, decision, state, hash_, now)
        if handled is not None and decision.state is None:
            decision.state = state
        # decide -> write -> act: a decision whose write is refused moves nothing (`outcome`).
        if (decision.writes or handled is not None) and not await self._write_status(
                plan_obj, ds, decision.state, handled, story, decision.events, decision):
            # Our cache was behind: decide again on fresh data shortly, and move nothing meanwhile.
            self.queue.add_after(key, _PLAN_CONFLICT_RETRY)
            return _HOLD
        shown = decision.state or state
        if shown is not None:
            self.metrics.set_plan(namespace_of(ds), name_of(ds), shown.wave, shown.waves, shown.phase)
        if decision.requeue_after is not None:
            self.queue.add_after(key, max(0.0, decision.requeue_after) + _PLAN_SLACK)
        self._plan_gates[uid] = decision.gate
        return decision.gate

    async def _write_status(self, plan: JSON, ds: JSON, state: RolloutState | None, record: JSON | None,
                            story: list[tuple[str, str, str]], events: list[tuple[str, str, str]],
                            decision: Decision | None = None) -> bool:
        """One status write per transition (never per node), the steering request it handled in the same write.
        Events only after the write succeeded: added to `story`, which the reconcile records (on the plan and the
        DaemonSet) after its deletions or condition patches. A rollback's template restore follows the write."""
        status: JSON = state.to_status() if state is not None else dict(plan.get("status") or {})
        status["conditions"] = [c for c in status.get("conditions") or []
                                if not (isinstance(c, dict) and c.get("type") == CONDITION_ACCEPTED)]
        previous = (plan.get("status") or {}).get("steer")
        if record is not None:
            status["steer"] = record
        elif isinstance(previous, dict):
            status["steer"] = previous
        restore: JSON | None = None
        events = list(events)
        if decision is not None and decision.rollback and state is not None:
            restore = self._template_of(ds, state.stable_revision)
            if restore is None:
                # Nothing to restore: stop, and say why the rollback did not happen.
                state = dataclasses.replace(state, phase=PHASE_ABORTED)
                status = {**status, **{"phase": state.to_status()["phase"]}}
                events = [(t, r, f"{m}; cannot roll back: no ControllerRevision of a completed revision "
                                 f"({state.stable_revision or 'none known'}) to restore") for t, r, m in events]
            else:
                # The restore follows this write: pending in it until the DaemonSet shows it done (rollout.restore).
                status["conditions"] = [*status["conditions"], condition_json(pending_condition(state, self._clock()))]
        if not await self._put_plan_status(plan, status):
            return False
        if decision is not None and decision.aborted:
            self.metrics.rollout_aborts.labels(namespace_of(ds), name_of(ds)).inc()
        story.extend(events)  # told even when the restore below fails: the status says it all already
        if restore is not None and state is not None:
            story.extend(await self._restore(ds, restore, state.stable_revision, state.revision))
        if state is not None:
            self._log.info("rollout_status_written", plan=key_of(plan), revision=state.revision,
                           wave=f"{state.wave}/{state.waves}", phase=state.phase)
        return True

    async def _finish_restore(self, key: str, ds: JSON, plan: JSON, state: RolloutState | None, hash_: str,
                              generation: int | None, story: list[tuple[str, str, str]]) -> Gate:
        """A rollback's status is written and its template restore still pending (`rollout.restore`): the restore
        again while the DaemonSet is at the generation it was decided for, else the outcome written. Nothing else
        moves meanwhile (steering waits its turn)."""
        settled: Settled | None
        if state is not None and restore_due(state, hash_, generation):
            template = self._template_of(ds, state.stable_revision)
            if template is not None:
                self._log.warning("rollback_restore_resumed", daemonset=key, bad=hash_, restored=state.stable_revision)
                story.extend(await self._restore(ds, template, state.stable_revision, hash_))
                return _HOLD
            settled = abandon(state, "no ControllerRevision of it is left")
        else:
            settled = settle(state, hash_, generation)
        if settled is None:
            return _HOLD
        events = [(EVENT_WARNING, EVENT_ROLLOUT_ROLLED_BACK, settled.warning)] if settled.warning else []
        if not await self._write_status(plan, ds, dataclasses.replace(settled.state, generation=generation), None,
                                        story, events):
            self.queue.add_after(key, _PLAN_CONFLICT_RETRY)
        return _HOLD

    async def _restore(self, ds: JSON, template: JSON, restored: str | None, bad: str) -> list[tuple[str, str, str]]:
        """The one write onto the DaemonSet: its template back to a completed revision's (as `kubectl rollout undo`
        does). The template it replaces must still be in place (an operator's edit wins), and the UID too."""
        path = f"/apis/apps/v1/namespaces/{namespace_of(ds)}/daemonsets/{name_of(ds)}"
        ops: list[JSON] = [
            {"op": "test", "path": "/metadata/uid", "value": uid_of(ds)},
            {"op": "test", "path": "/spec/template", "value": (ds.get("spec") or {}).get("template")},
            {"op": "replace", "path": "/spec/template", "value": template},
        ]
        self.metrics.write("daemonset_patch")
        try:
            await self._client.patch(path, ops, CONTENT_JSON_PATCH)
        except (NotFound, Conflict, Invalid) as exc:
            # Said once the DaemonSet as it is now reaches the cache (`rollout.restore.settle`): the template may
            # be a person's edit, or our own restore whose answer was lost.
            self._log.warning("template_not_restored", daemonset=key_of(ds), code=exc.code)
            return []
        self.metrics.rollout_rollbacks.labels(namespace_of(ds), name_of(ds)).inc()
        self._log.warning("rolled_back", daemonset=key_of(ds), bad=bad, restored=restored)
        return [(EVENT_WARNING, EVENT_ROLLOUT_ROLLED_BACK,
                 f"template restored from {self._shown(ds, bad)} to {self._shown(ds, restored)}, the last completed "
                 f"one; revision {bad} is marked RolledBack in the plan's history and is not rolled again "
                 "automatically")]

    async def _undo(self, key: str, ds: JSON, plan: JSON, state: RolloutState | None, hash_: str,
                    request: SteerRequest, story: list[tuple[str, str, str]]) -> Gate:
        """`rollout undo [--to-revision R]`: the template back to a Complete revision of the history (the stable
        one by default), the current one marked RolledBack. Nothing else moves in this reconcile."""
        now = self._clock()
        found = undo(state, hash_, request.to_revision, now)
        template = self._template_of(ds, found.stable_revision) if not isinstance(found, str) else None
        if isinstance(found, str) or template is None:
            why = found if isinstance(found, str) else f"no ControllerRevision of {request.to_revision} to restore"
            record = steer_record(request, RESULT_IGNORED, why, now)
            if not await self._write_status(plan, ds, state, record, story, []):
                self.queue.add_after(key, _PLAN_CONFLICT_RETRY)
            return _HOLD
        found = mark_pending(dataclasses.replace(found, generation=_generation(ds)), now)
        record = steer_record(request, RESULT_DONE, f"template restored to revision {found.stable_revision}", now)
        if not await self._write_status(plan, ds, found, record, story, []):
            self.queue.add_after(key, _PLAN_CONFLICT_RETRY)
            return _HOLD
        story.extend(await self._restore(ds, template, found.stable_revision, hash_))
        return _HOLD

    def _images_of(self, ds: JSON, revision: str) -> list[str]:
        """The images of a revision's pod template (Events and the plan's history name them)."""
        template = self._template_of(ds, revision) or {}
        spec = template.get("spec") or {}
        return [str(c.get("image")) for c in (spec.get("containers") or []) if isinstance(c, dict) and c.get("image")]

    def _shown(self, ds: JSON, revision: str | None) -> str:
        images = self._images_of(ds, revision) if revision else []
        return f"revision {revision or 'none'}" + (f" ({', '.join(images)})" if images else "")

    def _template_of(self, ds: JSON, revision: str | None) -> JSON | None:
        """The pod template stored in the DaemonSet's ControllerRevision with that hash (`kubectl rollout undo`)."""
        if not revision:
            return None
        for rev in self.revisions_of(ds):
            if revision_hash(ds, rev) != revision:
                continue
            template = ((rev.get("data") or {}).get("spec") or {}).get("template")
            if isinstance(template, dict):
                return {k: v for k, v in template.items() if k != "$patch"}
        return None


def _generation(ds: JSON) -> int | None:
    """The DaemonSet's `metadata.generation` (bumped by the API server on every spec change)."""
    value = meta(ds).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_plan(plan: JSON) -> JSON:
    """The plan with its kind (a list's items carry none): what an Event's involvedObject names."""
    return {**plan, "apiVersion": PLANS_PATH_PREFIX.removeprefix("/apis/"), "kind": "RolloutPlan"}


def _plan_target(plan: JSON) -> str | None:
    """`namespace/name` of the DaemonSet a RolloutPlan names."""
    name = (plan.get("spec") or {}).get("daemonSet")
    return f"{namespace_of(plan)}/{name}" if isinstance(name, str) and name else None


def _steering(paused: bool, request: SteerRequest | None) -> Steering:
    """The state machine's steering from the plan: `spec.paused` and the pending request (promote names the
    revision and wave the operator saw: `revision/wave`)."""
    if request is None:
        return Steering(paused=paused)
    if request.verb == VERB_PROMOTE:
        return Steering(paused=paused, promote=f"{request.revision}/{request.wave}")
    if request.verb == VERB_ABORT:
        return Steering(paused=paused, abort=request.revision)
    if request.verb == VERB_RETRY:
        return Steering(paused=paused, retry=request.revision)
    return Steering(paused=paused)


def _retry_ignored(request: SteerRequest, state: RolloutState | None, revision: str) -> bool:
    """A retry moves something only for the revision being rolled, Aborted, or a rolled-back one set again."""
    if request.verb != VERB_RETRY:
        return False
    if state is None or request.revision != revision:
        return True
    if state.revision == revision and state.phase == PHASE_ABORTED:
        return False
    return not rolled_back(state.history, revision)


def _steer_outcome(request: SteerRequest | None, decision: Decision, state: RolloutState | None, revision: str,
                   now: float) -> JSON | None:
    """`status.steer` once the request is handled (in the decision's write), or None while it waits (a promote
    of a wave still running takes effect when the wave finishes)."""
    if request is None:
        return None
    new = decision.state
    if request.verb == VERB_PROMOTE:
        if STEER_PROMOTE not in decision.remove:
            return None
        moved = new is not None and state is not None and (new.wave != state.wave or new.phase == PHASE_COMPLETE)
        if moved:
            return steer_record(request, RESULT_DONE, f"wave {request.wave} promoted", now)
        return steer_record(request, RESULT_IGNORED,
                            f"nothing to promote at wave {request.wave} of revision {request.revision}", now)
    if request.verb == VERB_ABORT:
        if decision.aborted:
            return steer_record(request, RESULT_DONE, f"rollout of revision {revision} aborted", now)
        return steer_record(request, RESULT_IGNORED, f"revision {request.revision} is not rolling", now)
    if request.verb == VERB_RETRY:
        return steer_record(request, RESULT_DONE, f"revision {revision} rolled again from the wave it stopped in",
                            now)
    return None


__all__ = ["Controller", "ReconcileError"]
