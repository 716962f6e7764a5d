"""In place (issue 37): pods patched instead of deleted, chosen by the roll or asked for by their node.

When the DaemonSet says `edgeagent.io/update-type: InPlaceIfPossible` and the revision changes only images, the pods
AdvancedRollingUpdate chose, and the pods of an OTA DaemonSet whose node asked for it, are patched, not deleted.

The roll's plan (rolling.py) decides which pods move, within `max-unavailable` and its rollout plan's gate,
exactly as for deletes; this module only carries a chosen pod out another way:

- the decision is edgeagent/inplace.py's (the pod's revision's template against the target's); anything
  else falls back to the delete, with a `InPlaceUpdateFallback` Event saying why;
- the PATCH is guarded like the delete: the UID and the resourceVersion the plan saw, so a pod replaced or
  changed since (its agent published `UpgradeHeld`, it turned unready) is refused (409/422) and planned again;
- when the template declares the readiness gate `edgeagent.io/InPlaceUpdateReady`, its condition is set False
  first (the answer's resourceVersion then guards the patch: our own write is the only change allowed), and
  True once the new containers run;
- the node counts as unavailable from the PATCH until the kubelet reports every changed container with a new
  `containerID` and ready (the verified outcome), or the pod is gone; so a pod whose cached status still shows
  the old container Ready never frees the budget early. A PATCH whose answer was lost holds the node only
  UNCONFIRMED_TTL unless the cache shows it carried out, and a restart to a revision the roll no longer targets
  (rolled back) is forgotten. The memory is per process: after a restart, the
  readiness gate (False until the new containers run) is what keeps such a pod from counting as available.

OTA in place: the node's agent may not patch a pod's spec, so it records the node's request on its own pod's
status (`contract.CONDITION_IN_PLACE_UPGRADE_REQUESTED`); `ota_request` is the one rule of what the controller
does about it (execute, answer once done, or wait), and the reconciler executes it with the same PATCH.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from edgeagent.contract import (
    CONDITION_IN_PLACE_UPDATE_READY,
    CONDITION_IN_PLACE_UPGRADE_REQUESTED,
    LABEL_REVISION_HASH,
    REASON_IN_PLACE_EXECUTED,
    held_by,
    image_not_ready,
    in_place_requested,
    needs_upgrade,
    target_revision,
    version_message,
)
from edgeagent.controller.expectations import UnobservedWrites
from edgeagent.inplace import Fallback, InPlacePatch, decide
from edgeagent.kube.objects import get_condition, labels_of, meta, uid_of

JSON = dict[str, Any]

EVENT_IN_PLACE_FALLBACK = "InPlaceUpdateFallback"
REASON_UPDATING = "InPlaceUpdating"
REASON_UPDATED = "InPlaceUpdated"
# How long a node may stay "restarting in place" before the roll stops waiting for the kubelet's report and
# judges the pod by its readiness like any other (a pod that never reports is then simply unavailable).
DEFAULT_TTL = 300.0
# A PATCH whose outcome is unknown (a 5xx, a timeout: it may or may not have been carried out, or may still be)
# holds its node this long unless the cache shows the pod patched meanwhile. Longer than a request the server
# holds before carrying it out; far shorter than DEFAULT_TTL, which would stall the roll for minutes on every
# lost answer (the soak's 500 bursts: two unconfirmed patches filled a budget of two for 300 s).
UNCONFIRMED_TTL = 30.0


def declares_gate(pod: JSON) -> bool:
    return any(isinstance(g, dict) and g.get("conditionType") == CONDITION_IN_PLACE_UPDATE_READY
               for g in (pod.get("spec") or {}).get("readinessGates") or [])


def gate_patch(pod: JSON, status: str, reason: str, message: str) -> JSON:
    """A `pods/status` strategic merge patch of the gate's condition, guarded by the pod's UID."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cond = {"type": CONDITION_IN_PLACE_UPDATE_READY, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now}
    return {"metadata": {"uid": uid_of(pod)}, "status": {"conditions": [cond]}}


def still_movable(fresh: JSON, planned: JSON, *, hold_counts: bool = True) -> bool:
    """After our own gate write, the kubelet answers by turning the pod not Ready, so the PATCH guarded by our
    write's resourceVersion may meet 409. The pod read again may then still be patched if it is the pod the plan
    chose, as the plan saw it in all that matters: same UID, not being deleted, same revision, same images,
    and its node's agent has not published `UpgradeHeld` meanwhile (the guarded delete's checks). A node's own
    OTA request (`hold_counts=False`) acts hold or not, as OpenYurt's explicit upgrade does; for it the request
    must still stand instead."""
    def images(pod: JSON) -> list[tuple[str, str]]:
        spec = pod.get("spec") or {}
        return [(str(c.get("name")), str(c.get("image"))) for key in ("initContainers", "containers")
                for c in spec.get(key) or []]

    return (uid_of(fresh) == uid_of(planned) and not meta(fresh).get("deletionTimestamp")
            and labels_of(fresh).get(LABEL_REVISION_HASH) == labels_of(planned).get(LABEL_REVISION_HASH)
            and images(fresh) == images(planned)
            and (held_by(fresh) is None if hold_counts else in_place_requested(fresh) == in_place_requested(planned)))


def container_ids(pod: JSON, names: Iterable[str]) -> dict[str, str]:
    """The containerIDs the kubelet reports now for these containers ("" when none)."""
    by_name = {str(s.get("name")): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    return {name: str((by_name.get(name) or {}).get("containerID") or "") for name in names}


def restart_done(pod: JSON, revision: str, before: Mapping[str, str]) -> bool:
    """The pod carries the revision and each changed container runs again, ready, as a new container."""
    if labels_of(pod).get(LABEL_REVISION_HASH) != revision:
        return False
    by_name = {str(s.get("name")): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    for name, old_id in before.items():
        status = by_name.get(name) or {}
        new_id = str(status.get("containerID") or "")
        if not new_id or new_id == old_id or not status.get("ready"):
            return False
    return True


@dataclass
class _Restart:
    uid: str
    revision: str
    before: dict[str, str]
    deadline: float
    confirmed: bool = True  # the PATCH was answered 200 (or the cache has shown the pod patched since)


@dataclass
class InPlaceRestarts:
    """Per DaemonSet key: node → the in-place restart the roll is waiting for there."""

    ttl: float = DEFAULT_TTL
    unconfirmed_ttl: float = UNCONFIRMED_TTL
    clock: Callable[[], float] = time.monotonic
    _by_key: dict[str, dict[str, _Restart]] = field(default_factory=dict)

    def record(self, key: str, node: str, uid: str, revision: str, before: Mapping[str, str], *,
               confirmed: bool = True) -> None:
        """`confirmed=False`: the PATCH's outcome is unknown; the node is held UNCONFIRMED_TTL seconds unless the
        cache shows the pod on `revision` by then (it was carried out: then the full time)."""
        ttl = self.ttl if confirmed else min(self.ttl, self.unconfirmed_ttl)
        self._by_key.setdefault(key, {})[node] = _Restart(uid, revision, dict(before), self.clock() + ttl, confirmed)

    def nodes(self, key: str, pods_by_uid: Mapping[str, JSON], revision: str | None = None) -> set[str]:
        """Nodes still restarting; restarts done, of pods gone, past their time, or (given the revision the roll
        targets now) to another revision are forgotten. The last: a restart that can never finish (the image
        cannot be pulled) to a revision a rollout plan has rolled back would otherwise keep its pod from being
        moved back to the restored revision until its time ran out."""
        entries = self._by_key.get(key)
        if not entries:
            return set()
        now = self.clock()
        for node, entry in list(entries.items()):
            pod = pods_by_uid.get(entry.uid)
            if pod is not None and not entry.confirmed and labels_of(pod).get(LABEL_REVISION_HASH) == entry.revision:
                entry.confirmed = True
                entry.deadline = max(entry.deadline, now + self.ttl)
            if pod is None or now > entry.deadline or restart_done(pod, entry.revision, entry.before) \
                    or (revision is not None and entry.revision != revision):
                del entries[node]
        if not entries:
            del self._by_key[key]
        return set(entries)

    def restarting(self, key: str, uid: str) -> _Restart | None:
        return next((e for e in self._by_key.get(key, {}).values() if e.uid == uid), None)

    def forget(self, key: str) -> None:
        self._by_key.pop(key, None)


@dataclass(frozen=True)
class Choice:
    """What to do with one pod the roll chose: patch it in place, or delete it (and why not in place)."""

    pod: JSON
    patch: InPlacePatch | None
    fallback: str | None


def choose(pods: Iterable[JSON], revision: str, template_of: Callable[[str | None], JSON | None]) -> list[Choice]:
    """Decide each chosen pod (pure): `template_of(hash)` is the template of one of the DaemonSet's revisions."""
    target = template_of(revision)
    out: list[Choice] = []
    for pod in pods:
        own = labels_of(pod).get(LABEL_REVISION_HASH)
        current = template_of(own)
        if target is None or current is None:
            missing = revision if target is None else own or "(none)"
            out.append(Choice(pod, None, f"the template of revision {missing} is not known"))
            continue
        decision = decide(pod, current, target, revision)
        if isinstance(decision, Fallback):
            out.append(Choice(pod, None, decision.message))
        else:
            out.append(Choice(pod, decision, None))
    return out


def gate_updates(pods: Iterable[JSON], restarts: InPlaceRestarts, key: str, written: UnobservedWrites) -> list[JSON]:
    """Pods whose gate condition should turn True now: missing (a pod the DaemonSet controller just made) or
    False with our reason, once their containers are ready and no restart of ours is under way there."""
    out: list[JSON] = []
    for pod in pods:
        if not declares_gate(pod) or meta(pod).get("deletionTimestamp"):
            continue
        if written.pending(uid_of(pod), str(meta(pod).get("resourceVersion") or "")):
            continue
        cond = get_condition(pod, CONDITION_IN_PLACE_UPDATE_READY)
        if cond is not None and (cond.get("status") == "True" or cond.get("reason") != REASON_UPDATING):
            continue
        containers = get_condition(pod, "ContainersReady")
        if containers is None or containers.get("status") != "True":
            continue
        entry = restarts.restarting(key, uid_of(pod))
        if entry is not None and not restart_done(pod, entry.revision, entry.before):
            continue
        out.append(pod)
    return out


# --- OTA in place: the node's request, executed here ------------------------------------------------------------

EXECUTE = "execute"
ANSWER = "answer"
IGNORE = "ignore"


@dataclass(frozen=True)
class OtaRequest:
    """What to do about the in-place request a pod's node recorded on the pod's status (`contract`
    `CONDITION_IN_PLACE_UPGRADE_REQUESTED`): `execute` it now, `answer` it (the pod runs the revision asked for:
    the request is done, only the condition is left to close), or `ignore` it for now, and why."""

    action: str
    why: str


def ota_request(pod: JSON, revision: str, may_move: Callable[[str], bool] | None,
                restarting: bool) -> OtaRequest | None:
    """The one rule for a node's in-place request (pure): None when the pod carries no open request.

    Only the condition on the pod itself counts: the API server lets only the pod's own node write a pod's status
    (NodeRestriction for a kubelet, deploy/k8s-1.30's policy for the agent's token), so what one node writes can
    move no other node's pod. Everything the agent checked is checked again here, on this controller's view: the
    request names the DaemonSet's current revision (`revision`; one naming an older revision is ignored, it
    asks for what is no longer rolled), the pod is outdated, its `PodNeedUpgrade` (this controller's own word)
    says `True` for that revision, the images are pre-pulled when a pre-pull was asked for, the rollout plan's gate
    lets its node move, and no restart of ours is under way there. A pod that already runs the revision asked
    for is answered, not patched again: that is what makes a request executed once, across restarts (the PATCH
    moved its label, and its resourceVersion precondition refuses a second one from an older view)."""
    asked = in_place_requested(pod)
    if asked is None:
        return None
    if meta(pod).get("deletionTimestamp"):
        return OtaRequest(IGNORE, "the pod is being deleted")
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node:
        return OtaRequest(IGNORE, "the pod is not bound to a node")
    if labels_of(pod).get(LABEL_REVISION_HASH) == asked:
        return OtaRequest(ANSWER, f"the pod runs revision {asked}")
    if asked != revision:
        return OtaRequest(IGNORE, f"the request names revision {asked}, the DaemonSet's current revision is {revision}")
    if not needs_upgrade(pod) or target_revision(pod) != revision:
        return OtaRequest(IGNORE, f"PodNeedUpgrade is not True for revision {revision}")
    if image_not_ready(pod) is not None:
        return OtaRequest(IGNORE, f"the images of revision {revision} are not pre-pulled yet")
    if may_move is not None and not may_move(node):
        return OtaRequest(IGNORE, f"the rollout plan has not reached node {node}")
    if restarting:
        return OtaRequest(IGNORE, "an in-place restart is under way")
    return OtaRequest(EXECUTE, f"node {node} asked for revision {revision}")


def request_answer(pod: JSON, revision: str) -> JSON:
    """The `pods/status` patch that closes a done request: `False`, reason `Executed`, naming the revision. Guarded
    by the UID and the resourceVersion the decision saw, so a newer request its node wrote meanwhile is never
    overwritten (409: decided again on the next view)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cond = {"type": CONDITION_IN_PLACE_UPGRADE_REQUESTED, "status": "False", "reason": REASON_IN_PLACE_EXECUTED,
            "message": version_message(revision), "lastTransitionTime": now}
    return {"metadata": {"uid": uid_of(pod), "resourceVersion": str(meta(pod).get("resourceVersion") or "")},
            "status": {"conditions": [cond]}}
