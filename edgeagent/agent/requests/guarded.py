"""The one way the agent upgrades a pod: GET, checks, then DELETE with the UID precondition (or, for a DaemonSet
`InPlaceIfPossible`, the in-place request recorded on the pod's status), classify.

The online request, the drainer and the auto-upgrader (which goes through the online request) all come
here, so they apply the same checks and read the cloud's answers the same way. Between the read and the
delete the DaemonSet controller may replace the pod under the same name; the UID precondition turns that
race into a `409`, classified `replaced`: the replacement is never deleted.

The answer is a domain result, not an HTTP status: `deleted`, `requested` (in place), `gone` (404), `replaced`
(another UID, or 409 on the precondition), `refused` (the checks said no, or the cloud refused with a 4xx it
means) and `transient` (no answer, 5xx, 429: worth trying again). Callers map results to what they need: the
upgrade service to its answers (their HTTP codes are one table in api/http.py), the drainer to request states.

OTA in place (issue 37): the agent's credential may write its pods' status, never their spec, so for a pod of an
`edgeagent.io/update-type: InPlaceIfPossible` DaemonSet the last step is not a DELETE but a `pods/status` PATCH of
the condition `edgeagent.io/InPlaceUpgradeRequested` (`True`, naming the revision PodNeedUpgrade asks for), with
the same UID and resourceVersion preconditions; the controller carries it out (controller/inplace_exec.py). The
update type is read off the DaemonSet (`get daemonsets`, the grant the plan check uses, in the same read); an
agent that may not read it (a kubelet identity) deletes, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from edgeagent import log
from edgeagent.contract import (
    CONDITION_IN_PLACE_UPGRADE_REQUESTED,
    CONDITION_POD_IMAGE_READY,
    CONDITION_POD_NEED_UPGRADE,
    REASON_IN_PLACE_REQUESTED,
    REASON_WAVE_REACHED,
    UPDATE_TYPE_IN_PLACE_IF_POSSIBLE,
    image_not_ready,
    target_revision,
    version_message,
)
from edgeagent.inplace import update_type
from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient
from edgeagent.kube.errors import Conflict, Forbidden, KubeError, KubeUnreachable, NotFound
from edgeagent.kube.objects import (
    daemonset_owner,
    get_condition,
    is_terminating,
    meta,
    node_name_of,
    pod_path,
    uid_of,
)
from edgeagent.rollout import api as plan_api
from edgeagent.rollout.state import PHASE_ABORTED, revision_now, state_from_status
from edgeagent.rollout.steer import pending, plans_path

JSON = dict[str, Any]
_log = log.get("edgeagent.guarded")


class Result(StrEnum):
    DELETED = "deleted"
    REQUESTED = "requested"  # the in-place request is on the pod's status; the controller carries it out
    GONE = "gone"
    REPLACED = "replaced"
    REFUSED = "refused"
    TRANSIENT = "transient"


class Refusal(StrEnum):
    """Why a pod may not be upgraded (Result.REFUSED)."""

    NOT_A_DAEMONSET_POD = "NotADaemonSetPod"
    OTHER_NODE = "OtherNode"
    TERMINATING = "Terminating"
    NOT_NEEDED = "NotNeeded"
    IMAGE_NOT_READY = "ImageNotReady"
    CLOUD = "Cloud"  # the API server refused with a 4xx it means (RBAC, validation)
    # The API server refuses this node reading a pod that is not in its cache: from Kubernetes 1.36 the Node
    # authorizer answers 403 for any pod not bound to the node, and for one that does not exist.
    NOT_VISIBLE = "NotVisible"
    # The pod's DaemonSet has a rollout plan whose state lags its spec: PodNeedUpgrade may be stale. Not yet,
    # rather than no: a queued or automatic request waits and is tried again.
    PLAN_NOT_CAUGHT_UP = "PlanNotCaughtUp"


@dataclass(frozen=True)
class Deletion:
    result: Result
    message: str
    pod: JSON | None = None  # as read: the deleted pod (for the verifier), or the one the checks refused
    refusal: Refusal | None = None
    error: BaseException | None = None  # the cloud's answer, or the missing one


class PodLookup(Protocol):
    """What the guard and the upgrade service need from the pod cache (PodCache satisfies it)."""

    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...


def refused_read(key: str, node_name: str, exc: Forbidden, cached: JSON | None) -> tuple[Refusal, str]:
    """What a `403` on reading pod `key` means. A pod in this node's cache is bound here, so the refusal is a
    missing grant (`CLOUD`, the cloud's message). Any other pod is one this node may not read: a kubelet identity
    on Kubernetes >= 1.36 gets a 403 for a pod bound to another node and for one that does not exist alike
    (`NOT_VISIBLE`). Never a verdict on our credentials: only a 401 is (kube/client.py CredentialHealth)."""
    if cached is not None:
        return Refusal.CLOUD, f"the cloud API refused reading pod {key} ({exc.code}): {exc.message}"
    return Refusal.NOT_VISIBLE, (f"pod {key} is not bound to this node ({node_name!r}), or does not exist: the "
                                 f"cloud API refuses this node reading it ({exc.code}: {exc.message})")


class Link(Protocol):
    """What the guard needs from the link monitor (LinkMonitor satisfies it)."""

    @property
    def connected(self) -> bool: ...

    def report_failure(self, reason: str) -> None: ...


def key_of_pod(pod: JSON) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def placement_refusal(pod: JSON, node_name: str) -> tuple[Refusal, str] | None:
    """Why this node's agent may not act on this pod at all (upgrade or image pre-pull), or None."""
    key = key_of_pod(pod)
    bound = node_name_of(pod)
    if bound != node_name:
        where = f"node {bound!r}" if bound else "no node"
        return Refusal.OTHER_NODE, f"pod {key} is bound to {where}, not to this node ({node_name!r})"
    if is_terminating(pod):
        return Refusal.TERMINATING, f"pod {key} is already being deleted"
    if daemonset_owner(pod) is None:
        return (Refusal.NOT_A_DAEMONSET_POD,
                f"pod {key} is not owned by a DaemonSet; only DaemonSet pods can be upgraded")
    return None


def upgrade_check(pod: JSON, node_name: str, *, queued: bool = False) -> tuple[Refusal, str] | None:
    """The checks every upgrade path applies; None when the pod may be deleted now.

    `queued`: the request was accepted earlier, so a pod that needs no upgrade "no longer" needs one.
    """
    refusal = placement_refusal(pod, node_name)
    if refusal is not None:
        return refusal
    key = key_of_pod(pod)
    need = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
    if need is None or need.get("status") != "True":
        state = "absent" if need is None else f"{need.get('status')!r}"
        return Refusal.NOT_NEEDED, (f"pod {key} {'no longer needs' if queued else 'does not need'} an upgrade: "
                                    f"condition {CONDITION_POD_NEED_UPGRADE} is {state}, not 'True'")
    image = image_not_ready(pod)
    if image is not None:
        return Refusal.IMAGE_NOT_READY, (f"pod {key}: the image of the current version is not ready: condition "
                                         f"{CONDITION_POD_IMAGE_READY} is {image.get('status')!r} for "
                                         f"{image.get('message')!r}, wanted 'True' for {need.get('message')!r}")
    return None


def plan_of(plans: list[JSON], ds: JSON) -> tuple[JSON | None, str | None]:
    """(the DaemonSet's RolloutPlan, None), (None, None) without one, or (None, why) when two name it."""
    name = meta(ds).get("name")
    found = [p for p in plans if isinstance(p, dict) and (p.get("spec") or {}).get("daemonSet") == name]
    if len(found) > 1:
        return None, f"{len(found)} RolloutPlans name it (the controller moves none of them)"
    return (found[0] if found else None), None


def plan_lag(ds: JSON, plan: JSON | None, pod: JSON) -> str | None:
    """Why the pod's PodNeedUpgrade cannot be trusted yet, given its DaemonSet and the DaemonSet's RolloutPlan
    (None: it can).

    After a template change the controller first writes the new revision's rollout state (the plan's status),
    then flips the conditions of pods whose wave is not reached; until both are done a pod can still say `True`
    for the old revision, and deleting it would give its node the new revision before its wave. The status names
    the DaemonSet generation (`observedGeneration`) and the revision it was decided for: both must match what the
    DaemonSet and the pod say now. A DaemonSet without a (valid) plan is rolled without waves: nothing to check.
    An abort of the revision the pod names (requested on the plan and not handled yet, or in its status) refuses
    too: the controller withdraws the conditions one PATCH at a time."""
    if plan is None or plan_api.parse_spec(plan.get("spec"))[0] is None:
        return None
    key, ds_key = key_of_pod(pod), f"{meta(ds).get('namespace', '')}/{meta(ds).get('name', '')}"
    state, unreadable = state_from_status(plan.get("status"))
    if state is None:
        why = unreadable or "it has no status yet"
        return (f"pod {key} is not upgraded now: DaemonSet {ds_key} has a RolloutPlan but the controller has not "
                f"caught up ({why}); try again once it has")
    generation = meta(ds).get("generation")
    named = target_revision(pod)
    if state.generation is not None and isinstance(generation, int) and state.generation != generation:
        return (f"pod {key} is not upgraded now: DaemonSet {ds_key} changed (generation {generation}) and the "
                f"controller has not caught up (its rollout status is for generation {state.generation}); "
                "try again once it has")
    current = revision_now(state)
    if named != current:
        return (f"pod {key} is not upgraded now: DaemonSet {ds_key} changed and the controller has not caught "
                f"up: {CONDITION_POD_NEED_UPGRADE} names revision {named}, the rollout is of revision {current}; "
                "try again once the pod's condition is updated")
    # An abort stops every pod at once, but the controller flips the conditions one PATCH at a time (or not at
    # all while the API server refuses it): a True that outlived the abort must not move a pod.
    asked = pending(plan) or {}
    if (asked.get("verb") == "abort" and asked.get("revision") == named) \
            or (state.phase == PHASE_ABORTED and state.revision == named):
        return (f"pod {key} is not upgraded now: the rollout of revision {named} of DaemonSet {ds_key} was aborted "
                "and the controller has not withdrawn its condition yet")
    return None


# DaemonSets whose plan could not be checked (no RBAC to read them, or gone), logged once until a read works.
# Keyed by the DaemonSet object (namespace/name and UID): a DaemonSet deleted and created again is a new episode.
_unchecked: set[str] = set()


def _in_place(ds: JSON) -> bool:
    try:
        return update_type(ds) == UPDATE_TYPE_IN_PLACE_IF_POSSIBLE
    except ValueError:
        return False  # a value we do not know: the controller warns about it; the node recreates as by default


def request_patch(pod: JSON) -> JSON:
    """The in-place request (`contract.CONDITION_IN_PLACE_UPGRADE_REQUESTED`) as a `pods/status` strategic merge
    patch: `True`, naming the revision PodNeedUpgrade asks for, guarded by the pod's UID and resourceVersion."""
    cond = {"type": CONDITION_IN_PLACE_UPGRADE_REQUESTED, "status": "True", "reason": REASON_IN_PLACE_REQUESTED,
            "message": version_message(target_revision(pod) or ""),
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    metadata: JSON = {"uid": uid_of(pod)}
    rv = meta(pod).get("resourceVersion")
    if rv:
        metadata["resourceVersion"] = str(rv)
    return {"metadata": metadata, "status": {"conditions": [cond]}}


def describe_failure(exc: BaseException) -> str:
    """A cloud call that did not get an answer, in words ("timed out" rather than an empty TimeoutError)."""
    if isinstance(exc, TimeoutError) or isinstance(exc.__cause__, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


# A pod that changes between our read and our DELETE is read again this many times before we give up for now.
_CHANGED_RETRIES = 3


class GuardedDelete:
    """One pod's guarded delete. `run()` does it all; the online path calls `read()`, records the request,
    then `delete()`, so that a request is on disk before its pod is deleted."""

    def __init__(self, client: KubeClient, link: Link, namespace: str, name: str, *, node_name: str,
                 timeout: Callable[[], float], expected_uid: str | None = None, queued: bool = False,
                 cache: PodLookup | None = None) -> None:
        self._client = client
        self._cache = cache  # tells a 403 on a pod of ours (a missing grant) from one on a pod not ours
        self._link = link
        self._node = node_name
        self._timeout = timeout  # seconds left for the next call (raises TimeoutError when none are)
        self._expected_uid = expected_uid
        self._queued = queued
        self.key = f"{namespace}/{name}"
        self._namespace, self._name = namespace, name
        self.path = pod_path(namespace, name)
        # Set by `read`: the pod's DaemonSet says `InPlaceIfPossible`, so `delete` records the in-place request.
        self.in_place = False

    async def run(self) -> Deletion:
        read = await self.read()
        return read if isinstance(read, Deletion) else await self.delete(read)

    async def read(self) -> JSON | Deletion:
        """The pod, fresh from the cloud and past every check; or why not."""
        try:
            left = self._timeout()
            async with asyncio.timeout(left + 1.0):  # not wait_for: see edgeagent/aio.py
                pod = await self._client.get(self.path, timeout=left)
        except NotFound as exc:
            return Deletion(Result.GONE, f"pod {self.key} not found (it no longer exists, or never did)", error=exc)
        except Forbidden as exc:
            cached = self._cache.get(self._namespace, self._name) if self._cache is not None else {}
            why, message = refused_read(self.key, self._node, exc, cached)
            if self._queued and why is Refusal.CLOUD:
                # A queued pod still in the cache: the cache may not have caught up with its deletion yet (the
                # link just returned), or a grant is missing; either is no verdict on the request. It waits.
                return Deletion(Result.TRANSIENT, f"GET {self.key}: {message}", error=exc)
            return Deletion(Result.REFUSED, message, refusal=why, error=exc)
        except (KubeError, KubeUnreachable, TimeoutError) as exc:
            return self._failed("GET", "reading", exc)
        uid = uid_of(pod)
        if self._expected_uid is not None and uid != self._expected_uid:
            return Deletion(Result.REPLACED, (f"pod {self.key} was replaced (uid {self._expected_uid} is now {uid}); "
                                              "the new pod is not touched"), pod=pod)
        refusal = upgrade_check(pod, self._node, queued=self._queued)
        if refusal is not None:
            return Deletion(Result.REFUSED, refusal[1], pod=pod, refusal=refusal[0])
        behind = await self._plan_check(pod)
        return pod if behind is None else behind

    async def _plan_check(self, pod: JSON) -> Deletion | None:
        """Read the pod's DaemonSet: its `edgeagent.io/update-type` (`self.in_place`) and, for a pod of a DaemonSet
        with a rollout plan (PodNeedUpgrade's reason `WaveReached`), the RolloutPlans of its namespace, refusing
        while the plan's status lags (`plan_lag`). Pods of other DaemonSets cost no plan read.

        An agent that may not read them (kubelet credentials: `get daemonsets` and `list rolloutplans` are the
        ServiceAccount's grants, deploy/agent-rbac.yaml), a cluster without the RolloutPlan kind, or a DaemonSet
        that is gone: it proceeds as without the check, on the condition alone, and deletes (logged once,
        docs/operations.md)."""
        need = get_condition(pod, CONDITION_POD_NEED_UPGRADE) or {}
        owner = daemonset_owner(pod)
        self.in_place = False
        if owner is None:
            return None
        planned = need.get("reason") == REASON_WAVE_REACHED
        namespace = str(meta(pod).get("namespace") or "")
        ds_key = f"{namespace}/{owner.get('name', '')}"
        episode = f"{ds_key} {owner.get('uid', '')}"
        what = "the DaemonSet"
        try:
            left = self._timeout()
            async with asyncio.timeout(left + 1.0):
                ds = await self._client.get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{owner.get('name', '')}",
                                            timeout=left)
            if uid_of(ds) != owner.get("uid"):
                self._note_unchecked(ds_key, episode, "the DaemonSet was replaced")
                return None
            self.in_place = _in_place(ds)
            if not planned:
                _unchecked.discard(episode)
                return None
            what = "the RolloutPlans of the namespace"
            left = self._timeout()
            async with asyncio.timeout(left + 1.0):
                listed = await self._client.get(plans_path(namespace), timeout=left)
        except (Forbidden, NotFound) as exc:
            self._note_unchecked(ds_key, episode, f"{what}: {exc.code} {type(exc).__name__}")
            return None
        except (KubeError, KubeUnreachable, TimeoutError) as exc:
            return self._failed("GET", f"reading {what} ({ds_key}) of", exc, pod)
        _unchecked.discard(episode)
        plan, ambiguous = plan_of(list(listed.get("items") or []), ds)
        lag = (f"pod {key_of_pod(pod)} is not upgraded now: DaemonSet {ds_key}: {ambiguous}" if ambiguous
               else plan_lag(ds, plan, pod))
        if lag is None:
            return None
        return Deletion(Result.REFUSED, lag, pod=pod, refusal=Refusal.PLAN_NOT_CAUGHT_UP)

    @staticmethod
    def _note_unchecked(ds_key: str, episode: str, why: str) -> None:
        if episode not in _unchecked:
            _unchecked.add(episode)
            _log.info("plan_check_skipped", daemonset=ds_key, why=why,
                      hint="upgrading on PodNeedUpgrade alone, by deleting the pod: the agent cannot read the "
                           "DaemonSet (its RolloutPlan, its update type)")

    async def delete(self, pod: JSON) -> Deletion:
        """The upgrade's one write: the DELETE, or for a DaemonSet `InPlaceIfPossible` the in-place request."""
        return await (self._request_in_place(pod) if self.in_place else self._delete(pod))

    async def _request_in_place(self, pod: JSON) -> Deletion:
        """Record the node's in-place request on the pod's status, with the UID and resourceVersion of the pod that
        was read and checked as preconditions (as the DELETE has them: the checks hold at the moment of the write;
        a pod that changed meanwhile is read again and re-checked). The controller executes it."""

        async def write(pod: JSON, left: float) -> None:
            await self._client.patch(f"{self.path}/status", request_patch(pod), CONTENT_STRATEGIC_MERGE_PATCH,
                                     timeout=left)

        def done(pod: JSON) -> Deletion:
            return Deletion(Result.REQUESTED, (
                f"Start updating pod {self.key} in place: the request for revision {target_revision(pod) or ''} is "
                f"recorded on the pod (uid {uid_of(pod)}); the controller patches its images, the pod is kept"),
                pod=pod)

        return await self._guarded_write(pod, write, done, verb="PATCH", target=f"{self.key}/status",
                                         doing="recording the in-place request on",
                                         spared="nothing was asked of the new pod")

    async def _delete(self, pod: JSON) -> Deletion:
        """DELETE with the UID and resourceVersion of the pod that was read and checked as preconditions,
        classified. The resourceVersion makes the checks hold at the moment of the delete, not only at the read:
        a pod that changed meanwhile (PodNeedUpgrade turned False, someone began deleting it, or a DELETE of
        ours that timed out on the way was carried out late) is refused with 409, read again and re-checked."""

        async def write(pod: JSON, left: float) -> None:
            preconditions = {"uid": uid_of(pod)}
            rv = (pod.get("metadata") or {}).get("resourceVersion")
            if rv:
                preconditions["resourceVersion"] = str(rv)
            await self._client.delete(self.path, {"preconditions": preconditions}, timeout=left)

        def done(pod: JSON) -> Deletion:
            return Deletion(Result.DELETED, (f"Start updating pod {self.key}: deleted (uid {uid_of(pod)}); waiting "
                                             "for its replacement to be Ready on the new revision"), pod=pod)

        return await self._guarded_write(pod, write, done, verb="DELETE", target=self.key, doing="deleting",
                                         spared="the new pod was not deleted")

    async def _guarded_write(self, pod: JSON, write: Callable[[JSON, float], Awaitable[None]],
                             done: Callable[[JSON], Deletion], *, verb: str, target: str, doing: str,
                             spared: str) -> Deletion:
        """The upgrade's one write (`write`, carrying the pod's UID and resourceVersion as preconditions),
        classified, for the DELETE and the in-place request alike: gone (404), or changed meanwhile (409: read
        again; replaced by a new pod ends it, the same pod changed is re-checked and written again), or failed."""
        for _ in range(_CHANGED_RETRIES):
            uid = uid_of(pod)
            try:
                left = self._timeout()
                async with asyncio.timeout(left + 1.0):
                    await write(pod, left)
            except NotFound as exc:
                return Deletion(Result.GONE, f"pod {self.key} no longer exists: it was deleted meanwhile", pod=pod,
                                error=exc)
            except Conflict as exc:
                again = await self.read()
                if isinstance(again, Deletion):
                    return again
                if uid_of(again) != uid:
                    return Deletion(Result.REPLACED, (f"pod {self.key} was replaced meanwhile (uid {uid} no longer "
                                                      f"exists); {spared}: {exc.message}"), pod=again, error=exc)
                pod = again  # the same pod, changed, still to be upgraded: try with what it is now
                continue
            except (KubeError, KubeUnreachable, TimeoutError) as exc:
                return self._failed(verb, doing, exc, pod)
            return done(pod)
        return Deletion(Result.TRANSIENT, f"{verb} {target}: the pod kept changing; trying again later", pod=pod)

    def _failed(self, verb: str, doing: str, exc: BaseException, pod: JSON | None = None) -> Deletion:
        if isinstance(exc, KubeError):
            # A queued request and a 401: our credentials were rejected. That is this node's to fix (a renewed
            # token or certificate), no verdict on the request: it waits, stored, like one the cloud cannot take
            # now. (Online, the caller is told at once: 502.)
            if exc.retryable or (self._queued and exc.code == 401):
                return Deletion(Result.TRANSIENT, f"{verb} {self.key}: the cloud answered {exc.code}: {exc.message}",
                                pod=pod, error=exc)
            return Deletion(Result.REFUSED, f"the cloud API refused {doing} pod {self.key} ({exc.code}): {exc.message}",
                            pod=pod, refusal=Refusal.CLOUD, error=exc)
        reason = f"{verb} {self.key} failed: {describe_failure(exc)}"
        self._link.report_failure(reason)
        return Deletion(Result.TRANSIENT, reason, pod=pod, error=exc)


__all__ = ["Deletion", "GuardedDelete", "PodLookup", "Refusal", "Result", "describe_failure", "placement_refusal",
           "plan_lag", "refused_read", "request_patch", "upgrade_check"]
