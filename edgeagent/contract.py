"""Every name the agent, the controller, the fleet view and the simulator exchange through API objects.

The agent, the controller and the simulator never import each other: what one writes on a pod, a
DaemonSet, a Job or an Event and another reads is spelt here once, with the pure readers of it. A
rename is then one edit, and import-linter (`.importlinter`) keeps this module below all three.

Kept free of I/O and of any import above `edgeagent.kube`, so that loading it costs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from edgeagent.kube.objects import get_condition, labels_of

JSON = dict[str, Any]

# --- OpenYurt-compatible names on DaemonSets and pods ------------------------------------------
ANNOTATION_UPDATE_STRATEGY = "apps.openyurt.io/update-strategy"
ANNOTATION_MAX_UNAVAILABLE = "apps.openyurt.io/max-unavailable"
STRATEGY_OTA = "ota"
STRATEGY_ADVANCED_ROLLING_UPDATE = "advancedrollingupdate"

# Written by the controller (OTA), read by the agent: the pod runs an old revision.
CONDITION_POD_NEED_UPGRADE = "PodNeedUpgrade"
# Set to False/WaitPullImage by the agent (or an operator), moved on by the controller's pre-pull.
CONDITION_POD_IMAGE_READY = "PodImageReady"
REASON_WAIT_PULL_IMAGE = "WaitPullImage"
REASON_PULL_IMAGE_SUCCESS = "PullImageSuccess"
REASON_PULL_IMAGE_FAIL = "PullImageFail"
# Both conditions name the revision in their message as `controllerrevision: <hash>`.
VERSION_MESSAGE_PREFIX = "controllerrevision: "

# --- Our own extensions on DaemonSets (read by the controller) -------------------------------
ANNOTATION_PARTITION = "edgeagent.io/partition"
ANNOTATION_NODE_SELECTOR = "edgeagent.io/node-selector"
ANNOTATION_PAUSED = "edgeagent.io/paused"
ANNOTATION_MAX_FAILED = "edgeagent.io/max-failed"
ANNOTATION_PROGRESS_DEADLINE = "edgeagent.io/progress-deadline-seconds"
ANNOTATION_PRE_PULL = "edgeagent.io/pre-pull"

# --- In-place upgrades (written by the operator on a managed DaemonSet) --------------------------
# `InPlaceIfPossible`: a revision that changes only container images patches the pods' images instead of
# deleting them; any other change, and `Recreate` (the default), deletes and recreates.
ANNOTATION_UPDATE_TYPE = "edgeagent.io/update-type"
UPDATE_TYPE_IN_PLACE_IF_POSSIBLE = "InPlaceIfPossible"
UPDATE_TYPE_RECREATE = "Recreate"
# The readiness gate a template may declare: False before the image patch (Services stop sending traffic),
# True once the new containers run; the kubelet holds the pod's Ready False while it is not True.
CONDITION_IN_PLACE_UPDATE_READY = "edgeagent.io/InPlaceUpdateReady"
# OTA in place: the node's request, recorded by its agent on its own pod's status (the agent may write only its
# pods' status, never their spec), executed by the controller (which may patch pods). `True`, reason
# `REASON_IN_PLACE_REQUESTED`, message `controllerrevision: <hash>` naming the revision the node asked for. Only the
# pod's node can write it (NodeRestriction, deploy/k8s-1.30's admission policy): the controller acts on nothing
# but this condition on the pod itself, re-checks everything, and answers it `False` once the pod runs that
# revision (reason `REASON_IN_PLACE_EXECUTED`), so a request is executed once.
CONDITION_IN_PLACE_UPGRADE_REQUESTED = "edgeagent.io/InPlaceUpgradeRequested"
REASON_IN_PLACE_REQUESTED = "RequestedByNode"
REASON_IN_PLACE_EXECUTED = "Executed"

# --- Rollout plans (waves, bake, abort, rollback) ---------------------------------------------
# Written by the operator:
ANNOTATION_ROLLOUT_STEPS = "edgeagent.io/rollout-steps"
ANNOTATION_ROLLOUT_BAKE = "edgeagent.io/rollout-bake"
ANNOTATION_ROLLOUT_GROUP_LABEL = "edgeagent.io/rollout-group-label"
ANNOTATION_ON_FAILURE = "edgeagent.io/on-failure"
# Written only by the controller (JSON state of the plan), and the revision a rollback left:
ANNOTATION_ROLLOUT_STATE = "edgeagent.io/rollout-state"
ANNOTATION_ROLLED_BACK_FROM = "edgeagent.io/rolled-back-from"
# The field of the rollout-state JSON naming the DaemonSet `metadata.generation` it was decided for (the agent
# refuses a plan pod's upgrade while it differs: the controller has not caught up with a template change).
STATE_GENERATION = "generation"
# Steering written by `edgeagent rollout promote|abort`, removed by the controller once acted on:
ANNOTATION_ROLLOUT_PROMOTE = "edgeagent.io/rollout-promote"
ANNOTATION_ROLLOUT_ABORT = "edgeagent.io/rollout-abort"
# PodNeedUpgrade False with this reason: the pod's node is in a wave the rollout has not reached yet.
REASON_WAITING_FOR_WAVE = "WaitingForWave"
# PodNeedUpgrade `True` of a pod whose DaemonSet has a rollout plan: the wave reached its node. It tells the
# agent to check the DaemonSet's rollout state before it deletes the pod (pods of other DaemonSets need no read).
REASON_WAVE_REACHED = "WaveReached"

# --- The node's site policy, published by the agent on its DaemonSet pods ----------------------
# AdvancedRollingUpdate never deletes a pod whose UpgradeHeld is True.
CONDITION_UPGRADE_HELD = "UpgradeHeld"
HELD_BY_OPERATOR = "HeldByOperator"
OUTSIDE_MAINTENANCE_WINDOW = "OutsideMaintenanceWindow"
AUTO_UPGRADE_FAILED = "AutoUpgradeFailed"
OPEN = "Open"

# --- A failed upgrade, reported by the node on its own pod's status ------------------------------
# The only failure report the controller and the fleet view count. Events cannot carry it: any credential
# may create one, naming any node as its source. A pod's status can: NodeRestriction (kubelet identity) and
# deploy/k8s-1.30's admission policy (the agent's ServiceAccount token) let only the pod's node write it.
# Owned by the agent of the pod's node, written (strategic merge, by type) on the pod of the revision that
# failed: `status: "True"`, a CamelCase `reason` (the kubelet's, e.g. CrashLoopBackOff, or NotReadyInTime),
# and a message `revision <hash>: <text>` naming that revision.
CONDITION_UPGRADE_FAILED = "edgeagent.io/UpgradeFailed"
REASON_NOT_READY_IN_TIME = "NotReadyInTime"
FAILURE_MESSAGE_PREFIX = "revision "

# --- Image pre-pull Jobs (owned by the controller) ---------------------------------------------
LABEL_PREPULL = "edgeagent.io/image-pre-pull"
ANNOTATION_DAEMONSET = "edgeagent.io/daemonset"
ANNOTATION_POD = "edgeagent.io/pod"
ANNOTATION_REVISION = "edgeagent.io/revision"
PREPULL_JOB_PREFIX = "image-pre-pull-"

# --- Names the DaemonSet controller maintains (Kubernetes' own; the sim writes them) -----------
LABEL_REVISION_HASH = "controller-revision-hash"
LABEL_TEMPLATE_GENERATION = "pod-template-generation"
ANNOTATION_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"

# --- Events --------------------------------------------------------------------------------------
# reportingComponent / source.component of the Events each side writes.
COMPONENT_AGENT = "edgeagent"
COMPONENT_CONTROLLER = "edgeagent-controller"
EVENT_NORMAL = "Normal"
EVENT_WARNING = "Warning"
# The agent, on the pod, for each transition of an upgrade request.
EVENT_UPGRADE_QUEUED = "UpgradeQueued"
EVENT_UPGRADE_STARTED = "UpgradeStarted"
EVENT_UPGRADE_SUCCEEDED = "UpgradeSucceeded"
EVENT_UPGRADE_FAILED = "UpgradeFailed"
EVENT_UPGRADE_OBSOLETE = "UpgradeObsolete"
EVENT_UPGRADE_CANCELLED = "UpgradeCancelled"
# The controller, on the DaemonSet (or the pod, for pre-pull).
EVENT_INVALID_UPDATE_STRATEGY = "InvalidUpdateStrategy"
EVENT_INVALID_ANNOTATION = "InvalidAnnotation"
EVENT_UPGRADING_PODS = "UpgradingPods"
EVENT_ROLLOUT_AUTO_PAUSED = "RolloutAutoPaused"
EVENT_IMAGE_PRE_PULLED = "ImagePrePulled"
EVENT_IMAGE_PRE_PULL_FAILED = "ImagePrePullFailed"
EVENT_WAVE_STARTED = "WaveStarted"
EVENT_WAVE_FINISHED = "WaveFinished"
EVENT_ROLLOUT_ABORTED = "RolloutAborted"
EVENT_ROLLOUT_ROLLED_BACK = "RolloutRolledBack"
EVENT_ROLLOUT_COMPLETE = "RolloutComplete"
EVENT_ROLLOUT_PLAN_INVALID = "RolloutPlanInvalid"
# A revision that was rolled back is the template again (a GitOps tool re-applied it): nothing rolls it until the
# template changes or the operator retries it.
EVENT_ROLLOUT_HELD = "RolloutHeld"


# --- Pure readers ----------------------------------------------------------------------------------
def version_message(revision_hash: str) -> str:
    return f"{VERSION_MESSAGE_PREFIX}{revision_hash}"


def version_from_message(message: str | None) -> str | None:
    if message and message.startswith(VERSION_MESSAGE_PREFIX):
        return message[len(VERSION_MESSAGE_PREFIX):].strip()
    return None


def needs_upgrade(pod: JSON) -> bool:
    """The controller says the pod runs an old revision (`PodNeedUpgrade` is `True`)."""
    cond = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
    return cond is not None and cond.get("status") == "True"


def target_revision(pod: JSON) -> str | None:
    """The revision `PodNeedUpgrade`'s message names, whatever its status; None without one."""
    cond = get_condition(pod, CONDITION_POD_NEED_UPGRADE) or {}
    return version_from_message(str(cond.get("message") or ""))


def image_not_ready(pod: JSON) -> JSON | None:
    """The PodImageReady condition when it is not True for the version PodNeedUpgrade asks for, else None.

    Without the condition nobody asked for a pre-pull, so there is nothing to wait for. The online
    answer and the drainer's re-check both use this, so a queued request is held to the same rule.
    """
    image = get_condition(pod, CONDITION_POD_IMAGE_READY)
    if image is None:
        return None
    wanted = target_revision(pod)
    have = version_from_message(str(image.get("message") or ""))
    if image.get("status") != "True" or wanted is None or have != wanted:
        return image
    return None


def image_ready(pod: JSON) -> bool:
    """Nothing to wait for: no pre-pull was asked for, or the images of the wanted revision are on the node."""
    return image_not_ready(pod) is None


def in_place_requested(pod: JSON) -> str | None:
    """The revision a `True` `CONDITION_IN_PLACE_UPGRADE_REQUESTED` names (the node asks for it), else None."""
    cond = get_condition(pod, CONDITION_IN_PLACE_UPGRADE_REQUESTED)
    if cond is None or cond.get("status") != "True":
        return None
    return version_from_message(str(cond.get("message") or "")) or None


def held_by(pod: JSON) -> tuple[str, str] | None:
    """(reason, message) when the pod's `UpgradeHeld` is `True`: its node said no upgrade now."""
    cond = get_condition(pod, CONDITION_UPGRADE_HELD)
    if cond is None or cond.get("status") != "True":
        return None
    return str(cond.get("reason") or ""), str(cond.get("message") or "")


@dataclass(frozen=True)
class ReportedFailure:
    """What a node reported about the failed upgrade of its own pod (`CONDITION_UPGRADE_FAILED`)."""

    revision: str
    reason: str
    message: str


_FAILURE_MESSAGE = re.compile(re.escape(FAILURE_MESSAGE_PREFIX) + r"([^\s:]+): ?(.*)", re.DOTALL)
_CAMEL_CASE = re.compile(r"[A-Z][A-Za-z0-9]*")


def failure_message(revision: str, text: str) -> str:
    """The condition's message: `revision <hash>: <text>` (the one spelling `reported_failure` reads)."""
    return f"{FAILURE_MESSAGE_PREFIX}{revision}: {text}"


def failure_reason(reason: str) -> str:
    """The condition's reason: the kubelet's own word when it is one (CamelCase), else `NotReadyInTime`."""
    return reason if _CAMEL_CASE.fullmatch(reason) else REASON_NOT_READY_IN_TIME


def reported_failure(pod: JSON) -> ReportedFailure | None:
    """The failure the pod's node reported about this pod's own revision, or None.

    Counts only a `CONDITION_UPGRADE_FAILED` condition that is `True` and whose message names the revision the
    pod runs (its `controller-revision-hash` label): a condition naming any other revision says nothing about
    this pod, whoever wrote it. Who may write it is the API server's business (only the pod's node may write
    its status); this reader only refuses what cannot be about this pod.
    """
    cond = get_condition(pod, CONDITION_UPGRADE_FAILED)
    if cond is None or cond.get("status") != "True":
        return None
    found = _FAILURE_MESSAGE.fullmatch(str(cond.get("message") or ""))
    own = labels_of(pod).get(LABEL_REVISION_HASH)
    if found is None or not own or found.group(1) != own:
        return None
    return ReportedFailure(revision=found.group(1), reason=str(cond.get("reason") or ""), message=found.group(2))
