"""Starting a pod's containers on a simulated node: pull their images, then run, crash-loop or run to completion.

Split from kubelet.py so the kubelet keeps only node lifecycle. The statuses written here are the ones a real
kubelet writes for each case, so the agent's verifier and the controller's pre-pull see what they would see
on a real node: `ErrImagePull` then `ImagePullBackOff` (pod Pending, not Ready) for an image the registry lacks,
`CrashLoopBackOff` with a growing `restartCount` for a container that exits, and `Succeeded`/`Failed` for pods
whose `restartPolicy` is not `Always` (a Job's pods), whose simulated command finishes as soon as it starts.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from edgeagent import log
from edgeagent.kube.objects import is_terminating, node_name_of, uid_of
from edgeagent.sim.errors import ApiError
from edgeagent.sim.images import NodeImages, PullError, backoff_delay, runtime_image
from edgeagent.sim.readiness import apply_gates
from edgeagent.sim.resources import PODS
from edgeagent.sim.store import Store

JSON = dict[str, Any]
STRATEGIC = "application/strategic-merge-patch+json"

_log = log.get("edgeagent.sim.containers")


def timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def container_id(uid: str, name: str, restarts: int = 0) -> str:
    """A container's runtime id: one per pod, container and attempt (a restart gets a new one)."""
    return "containerd://" + hashlib.sha256(f"{uid}/{name}/{restarts}".encode()).hexdigest()


def containers_of(pod: JSON) -> list[JSON]:
    spec = pod.get("spec") or {}
    return [c for c in (spec.get("initContainers") or []) + (spec.get("containers") or []) if isinstance(c, dict)]


def _base(container: JSON, *, ready: bool = False, restarts: int = 0) -> JSON:
    image = str(container.get("image", ""))
    return {"name": container.get("name", ""), "ready": ready, "restartCount": restarts, "image": image,
            "imageID": "", "started": False, "lastState": {}}


def _with_image(status: JSON, uid: str, restarts: int = 0) -> JSON:
    """A container the runtime has created: the image as containerd names it, its digest and the container id.

    (A container still waiting for its image keeps the spec's reference and an empty imageID, as on a node.)"""
    status["image"], status["imageID"] = runtime_image(str(status["image"]))
    status["containerID"] = container_id(uid, str(status["name"]), restarts)
    return status


def crash_looping(namespace: str, name: str, uid: str, container: str, last_id: str, delay: float,
                  now: str) -> JSON:
    """The `state` and `lastState` of a container's status between two starts of a crash loop, as the kubelet
    reports them: waiting in `CrashLoopBackOff` with its back-off message, the instance `last_id` terminated with
    exit code 1 at `now` (it exits as soon as it starts)."""
    message = f"back-off {delay:g}s restarting failed container={container} pod={name}_{namespace}({uid})"
    return {"state": {"waiting": {"reason": "CrashLoopBackOff", "message": message}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now,
                                         "containerID": last_id}}}


def pod_conditions(*, ready: bool, not_ready: list[str], completed: bool = False) -> list[JSON]:
    now = timestamp()
    out: list[JSON] = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                       for t in ("Initialized", "PodScheduled")]  # a v1.24 kubelet: no PodReadyToStartContainers
    for cond_type in ("Ready", "ContainersReady"):
        cond: JSON = {"type": cond_type, "status": "True" if ready else "False", "lastProbeTime": None,
                      "lastTransitionTime": now}
        if not ready:
            cond["reason"] = "PodCompleted" if completed else "ContainersNotReady"
            if not completed:
                cond["message"] = f"containers with unready status: [{' '.join(not_ready)}]"
        out.append(cond)
    return out


def keep_transition_times(conditions: list[JSON], pod: JSON) -> list[JSON]:
    """The kubelet moves a condition's `lastTransitionTime` only when its status changes: a crash-looping pod
    stays `Ready` False from its first failure on, whatever it reports at each restart. Bumping it at every
    restart made a controller that gives a pod which turned not Ready a fresh progress deadline wait for the
    back-off to outgrow that deadline (the seed-29 soak: a bad version rolled back 240 s after its pods came, not
    90 s)."""
    before = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    out: list[JSON] = []
    for cond in conditions:
        old = before.get(cond.get("type"))
        if old is not None and old.get("status") == cond.get("status") and old.get("lastTransitionTime"):
            cond = {**cond, "lastTransitionTime": old["lastTransitionTime"]}
        out.append(cond)
    return out


def live_pod(store: Store, node: str, namespace: str, name: str, uid: str) -> JSON | None:
    """The pod as the store has it now while it is still the one this node's kubelet runs: the same UID (not a
    same-named successor), not being deleted, bound to `node`. None otherwise: nothing is left to start, restart or
    report for it."""
    try:
        pod = store.entry(PODS, namespace, name).obj
    except ApiError:
        return None
    if uid_of(pod) != uid or is_terminating(pod) or node_name_of(pod) != node:
        return None
    return pod


def post_status(store: Store, node: str, namespace: str, name: str, uid: str, status: JSON) -> None:
    """A kubelet's report on one of its pods: a strategic merge on `pods/status`, guarded by the UID. A report the
    store refuses (the pod went, or a same-named pod replaced it, meanwhile) is dropped, as the kubelet would drop
    it: that pod is no longer one it runs."""
    try:
        store.patch(PODS, namespace, name, {"metadata": {"uid": uid}, "status": status}, STRATEGIC,
                    subresource="status")
    except ApiError as exc:
        _log.debug("pod_status_skipped", node=node, pod=f"{namespace}/{name}", error=str(exc))


class PodLauncher:
    """Runs one node's pod start-ups; `launch` is the task the kubelet keeps per pod (cancelled on delete)."""

    def __init__(self, store: Store, images: NodeImages, *, node: str, host_ip: str, startup: float,
                 backoff: float, reachable: Callable[[], bool],
                 start_running: Callable[[str, str, str], None], missed: Callable[[], None] | None = None,
                 observe: Callable[[str, str, str, JSON], None] | None = None) -> None:
        self.store = store
        self.images = images
        self.node = node
        self.host_ip = host_ip
        self.startup = startup
        self.backoff = backoff
        self._reachable = reachable
        self._start_running = start_running
        self._missed = missed  # a status lost to a cut link: the kubelet resyncs when the link is back
        self._observe = observe  # what the node runs, reported or not (sim/runtime.py)
        self._wake = asyncio.Event()  # the registry changed: pods in back-off retry now
        images.catalog.on_change(self._wake.set)

    async def launch(self, namespace: str, name: str, uid: str) -> None:
        pod = self._current(namespace, name, uid)
        if pod is None:
            return
        failures = 0
        while True:
            pod = self._current(namespace, name, uid)
            if pod is None:
                return
            try:
                for container in containers_of(pod):
                    await self.images.ensure(str(container.get("image", "")),
                                             str(container.get("imagePullPolicy") or "IfNotPresent"))
                break
            except PullError as exc:
                failures += 1
                self._waiting(namespace, name, uid, pod, exc.image, exc.reason, exc.message)
                await self._sleep(min(self.startup, 1.0) or 0.01)
                pod = self._current(namespace, name, uid)
                if pod is None:
                    return
                self._waiting(namespace, name, uid, pod, exc.image, "ImagePullBackOff",
                              f'Back-off pulling image "{exc.image}"')
                await self._sleep(backoff_delay(failures, self.backoff))
        await asyncio.sleep(self.startup)
        pod = self._current(namespace, name, uid)
        if pod is None:
            return
        specs = [self.images.catalog.spec(str(c.get("image", ""))) for c in containers_of(pod)]
        crashing = [c for c, spec in zip(containers_of(pod), specs, strict=True) if spec.crash]
        if (pod.get("spec") or {}).get("restartPolicy", "Always") != "Always":
            self._run_to_completion(namespace, name, uid, pod, failed=bool(crashing))
        elif crashing:
            ready_for = min(spec.ready_seconds for spec in specs if spec.crash)
            await self._crash_loop(namespace, name, uid, [str(c.get("name")) for c in crashing], ready_for)
        else:
            self._start_running(namespace, name, uid)

    async def _sleep(self, seconds: float) -> None:
        """A back-off wait that a registry change (POST /sim/v1/images) cuts short."""
        self._wake.clear()
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            pass

    def _current(self, namespace: str, name: str, uid: str) -> JSON | None:
        return live_pod(self.store, self.node, namespace, name, uid)

    def _patch(self, namespace: str, name: str, uid: str, status: JSON) -> None:
        current = self._current(namespace, name, uid)
        if current is not None and status.get("conditions"):
            conditions = apply_gates(current, keep_transition_times(status["conditions"], current))
            status = {**status, "conditions": conditions}
        if self._observe is not None:
            self._observe(namespace, name, uid, status)
        if not self._reachable():
            if self._missed is not None:
                self._missed()
            return  # a partitioned kubelet cannot report; it re-syncs when the link returns
        post_status(self.store, self.node, namespace, name, uid, status)

    def _common(self, pod: JSON) -> JSON:
        status = pod.get("status") or {}
        return {"hostIP": self.host_ip, "hostIPs": [{"ip": self.host_ip}],
                "startTime": status.get("startTime") or timestamp(), "qosClass": "BestEffort"}

    def _waiting(self, namespace: str, name: str, uid: str, pod: JSON, image: str, reason: str,
                 message: str) -> None:
        statuses = []
        for container in (pod.get("spec") or {}).get("containers") or []:
            entry = _base(container)
            failed = str(container.get("image", "")) == image
            entry["state"] = {"waiting": {"reason": reason, "message": message} if failed
                              else {"reason": "ContainerCreating"}}
            statuses.append(entry)
        names = [str(s["name"]) for s in statuses]
        self._patch(namespace, name, uid, {"phase": "Pending", **self._common(pod),
                                           "conditions": pod_conditions(ready=False, not_ready=names),
                                           "containerStatuses": statuses})

    def _run_to_completion(self, namespace: str, name: str, uid: str, pod: JSON, *, failed: bool) -> None:
        now = timestamp()
        statuses = []
        crash = self.images.catalog
        for container in (pod.get("spec") or {}).get("containers") or []:
            entry = _with_image(_base(container), uid)
            code = 1 if crash.spec(str(container.get("image", ""))).crash else 0
            entry["state"] = {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed",
                                             "startedAt": now, "finishedAt": now,
                                             "containerID": entry["containerID"]}}
            statuses.append(entry)
        self._patch(namespace, name, uid, {
            "phase": "Failed" if failed else "Succeeded", **self._common(pod),
            "conditions": pod_conditions(ready=False, not_ready=[], completed=True),
            "containerStatuses": statuses})

    async def _crash_loop(self, namespace: str, name: str, uid: str, crashing: list[str],
                          ready_for: float = 0.0) -> None:
        """Start, exit 1, back off, restart — forever, as the kubelet does with restartPolicy Always (counting on
        from the pod's status after a sim restart). `ready_for` > 0: each start runs Ready that long before the
        crash (the image's `readySeconds`)."""
        current = self._current(namespace, name, uid)
        restarts = max((int(s.get("restartCount") or 0) for s in ((current or {}).get("status") or {})
                        .get("containerStatuses") or [] if s.get("name") in crashing), default=0)
        while True:
            pod = self._current(namespace, name, uid)
            if pod is None:
                return
            if ready_for > 0:
                self._running_briefly(namespace, name, uid, pod, crashing, restarts)
                await asyncio.sleep(ready_for)
                pod = self._current(namespace, name, uid)
                if pod is None:
                    return
            now = timestamp()
            statuses = []
            for container in (pod.get("spec") or {}).get("containers") or []:
                cname = str(container.get("name"))
                if cname not in crashing:
                    entry = _with_image(_base(container, ready=True), uid)
                    entry.update(state={"running": {"startedAt": now}}, started=True)
                    statuses.append(entry)
                    continue
                entry = _with_image(_base(container, restarts=restarts), uid, restarts)
                entry.update(crash_looping(namespace, name, uid, cname, entry["containerID"],
                                           backoff_delay(restarts + 1, self.backoff), now))
                statuses.append(entry)
            self._patch(namespace, name, uid, {
                "phase": "Running", **self._common(pod),
                "podIP": f"10.244.0.{2 + hash(uid) % 250}",
                "conditions": pod_conditions(ready=False, not_ready=crashing),
                "containerStatuses": statuses})
            await asyncio.sleep(backoff_delay(restarts + 1, self.backoff))
            restarts += 1

    def _running_briefly(self, namespace: str, name: str, uid: str, pod: JSON, crashing: list[str],
                         restarts: int) -> None:
        """A crash-looping container started again and passed its readiness probe: Ready until it dies."""
        now = timestamp()
        statuses = []
        for container in (pod.get("spec") or {}).get("containers") or []:
            count = restarts if str(container.get("name")) in crashing else 0
            entry = _with_image(_base(container, ready=True, restarts=count), uid, count)
            entry.update(state={"running": {"startedAt": now}}, started=True)
            statuses.append(entry)
        self._patch(namespace, name, uid, {
            "phase": "Running", **self._common(pod), "podIP": f"10.244.0.{2 + hash(uid) % 250}",
            "conditions": pod_conditions(ready=True, not_ready=[]), "containerStatuses": statuses})
