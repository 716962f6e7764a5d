"""Image pre-pull: answers `PodImageReady` `False`/`WaitPullImage` with a Job on the pod's node, and owns that
condition from then on (`PullImageSuccess`, `PullImageFail`).

What it adds to OpenYurt's image-preheat controller: success is judged by the node's own `status.images`
listing every image of the revision (not by the Job's exit), a failed pull is retried with capped exponential
backoff instead of dropping the version, every attempt leaves one Event on the pod, and the Jobs are capped
cluster-wide and per node. The pod condition is the durable state: its message carries the attempt number, so
a new leader continues where the old one stopped instead of starting over.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from edgeagent import backoff, log
from edgeagent.contract import (
    ANNOTATION_DAEMONSET,
    ANNOTATION_POD,
    ANNOTATION_PRE_PULL,
    ANNOTATION_REVISION,
    CONDITION_POD_IMAGE_READY,
    EVENT_IMAGE_PRE_PULL_FAILED,
    EVENT_IMAGE_PRE_PULLED,
    EVENT_NORMAL,
    EVENT_WARNING,
    LABEL_PREPULL,
    PREPULL_JOB_PREFIX,
    REASON_PULL_IMAGE_FAIL,
    REASON_PULL_IMAGE_SUCCESS,
    REASON_WAIT_PULL_IMAGE,
    VERSION_MESSAGE_PREFIX,
    version_message,
)
from edgeagent.controller.events import EventRecorder
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.errors import Conflict, Invalid, NotFound
from edgeagent.kube.images import node_has_images, normalize_image
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
from edgeagent.kube.timeutil import format_time, parse_time

JSON = dict[str, Any]

MAX_JOB_NAME = 63  # the Job controller copies the name into a label value
# Pull errors the kubelet reports on a waiting container: the attempt has failed, no need to wait for the deadline.
PULL_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                         "RegistryUnavailable", "SignatureValidationFailed"})
# How long a completed Job may wait for the node to list its images (a kubelet posts them with node status).
NODE_REPORT_GRACE = 60.0
_ATTEMPT = re.compile(r"attempt (\d+) of (\d+)")

_log = log.get("edgeagent.controller.prepull")


@dataclass(frozen=True)
class PrepullSettings:
    enabled: bool = True
    max_concurrent: int = 20
    retries: int = 3
    backoff: float = 10.0  # first retry delay; doubles per failed attempt
    backoff_cap: float = 300.0
    deadline: float = 600.0  # the Job's activeDeadlineSeconds


# ---------------------------------------------------------------------------------------------- pure parts


# How long a Job whose create failed without saying whether it was carried out (a 5xx, no answer) keeps its slot
# while the informer does not show it. The informer brings a created Job within a second on a healthy link;
# this bounds the wait of a pod whose create really failed.
UNSURE_CREATE_TTL = 30.0


def retry_delay(failed_attempts: int, base: float, cap: float) -> float:
    """Delay before the next attempt after `failed_attempts` failures: base, 2·base, 4·base … at most cap."""
    return backoff.exponential(failed_attempts, initial=base, cap=cap)


def job_name(pod_name: str, revision: str) -> str:
    """`image-pre-pull-<pod>-<hash>`, shortened to a valid 63-character name with a digest of what was cut."""
    name = f"{PREPULL_JOB_PREFIX}{pod_name}-{revision}"
    if len(name) <= MAX_JOB_NAME:
        return name
    digest = hashlib.sha256(pod_name.encode()).hexdigest()[:5]
    room = MAX_JOB_NAME - len(PREPULL_JOB_PREFIX) - len(revision) - len(digest) - 2
    head = pod_name[:max(0, room)].rstrip("-.")
    return f"{PREPULL_JOB_PREFIX}{head}-{digest}-{revision}" if head else f"{PREPULL_JOB_PREFIX}{digest}-{revision}"


def revision_images(template: JSON) -> list[str]:
    """Distinct images of a pod template (init containers first), in order."""
    spec = template.get("spec") or {}
    seen: dict[str, str] = {}
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        image = str((container or {}).get("image") or "")
        if image and normalize_image(image) not in seen:
            seen[normalize_image(image)] = image
    return list(seen.values())


def job_manifest(ds: JSON, pod: JSON, revision: str, images: list[str], deadline: float) -> JSON:
    """The Job that pulls `images` on the pod's node: owned by the pod, pinned, tolerating every taint."""
    template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    labels = {LABEL_PREPULL: "true"}
    pod_spec: JSON = {
        "nodeName": node_name_of(pod),
        "restartPolicy": "Never",
        "tolerations": [{"operator": "Exists"}],
        "terminationGracePeriodSeconds": 0,
        # Only the pull matters: the command exits at once (an image without /bin/true fails to start, which
        # is fine — success is judged by the node listing the image, not by the exit code).
        "containers": [{"name": f"image-{index}", "image": image, "imagePullPolicy": "Always",
                        "command": ["/bin/true"]} for index, image in enumerate(images)],
    }
    if template_spec.get("imagePullSecrets"):
        pod_spec["imagePullSecrets"] = [dict(s) for s in template_spec["imagePullSecrets"]]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(name_of(pod), revision),
            "namespace": namespace_of(pod),
            "labels": dict(labels),
            "annotations": {ANNOTATION_DAEMONSET: name_of(ds), ANNOTATION_POD: name_of(pod),
                            ANNOTATION_REVISION: revision},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name_of(pod), "uid": uid_of(pod),
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, math.ceil(deadline)),
            # A safety net if no controller is left to delete it.
            "ttlSecondsAfterFinished": 600,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def condition_revision(cond: JSON | None) -> str | None:
    """The hash in a PodImageReady message (`controllerrevision: <hash>` optionally followed by more)."""
    if cond is None:
        return None
    message = str(cond.get("message") or "")
    if not message.startswith(VERSION_MESSAGE_PREFIX):
        return None
    rest = message[len(VERSION_MESSAGE_PREFIX):].split()
    return rest[0].rstrip(",:;") if rest else None


def attempts_in(cond: JSON | None) -> tuple[int, int] | None:
    """(attempt, of) from a PullImageFail message written by us; None for any other message."""
    if cond is None or cond.get("reason") != REASON_PULL_IMAGE_FAIL:
        return None
    found = _ATTEMPT.search(str(cond.get("message") or ""))
    return (int(found.group(1)), int(found.group(2))) if found else None


def failure_message(revision: str, attempt: int, total: int, error: str, retry_in: float | None) -> str:
    tail = f"retry in {retry_in:g}s" if retry_in is not None else "giving up"
    return f"{version_message(revision)} attempt {attempt} of {total} failed ({tail}): {error}"


def _job_condition(job: JSON, cond_type: str) -> JSON | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == cond_type and cond.get("status") == "True":
            return dict(cond)
    return None


def pull_error(job_pod: JSON | None) -> str | None:
    """`Reason: message` of the first container the kubelet could not pull an image for."""
    if job_pod is None:
        return None
    for status in (job_pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_ERRORS:
            return f"{waiting['reason']}: {waiting.get('message') or status.get('image')}"
    return None


@dataclass(frozen=True)
class Verdict:
    outcome: str  # "running", "succeeded", "failed", "wait"
    error: str = ""
    recheck_in: float | None = None


def judge(job: JSON, job_pod: JSON | None, node: JSON | None, images: list[str], now: float) -> Verdict:
    """Has this pull attempt succeeded (every image on the node), failed (and why), or is it still going?"""
    on_node = node is not None and node_has_images(node, images)
    complete = _job_condition(job, "Complete")
    failed = _job_condition(job, "Failed")
    pod_phase = (job_pod.get("status") or {}).get("phase") if job_pod else None
    if on_node and (complete or failed or pod_phase in ("Running", "Succeeded", "Failed")):
        return Verdict("succeeded")
    error = pull_error(job_pod)
    if error:
        return Verdict("failed", error)
    if failed:
        return Verdict("failed", f"Job {failed.get('reason') or 'Failed'}: {failed.get('message') or ''}".strip())
    if complete or pod_phase in ("Succeeded", "Failed"):
        finished = parse_time((job.get("status") or {}).get("completionTime")) or now
        missing = [i for i in images if node is None or not node_has_images(node, [i])]
        if now - finished < NODE_REPORT_GRACE:
            return Verdict("wait", recheck_in=min(5.0, NODE_REPORT_GRACE - (now - finished)))
        return Verdict("failed", f"the Job finished but node {node_name_of(job_pod or {}) or '?'} does not list "
                                 f"{', '.join(missing)}")
    return Verdict("running")


# ---------------------------------------------------------------------------------------------- metrics


class PrepullMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.jobs_created = Counter("edgeagent_image_prepull_jobs_created", "Pre-pull Jobs created",
                                    registry=registry)
        self.attempts = Counter("edgeagent_image_prepull_attempts", "Finished pre-pull attempts by result",
                                ["result"], registry=registry)
        self.gave_up = Counter("edgeagent_image_prepull_gave_up", "Pods whose pre-pull failed every attempt",
                               registry=registry)
        self.active = Gauge("edgeagent_image_prepull_active_jobs", "Pre-pull Jobs that exist now",
                            registry=registry)
        self.waiting = Gauge("edgeagent_image_prepull_waiting_pods", "Pods waiting for a pre-pull slot",
                             registry=registry)
        self.seconds = Histogram("edgeagent_image_prepull_seconds", "From Job creation to the images on the node",
                                 registry=registry, buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))


# ---------------------------------------------------------------------------------------------- the controller part


@dataclass
class _Attempt:
    failed: int = 0  # failed attempts so far for (pod uid, revision)
    next_at: float = 0.0


@dataclass
class PrePuller:
    """Called from the DaemonSet reconcile (so it runs only in the leader); reads the informers' caches."""

    client: KubeClient
    settings: PrepullSettings
    events: EventRecorder
    registry: CollectorRegistry
    write: Callable[[str], None]
    enqueue: Callable[[str], None]
    enqueue_after: Callable[[str, float], None]
    clock: Callable[[], float] = time.time
    jobs: dict[str, JSON] = field(default_factory=dict)  # job key -> Job (the informer's items)
    job_pods: dict[str, JSON] = field(default_factory=dict)  # job key -> its pod
    _attempts: dict[tuple[str, str], _Attempt] = field(default_factory=dict)
    _inflight: dict[str, str] = field(default_factory=dict)  # job key -> node, created but not yet observed
    # Job key -> until when its slot stays taken though its create failed: the failure left open whether the Job
    # was created (`_create_failed`).
    _unsure: dict[str, float] = field(default_factory=dict)
    _waiting: set[str] = field(default_factory=set)  # DaemonSet keys with a pod waiting for a slot
    _deleting: set[str] = field(default_factory=set)  # job keys deleted by us, not yet gone from the cache
    _written: dict[str, str] = field(default_factory=dict)  # pod uid -> resourceVersion our patch was based on

    def __post_init__(self) -> None:
        self.metrics = PrepullMetrics(self.registry)
        self.metrics.active.set_function(lambda: len(self._active_nodes()))
        self.metrics.waiting.set_function(lambda: len(self._waiting))

    # Event routing ---------------------------------------------------------------------------------------

    @staticmethod
    def daemonset_of_job(job: JSON) -> str | None:
        ds = annotations_of(job).get(ANNOTATION_DAEMONSET)
        return f"{namespace_of(job)}/{ds}" if ds else None

    def on_job(self, etype: str, job: JSON) -> None:
        key = f"{namespace_of(job)}/{name_of(job)}"
        if etype == "DELETED":
            self.jobs.pop(key, None)
            self.job_pods.pop(key, None)
            self._deleting.discard(key)
            # A create that met this Job (409) holds no slot once it is gone: the next pass creates ours.
            if self._unsure.pop(key, None) is not None:
                self._inflight.pop(key, None)
            if self._waiting:  # a slot freed: everyone waiting gets a chance
                for ds_key in list(self._waiting):
                    self.enqueue(ds_key)
        else:
            self.jobs[key] = job
            self._inflight.pop(key, None)
            self._unsure.pop(key, None)
        owner = self.daemonset_of_job(job)
        if owner:
            self.enqueue(owner)

    def on_job_pod(self, etype: str, pod: JSON) -> bool:
        """Index a pre-pull Job's pod; True when `pod` was one (the caller then skips its own handling)."""
        if labels_of(pod).get(LABEL_PREPULL) != "true":
            return False
        ref = controller_owner(pod)
        if ref is None or ref.get("kind") != "Job":
            return True
        key = f"{namespace_of(pod)}/{ref.get('name')}"
        if etype == "DELETED":
            if (self.job_pods.get(key) or {}).get("metadata", {}).get("uid") == uid_of(pod):
                self.job_pods.pop(key, None)
        else:
            self.job_pods[key] = pod
        job = self.jobs.get(key)
        owner = self.daemonset_of_job(job) if job else None
        if owner:
            self.enqueue(owner)
        return True

    def on_node(self, node: JSON, old: JSON | None) -> None:
        """A node's image list changed: the DaemonSets pre-pulling there re-judge their Jobs."""
        if old is not None and (node.get("status") or {}).get("images") == (old.get("status") or {}).get("images"):
            return
        name = name_of(node)
        for job in self.jobs.values():
            if _job_node(job) == name:
                owner = self.daemonset_of_job(job)
                if owner:
                    self.enqueue(owner)

    def forget_pod(self, pod_uid: str) -> None:
        self._written.pop(pod_uid, None)
        for key in [k for k in self._attempts if k[0] == pod_uid]:
            del self._attempts[key]

    # Caps ------------------------------------------------------------------------------------------------

    def _active_nodes(self) -> dict[str, str]:
        """job key -> node of every pre-pull Job that exists (or is being created): what the caps count."""
        active = {key: _job_node(job) for key, job in self.jobs.items()
                  if not is_terminating(job) and key not in self._deleting}
        active.update(self._inflight)
        return active

    def _slot(self, node: str) -> bool:
        active = self._active_nodes()
        return len(active) < self.settings.max_concurrent and node not in active.values()

    # Reconcile -------------------------------------------------------------------------------------------

    async def sync(self, ds: JSON, pods: Mapping[str, JSON], revision: str, template: JSON,
                   nodes: dict[str, JSON], pending: Collection[str] | None = None) -> list[BaseException]:
        """Start, judge and finish the pre-pulls of one DaemonSet's pods (by key); returns the errors of failed
        writes. `pending`: the keys of the pods whose `PodImageReady` is there and not True (the only ones with
        anything to do), when the caller tracks them; otherwise every pod is looked at."""
        ds_key = f"{namespace_of(ds)}/{name_of(ds)}"
        self._waiting.discard(ds_key)
        self._expire_unsure()
        images = revision_images(template)
        errors: list[BaseException] = []
        live: dict[str, JSON] | None = None
        for job_key, job in list(self.jobs.items()):
            # Jobs of this DaemonSet for an older revision, or whose pod is gone or replaced, are stale; so is one
            # whose pod says its pull is done (`pulled`): judged and recorded, but not deleted (the DELETE failed,
            # or the leader changed in between). Its pod is no longer looked at below, and the Job would hold a
            # slot of the cap for good (the soak, seed 9917: ten such Jobs, a cap of ten, no pull ever again).
            if self.daemonset_of_job(job) != ds_key or is_terminating(job) or job_key in self._deleting:
                continue
            if live is None:  # only while this DaemonSet has Jobs
                live = {uid_of(p): p for p in pods.values()}
            owner = live.get(str((controller_owner(job) or {}).get("uid")))
            if annotations_of(job).get(ANNOTATION_REVISION) != revision or owner is None \
                    or self.pulled(owner, revision):
                await self._delete_job(job, errors)
        now = self.clock()
        looked_at = pods.values() if pending is None else [pods[k] for k in pending if k in pods]
        for pod in sorted(looked_at, key=name_of):
            if is_terminating(pod) or not node_name_of(pod):
                continue
            written = self._written.get(uid_of(pod))
            if written is not None:
                if written == str(meta(pod).get("resourceVersion") or ""):
                    continue  # our condition patch is not in the cache yet: act on the pod once it is
                del self._written[uid_of(pod)]
            cond = get_condition(pod, CONDITION_POD_IMAGE_READY)
            if cond is None or condition_revision(cond) != revision or cond.get("status") == "True":
                continue
            key = f"{namespace_of(pod)}/{job_name(name_of(pod), revision)}"
            if key in self._deleting:
                continue  # the previous attempt's Job is still going away; its DELETED event brings us back
            current = self.jobs.get(key)
            if current is not None and not is_terminating(current):
                if (controller_owner(current) or {}).get("uid") == uid_of(pod):
                    await self._judge(ds_key, pod, current, images, nodes, revision, now, errors)
                continue
            if key in self._inflight:
                continue
            await self._maybe_start(ds_key, ds, pod, cond, revision, images, now, errors)
        return errors

    @staticmethod
    def wanted_by(ds: JSON) -> bool:
        return annotations_of(ds).get(ANNOTATION_PRE_PULL, "").strip().lower() == "true"

    @staticmethod
    def pulled(pod: JSON, revision: str) -> bool:
        cond = get_condition(pod, CONDITION_POD_IMAGE_READY)
        return cond is not None and cond.get("status") == "True" and condition_revision(cond) == revision

    async def request(self, pods: list[JSON], wanted: list[JSON], revision: str) -> list[BaseException]:
        """Ask for the pulls an AdvancedRollingUpdate needs next (as `/imagepull` would), in deletion order:
        as many as keep this DaemonSet's unfinished pulls within the cluster-wide cap, so pulls run ahead of
        the unavailability budget but never queue up more than the Jobs that may run at once."""
        outstanding = sum(1 for p in pods if not is_terminating(p) and self.pending_pull(p, revision))
        room = self.settings.max_concurrent - outstanding
        errors: list[BaseException] = []
        for pod in wanted:
            if room <= 0:
                break
            written = self._written.get(uid_of(pod))
            if written is not None and written == str(meta(pod).get("resourceVersion") or ""):
                continue
            cond = get_condition(pod, CONDITION_POD_IMAGE_READY)
            if cond is not None and condition_revision(cond) == revision:
                continue  # asked already (pending, done, or given up: a failed pull blocks its node's upgrade)
            room -= 1
            await self._patch(pod, "False", REASON_WAIT_PULL_IMAGE, version_message(revision), errors)
        return errors

    def pending_pull(self, pod: JSON, revision: str) -> bool:
        """Whether the pod has a pre-pull requested for `revision` that has not succeeded (nor given up)."""
        cond = get_condition(pod, CONDITION_POD_IMAGE_READY)
        if cond is None or condition_revision(cond) != revision or cond.get("status") == "True":
            return False
        done = attempts_in(cond)
        return done is None or done[0] < done[1] or self._attempts.get((uid_of(pod), revision)) is not None

    async def _maybe_start(self, ds_key: str, ds: JSON, pod: JSON, cond: JSON, revision: str, images: list[str],
                           now: float, errors: list[BaseException]) -> None:
        total = self.settings.retries + 1
        attempt = self._attempts.get((uid_of(pod), revision))
        if cond.get("reason") == REASON_PULL_IMAGE_FAIL:
            written = attempts_in(cond)
            if written is None:
                return  # someone else's failure (e.g. OpenYurt's): a new /imagepull asks again
            if attempt is None:  # a new leader: continue from the attempt the condition records
                attempt = _Attempt(failed=written[0], next_at=now + retry_delay(
                    written[0], self.settings.backoff, self.settings.backoff_cap))
                self._attempts[(uid_of(pod), revision)] = attempt
            if attempt.failed >= total:
                return
            if now < attempt.next_at:
                self.enqueue_after(ds_key, attempt.next_at - now)
                return
        elif cond.get("reason") != REASON_WAIT_PULL_IMAGE:
            return
        else:
            # A (new) request: WaitPullImage resets the count, as OpenYurt's /imagepull starts over.
            attempt = _Attempt()
            self._attempts[(uid_of(pod), revision)] = attempt
        node = node_name_of(pod)
        if not images:
            return
        if not self._slot(node):
            self._waiting.add(ds_key)
            return
        manifest = job_manifest(ds, pod, revision, images, self.settings.deadline)
        key = f"{namespace_of(pod)}/{name_of(manifest)}"
        self._inflight[key] = node
        self.write("job_create")
        try:
            await self.client.create(f"/apis/batch/v1/namespaces/{namespace_of(pod)}/jobs", manifest)
        except Conflict:  # ours from before (the informer will bring it); never a second one
            self._create_failed(key, ds_key, exists=True)
            return
        except KubeError as exc:
            self._create_failed(key, ds_key, exists=exc.code >= 500)
            errors.append(exc)
            return
        except KubeUnreachable as exc:
            self._create_failed(key, ds_key, exists=True)
            errors.append(exc)
            return
        except BaseException:
            # Cancelled (leadership lost, shutdown) with the request on its way: forget it, or the pod is skipped
            # and its node's slot taken for the life of the process (the controller object outlives a leadership
            # term). Created after all, the Job comes through the informer; asked again, the create meets 409.
            self._inflight.pop(key, None)
            raise
        self.metrics.jobs_created.inc()
        _log.info("prepull_job_created", pod=f"{namespace_of(pod)}/{name_of(pod)}", node=node, revision=revision,
                  images=images, attempt=attempt.failed + 1)

    def _create_failed(self, key: str, ds_key: str, *, exists: bool) -> None:
        """A Job create that did not answer 201. Its slot is freed only when the Job surely was not created (a
        4xx): after a 409 it exists, and after a 5xx or no answer at all it may (the server can commit a request
        and lose its answer). Such a Job counts against the caps until the informer shows it, or, if it never
        does, for `UNSURE_CREATE_TTL`; freeing the slot at once let the next pod's Job start before the informer
        brought the first, one Job over the cap (the soak, seed 41: 11 Jobs with a cap of 10, in a burst of lost
        answers). The DaemonSet is reconciled again when that time is up."""
        if not exists:
            self._inflight.pop(key, None)
            return
        self._unsure[key] = self.clock() + UNSURE_CREATE_TTL
        self.enqueue_after(ds_key, UNSURE_CREATE_TTL)

    def _expire_unsure(self) -> None:
        """Free the slots of failed creates whose Job the informer has not shown within `UNSURE_CREATE_TTL`."""
        if not self._unsure:
            return
        now = self.clock()
        for key in [k for k, until in self._unsure.items() if until <= now]:
            del self._unsure[key]
            self._inflight.pop(key, None)

    async def _judge(self, ds_key: str, pod: JSON, job: JSON, images: list[str], nodes: dict[str, JSON],
                     revision: str, now: float, errors: list[BaseException]) -> None:
        job_key = f"{namespace_of(job)}/{name_of(job)}"
        verdict = judge(job, self.job_pods.get(job_key), nodes.get(node_name_of(pod)), images, now)
        if verdict.outcome == "running":
            return
        if verdict.outcome == "wait":
            self.enqueue_after(ds_key, verdict.recheck_in or 1.0)
            return
        attempt = self._attempts.setdefault((uid_of(pod), revision), _Attempt(
            failed=(attempts_in(get_condition(pod, CONDITION_POD_IMAGE_READY)) or (0, 0))[0]))
        total = self.settings.retries + 1
        number = attempt.failed + 1
        pod_ref = {**pod, "apiVersion": "v1", "kind": "Pod"}
        if verdict.outcome == "succeeded":
            started = parse_time(meta(job).get("creationTimestamp"))
            if started is not None:
                self.metrics.seconds.observe(max(0.0, now - started))
            self.metrics.attempts.labels("succeeded").inc()
            ok = await self._patch(pod, "True", REASON_PULL_IMAGE_SUCCESS, version_message(revision), errors)
            if ok:
                self._attempts.pop((uid_of(pod), revision), None)
                await self.events.emit(pod_ref, EVENT_NORMAL, EVENT_IMAGE_PRE_PULLED,
                                       f"attempt {number} of {total}: {', '.join(images)} on node "
                                       f"{node_name_of(pod)} (revision {revision})")
                await self._delete_job(job, errors)
            return
        attempt.failed = number
        retry_in: float | None = None
        if number < total:
            retry_in = retry_delay(number, self.settings.backoff, self.settings.backoff_cap)
            attempt.next_at = now + retry_in
        self.metrics.attempts.labels("failed").inc()
        message = failure_message(revision, number, total, verdict.error, retry_in)
        ok = await self._patch(pod, "False", REASON_PULL_IMAGE_FAIL, message, errors)
        if not ok:
            attempt.failed = number - 1
            return
        if retry_in is None:
            self.metrics.gave_up.inc()
        await self.events.emit(pod_ref, EVENT_WARNING, EVENT_IMAGE_PRE_PULL_FAILED,
                               message[len(version_message(revision)) + 1:]
                               + f" (revision {revision}, node {node_name_of(pod)})")
        await self._delete_job(job, errors)
        if retry_in is not None:
            self.enqueue_after(ds_key, retry_in)

    async def _patch(self, pod: JSON, status: str, reason: str, message: str, errors: list[BaseException]) -> bool:
        condition: JSON = {"type": CONDITION_POD_IMAGE_READY, "status": status, "reason": reason,
                           "message": message}
        current = get_condition(pod, CONDITION_POD_IMAGE_READY)
        if current is None or current.get("status") != status:
            condition["lastTransitionTime"] = format_time(self.clock())
        patch = {"metadata": {"uid": uid_of(pod)}, "status": {"conditions": [condition]}}
        self.write("condition_patch")
        try:
            await self.client.patch(f"/api/v1/namespaces/{namespace_of(pod)}/pods/{name_of(pod)}/status", patch)
            self._written[uid_of(pod)] = str(meta(pod).get("resourceVersion") or "")
        except (NotFound, Conflict, Invalid):  # gone or replaced: its Job goes with it
            return False
        except KubeError as exc:
            errors.append(exc)
            return False
        except KubeUnreachable as exc:
            errors.append(exc)
            return False
        return True

    async def _delete_job(self, job: JSON, errors: list[BaseException]) -> None:
        key = f"{namespace_of(job)}/{name_of(job)}"
        self._deleting.add(key)
        self.write("job_delete")
        try:
            await self.client.delete(f"/apis/batch/v1/namespaces/{namespace_of(job)}/jobs/{name_of(job)}",
                                     {"propagationPolicy": "Background",
                                      "preconditions": {"uid": uid_of(job)}})
        except (NotFound, Conflict):
            pass  # gone already, or a new Job holds the name
        except KubeError as exc:
            self._deleting.discard(key)
            errors.append(exc)
        except KubeUnreachable as exc:
            self._deleting.discard(key)
            errors.append(exc)


def _job_node(job: JSON) -> str:
    return str((((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeName") or "")
