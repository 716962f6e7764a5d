"""The kubelet's answer to a container image changed in a running pod's spec: restart that container in place.

A real kubelet notices that a container's spec (its hash) differs from the running container's, kills it
(`Killing`: "Container app definition changed, will be restarted"), pulls the new image if it must
(`Pulling`, `Pulled`, or `Pulled` "already present on machine" when it was pre-pulled), then creates and starts
a new container in the same pod (`Created`, `Started`). The pod keeps its name, UID and IP; the container's
status gets a new `containerID` and `imageID`, `restartCount` + 1 and `lastState.terminated` for the old
instance; the container and the pod are not Ready meanwhile. An image the registry lacks leaves the container
waiting in `ErrImagePull`/`ImagePullBackOff`, retried with the kubelet's back-off.

Everything happens on the node: with its link cut the kubelet goes on (what it runs is in sim/runtime.py) and
only its reports and Events wait; it learns of an image change only when the change reaches it, i.e. when the
link is back (the kubelet's sync_pod is not called while it is cut).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from edgeagent import log
from edgeagent.kube.images import normalize_image
from edgeagent.kube.objects import uid_of
from edgeagent.sim.cluster_events import EventRecorder
from edgeagent.sim.containers import (
    container_id,
    crash_looping,
    keep_transition_times,
    live_pod,
    pod_conditions,
    post_status,
    timestamp,
)
from edgeagent.sim.images import NodeImages, PullError, backoff_delay, image_size, runtime_image
from edgeagent.sim.readiness import apply_gates
from edgeagent.sim.runtime import NodeRuntime, RuntimeContainer
from edgeagent.sim.store import Store

JSON = dict[str, Any]

_log = log.get("edgeagent.sim.image_restart")


def changed_containers(pod: JSON, running: list[RuntimeContainer]) -> list[str]:
    """Containers of `pod` whose spec image is not the image the node runs for them (in spec order).

    Only containers the node has started count: one still waiting for its first start is the launcher's."""
    by_name = {c.name: c for c in running}
    out: list[str] = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        current = by_name.get(str(container.get("name")))
        if current is None or not current.container_id:
            continue
        if normalize_image(str(container.get("image") or "")) != current.image:
            out.append(str(container.get("name")))
    return out


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it in the kubelet's Pulled message (`1.5s`, `250ms`)."""
    if seconds >= 1:
        return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    if seconds >= 0.001:
        return f"{seconds * 1000:.6f}".rstrip("0").rstrip(".") + "ms"
    return f"{seconds * 1_000_000:.3f}".rstrip("0").rstrip(".") + "µs"


def _killed(entry: JSON) -> JSON:
    """The old instance stopped (SIGTERM, exit 0): the kubelet reports it terminated until the new one runs."""
    running = (entry.get("state") or {}).get("running") or {}
    terminated = {"exitCode": 0, "reason": "Completed", "startedAt": running.get("startedAt") or timestamp(),
                  "finishedAt": timestamp(), "containerID": entry.get("containerID", "")}
    return {**entry, "state": {"terminated": terminated}, "ready": False, "started": False}


def _previous(entry: JSON) -> JSON:
    """The terminated instance this entry shows or remembers (for lastState)."""
    state = entry.get("state") or {}
    if "terminated" in state:
        return {"terminated": state["terminated"]}
    return dict(entry.get("lastState") or {})


class ImageRestarter:
    """One node's in-place container restarts; `run` is the task the kubelet keeps for the pod meanwhile."""

    def __init__(self, store: Store, images: NodeImages, runtime: NodeRuntime, events: EventRecorder, *,
                 node: str, startup: float, backoff: float, reachable: Callable[[], bool],
                 missed: Callable[[], None]) -> None:
        self.store = store
        self.images = images
        self.runtime = runtime
        self.events = events
        self.node = node
        self.startup = startup
        self.backoff = backoff
        self._reachable = reachable
        self._missed = missed
        # pod uid -> (woken when the container's spec image changes, the container, the image backing off)
        self._pokes: dict[str, tuple[asyncio.Event, str, str]] = {}

    def poke(self, pod: JSON) -> None:
        """The pod changed: if the image a pull backs off on is no longer its spec's (say, rolled back), try the
        new one at once, as a kubelet syncs a pod when it changes (its back-off is per image)."""
        waiting = self._pokes.get(uid_of(pod))
        if waiting is None:
            return
        event, cname, image = waiting
        spec = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == cname), None)
        if spec is not None and str(spec.get("image") or "") != image:
            event.set()

    async def run(self, namespace: str, name: str, uid: str) -> None:
        """Restart every container whose image changed; again if the spec changed meanwhile."""
        while True:
            pod = self._current(namespace, name, uid)
            if pod is None:
                return
            changed = changed_containers(pod, self.runtime.containers(pod))
            if not changed:
                return
            if not await self._restart(namespace, name, uid, pod, changed):
                return

    async def _restart(self, namespace: str, name: str, uid: str, pod: JSON, changed: list[str]) -> bool:
        statuses = self._statuses(pod)
        for cname in changed:
            self._event(pod, cname, "Normal", "Killing", f"Container {cname} definition changed, will be restarted")
            statuses[cname] = _killed(statuses[cname])
        self._report(pod, statuses)
        for cname in changed:
            if not await self._pull(namespace, name, uid, cname, statuses):
                return False
        await asyncio.sleep(self.startup)
        now_pod = self._current(namespace, name, uid)
        if now_pod is None:
            return False
        pod = now_pod
        specs = {str(c.get("name")): c for c in (pod.get("spec") or {}).get("containers") or []}
        for cname in changed:
            entry = statuses[cname]
            restarts = int(entry.get("restartCount") or 0) + 1
            image, image_id = runtime_image(str(specs[cname].get("image") or ""))
            cid = container_id(uid, cname, restarts)
            previous = _previous(entry)
            self._event(pod, cname, "Normal", "Created", f"Created container: {cname}")
            self._event(pod, cname, "Normal", "Started", f"Started container {cname}")
            started = {**entry, "image": image, "imageID": image_id, "containerID": cid, "restartCount": restarts,
                       "lastState": previous}
            if self.images.catalog.spec(image).crash:
                # It exits at once: the kubelet's crash loop shows it waiting, never Ready.
                started.update(ready=False, started=False,
                               **crash_looping(namespace, name, uid, cname, cid, backoff_delay(1, self.backoff),
                                               timestamp()))
            else:
                started.update(ready=True, started=True, state={"running": {"startedAt": timestamp()}})
            statuses[cname] = started
        self._report(pod, statuses)
        return True

    async def _pull(self, namespace: str, name: str, uid: str, cname: str, statuses: dict[str, JSON]) -> bool:
        """Make the container's new image present, reporting the kubelet's Events; False: the pod went away."""
        failures = 0
        while True:
            pod = self._current(namespace, name, uid)
            if pod is None:
                return False
            container = next(c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == cname)
            image = str(container.get("image") or "")
            policy = str(container.get("imagePullPolicy") or "IfNotPresent")
            present = self.images.has(image) and policy != "Always"
            try:
                if present:
                    await self.images.ensure(image, policy)
                    self._event(pod, cname, "Normal", "Pulled",
                                f'Container image "{image}" already present on machine')
                    return True
                self._event(pod, cname, "Normal", "Pulling", f'Pulling image "{image}"')
                began = time.monotonic()
                await self.images.ensure(image, policy)
                took = go_duration(time.monotonic() - began)
                self._event(pod, cname, "Normal", "Pulled",
                            f'Successfully pulled image "{image}" in {took} ({took} including waiting). '
                            f"Image size: {image_size(image)} bytes.")
                return True
            except PullError as exc:
                failures += 1
                self._event(pod, cname, "Warning", "Failed", f'Failed to pull image "{image}": {exc.message}')
                self._event(pod, cname, "Warning", "Failed", f"Error: {exc.reason}")
                statuses[cname] = self._waiting(statuses[cname], exc.reason, exc.message)
                self._report(pod, statuses)
                await asyncio.sleep(min(self.startup, 1.0) or 0.01)
                pod = self._current(namespace, name, uid)
                if pod is None:
                    return False
                message = f'Back-off pulling image "{image}"'
                self._event(pod, cname, "Normal", "BackOff", message)
                statuses[cname] = self._waiting(statuses[cname], "ImagePullBackOff", message)
                self._report(pod, statuses)
                poked = asyncio.Event()
                self._pokes[uid] = (poked, cname, image)
                try:
                    async with asyncio.timeout(backoff_delay(failures, self.backoff)):
                        await poked.wait()
                except TimeoutError:
                    pass
                finally:
                    self._pokes.pop(uid, None)

    @staticmethod
    def _waiting(entry: JSON, reason: str, message: str) -> JSON:
        return {**entry, "state": {"waiting": {"reason": reason, "message": message}}, "ready": False,
                "started": False, "lastState": _previous(entry)}

    def _statuses(self, pod: JSON) -> dict[str, JSON]:
        """The containers' statuses as the kubelet last reported them (or would have, while cut off)."""
        status = self.runtime.last_status(uid_of(pod)) or pod.get("status") or {}
        return {str(e.get("name")): dict(e) for e in status.get("containerStatuses") or []}

    def _report(self, pod: JSON, statuses: dict[str, JSON]) -> None:
        """Record what the node runs, and tell the API server if the link lets us."""
        order = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
        entries = [statuses[n] for n in order if n in statuses]
        not_ready = [str(e.get("name")) for e in entries if not e.get("ready")]
        conditions = keep_transition_times(pod_conditions(ready=not not_ready, not_ready=not_ready), pod)
        # A strategic merge keeps fields the patch leaves out: a condition turning True must drop the reason.
        conditions = [c if c["status"] != "True" else {"reason": None, "message": None, **c} for c in conditions]
        status = {"containerStatuses": entries, "conditions": apply_gates(pod, conditions)}
        self.runtime.observe(pod["metadata"]["namespace"], pod["metadata"]["name"], uid_of(pod), status)
        self.post(pod, status)

    def post(self, pod: JSON, status: JSON) -> None:
        if not self._reachable():
            self._missed()  # reported again when the link is back (Kubelet.resync)
            return
        post_status(self.store, self.node, pod["metadata"]["namespace"], pod["metadata"]["name"], uid_of(pod), status)

    def _event(self, pod: JSON, container: str, type_: str, reason: str, message: str) -> None:
        if self._reachable():  # a cut kubelet's Events are lost, as its recorder's retries give up
            self.events.record(pod, type_, reason, message, field_path=f"spec.containers{{{container}}}")

    def _current(self, namespace: str, name: str, uid: str) -> JSON | None:
        return live_pod(self.store, self.node, namespace, name, uid)
