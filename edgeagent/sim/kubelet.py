"""Node simulation: a kubelet per node and the node-lifecycle controller, both acting only through the Store.

The kubelet is the only actor that makes pods Running and that finishes graceful deletions, exactly as in a
real cluster; so a node whose link is cut must stop doing both (a real kubelet that cannot reach the API can
neither report status nor remove pod objects), and must stop renewing its Lease, which is how the
node-lifecycle controller notices the partition and marks the node Unknown with the `unreachable` taints.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from edgeagent import log
from edgeagent.config import SimConfig
from edgeagent.kube.objects import get_condition, is_terminating, meta, name_of, namespace_of, node_name_of, uid_of
from edgeagent.sim.cluster_events import NODE_CONTROLLER, EventRecorder
from edgeagent.sim.containers import PodLauncher, keep_transition_times
from edgeagent.sim.discovery import SERVER_MAJOR, SERVER_MINOR
from edgeagent.sim.errors import ApiError
from edgeagent.sim.image_restart import ImageRestarter, changed_containers
from edgeagent.sim.images import ImageCatalog, NodeImages, runtime_image
from edgeagent.sim.readiness import REASON_GATES_NOT_READY, apply_gates, gate_problems, wanted_ready
from edgeagent.sim.resources import LEASES, NODES, PODS
from edgeagent.sim.runtime import NodeRuntime
from edgeagent.sim.store import Store, WatchEvent

JSON = dict[str, Any]

NODE_LEASE_NAMESPACE = "kube-node-lease"
KUBELET = "kubelet"
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
# A kubelet of the release the API server claims (/version): clients compare the two (skew checks, kubectl).
KUBELET_VERSION = f"v{SERVER_MAJOR}.{SERVER_MINOR}.0"

TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
NODE_STATUS_UNKNOWN_REASON = "NodeStatusUnknown"
NODE_STATUS_UNKNOWN_MESSAGE = "Kubelet stopped posting node status."
NODE_STATUS_NEVER_POSTED_MESSAGE = "Kubelet never posted node status."

_log = log.get("edgeagent.sim.kubelet")

# The conditions a kubelet posts, with the texts real kubelets use: (type, healthy status, reason, message).
_PRESSURE_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def now_time() -> str:
    """metav1.Time: RFC 3339 with whole seconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro_time() -> str:
    """metav1.MicroTime (Lease renewTime/acquireTime)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _hex(seed: str, length: int = 64) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def node_ip(index: int) -> str:
    return f"10.0.{index // 250}.{index % 250 + 2}"


def node_object(name: str, index: int) -> JSON:
    """What a kubelet registers: labels, capacity and identity a real node shows (status posted separately)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "openyurt.io/is-edge-worker": "true",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": f"10.244.{index}.0/24", "podCIDRs": [f"10.244.{index}.0/24"]},
    }


def node_status(name: str, index: int, *, ready: bool) -> JSON:
    """The status a kubelet posts; conditions merge by type, so this also replaces the controller's Unknown."""
    now = now_time()
    conditions: list[JSON] = [
        {"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": now, "lastTransitionTime": now}
        for t, s, r, m in _PRESSURE_CONDITIONS
    ]
    conditions.append({
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime is down (simulated)",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    })
    resources = {"cpu": "4", "memory": "8148020Ki", "pods": "110", "ephemeral-storage": "61202244Ki",
                 "hugepages-2Mi": "0"}
    return {
        "capacity": resources,
        "allocatable": dict(resources, memory="8045620Ki", **{"ephemeral-storage": "56403987978"}),
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": node_ip(index)}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": _hex("machine/" + name, 32),
            "systemUUID": _hex("uuid/" + name, 32),
            "bootID": _hex("boot/" + name, 32),
            "kernelVersion": "6.1.0-sim",
            "osImage": "Simulated Linux",
            "containerRuntimeVersion": "containerd://1.7.0-sim",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def _running_status(pod: JSON, host_ip: str, pod_ip: str) -> JSON:
    """What the kubelet reports once every container has started: Running, Ready, with container statuses."""
    now = now_time()
    spec = pod.get("spec") or {}
    if spec.get("hostNetwork"):
        pod_ip = host_ip
    conditions = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
        # What a v1.24 kubelet posts (PodReadyToStartContainers only exists from v1.29).
        for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]

    def container_status(container: JSON, *, init: bool) -> JSON:
        image, image_id = runtime_image(str(container.get("image", "")))
        cid = "containerd://" + _hex(f"{uid_of(pod)}/{container.get('name')}")
        state: JSON = (
            {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now,
                            "containerID": cid}}
            if init else {"running": {"startedAt": now}}
        )
        return {
            "name": container.get("name", ""),
            "state": state,
            "lastState": {},
            "ready": not init,
            "restartCount": 0,
            "image": image,
            "imageID": image_id,
            "containerID": cid,
            "started": not init,
        }

    status: JSON = {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "qosClass": "BestEffort",
        "containerStatuses": [container_status(c, init=False) for c in spec.get("containers") or []],
    }
    if spec.get("initContainers"):
        status["initContainerStatuses"] = [container_status(c, init=True) for c in spec["initContainers"]]
    return status


class Kubelet:
    """One node: heartbeats (Lease + node status) and the lifecycle of the pods bound to it."""

    def __init__(self, store: Store, config: SimConfig, name: str, index: int,
                 reachable: Callable[[], bool], catalog: ImageCatalog | None = None) -> None:
        self.store = store
        self.config = config
        self.name = name
        self.index = index
        self.host_ip = node_ip(index)
        self._reachable = reachable
        self._ready = True
        self._pending_resync = False  # healthy again after set_ready(False): re-report pods after the node
        self._wake = asyncio.Event()
        self._was_reachable = False
        self._registered = False
        self._resync_timer: asyncio.TimerHandle | None = None
        # pod uid -> pending start (a task: image pulls, then the containers) or finish (a timer)
        self._timers: dict[str, asyncio.TimerHandle | asyncio.Task[None]] = {}
        self._terminating: set[str] = set()
        self._next_ip = 2
        self.images = NodeImages(catalog or ImageCatalog(config.image_pull_seconds), self.images_pulled)
        self.runtime = NodeRuntime()
        self._launcher = PodLauncher(store, self.images, node=name, host_ip=self.host_ip,
                                     startup=config.pod_startup, backoff=config.kubelet_backoff,
                                     reachable=reachable, start_running=self._start, missed=self._missed,
                                     observe=self.runtime.observe)
        events = EventRecorder(store, KUBELET, enabled=config.control_plane_events, host=name)
        self._restarter = ImageRestarter(store, self.images, self.runtime, events, node=name,
                                         startup=config.pod_startup, backoff=config.kubelet_backoff,
                                         reachable=reachable, missed=self._missed)

    @property
    def reachable(self) -> bool:
        return self._reachable()

    def set_ready(self, ready: bool) -> None:
        """Simulate the kubelet's own health (e.g. runtime down): it posts Ready=False until set back.

        The node lifecycle controller marks the pods NotReady when Ready leaves True; once healthy again the
        kubelet re-reports them, like after a link's return, a few seconds after the node itself."""
        was = self._ready
        self._ready = ready
        if ready and not was:
            self._pending_resync = True
        self.wake()

    def wake(self) -> None:
        """Heartbeat now (the link came back, or health changed) instead of at the next interval."""
        self._wake.set()

    def register(self) -> None:
        """Create the Node object (if missing) and post its first status and Lease, like kubelet start-up."""
        try:
            self.store.create(NODES, node_object(self.name, self.index))
            self.images.preload(self.config.node_images)
        except ApiError as exc:
            if exc.code != 409:
                raise
            # A node that existed (a sim restarted on its --dir): its runtime still has what it pulled.
            self.images.seed(self.store.entry(NODES, None, self.name).obj)
        self.heartbeat()

    async def run(self) -> None:
        try:
            while True:
                self.heartbeat()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.heartbeat_interval):
                        await self._wake.wait()
                self._wake.clear()
        finally:
            self.cancel_timers()

    def cancel_timers(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._terminating.clear()
        self._cancel_resync()

    def _cancel_resync(self) -> None:
        if self._resync_timer is not None:
            self._resync_timer.cancel()
            self._resync_timer = None

    def heartbeat(self) -> None:
        if not self.reachable:
            self._was_reachable = False
            self._cancel_resync()
            return
        try:
            self._renew_lease()
            self._post_status_if_changed()
            self._post_images_if_changed()
        except ApiError as exc:  # a conflict with another writer: try again next beat
            _log.debug("heartbeat_failed", node=self.name, error=str(exc))
            return
        if not self._was_reachable:
            self._was_reachable = True
            if not self._registered:
                self._registered = True
                self.resync()
            else:
                self._schedule_resync()
        elif self._pending_resync:
            self._schedule_resync()
        self._pending_resync = False

    def _schedule_resync(self) -> None:
        """The link came back: Lease and Ready went out just now; pod statuses follow a few seconds later.

        A real kubelet renews its Lease and posts node status from its own loops, while pod statuses are
        re-reported by the status manager's periodic sync, so on a real cluster the node turns Ready seconds
        before its pods do (measured on kube-apiserver v1.24). Clients that read "node Ready" as "pods Ready" must
        meet that gap in tests, not only in production.
        """
        self._cancel_resync()
        delay = self.config.pod_resync_delay
        if delay <= 0:
            self.resync()
            return
        self._resync_timer = asyncio.get_running_loop().call_later(delay, self._delayed_resync)

    def _delayed_resync(self) -> None:
        self._resync_timer = None
        if self.reachable:
            self.resync()
        else:
            self._missed()

    def _missed(self) -> None:
        """Work fell into a cut (a start, a removal, a resync): the next heartbeat that gets through resyncs.

        A real kubelet retries what the API server did not take; without this a pod whose removal timer fired
        during a flapping link stayed terminating for good, and a pod whose start did stayed Pending, whenever
        no heartbeat happened to run while the link was down (found by the soak, issue 23)."""
        self._was_reachable = False

    def _renew_lease(self) -> None:
        now = now_micro_time()
        try:
            lease = self.store.get(LEASES, NODE_LEASE_NAMESPACE, self.name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            node = self.store.get(NODES, None, self.name)
            self.store.create(LEASES, {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": NODE_LEASE_NAMESPACE,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name,
                                         "uid": uid_of(node)}],
                },
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": max(1, round(self.config.node_grace)),
                         "renewTime": now},
            }, namespace=NODE_LEASE_NAMESPACE)
            return
        lease.setdefault("spec", {})["renewTime"] = now
        lease["spec"]["holderIdentity"] = self.name
        self.store.update(LEASES, lease)

    def _post_status_if_changed(self) -> None:
        """Only on change (like nodeStatusReportFrequency): an unchanged node must not emit watch events."""
        node = self.store.entry(NODES, None, self.name).obj  # read only: no copy of a node per heartbeat
        ready = get_condition(node, "Ready")
        want = "True" if self._ready else "False"
        info = (node.get("status") or {}).get("nodeInfo") or {}
        if ready is not None and ready.get("status") == want and info.get("kubeletVersion") == KUBELET_VERSION:
            return  # (a node saved by an older sim reports its kubelet version again)
        status = node_status(self.name, self.index, ready=self._ready)
        self.store.patch(NODES, None, self.name, {"status": status}, STRATEGIC, subresource="status")
        _log.info("node_status_posted", node=self.name, ready=want)

    def _post_images_if_changed(self) -> None:
        if not self.images.dirty:
            return
        self.store.patch(NODES, None, self.name, {"status": {"images": self.images.status_images()}}, MERGE,
                         subresource="status")
        self.images.dirty = False

    def images_pulled(self) -> None:
        """Publish status.images now (a kubelet posts node status soon after a pull, not only on heartbeat)."""
        if self.reachable:
            try:
                self._post_images_if_changed()
            except ApiError as exc:
                _log.debug("image_status_skipped", node=self.name, error=str(exc))

    # Pods ---------------------------------------------------------------------------------------------

    def resync(self) -> None:
        """After start-up or a partition heals: act on every pod bound here, including Ready lost meanwhile."""
        for pod in _pods_on(self.store, self.name):
            self.sync_pod(pod, restore_ready=True)

    def on_event(self, event: WatchEvent) -> None:
        uid = uid_of(event.object)
        if event.type == "DELETED":
            handle = self._timers.pop(uid, None)
            if handle is not None:
                handle.cancel()
            self._terminating.discard(uid)
            self.runtime.forget(uid)
            return
        self.sync_pod(event.object)

    def containers(self) -> list[JSON]:
        """What this node runs, as its kubelet knows it (`GET /sim/v1/nodes/{node}/containers`)."""
        return self.runtime.items(_pods_on(self.store, self.name))

    def sync_pod(self, pod: JSON, *, restore_ready: bool = False) -> None:
        if not self.reachable:
            # A partitioned kubelet can neither report nor delete: the next heartbeat that gets through
            # schedules resync(), even if the cut was shorter than a heartbeat interval.
            self._was_reachable = False
            return
        uid = uid_of(pod)
        phase = (pod.get("status") or {}).get("phase")
        if is_terminating(pod):
            if uid in self._terminating:
                return
            old = self._timers.pop(uid, None)
            if old is not None:
                old.cancel()
            grace = float(meta(pod).get("deletionGracePeriodSeconds") or 0)
            delay = min(grace, self.config.pod_termination)
            self._terminating.add(uid)
            self._timers[uid] = asyncio.get_running_loop().call_later(
                delay, self._finish, namespace_of(pod), name_of(pod), uid)
        elif phase in (None, "", "Pending"):
            if uid not in self._timers:
                self._timers[uid] = asyncio.create_task(self._launch(namespace_of(pod), name_of(pod), uid),
                                                        name=f"start {namespace_of(pod)}/{name_of(pod)}")
        elif phase == "Running" and uid not in self._timers:
            self._sync_running(pod, restore_ready=restore_ready)
        elif phase == "Running":
            self._restarter.poke(pod)  # a restart backing off on a pull looks at a changed image now

    def _sync_running(self, pod: JSON, *, restore_ready: bool) -> None:
        """A running pod: restart containers whose image changed, else re-report and mend Ready as needed."""
        uid = uid_of(pod)
        if changed_containers(pod, self.runtime.containers(pod)):
            self._timers[uid] = asyncio.create_task(self._restart(namespace_of(pod), name_of(pod), uid),
                                                    name=f"restart {namespace_of(pod)}/{name_of(pod)}")
            return
        if restore_ready and self._report_again(pod):
            return
        if restore_ready:
            # (a pod still in its launcher, crash-looping, reports its own status: not Ready)
            ready = get_condition(pod, "Ready")
            if ready is not None and ready.get("status") != "True":
                if _crash_looping(pod):
                    # A restarted sim has no launcher running its crash loop: start it again. Restoring Ready
                    # made a bad version look good on every node it had reached (seed-29 soak, sim restart).
                    self._timers[uid] = asyncio.create_task(self._launch(namespace_of(pod), name_of(pod), uid),
                                                            name=f"start {namespace_of(pod)}/{name_of(pod)}")
                else:
                    self._restore_ready(pod)
            return
        self._follow_gates(pod)

    async def _restart(self, namespace: str, name: str, uid: str) -> None:
        """Restart in place the containers whose image changed (sim/image_restart.py)."""
        try:
            await self._restarter.run(namespace, name, uid)
        finally:
            if self._timers.get(uid) is asyncio.current_task():
                self._timers.pop(uid, None)

    def _report_again(self, pod: JSON) -> bool:
        """Back from a cut: report what the containers did meanwhile (a restart the API has not heard of)."""
        last = self.runtime.last_status(uid_of(pod))
        if last is None:
            return False
        ids = [(e.get("containerID"), e.get("state")) for e in last.get("containerStatuses") or []]
        known = [(e.get("containerID"), e.get("state"))
                 for e in (pod.get("status") or {}).get("containerStatuses") or []]
        if ids == known:
            return False
        conditions = apply_gates(pod, keep_transition_times(list(last.get("conditions") or []), pod))
        self._restarter.post(pod, {**last, "conditions": conditions})
        return True

    def _follow_gates(self, pod: JSON) -> None:
        """A readiness gate's condition changed: Ready follows (containers ready AND every gate True)."""
        want = wanted_ready(pod)
        ready = get_condition(pod, "Ready")
        if want is None or not self._ready or (ready is not None and ready.get("status") == want):
            return
        cond: JSON = {"type": "Ready", "status": want, "lastProbeTime": None, "lastTransitionTime": now_time()}
        if want == "False":
            cond.update(reason=REASON_GATES_NOT_READY, message=", ".join(gate_problems(pod)))
        else:
            cond.update(reason=None, message=None)
        self._restarter.post(pod, {"conditions": [cond]})

    async def _launch(self, namespace: str, name: str, uid: str) -> None:
        """Pull the images (sim/containers.py), then start; the entry goes when done, so a resync retries."""
        try:
            await self._launcher.launch(namespace, name, uid)
        finally:
            if self._timers.get(uid) is asyncio.current_task():
                self._timers.pop(uid, None)

    def _start(self, namespace: str, name: str, uid: str) -> None:
        self._timers.pop(uid, None)
        if not self.reachable:
            self._missed()
            return
        try:
            pod = self.store.entry(PODS, namespace, name).obj
            if uid_of(pod) != uid or is_terminating(pod) or node_name_of(pod) != self.name:
                return
            if (pod.get("status") or {}).get("phase") not in (None, "", "Pending"):
                return
            pod_ip = f"10.244.{self.index}.{self._next_ip}"
            self._next_ip = self._next_ip % 250 + 1
            status = _running_status(pod, self.host_ip, pod_ip)
            status["conditions"] = apply_gates(pod, status["conditions"])
            self.runtime.observe(namespace, name, uid, status)
            patch = {"metadata": {"uid": uid}, "status": status}
            self.store.patch(PODS, namespace, name, patch, STRATEGIC, subresource="status")
        except ApiError as exc:
            _log.debug("pod_start_skipped", node=self.name, pod=f"{namespace}/{name}", error=str(exc))

    def _restore_ready(self, pod: JSON) -> None:
        """The node controller marked our pods NotReady while we were away; the containers never stopped."""
        now = now_time()
        conditions = apply_gates(pod, [{"type": t, "status": "True", "lastTransitionTime": now}
                                       for t in ("Ready", "ContainersReady")])
        patch = {"metadata": {"uid": uid_of(pod)}, "status": {"conditions": conditions}}
        try:
            self.store.patch(PODS, namespace_of(pod), name_of(pod), patch, STRATEGIC, subresource="status")
        except ApiError as exc:
            _log.debug("pod_ready_restore_skipped", node=self.name, pod=name_of(pod), error=str(exc))

    def _finish(self, namespace: str, name: str, uid: str) -> None:
        """Containers stopped: remove the pod object the way the kubelet does (grace 0, UID precondition)."""
        self._timers.pop(uid, None)
        self._terminating.discard(uid)
        self.runtime.forget(uid)  # the containers stopped, whether the API hears of it now or later
        if not self.reachable:
            self._missed()
            return
        try:
            self.store.delete(PODS, namespace, name, {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        except ApiError as exc:
            _log.debug("pod_removal_skipped", node=self.name, pod=f"{namespace}/{name}", error=str(exc))


def _crash_looping(pod: JSON) -> bool:
    return any(((s.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"
               for s in (pod.get("status") or {}).get("containerStatuses") or [])


def _pods_on(store: Store, node: str) -> list[JSON]:
    """The pods bound to a node, as the shared stored objects (callers only read them)."""
    _, fields = store.parse_selectors(PODS, None, f"spec.nodeName={node}")
    return [stored.obj for stored in store.list_page(PODS, fields=fields).items]


class NodeSimulator:
    """All kubelets, fed from one pod subscription (dispatching by spec.nodeName scales to many nodes)."""

    def __init__(self, store: Store, config: SimConfig, node_names: list[str],
                 reachable: Callable[[str], bool]) -> None:
        self.store = store
        def probe(node: str) -> Callable[[], bool]:
            return lambda: reachable(node)

        self.catalog = ImageCatalog(config.image_pull_seconds)
        self.kubelets: dict[str, Kubelet] = {
            name: Kubelet(store, config, name, index, probe(name), self.catalog)
            for index, name in enumerate(node_names, start=1)
        }

    def register(self) -> None:
        for kubelet in self.kubelets.values():
            kubelet.register()

    def kubelet(self, node: str) -> Kubelet:
        return self.kubelets[node]

    def containers(self) -> list[JSON]:
        """What every node runs (`GET /sim/v1/containers`): each node's items with its name, from one pass over
        the pods (a fleet-wide watcher, such as the soak's, would otherwise list the pods once per node)."""
        by_node: dict[str, list[JSON]] = {}
        for stored in self.store.list_page(PODS).items:
            by_node.setdefault(node_name_of(stored.obj), []).append(stored.obj)
        return [{"node": name, **item} for name, kubelet in self.kubelets.items()
                for item in kubelet.runtime.items(by_node.get(name, []))]

    async def run(self) -> None:
        # Kubelets only read pods: the shared stored objects will do, no copy of every pod event.
        subscription = self.store.open_subscription([PODS], copy=False)
        try:
            for kubelet in self.kubelets.values():
                kubelet.resync()
            async with asyncio.TaskGroup() as tg:
                for kubelet in self.kubelets.values():
                    tg.create_task(kubelet.run())
                tg.create_task(self._dispatch(subscription))
        finally:
            subscription.close()

    async def _dispatch(self, subscription: Any) -> None:
        async for event in subscription:
            kubelet = self.kubelets.get(node_name_of(event.object))
            if kubelet is not None:
                kubelet.on_event(event)


class NodeLifecycleController:
    """Marks nodes whose Lease stopped moving Unknown, and keeps the condition taints in line with Ready.

    Like the real controller it times leases by when it *observed* a renewal (its own monotonic clock), not
    by the renewTime value, so it is immune to clock skew between "nodes".
    """

    def __init__(self, store: Store, config: SimConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self.grace = config.node_grace
        self._ready_status: dict[str, str] = {}  # node -> its Ready status as last seen
        self.period = max(0.05, min(config.node_grace / 4, 5.0))
        self._observed: dict[str, tuple[str, float]] = {}  # node -> (renewTime, monotonic when seen)
        self._last_check: float | None = None
        self.events = EventRecorder(store, NODE_CONTROLLER, enabled=config.control_plane_events)
        self._registered: set[str] = set()

    async def run(self) -> None:
        subscription = self.store.open_subscription([NODES], copy=False)  # read only, as below
        try:
            for stored in self.store.list_page(NODES).items:
                self._register(stored.obj)
                self.reconcile_taints(stored.obj)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._monitor())
                tg.create_task(self._watch(subscription))
        finally:
            subscription.close()

    async def _watch(self, subscription: Any) -> None:
        async for event in subscription:
            if event.type != "DELETED":
                self._register(event.object)
                self.reconcile_taints(event.object)
                self._follow_ready(event.object)
            else:
                self._observed.pop(name_of(event.object), None)
                self._ready_status.pop(name_of(event.object), None)
                if name_of(event.object) in self._registered:
                    self._registered.discard(name_of(event.object))
                    self._node_event(event.object, "RemovingNode", "Removing Node {} from Controller")

    def _register(self, node: JSON) -> None:
        """The first sight of a node (also after a restart, as a restarted controller-manager reports)."""
        if name_of(node) not in self._registered:
            self._registered.add(name_of(node))
            self._node_event(node, "RegisteredNode", "Registered Node {} in Controller")

    def _node_event(self, node: JSON, reason: str, what: str) -> None:
        name = name_of(node)
        self.events.record(node, "Normal", reason, f"Node {name} event: {what.format(name)}")

    def _follow_ready(self, node: JSON) -> None:
        """Ready leaving True (the kubelet posting False, or Unknown) marks the node's pods NotReady, as the real
        controller does for any such transition (monitorNodeHealth), not only for a silent node."""
        name = name_of(node)
        cond = get_condition(node, "Ready")
        status = str(cond.get("status")) if cond else "Unknown"
        before = self._ready_status.get(name)
        self._ready_status[name] = status
        if before == "True" and status != "True":
            self.events.record(node, "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady")
            self._mark_pods_not_ready(name)

    async def _monitor(self) -> None:
        while True:
            self.check_leases()
            await asyncio.sleep(self.period)

    def check_leases(self) -> None:
        now = self.clock()
        if self._last_check is not None and now - self._last_check > self.period + self.grace / 2:
            # This loop itself was stalled (a busy machine, a blocking call in the same process): the kubelets
            # were stalled with it, so silence measured across the stall says nothing about them.
            self._observed = {name: (renew, now) for name, (renew, _) in self._observed.items()}
        self._last_check = now
        # Every few seconds over every node and Lease: read the shared objects instead of copying them all.
        nodes = [stored.obj for stored in self.store.list_page(NODES).items]
        leases = [stored.obj for stored in self.store.list_page(LEASES, NODE_LEASE_NAMESPACE).items]
        renewals = {name_of(lease): str((lease.get("spec") or {}).get("renewTime") or "") for lease in leases}
        for node in nodes:
            name = name_of(node)
            renew = renewals.get(name, "")
            seen = self._observed.get(name)
            if seen is None or seen[0] != renew:
                self._observed[name] = (renew, now)
                continue
            if now - seen[1] <= self.grace:
                continue
            ready = get_condition(node, "Ready")
            if ready is None or ready.get("status") != "Unknown":
                self._mark_unknown(node)

    def _mark_unknown(self, node: JSON) -> None:
        name = name_of(node)
        now = now_time()
        existing = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
        conditions = []
        for cond_type in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready"):
            cond = existing.get(cond_type)
            if cond is None:  # a Node object nobody runs a kubelet for (e.g. created through the API)
                conditions.append({"type": cond_type, "status": "Unknown", "reason": NODE_STATUS_UNKNOWN_REASON,
                                   "message": NODE_STATUS_NEVER_POSTED_MESSAGE, "lastHeartbeatTime": now,
                                   "lastTransitionTime": now})
                continue
            changed = cond.get("status") != "Unknown"
            conditions.append({
                "type": cond_type,
                "status": "Unknown",
                "reason": NODE_STATUS_UNKNOWN_REASON,
                "message": NODE_STATUS_UNKNOWN_MESSAGE,
                "lastHeartbeatTime": cond.get("lastHeartbeatTime"),
                "lastTransitionTime": now if changed else cond.get("lastTransitionTime"),
            })
        try:
            self.store.patch(NODES, None, name, {"status": {"conditions": conditions}}, STRATEGIC,
                             subresource="status")
        except ApiError as exc:
            _log.warning("node_unknown_not_marked", node=name, error=str(exc))
            return
        _log.info("node_stopped_posting_status", node=name)
        self._mark_pods_not_ready(name)

    def _mark_pods_not_ready(self, node: str) -> None:
        """As the real controller does: the pods' containers may be fine, but nobody can vouch for them."""
        now = now_time()
        for pod in _pods_on(self.store, node):
            ready = get_condition(pod, "Ready")
            if ready is None or ready.get("status") == "False":
                continue
            patch = {"metadata": {"uid": uid_of(pod)},
                     "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}]}}
            try:
                self.store.patch(PODS, namespace_of(pod), name_of(pod), patch, STRATEGIC, subresource="status")
            except ApiError as exc:
                _log.debug("pod_not_ready_not_marked", pod=name_of(pod), error=str(exc))
                continue
            self.events.record(pod, "Warning", "NodeNotReady", "Node is not ready")

    def reconcile_taints(self, node: JSON) -> None:
        """Ready False → not-ready taints, Unknown → unreachable taints (NoSchedule and NoExecute), True → none."""
        ready = get_condition(node, "Ready")
        status = ready.get("status") if ready else "Unknown"
        wanted_key = {"False": TAINT_NOT_READY, "Unknown": TAINT_UNREACHABLE}.get(str(status))
        taints: list[JSON] = list((node.get("spec") or {}).get("taints") or [])
        kept = [t for t in taints if t.get("key") not in (TAINT_NOT_READY, TAINT_UNREACHABLE)
                or (t.get("key") == wanted_key and t.get("effect") in ("NoSchedule", "NoExecute"))]
        if wanted_key is not None:
            now = now_time()
            for effect in ("NoSchedule", "NoExecute"):
                if not any(t.get("key") == wanted_key and t.get("effect") == effect for t in kept):
                    kept.append({"key": wanted_key, "effect": effect, "timeAdded": now})
        if kept == taints:
            return
        patch = {"metadata": {"resourceVersion": meta(node).get("resourceVersion")},
                 "spec": {"taints": kept or None}}
        try:
            self.store.patch(NODES, None, name_of(node), patch, MERGE)
        except ApiError as exc:  # stale: the MODIFIED event of the newer version brings us back here
            _log.debug("taint_update_skipped", node=name_of(node), error=str(exc))
