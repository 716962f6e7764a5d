"""batch/v1 Jobs in the sim: the Job controller (one pod at a time, backoffLimit, activeDeadlineSeconds, the
real conditions) plus the scheduling a Job's pod needs (nodeName, nodeSelector, node affinity, taints).

The image pre-pull controller runs its pulls as Jobs, so the sim must finish them the way a cluster does:
a pod that cannot pull its image stays Pending (the Job does not count it failed) until the Job's deadline
ends it with `DeadlineExceeded`; a pod that fails is replaced, with back-off, until `BackoffLimitExceeded`.
Only non-indexed Jobs with `completions` and `parallelism` of at most 1 are run (all this project creates);
others are stored and get a `Failed` condition saying so, rather than being run wrongly.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from edgeagent import log
from edgeagent.kube.objects import controller_owner, is_terminating, meta, name_of, namespace_of, uid_of
from edgeagent.sim.daemonsets import fits_node, tolerates
from edgeagent.sim.errors import ApiError
from edgeagent.sim.images import backoff_delay
from edgeagent.sim.job_defaults import DEFAULT_BACKOFF_LIMIT
from edgeagent.sim.resources import JOBS, NODES, PODS
from edgeagent.sim.store import Store, Subscription, WatchEvent

JSON = dict[str, Any]
Key = tuple[str, str]
MERGE = "application/merge-patch+json"

# The Job controller's pod-failure back-off (pkg/controller/job: 10 s doubling, at most 6 min).
POD_FAILURE_BACKOFF_MAX = 360.0

_log = log.get("edgeagent.sim.jobs")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: Any) -> float | None:
    if not value:
        return None
    try:
        return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def untolerated_taints(spec: JSON, node: JSON) -> list[JSON]:
    tolerations = spec.get("tolerations") or []
    return [t for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(x, t) for x in tolerations)]


def schedulable_on(spec: JSON, node: JSON) -> bool:
    """What the scheduler checks for a Job's pod: placement rules and taints (not resources)."""
    return fits_node(spec, node) and not untolerated_taints(spec, node) and not (node.get("spec") or {}).get(
        "unschedulable")


def _finished(job: JSON) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    return None


def _condition(cond_type: str, reason: str = "", message: str = "") -> JSON:
    now = _now()
    cond: JSON = {"type": cond_type, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


class JobController:
    """Event-driven like the real one: Job, pod and node events queue the Job keys they concern."""

    def __init__(self, store: Store, *, pod_backoff: float = 10.0) -> None:
        self.store = store
        self.pod_backoff = pod_backoff
        self._queue: OrderedDict[Key, None] = OrderedDict()
        self._wakeup = asyncio.Event()
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._events: Subscription | None = None

    async def run(self) -> None:
        self._events = self.store.open_subscription([JOBS, PODS, NODES], copy=False)
        try:
            for stored in self.store.list_page(JOBS).items:
                self.enqueue((namespace_of(stored.obj), name_of(stored.obj)))
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._watch(self._events))
                tg.create_task(self._work())
        finally:
            self._events.close()
            self._events = None
            for handle in self._timers.values():
                handle.cancel()
            self._timers.clear()

    def enqueue(self, key: Key) -> None:
        self._queue[key] = None
        self._wakeup.set()

    def enqueue_after(self, key: Key, delay: float) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self.enqueue(key)

        self._timers[key] = asyncio.get_running_loop().call_later(max(0.0, delay), fire)

    async def _watch(self, events: Subscription) -> None:
        async for event in events:
            self._on_event(event)

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        if event.resource is JOBS:
            if event.type != "DELETED":
                self.enqueue((namespace_of(obj), name_of(obj)))
        elif event.resource is PODS:
            ref = controller_owner(obj)
            if ref is not None and ref.get("kind") == "Job":
                self.enqueue((namespace_of(obj), str(ref.get("name"))))
        elif event.type != "DELETED":  # a node changed: Job pods waiting for a node may fit now
            for stored in self.store.list_page(JOBS).items:
                job = stored.obj
                if not _finished(job) and (job.get("status") or {}).get("active"):
                    self.enqueue((namespace_of(job), name_of(job)))

    async def _work(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                key, _ = self._queue.popitem(last=False)
                try:
                    self.sync(*key)
                except ApiError as exc:  # a write lost a race: the event it caused brings us back
                    _log.debug("job_sync_failed", job=f"{key[0]}/{key[1]}", error=str(exc))
                await asyncio.sleep(0)

    # One Job ----------------------------------------------------------------------------------------

    def _pods(self, job: JSON) -> list[JSON]:
        uid = uid_of(job)
        items = self.store.list_page(PODS, namespace_of(job)).items
        return [s.obj for s in items if (controller_owner(s.obj) or {}).get("uid") == uid]

    def sync(self, namespace: str, name: str) -> None:
        try:
            job = self.store.entry(JOBS, namespace, name).obj
        except ApiError:
            return
        if is_terminating(job):
            return
        pods = self._pods(job)
        spec = job.get("spec") or {}
        status = dict(job.get("status") or {})
        done = _finished(job)
        active = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                  and not is_terminating(p)]
        if done:
            self._delete(active)
            return
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
        failed = max(failed, int(status.get("failed") or 0))  # failed pods may have been deleted since
        succeeded = max(succeeded, int(status.get("succeeded") or 0))
        now = time.time()
        start = _parse_time(status.get("startTime"))
        new: JSON = {"startTime": status.get("startTime") or _now(), "uncountedTerminatedPods": {}}
        if start is None:
            start = now
        conditions: list[JSON] = []
        deadline = spec.get("activeDeadlineSeconds")
        unsupported = (spec.get("completionMode") == "Indexed" or int(spec.get("completions") or 1) > 1
                       or int(spec.get("parallelism") or 1) > 1)
        if unsupported:
            conditions.append(_condition("Failed", "NotSupportedBySim",
                                         "the sim runs non-indexed Jobs of one pod only"))
        elif succeeded >= 1:
            conditions.append(_condition("Complete"))
            new["completionTime"] = _now()
        elif deadline is not None and now - start >= float(deadline):
            conditions.append(_condition("Failed", "DeadlineExceeded",
                                         "Job was active longer than specified deadline"))
        elif failed > int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)):
            conditions.append(_condition("Failed", "BackoffLimitExceeded",
                                         "Job has reached the specified backoff limit"))
        if conditions or spec.get("suspend"):
            self._delete(active)
            active = []
        elif not active:
            wait = 0.0
            if failed:
                last = max((_parse_time((p.get("status") or {}).get("startTime")) or start for p in pods),
                           default=start)
                wait = last + min(POD_FAILURE_BACKOFF_MAX, backoff_delay(failed, self.pod_backoff)) - now
            if wait > 0:
                self.enqueue_after((namespace, name), wait)
            else:
                active = [self._create_pod(job)]
        for pod in active:
            self._bind_if_unscheduled(pod)
        ready = sum(1 for p in active for c in (p.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Ready" and c.get("status") == "True")
        new.update(active=len(active) or None, succeeded=succeeded or None, failed=failed or None,
                   ready=ready, terminating=0)
        if conditions:
            new["conditions"] = (status.get("conditions") or []) + conditions
        elif deadline is not None:
            self.enqueue_after((namespace, name), start + float(deadline) - now + 0.01)
        want = {k: v for k, v in {**status, **new}.items() if v is not None}
        if want != status:  # None in a merge patch removes the field
            self.store.patch(JOBS, namespace, name, {"status": new}, MERGE, subresource="status")

    def _delete(self, pods: list[JSON]) -> None:
        for pod in pods:
            try:
                self.store.delete(PODS, namespace_of(pod), name_of(pod), {"preconditions": {"uid": uid_of(pod)}})
            except ApiError as exc:
                _log.debug("job_pod_delete_skipped", pod=name_of(pod), error=str(exc))

    def _create_pod(self, job: JSON) -> JSON:
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        metadata: JSON = {
            "generateName": f"{name_of(job)}-", "namespace": namespace_of(job),
            "labels": dict(tmeta.get("labels") or {}),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name_of(job), "uid": uid_of(job),
                                 "controller": True, "blockOwnerDeletion": True}],
        }
        if tmeta.get("annotations"):
            metadata["annotations"] = dict(tmeta["annotations"])
        spec: JSON = template.get("spec") or {}
        if not spec.get("nodeName"):
            node = self._pick_node(spec)
            if node is not None:
                spec["nodeName"] = node
        pod = self.store.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec},
                                namespace=namespace_of(job))
        if not spec.get("nodeName"):
            self._unschedulable(pod)
        return pod

    def _pick_node(self, spec: JSON) -> str | None:
        """The scheduler's filter (placement and taints), then the node with the fewest pods."""
        nodes = [s.obj for s in self.store.list_page(NODES).items if schedulable_on(spec, s.obj)]
        if not nodes:
            return None
        if len(nodes) == 1:
            return name_of(nodes[0])
        counts: dict[str, int] = {}
        for stored in self.store.list_page(PODS).items:
            node_name = str((stored.obj.get("spec") or {}).get("nodeName") or "")
            counts[node_name] = counts.get(node_name, 0) + 1
        return name_of(min(nodes, key=lambda n: (counts.get(name_of(n), 0), name_of(n))))

    def _unschedulable(self, pod: JSON) -> None:
        total = len(self.store.list_page(NODES).items)
        message = (f"0/{total} nodes are available: {total} node(s) didn't match Pod's node affinity/selector "
                   "or had untolerated taints. preemption: not eligible.")
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                "lastProbeTime": None, "lastTransitionTime": _now()}
        try:
            self.store.patch(PODS, namespace_of(pod), name_of(pod),
                             {"status": {"phase": "Pending", "conditions": [cond]}}, MERGE, subresource="status")
        except ApiError as exc:
            _log.debug("unschedulable_status_skipped", pod=name_of(pod), error=str(exc))

    def _bind_if_unscheduled(self, pod: JSON) -> None:
        spec = pod.get("spec") or {}
        if spec.get("nodeName"):
            return
        node = self._pick_node(spec)
        if node is None:
            return
        bound = {**pod, "metadata": {**meta(pod)}, "spec": {**spec, "nodeName": node}}
        bound["metadata"].pop("managedFields", None)
        try:
            self.store.update(PODS, bound)
        except ApiError as exc:
            _log.debug("bind_skipped", pod=name_of(pod), error=str(exc))
