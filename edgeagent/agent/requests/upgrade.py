"""The OTA upgrade and image pre-pull requests (docs/api.md lists every outcome), online and offline.

Online, the decision is made on a fresh read from the cloud, never on the cache, and the delete
carries the pod's UID as a precondition: between our read and our delete the DaemonSet controller may
have replaced the pod, and the replacement must not be deleted. Offline (or when the cloud does not
answer within `upgrade_timeout`), the same checks run on the cached pod and the request is committed
to the state store before `202` is answered; the drainer applies it when the link returns.

Every accepted request is recorded, online ones too: as `running` before the DELETE, `verifying` after it
(the verifier decides how it ends), so that its outcome is verified and reported as Events like a queued one.

For a DaemonSet `InPlaceIfPossible` the DELETE is replaced by the in-place request on the pod's status
(guarded.py): the `200` then says the cloud accepted the node's request, exactly as it says the cloud accepted the
delete for a recreate; in both cases the verifier decides whether the upgrade succeeded (in place: the same pod,
restarted on the new images, Ready).

Unlike YurtHub, which answers 503 while disconnected and deletes without a precondition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from edgeagent import log
from edgeagent.agent.requests.guarded import (
    Deletion,
    GuardedDelete,
    PodLookup,
    Refusal,
    Result,
    describe_failure,
    key_of_pod,
    placement_refusal,
    refused_read,
    upgrade_check,
)
from edgeagent.agent.requests.verifier import record_deleted
from edgeagent.agent.state.store import (
    FAILED,
    OBSOLETE,
    RUNNING,
    InvalidTransition,
    StateStore,
    StateUnavailable,
    UnknownRequest,
    UpgradeRequest,
)
from edgeagent.agent.state.store import QUEUED as QUEUED_STATE
from edgeagent.contract import (
    CONDITION_POD_IMAGE_READY,
    CONDITION_POD_NEED_UPGRADE,
    REASON_WAIT_PULL_IMAGE,
    version_from_message,
    version_message,
)
from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.errors import Conflict, Forbidden, Invalid, NotFound
from edgeagent.kube.objects import (
    get_condition,
    is_dns1123_label,
    is_dns1123_subdomain,
    pod_path,
    uid_of,
)

JSON = dict[str, Any]
_log = log.get("edgeagent.upgrade")

class Answer(StrEnum):
    """What the agent answers an upgrade or imagepull request: the `status` word of the JSON body.

    Its HTTP status is a table at the HTTP boundary (api/http.py: HTTP_STATUS), so nothing here, nor the
    auto-upgrader or auto-pre-puller that call this service, branches on HTTP codes.
    """

    STARTED = "Started"  # the pod was deleted, or its in-place request recorded on its status
    QUEUED = "Queued"  # stored; the drainer applies it
    IMAGE_PULL_REQUESTED = "ImagePullRequested"
    BAD_REQUEST = "BadRequest"  # never valid: bad names, not a DaemonSet pod
    FORBIDDEN = "Forbidden"  # refused by the checks: another node's pod, no upgrade needed, image not ready
    NOT_FOUND = "NotFound"  # no such pod (or it went away meanwhile)
    CONFLICT = "Conflict"  # replaced meanwhile: the new pod is not touched
    BAD_GATEWAY = "BadGateway"  # the cloud refused (a 4xx it means)
    UNAVAILABLE = "ServiceUnavailable"  # nothing stored (state unwritable), or the cloud is needed and absent


# A refusal of the checks, as an answer.
_REFUSED = {Refusal.NOT_A_DAEMONSET_POD: Answer.BAD_REQUEST, Refusal.CLOUD: Answer.BAD_GATEWAY}


class Link(Protocol):
    """What the upgrade service and drainer need from the link monitor (LinkMonitor satisfies it)."""

    @property
    def connected(self) -> bool: ...

    def report_failure(self, reason: str) -> None: ...


class UpgradeMetrics(Protocol):
    def upgrade_outcome(self, outcome: str) -> None: ...

    def image_pull_outcome(self, outcome: str) -> None: ...

    def set_queue_counts(self, counts: dict[str, int]) -> None: ...


@dataclass(frozen=True)
class Outcome:
    """One answer of the upgrade/imagepull endpoints: the HTTP layer renders it as text or JSON."""

    answer: Answer
    message: str
    request_id: str | None = None
    # Refused for now only (a plan's state lags its DaemonSet): the auto-upgrader asks again, it does not skip.
    retry_later: bool = False

    @property
    def status_word(self) -> str:
        return self.answer.value

    def to_json(self) -> JSON:
        body: JSON = {"status": self.status_word, "message": self.message}
        if self.request_id is not None:
            body["id"] = self.request_id
        return body


def _outcome(answer: Answer, message: str, request_id: str | None = None) -> Outcome:
    return Outcome(answer, message, request_id)


def _refused(refusal: tuple[Refusal, str]) -> Outcome:
    return Outcome(_REFUSED.get(refusal[0], Answer.FORBIDDEN), refusal[1],
                   retry_later=refusal[0] is Refusal.PLAN_NOT_CAUGHT_UP)


def validate_names(namespace: str, name: str) -> Outcome | None:
    """400 unless the namespace is a DNS-1123 label and the name a DNS-1123 subdomain, as the API requires."""
    if not is_dns1123_label(namespace):
        return _outcome(Answer.BAD_REQUEST, f"invalid namespace {namespace!r}: must be a DNS-1123 label "
                             "(lower-case alphanumerics and '-', at most 63 characters)")
    if not is_dns1123_subdomain(name):
        return _outcome(Answer.BAD_REQUEST, f"invalid pod name {name!r}: must be a DNS-1123 subdomain "
                             "(lower-case alphanumerics, '-' and '.', at most 253 characters)")
    return None


def upgrade_refusal(pod: JSON, node_name: str) -> Outcome | None:
    """Why this pod may not be upgraded through this node's agent (as an answer), or None when it may."""
    refusal = upgrade_check(pod, node_name)
    return None if refusal is None else _refused(refusal)


async def publish_queue_counts(state: StateStore, metrics: UpgradeMetrics | None) -> None:
    """Refresh the queue gauges after a change; an unreadable store only costs a stale gauge."""
    if metrics is None:
        return
    try:
        metrics.set_queue_counts(await state.counts())
    except StateUnavailable as exc:
        _log.warning("queue_counts_unavailable", error=str(exc))


class _Deadline:
    def __init__(self, seconds: float, cap: float) -> None:
        self._end = time.monotonic() + seconds
        self._cap = cap

    def left(self) -> float:
        remaining = self._end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("upgrade timeout exceeded")
        return min(remaining, self._cap)


class UpgradeService:
    """Answers upgrade and imagepull requests; the outcomes are exactly those docs/api.md lists."""

    def __init__(self, *, client: KubeClient, cache: PodLookup, link: Link, state: StateStore,
                 node_name: str, upgrade_timeout: float, request_timeout: float,
                 metrics: UpgradeMetrics | None = None, ready_timeout: float = 300.0) -> None:
        self._client = client
        self._cache = cache
        self._link = link
        self._state = state
        self._node = node_name
        self._upgrade_timeout = upgrade_timeout
        self._request_timeout = request_timeout
        self._metrics = metrics
        self._ready_timeout = ready_timeout
        # Called after a new entry is committed, so the drainer need not wait for its next poll.
        self.on_queued: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ upgrade

    async def upgrade(self, namespace: str, name: str, *, origin: str = "online") -> Outcome:
        """`origin` is recorded with the request ("online" for the HTTP API, "auto" for --auto-upgrade)."""
        outcome = await self._upgrade(namespace, name, origin)
        _log.info("upgrade_request", pod=f"{namespace}/{name}", status=outcome.status_word, message=outcome.message,
                  id=outcome.request_id)
        if self._metrics is not None:
            self._metrics.upgrade_outcome(outcome.status_word)
        return outcome

    async def _upgrade(self, namespace: str, name: str, origin: str) -> Outcome:
        invalid = validate_names(namespace, name)
        if invalid is not None:
            return invalid
        key = f"{namespace}/{name}"
        if not self._link.connected:
            return await self._queue_from_cache(namespace, name, "the cloud link is down")

        deadline = _Deadline(self._upgrade_timeout, self._request_timeout)
        guard = GuardedDelete(self._client, self._link, namespace, name, node_name=self._node, timeout=deadline.left,
                              cache=self._cache)
        read = await guard.read()
        if isinstance(read, Deletion):
            if read.result is Result.TRANSIENT:
                return await self._queue_from_cache(namespace, name, read.message)
            return _read_answer(read)
        pod = read
        uid = uid_of(pod)
        existing = await self._active_request(namespace, name)
        if existing is not None and existing.uid == uid:
            # Already queued (the link came back, the drainer is on it): one request per pod.
            return _outcome(Answer.QUEUED, _already(existing), existing.id)
        record, created = await self._record(namespace, name, uid, origin)
        if record is not None and (record.state != RUNNING or not created):
            # Queued meanwhile, or another call (an operator's, the auto-upgrade's) is deleting it right now.
            return _outcome(Answer.QUEUED, _already(record), record.id)
        request_id = record.id if record is not None else None
        try:
            return await self._delete_recorded(guard, pod, key, namespace, name, uid, request_id)
        finally:
            if request_id is not None:
                self._state.release(request_id)  # from now on a `running` leftover is the drainer's

    async def _delete_recorded(self, guard: GuardedDelete, pod: JSON, key: str, namespace: str, name: str,
                               uid: str, request_id: str | None) -> Outcome:
        deletion = await guard.delete(pod)
        if deletion.result is Result.TRANSIENT:
            return await self._requeue(request_id, namespace, name, uid, deletion.message)
        if deletion.refusal is Refusal.PLAN_NOT_CAUGHT_UP:
            # Re-read after a 409: the DaemonSet changed meanwhile. Refused as at the first read; nothing to do.
            return await self._ended(request_id, OBSOLETE, _refused((deletion.refusal, deletion.message)))
        if deletion.result not in (Result.DELETED, Result.REQUESTED):
            ended = FAILED if deletion.result is Result.REFUSED else OBSOLETE
            return await self._ended(request_id, ended, _deleted_answer(deletion))
        if request_id is not None:
            try:
                await record_deleted(self._state, request_id, deletion.pod or pod, self._ready_timeout,
                                     deletion.message, in_place=deletion.result is Result.REQUESTED)
            except (StateUnavailable, InvalidTransition, UnknownRequest) as exc:
                _log.error("upgrade_verification_unrecorded", id=request_id, pod=key, error=str(exc))
        return _outcome(Answer.STARTED, f"Start updating pod {key}", request_id)

    async def _record(self, namespace: str, name: str, uid: str, origin: str) -> tuple[UpgradeRequest | None, bool]:
        """Record the request as `running` before the DELETE, so that it is verified and reported.

        A store that cannot be written must not stop OpenYurt's explicit upgrade: the pod is still deleted,
        the answer simply carries no id (and says nothing it cannot keep).
        """
        try:
            return await self._state.enqueue(namespace, name, uid, self._node, state=RUNNING, origin=origin,
                                             message="deleting the pod")
        except StateUnavailable as exc:
            _log.error("upgrade_unrecorded", pod=f"{namespace}/{name}", error=str(exc),
                       hint="the pod is deleted, but its outcome is not verified")
            return None, True

    async def _ended(self, request_id: str | None, state: str, outcome: Outcome) -> Outcome:
        if request_id is not None:
            try:
                await self._state.set_state(request_id, state, outcome.message)
            except (StateUnavailable, InvalidTransition, UnknownRequest) as exc:
                _log.error("upgrade_outcome_unrecorded", id=request_id, error=str(exc))
        return Outcome(outcome.answer, outcome.message, request_id, retry_later=outcome.retry_later)

    async def _requeue(self, request_id: str | None, namespace: str, name: str, uid: str, reason: str) -> Outcome:
        """The DELETE did not get through: the recorded request goes to the queue for the drainer."""
        if request_id is None:
            return await self._enqueue(namespace, name, uid, reason)
        key = f"{namespace}/{name}"
        try:
            request = await self._state.set_state(request_id, QUEUED_STATE, f"queued: {reason}")
        except (StateUnavailable, InvalidTransition, UnknownRequest) as exc:
            return _outcome(Answer.UNAVAILABLE,
                            f"the cloud cannot be reached ({reason}) and the upgrade request for pod {key} "
                            f"could not be stored: {exc}; nothing was queued")
        await publish_queue_counts(self._state, self._metrics)
        for callback in self.on_queued:
            callback()
        return _outcome(Answer.QUEUED, f"Upgrade of pod {key} queued as request {request.id}: {reason}; it is applied "
                             "when the cloud is reachable again", request.id)

    @staticmethod
    def _cloud_refused(doing: str, key: str, exc: KubeError) -> Outcome:
        return _outcome(Answer.BAD_GATEWAY, f"the cloud API refused {doing} pod {key} ({exc.code}): {exc.message}")


    async def _queue_from_cache(self, namespace: str, name: str, reason: str) -> Outcome:
        key = f"{namespace}/{name}"
        pod = self._cache.get(namespace, name)
        if pod is None:
            return _outcome(Answer.NOT_FOUND,
                            f"pod {key} is not in the local cache and the cloud cannot be asked ({reason})")
        refusal = upgrade_refusal(pod, self._node)
        if refusal is not None:
            return refusal
        return await self._enqueue(namespace, name, uid_of(pod), reason)

    async def _enqueue(self, namespace: str, name: str, uid: str, reason: str) -> Outcome:
        key = f"{namespace}/{name}"
        try:
            request, created = await self._state.enqueue(namespace, name, uid, self._node,
                                                         message=f"queued: {reason}")
        except StateUnavailable as exc:
            return _outcome(Answer.UNAVAILABLE,
                            f"the cloud cannot be reached ({reason}) and the upgrade request for pod {key} "
                            f"could not be stored: {exc}; nothing was queued")
        await publish_queue_counts(self._state, self._metrics)
        if created:
            for callback in self.on_queued:
                callback()
            return _outcome(Answer.QUEUED,
                            f"Upgrade of pod {key} queued as request {request.id}: {reason}; it is applied "
                            "when the cloud is reachable again", request.id)
        return _outcome(Answer.QUEUED, _already(request), request.id)

    async def _active_request(self, namespace: str, name: str) -> UpgradeRequest | None:
        try:
            return await self._state.active_request(namespace, name)
        except StateUnavailable:
            return None  # nothing readable is queued; the online path does not need the store

    # ------------------------------------------------------------------ ?when=open

    async def upgrade_when_open(self, namespace: str, name: str) -> Outcome:
        """`POST …/upgrade?when=open`: always queued (202), applied by the drainer once the node is open.

        The pod is checked now as for any request (fresh from the cloud when it answers, else from the
        cache), so a request that could never be applied is refused at once rather than at the window.
        """
        outcome = await self._upgrade_when_open(namespace, name)
        _log.info("upgrade_request", pod=f"{namespace}/{name}", when="open", status=outcome.status_word,
                  message=outcome.message, id=outcome.request_id)
        if self._metrics is not None:
            self._metrics.upgrade_outcome(outcome.status_word)
        return outcome

    async def _upgrade_when_open(self, namespace: str, name: str) -> Outcome:
        invalid = validate_names(namespace, name)
        if invalid is not None:
            return invalid
        key = f"{namespace}/{name}"
        pod: JSON | None = None
        if self._link.connected:
            try:
                async with asyncio.timeout(self._upgrade_timeout):
                    pod = await self._client.get(pod_path(namespace, name), timeout=self._request_timeout)
            except NotFound:
                return _outcome(Answer.NOT_FOUND, f"pod {key} not found")
            except Forbidden as exc:
                return _refused(refused_read(key, self._node, exc, self._cache.get(namespace, name)))
            except KubeError as exc:
                if not exc.retryable:
                    return self._cloud_refused("reading", key, exc)
            except (KubeUnreachable, TimeoutError) as exc:
                self._link.report_failure(f"GET {key} failed: {describe_failure(exc)}")
        if pod is None:
            pod = self._cache.get(namespace, name)
            if pod is None:
                return _outcome(Answer.NOT_FOUND, f"pod {key} is not in the local cache and the cloud did not answer")
        refusal = upgrade_refusal(pod, self._node)
        if refusal is not None:
            return refusal
        try:
            request, created = await self._state.enqueue(
                namespace, name, uid_of(pod), self._node, when_open=True,
                message="queued until the node is open (?when=open)")
        except StateUnavailable as exc:
            return _outcome(Answer.UNAVAILABLE,
                            f"the upgrade request for pod {key} could not be stored: {exc}; nothing was queued")
        await publish_queue_counts(self._state, self._metrics)
        if not created:
            return _outcome(Answer.QUEUED, _already(request), request.id)
        for callback in self.on_queued:
            callback()
        return _outcome(Answer.QUEUED,
                        f"Upgrade of pod {key} queued as request {request.id}: it is applied when the node is "
                        "open (no hold, inside a maintenance window) and the cloud is reachable", request.id)

    # ------------------------------------------------------------------ imagepull

    async def imagepull(self, namespace: str, name: str) -> Outcome:
        outcome = await self._imagepull(namespace, name)
        _log.info("imagepull_request", pod=f"{namespace}/{name}", status=outcome.status_word,
                  message=outcome.message)
        if self._metrics is not None:
            self._metrics.image_pull_outcome(outcome.status_word)
        return outcome

    async def _imagepull(self, namespace: str, name: str) -> Outcome:
        """Ask for the next version's image: PodImageReady False/WaitPullImage with that version.

        Needs the cloud (the condition lives there); not queued, since a pre-pull is only useful
        ahead of an upgrade and a stale one would be misleading.
        """
        invalid = validate_names(namespace, name)
        if invalid is not None:
            return invalid
        key = f"{namespace}/{name}"
        if not self._link.connected:
            return _outcome(Answer.UNAVAILABLE,
                            f"the cloud link is down; the image pre-pull for pod {key} needs the cloud, "
                            "try again when it is back")
        path = pod_path(namespace, name)
        deadline = _Deadline(self._upgrade_timeout, self._request_timeout)
        pod: JSON | None = None
        try:
            async with asyncio.timeout(self._upgrade_timeout):
                pod = await self._client.get(path, timeout=deadline.left())
                refusal = _imagepull_refusal(pod, self._node)
                if refusal is not None:
                    return refusal
                need = get_condition(pod, CONDITION_POD_NEED_UPGRADE) or {}
                version = version_from_message(str(need.get("message") or "")) or ""
                patch = {
                    # The UID guard: a replaced pod must not receive the old pod's request.
                    "metadata": {"uid": uid_of(pod)},
                    "status": {"conditions": [{
                        "type": CONDITION_POD_IMAGE_READY,
                        "status": "False",
                        "reason": REASON_WAIT_PULL_IMAGE,
                        "message": version_message(version),
                        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }]},
                }
                await self._client.patch(f"{path}/status", patch, CONTENT_STRATEGIC_MERGE_PATCH,
                                         timeout=deadline.left())
        except NotFound:
            return _outcome(Answer.NOT_FOUND, f"pod {key} not found")
        except Forbidden as exc:
            if pod is None:  # the read was refused: a pod this node may not see; else a missing grant to patch
                return _refused(refused_read(key, self._node, exc, self._cache.get(namespace, name)))
            return self._cloud_refused("patching", key, exc)
        except (Conflict, Invalid) as exc:
            return _outcome(Answer.CONFLICT, f"pod {key} was replaced meanwhile; the image pre-pull was not recorded: "
                                     f"{exc.message}")
        except KubeError as exc:
            if exc.retryable:
                return _outcome(Answer.UNAVAILABLE,
                                f"the cloud API could not take the image pre-pull for pod {key} now "
                                f"({exc.code}): {exc.message}")
            return self._cloud_refused("patching", key, exc)
        except (KubeUnreachable, TimeoutError) as exc:
            reason = f"image pre-pull for {key}: {describe_failure(exc)}"
            self._link.report_failure(reason)
            return _outcome(Answer.UNAVAILABLE,
                            f"the cloud API did not answer ({describe_failure(exc)}); the image pre-pull for pod "
                            f"{key} needs the cloud, try again later")
        return _outcome(Answer.IMAGE_PULL_REQUESTED, f"Image pre-pull requested for pod {key}")


def _imagepull_refusal(pod: JSON, node_name: str) -> Outcome | None:
    refusal = placement_refusal(pod, node_name)
    if refusal is not None:
        return _refused(refusal)
    key = key_of_pod(pod)
    need = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
    if need is None or need.get("status") != "True" or not version_from_message(str(need.get("message") or "")):
        return _outcome(Answer.FORBIDDEN, f"pod {key} has no pending version to pre-pull: condition "
                             f"{CONDITION_POD_NEED_UPGRADE} is not 'True' with a 'controllerrevision: <hash>' message")
    return None


def _already(request: UpgradeRequest) -> str:
    return f"Upgrade of pod {request.key} is already queued as request {request.id} (state {request.state})"


def _read_answer(read: Deletion) -> Outcome:
    """The answer when the guarded delete stopped at its read (not found, refused by the checks or the cloud)."""
    if read.result is Result.GONE:
        return _outcome(Answer.NOT_FOUND, read.message)
    if read.result is Result.REFUSED and read.refusal is not None:
        return _credentials_refused(read) or _refused((read.refusal, read.message))
    return _outcome(Answer.CONFLICT, read.message)  # replaced (only when an expected UID was given)


def _credentials_refused(step: Deletion) -> Outcome | None:
    """A 401: the cloud rejected our credentials, not the request. Online the caller is told at once (502), but
    a rotated token is on its way (the client re-reads it), so the auto-upgrader asks again, it does not skip."""
    if step.refusal is Refusal.CLOUD and isinstance(step.error, KubeError) and step.error.code == 401:
        return Outcome(Answer.BAD_GATEWAY, step.message, retry_later=True)
    return None


def _deleted_answer(deletion: Deletion) -> Outcome:
    """The answer when the DELETE (or the in-place request) itself did not happen: gone, replaced, refused by the
    checks on the pod read again after a 409 (answered as at the first read), or refused by the cloud."""
    if deletion.result is Result.GONE:
        return _outcome(Answer.NOT_FOUND, deletion.message)
    if deletion.result is Result.REPLACED:
        return _outcome(Answer.CONFLICT, deletion.message)
    if deletion.refusal is not None and deletion.refusal is not Refusal.CLOUD:
        return _refused((deletion.refusal, deletion.message))
    return _credentials_refused(deletion) or _outcome(Answer.BAD_GATEWAY, deletion.message)
