"""Events that other control-plane components write on a real cluster: the scheduler's `Scheduled` on each pod
it binds and the node controller's `RegisteredNode` and `NodeNotReady` on nodes and their pods.

Without them `kubectl describe pod` shows `Events: <none>` where a real cluster shows the pod's history, and a
client that lists Events (ours do, to show upgrade history) is never tested among Events it did not write.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from edgeagent import log
from edgeagent.kube.objects import meta, name_of, namespace_of, node_name_of, uid_of
from edgeagent.sim.errors import ApiError
from edgeagent.sim.resources import EVENTS, PODS
from edgeagent.sim.store import Store

JSON = dict[str, Any]

SCHEDULER = "default-scheduler"
NODE_CONTROLLER = "node-controller"
# Owners whose pods the real default-scheduler binds (the sim's controllers set spec.nodeName themselves, as a
# shortcut for the scheduler's Binding). A pod created with spec.nodeName by a user never meets the scheduler.
_SCHEDULED_OWNERS = frozenset({"DaemonSet", "Job", "ReplicaSet", "StatefulSet"})
_DEDUP_LIMIT = 4096

_log = log.get("edgeagent.sim.cluster_events")


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _micro(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def reference(obj: JSON) -> JSON:
    """The involvedObject of an Event about `obj` (cluster-scoped objects: no namespace)."""
    ref: JSON = {"kind": obj.get("kind") or "", "name": name_of(obj), "uid": uid_of(obj),
                 "apiVersion": obj.get("apiVersion") or "v1",
                 "resourceVersion": str(meta(obj).get("resourceVersion") or "")}
    if namespace_of(obj):
        ref["namespace"] = namespace_of(obj)
    return ref


class EventRecorder:
    """core/v1 Events as client-go's recorder writes them: a repeat of the same Event raises its count."""

    def __init__(self, store: Store, component: str, *, enabled: bool = True, host: str = "") -> None:
        self.store = store
        self.component = component
        self.host = host  # a kubelet's Events name their node as source.host
        self.enabled = enabled  # off: records nothing (SimConfig.control_plane_events)
        self._recent: dict[tuple[str, ...], tuple[str, str]] = {}  # what was said about whom -> event ns/name

    def record(self, obj: JSON, type_: str, reason: str, message: str, *, field_path: str = "") -> None:
        if not self.enabled:
            return
        ref = reference(obj)
        if field_path:
            ref["fieldPath"] = field_path  # which container of the pod (a kubelet's container Events)
        namespace = str(ref.get("namespace") or "default")  # events about nodes live in default
        key = (str(ref["uid"]), ref["kind"], type_, reason, message)
        now = time.time()
        known = self._recent.get(key)
        if known is not None and self._bump(*known, now):
            return
        event_name = f"{ref['name']}.{time.time_ns():x}"
        event: JSON = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": event_name, "namespace": namespace},
            "involvedObject": ref, "reason": reason, "message": message,
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "firstTimestamp": _stamp(now), "lastTimestamp": _stamp(now), "count": 1, "type": type_,
            "eventTime": None, "reportingComponent": "", "reportingInstance": "",
        }
        self._create(event, namespace)
        if len(self._recent) >= _DEDUP_LIMIT:
            self._recent.clear()
        self._recent[key] = (namespace, event_name)

    def _bump(self, namespace: str, name: str, now: float) -> bool:
        try:
            current = self.store.entry(EVENTS, namespace, name).obj
            patch = {"count": int(current.get("count") or 1) + 1, "lastTimestamp": _stamp(now)}
            self.store.patch(EVENTS, namespace, name, patch, "application/merge-patch+json")
        except ApiError:
            return False  # gone meanwhile: write a new one
        return True

    def _create(self, event: JSON, namespace: str) -> None:
        try:
            self.store.create(EVENTS, event, namespace=namespace)
        except ApiError as exc:  # Events are best effort, as the recorder's are
            _log.debug("event_not_recorded", reason=event.get("reason"), error=str(exc))

    def record_new_api(self, obj: JSON, type_: str, reason: str, action: str, message: str) -> None:
        """An events.k8s.io/v1 Event (what kube-scheduler writes), stored in its core/v1 form."""
        if not self.enabled:
            return
        ref = reference(obj)
        now = time.time()
        self._create({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{ref['name']}.{time.time_ns():x}", "namespace": ref.get("namespace") or "default"},
            "involvedObject": ref, "reason": reason, "message": message, "source": {},
            "firstTimestamp": None, "lastTimestamp": None, "type": type_, "eventTime": _micro(now),
            "action": action, "reportingComponent": self.component,
            "reportingInstance": f"{self.component}-edgeagent-sim",
        }, str(ref.get("namespace") or "default"))


def _controller_kind(pod: JSON) -> str | None:
    for ref in meta(pod).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("kind") or "")
    return None


class SchedulerEvents:
    """`Scheduled` on each pod the scheduler would have bound: controllers' pods, and pods bound after creation."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.recorder = EventRecorder(store, SCHEDULER)

    async def run(self) -> None:
        subscription = self.store.open_subscription([PODS], copy=False)  # read only
        try:
            async for event in subscription:
                node = node_name_of(event.object)
                if not node or event.type == "DELETED":
                    continue
                if event.type == "ADDED":
                    if _controller_kind(event.object) not in _SCHEDULED_OWNERS:
                        continue
                elif event.old is None or node_name_of(event.old):
                    continue
                pod = event.object
                self.recorder.record_new_api(pod, "Normal", "Scheduled", "Binding",
                                             f"Successfully assigned {namespace_of(pod)}/{name_of(pod)} to {node}")
                await asyncio.sleep(0)  # a burst of new pods must not starve the event loop
        finally:
            subscription.close()
