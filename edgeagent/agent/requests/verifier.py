"""Follows each deleted pod's replacement until it is Ready on the new revision (`succeeded`) or time is up.

Deleting a pod is not an upgrade: the new version may not pull, may crash, may never become Ready. So a
request whose pod was deleted is `verifying`, and this module decides how it ends, from the agent's own pod
cache (fed by the watch), never by polling the cloud. It judges in two directions with different evidence:

- Success needs positive evidence: a pod of the same DaemonSet on this node, not the deleted one, Ready, on a
  newer revision. Seen in the cache at any moment (even one loaded from the snapshot), it is a fact.
- Failure is the absence of that evidence at the deadline, and absence is only believable from a live cache.
  While the link is down the cache is frozen, so the verdict waits for the link; and a node that just came
  back reports its pods' readiness only seconds after the node itself turns Ready (as measured on kube-apiserver v1.24),
  so after the link returns the verifier allows `return_grace` seconds before judging.

OTA in place (issue 37): a request recorded in place keeps its pod, so the evidence of success is that pod itself:
same UID, Ready, on the wanted revision, and each container whose image changed running again as a new container
(a new `containerID` and `imageID`, `restartCount` + 1; `in_place_done`). The controller may still recreate the pod
instead (a revision that is not image-only): then the replacement is judged as for a delete.

Deadlines are wall-clock epoch seconds stored with the request, so a restarted agent resumes each verification
where it was.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from edgeagent import log
from edgeagent.agent.state.store import (
    FAILED,
    SUCCEEDED,
    TERMINAL_STATES,
    VERIFYING,
    InvalidTransition,
    StateStore,
    StateUnavailable,
    UnknownRequest,
    UpgradeRequest,
)
from edgeagent.aio import wait_event
from edgeagent.contract import (
    CONDITION_POD_NEED_UPGRADE,
    LABEL_REVISION_HASH,
    LABEL_TEMPLATE_GENERATION,
    version_from_message,
)
from edgeagent.kube.objects import (
    daemonset_owner,
    get_condition,
    is_pod_ready,
    is_terminating,
    labels_of,
    meta,
    uid_of,
)

JSON = dict[str, Any]
_log = log.get("edgeagent.verifier")

NO_REPLACEMENT = "no replacement pod appeared"
NOT_EXECUTED = "in-place request not carried out"
# After the link returns, how long the kubelet gets to report its pods' readiness before a failure verdict.
RETURN_GRACE = 15.0


@dataclass(frozen=True)
class Identity:
    """What identifies a deleted pod's replacement: same DaemonSet, revision other than the deleted pod's."""

    revision: str
    generation: str
    owner_uid: str
    target: str


def identity_of(pod: JSON) -> Identity:
    """Read off the pod about to be deleted (the target is the revision PodNeedUpgrade asked for)."""
    labels = labels_of(pod)
    owner = daemonset_owner(pod) or {}
    need = get_condition(pod, CONDITION_POD_NEED_UPGRADE) or {}
    return Identity(
        revision=str(labels.get(LABEL_REVISION_HASH, "")),
        generation=str(labels.get(LABEL_TEMPLATE_GENERATION, "")),
        owner_uid=str(owner.get("uid", "")),
        target=version_from_message(str(need.get("message") or "")) or "",
    )


async def record_deleted(state: StateStore, request_id: str, pod: JSON, ready_timeout: float,
                         message: str, *, in_place: bool = False) -> UpgradeRequest:
    """The pod was deleted (or asked in place): the request becomes `verifying`, with the replacement's identity
    (in place: the pod's containers as they are now) and deadline."""
    ident = identity_of(pod)
    return await state.start_verifying(request_id, message, revision=ident.revision, generation=ident.generation,
                                       owner_uid=ident.owner_uid, target=ident.target,
                                       deadline=time.time() + ready_timeout,
                                       in_place=json.dumps(containers_of(pod)) if in_place else "")


def containers_of(pod: JSON) -> dict[str, JSON]:
    """Each container and init container: its image, containerID, imageID and restartCount, as the kubelet reports."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = {str(s.get("name")): s for key in ("initContainerStatuses", "containerStatuses")
                for s in status.get(key) or [] if isinstance(s, dict)}
    out: dict[str, JSON] = {}
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            name = str(container.get("name"))
            reported = statuses.get(name) or {}
            out[name] = {"image": str(container.get("image") or ""),
                         "containerID": str(reported.get("containerID") or ""),
                         "imageID": str(reported.get("imageID") or ""),
                         "restartCount": int(reported.get("restartCount") or 0)}
    return out


def before_restart(request: UpgradeRequest) -> dict[str, JSON] | None:
    """The pod's containers at an in-place request (None: the request deleted its pod)."""
    if not request.in_place:
        return None
    try:
        found = json.loads(request.in_place)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def in_place_done(request: UpgradeRequest, pod: JSON) -> bool:
    """The pod asked in place runs the wanted revision, restarted: same UID, not being deleted, Ready, on a newer
    revision, and every container whose image changed since the request runs as a new container (new
    `containerID` and `imageID`, `restartCount` at least one more), ready. At least one image must have changed:
    an in-place upgrade is an image change."""
    before = before_restart(request)
    if before is None or uid_of(pod) != request.uid or is_terminating(pod) or not is_pod_ready(pod):
        return False
    if not on_new_revision(pod, request):
        return False
    now = containers_of(pod)
    changed = [name for name, was in before.items() if name in now and now[name]["image"] != was.get("image")]
    if not changed:
        return False
    ready = {str(s.get("name")): bool(s.get("ready")) for key in ("initContainerStatuses", "containerStatuses")
             for s in (pod.get("status") or {}).get(key) or [] if isinstance(s, dict)}
    for name in changed:
        was, is_ = before[name], now[name]
        if (not is_["containerID"] or is_["containerID"] == was.get("containerID")
                or not is_["imageID"] or is_["imageID"] == was.get("imageID")
                or is_["restartCount"] < int(was.get("restartCount") or 0) + 1 or not ready.get(name)):
            return False
    return True


def the_pod(request: UpgradeRequest, pods: Iterable[JSON]) -> JSON | None:
    """The pod an in-place request asked about, as the cache has it now (None: gone, or not asked in place)."""
    if before_restart(request) is None:
        return None
    return next((p for p in pods if uid_of(p) == request.uid), None)


@dataclass(frozen=True)
class Verdict:
    state: str  # SUCCEEDED or FAILED
    message: str
    reason: str
    replacement: str


def _newer(a: str, b: str) -> bool:
    return a.isdigit() and b.isdigit() and int(a) > int(b)


def on_new_revision(pod: JSON, request: UpgradeRequest) -> bool:
    """The pod runs a newer revision than the deleted one: its hash differs and is the wanted one (when known),
    or its template generation is newer (the DaemonSet may have moved on again since the request)."""
    labels = labels_of(pod)
    revision = str(labels.get(LABEL_REVISION_HASH, ""))
    if revision and revision != request.revision and (not request.target or revision == request.target):
        return True
    return _newer(str(labels.get(LABEL_TEMPLATE_GENERATION, "")), request.generation)


def replacements(request: UpgradeRequest, pods: Iterable[JSON]) -> list[JSON]:
    """Candidate replacements in the cache (which holds only this node's pods), newest first."""
    found = [
        p for p in pods
        if uid_of(p) != request.uid and not is_terminating(p)
        and request.owner_uid and (daemonset_owner(p) or {}).get("uid") == request.owner_uid
    ]
    return sorted(found, key=lambda p: str(meta(p).get("creationTimestamp") or ""), reverse=True)


def why_not_ready(pod: JSON) -> str:
    """The kubelet's own word for a pod that is not Ready: a container's waiting reason (ImagePullBackOff,
    CrashLoopBackOff, ErrImagePull, ...), else a terminated reason, else the Ready condition's reason."""
    status = pod.get("status") or {}
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    for key in ("waiting", "terminated"):
        for cs in statuses:
            reason = ((cs.get("state") or {}).get(key) or {}).get("reason") if isinstance(cs, dict) else None
            if reason and reason != "Completed":
                return str(reason)
    ready = get_condition(pod, "Ready") or {}
    return str(ready.get("reason") or f"not Ready (phase {status.get('phase') or 'Pending'})")


def success(request: UpgradeRequest, pods: Iterable[JSON]) -> Verdict | None:
    pods = list(pods)
    kept = the_pod(request, pods)
    if kept is not None and in_place_done(request, kept):
        key = f"{meta(kept).get('namespace')}/{meta(kept).get('name')}"
        revision = labels_of(kept).get(LABEL_REVISION_HASH, "?")
        return Verdict(SUCCEEDED, f"pod {key} (uid {uid_of(kept)}) restarted in place and is Ready on revision "
                                  f"{revision}", "", key)
    for pod in replacements(request, pods):
        if is_pod_ready(pod) and on_new_revision(pod, request):
            key = f"{meta(pod).get('namespace')}/{meta(pod).get('name')}"
            revision = labels_of(pod).get(LABEL_REVISION_HASH, "?")
            return Verdict(SUCCEEDED, f"replacement pod {key} (uid {uid_of(pod)}) is Ready on revision {revision}",
                           "", key)
    return None


def failure(request: UpgradeRequest, pods: Iterable[JSON], timeout: float) -> Verdict:
    """Why no replacement became Ready on the new revision in time, naming the most recent candidate."""
    pods = list(pods)
    wanted = request.target or "a newer revision"
    kept = the_pod(request, pods)
    if kept is not None and not is_terminating(kept):
        key = f"{meta(kept).get('namespace')}/{meta(kept).get('name')}"
        if on_new_revision(kept, request):
            reason = why_not_ready(kept)
            return Verdict(FAILED, f"pod {key} did not restart in place and become Ready on revision {wanted} within "
                                   f"{timeout:g}s: {reason}", reason, key)
        reason = NOT_EXECUTED
        return Verdict(FAILED, f"pod {key} still runs revision {labels_of(kept).get(LABEL_REVISION_HASH, '?')} "
                               f"{timeout:g}s after its in-place request for {wanted}: the controller did not carry it "
                               "out (is it running? does the rollout plan hold the node?)", reason, "")
    candidates = replacements(request, pods)
    if not candidates:
        return Verdict(FAILED, f"{NO_REPLACEMENT} within {timeout:g}s of deleting pod {request.key}",
                       NO_REPLACEMENT, "")
    pod = next((p for p in candidates if on_new_revision(p, request)), candidates[0])
    key = f"{meta(pod).get('namespace')}/{meta(pod).get('name')}"
    if on_new_revision(pod, request):
        reason = why_not_ready(pod)
        message = f"replacement pod {key} did not become Ready on revision {wanted} within {timeout:g}s: {reason}"
    else:
        revision = labels_of(pod).get(LABEL_REVISION_HASH, "?")
        reason = "replacement on the old revision"
        message = f"replacement pod {key} runs revision {revision}, not {wanted}"
    return Verdict(FAILED, message, reason, key)


def may_judge_failure(now: float, deadline: float, connected_since: float | None, grace: float) -> bool:
    """A failure verdict needs the deadline passed and a cache that has been live for `grace` seconds."""
    return now >= deadline and connected_since is not None and now - connected_since >= grace


def next_check(now: float, deadline: float, connected_since: float | None, grace: float) -> float | None:
    """When a failure verdict may next become possible (None: only once the link returns)."""
    if connected_since is None:
        return None
    return max(deadline, connected_since + grace, now)


class PodSource(Protocol):
    def pods(self) -> list[JSON]: ...


class LinkState(Protocol):
    @property
    def connected(self) -> bool: ...


class Verifier:
    """Owns every `verifying` request: judges on each cache change, link change and deadline."""

    def __init__(self, *, state: StateStore, pods: PodSource, link: LinkState, ready_timeout: float,
                 return_grace: float = RETURN_GRACE, clock: Callable[[], float] = time.time) -> None:
        self._state = state
        self._pods = pods
        self._link = link
        self.ready_timeout = ready_timeout
        # Never longer than the timeout itself: a pod expected Ready in 5 s gets no 15 s benefit of the doubt.
        self._grace = min(return_grace, ready_timeout)
        self._clock = clock
        self._wake = asyncio.Event()
        self._tracked: dict[str, UpgradeRequest] = {}
        self._waiters: dict[str, list[asyncio.Future[UpgradeRequest]]] = {}
        self._connected_since: float | None = clock() if link.connected else None
        self._store_failed = False
        state.listeners.append(self._on_request)

    # ----------------------------------------------------------------- wiring

    def on_pod_change(self, _type: str, _obj: JSON, _old: JSON | None) -> None:
        """An Informer handler: the cache changed, a replacement may be Ready now."""
        if self._tracked:
            self._wake.set()

    def on_link(self, connected: bool) -> None:
        """A LinkMonitor listener: the cache is live again (or frozen) from now."""
        self._connected_since = self._clock() if connected else None
        self._wake.set()

    def deadline_from_now(self) -> float:
        return self._clock() + self.ready_timeout

    async def wait(self, request_id: str) -> UpgradeRequest:
        """Until the request reaches a final state (queued and running ones included); returns it then."""
        future: asyncio.Future[UpgradeRequest] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(request_id, []).append(future)
        try:
            current = await self._state.get_request(request_id)
            if current is None:
                raise UnknownRequest(f"no upgrade request with id {request_id!r}")
            if current.state in TERMINAL_STATES:
                return current
            return await future
        finally:
            waiters = self._waiters.get(request_id, [])
            if future in waiters:
                waiters.remove(future)
            if not waiters:
                self._waiters.pop(request_id, None)

    def _on_request(self, _before: UpgradeRequest | None, after: UpgradeRequest) -> None:
        if after.state == VERIFYING:
            self._tracked[after.id] = after
            self._wake.set()
        elif after.state in TERMINAL_STATES:
            self._tracked.pop(after.id, None)
            for future in self._waiters.get(after.id, []):
                if not future.done():
                    future.set_result(after)

    # ----------------------------------------------------------------- loop

    async def run(self) -> None:
        for request in await self._load():
            self._tracked.setdefault(request.id, request)
        if self._tracked:
            _log.info("verifications_resumed", count=len(self._tracked))
        while True:
            self._wake.clear()
            await self.check()
            await wait_event(self._wake, self._pause())

    async def _load(self) -> list[UpgradeRequest]:
        try:
            return await self._state.verifying()
        except StateUnavailable as exc:
            _log.error("verifications_unreadable", error=str(exc))
            return []

    def _pause(self) -> float:
        now = self._clock()
        times = [t for r in self._tracked.values()
                 if (t := next_check(now, r.deadline or now, self._connected_since, self._grace)) is not None]
        if not times:
            return 60.0
        floor = 1.0 if self._store_failed else 0.01  # a broken disk is retried, not spun on
        return max(floor, min(times) - now + 0.01)

    async def check(self) -> None:
        """Judge every tracked request once against the cache as it is now."""
        if not self._tracked:
            return
        pods = self._pods.pods()
        now = self._clock()
        self._store_failed = False
        for request in list(self._tracked.values()):
            verdict = success(request, pods)
            if verdict is None and may_judge_failure(now, request.deadline or now, self._connected_since,
                                                     self._grace):
                verdict = failure(request, pods, self.ready_timeout)
            if verdict is not None:
                await self._finish(request, verdict)

    async def _finish(self, request: UpgradeRequest, verdict: Verdict) -> None:
        try:
            await self._state.set_state(request.id, verdict.state, verdict.message, reason=verdict.reason,
                                        replacement=verdict.replacement)
        except (InvalidTransition, UnknownRequest):
            self._tracked.pop(request.id, None)
        except StateUnavailable as exc:
            _log.error("verdict_unrecorded", id=request.id, state=verdict.state, error=str(exc))
            self._store_failed = True
            return  # kept tracked: judged again on the next wake-up
        _log.info("upgrade_verified", id=request.id, pod=request.key, state=verdict.state, reason=verdict.reason,
                  replacement=verdict.replacement or None)
