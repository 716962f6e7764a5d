"""`edgeagent rollout promote|pause|resume|abort|retry|undo DS`: steer a rollout by writing its RolloutPlan.

The CLI never moves a pod and never writes the plan's `status` (the controller alone may): each verb is one
merge PATCH of the RolloutPlan object, so it needs only `patch` on `rolloutplans` (and list to find the plan),
works whichever controller replica leads, and a verb given while the controller is down takes effect when it
is back.

- `pause` / `resume` set `spec.paused`; already so is exit 0 with a line saying so (no write).
- `promote`, `abort`, `retry`, `undo` write one request in the annotation `edgeagent.io/steer`:
  `{"id": <12 random hex>, "verb": ..., "revision": <status.revision the operator saw>}`, with `wave` (the
  wave seen) for promote and `toRevision` for undo. The controller acts on a request whose id differs from
  `status.steer.id`, once, and records the outcome there (`Done` or `Ignored`, with a message): a late or
  repeated promote names a wave the rollout has left and is ignored, so a promote never skips a wave.

Every write carries the plan's UID and resourceVersion as preconditions: a plan deleted and re-created, or
changed since it was read, refuses the write (409); the verb then reads the plan again and decides again, once.
The rules of what makes sense (`decide`) are pure, so they are tested without a server.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient
from edgeagent.kube.errors import Conflict, Forbidden, Invalid, NotFound
from edgeagent.kube.objects import annotations_of, meta, name_of
from edgeagent.rollout import api
from edgeagent.rollout.state import (
    ACTIVE_PHASES,
    PHASE_ABORTED,
    PHASE_COMPLETE,
    PHASE_PAUSED,
    HistoryEntry,
    RolloutState,
    api_phase,
    state_from_status,
)

JSON = dict[str, Any]

# The annotation an operator's request is written in (the controller records its outcome in `status.steer`).
ANNOTATION_STEER = "edgeagent.io/steer"
REQUEST_VERBS = ("promote", "abort", "retry", "undo")
VERBS = ("promote", "pause", "resume", "abort", "retry", "undo")


class SteerError(Exception):
    """A refusal: one line for the operator, exit 1."""


@dataclass(frozen=True)
class Request:
    """One steering request, as the annotation holds it."""

    id: str
    verb: str
    revision: str
    wave: int | None = None
    to_revision: str | None = None

    def to_json(self) -> str:
        body: JSON = {"id": self.id, "verb": self.verb, "revision": self.revision}
        if self.wave is not None:
            body["wave"] = self.wave
        if self.to_revision is not None:
            body["toRevision"] = self.to_revision
        return json.dumps(body, separators=(",", ":"))


def new_id() -> str:
    return secrets.token_hex(6)


def plans_path(namespace: str) -> str:
    return f"/apis/{api.API_VERSION}/namespaces/{namespace}/{api.PLURAL}"


def plan_path(namespace: str, name: str) -> str:
    return f"{plans_path(namespace)}/{name}"


def requested(plan: Mapping[str, Any]) -> JSON | None:
    """The request written in the plan's annotation (None: none, or not a JSON object with an id)."""
    raw = annotations_of(dict(plan)).get(ANNOTATION_STEER)
    try:
        body = json.loads(str(raw)) if raw else None
    except ValueError:
        return None
    return body if isinstance(body, dict) and isinstance(body.get("id"), str) else None


def handled_id(plan: Mapping[str, Any]) -> str | None:
    steer = (plan.get("status") or {}).get("steer")
    return str(steer["id"]) if isinstance(steer, dict) and steer.get("id") else None


def pending(plan: Mapping[str, Any]) -> JSON | None:
    """The request the controller has not handled yet (its id is not `status.steer.id`), if any."""
    request = requested(plan)
    if request is None or request["id"] == handled_id(plan):
        return None
    return request


def _where(plan: Mapping[str, Any]) -> str:
    m = plan.get("metadata") or {}
    return f'rolloutplan "{m.get("name")}" in namespace "{m.get("namespace")}"'


def _state(plan: Mapping[str, Any], verb: str) -> RolloutState:
    state, problem = state_from_status(plan.get("status"))
    if state is None:
        why = problem or "the controller has not started a rollout of it yet (no status)"
        raise SteerError(f"nothing to {verb}: {_where(plan)}: {why}")
    return state


def _completed(history: tuple[HistoryEntry, ...], revision: str) -> bool:
    return any(h.revision == revision and h.phase == PHASE_COMPLETE for h in history)


def decide(plan: Mapping[str, Any], verb: str, *, to_revision: str = "", request_id: str = "") -> tuple[JSON | None,
                                                                                                          str]:
    """(the merge patch to write, or None when there is nothing to write; the line to print) for `verb` on
    `plan` as read. Raises SteerError for a verb that makes no sense in the plan's status, or while a previous
    request is not handled yet."""
    where = _where(plan)
    if verb in ("pause", "resume"):
        paused = bool((plan.get("spec") or {}).get("paused", False))
        want = verb == "pause"
        if paused == want:
            return None, f"{where} already {'paused' if want else 'not paused'} (spec.paused: {str(want).lower()})"
        what = "no pod moves and no wave starts until resumed" if want else "the rollout goes on"
        return {"spec": {"paused": want}}, f"{where} {'paused' if want else 'resumed'} (spec.paused: " \
                                           f"{str(want).lower()}): {what}"
    if verb not in REQUEST_VERBS:
        raise SteerError(f"unknown rollout command {verb!r}: expected one of {', '.join(VERBS)}")
    waiting = pending(plan)
    if waiting is not None:
        raise SteerError(f"a previous {waiting.get('verb', 'request')} is not handled yet by the controller "
                         f"({ANNOTATION_STEER} id {waiting['id']} on {where}); try again once it is")
    state = _state(plan, verb)
    if verb == "promote":
        if state.phase not in ACTIVE_PHASES:
            raise SteerError(f"nothing to promote: the rollout of revision {state.revision} ({where}) has ended "
                             f"(phase {api_phase(state.phase)})")
        if state.phase == PHASE_PAUSED or (plan.get("spec") or {}).get("paused") is True:
            raise SteerError(f"nothing to promote: {where} is paused; `edgeagent rollout resume` first")
        request = Request(request_id or new_id(), verb, state.revision, wave=state.wave)
        after = (f"wave {state.wave + 1}/{state.waves} starts" if state.wave < state.waves
                 else "the rollout completes (it is the last wave)")
        line = (f"{where}: promote of wave {state.wave}/{state.waves} requested (revision {state.revision}): once "
                f"the wave is finished the controller ends its bake and {after}")
    elif verb == "abort":
        if state.phase not in ACTIVE_PHASES:
            raise SteerError(f"nothing to abort: the rollout of revision {state.revision} ({where}) has ended "
                             f"(phase {api_phase(state.phase)})")
        request = Request(request_id or new_id(), verb, state.revision)
        on_failure = str((plan.get("spec") or {}).get("onFailure") or api.DEFAULT_ON_FAILURE)
        then = (f"restores revision {state.stable_revision}" if on_failure == "Rollback" and state.stable_revision
                else "leaves every pod as it is")
        line = f"{where}: abort of revision {state.revision} requested: the controller stops the rollout and {then}"
    elif verb == "retry":
        if state.phase != PHASE_ABORTED:
            raise SteerError(f"nothing to retry: the rollout of revision {state.revision} ({where}) is "
                             f"{api_phase(state.phase)}, not Aborted")
        request = Request(request_id or new_id(), verb, state.revision)
        line = (f"{where}: retry of revision {state.revision} requested: the controller clears its failures and "
                f"goes on from wave {state.wave}/{state.waves}")
    else:  # undo
        target = to_revision or state.stable_revision or ""
        if not target:
            raise SteerError(f"nothing to undo to: {where} has no stable revision (no rollout completed yet)")
        if to_revision and not _completed(state.history, to_revision):
            done = [h.revision for h in state.history if h.phase == PHASE_COMPLETE]
            raise SteerError(f"--to-revision {to_revision}: not a completed revision of {where} (completed: "
                             f"{', '.join(done) or 'none'})")
        if target == state.revision and state.phase == PHASE_COMPLETE:
            raise SteerError(f"nothing to undo: revision {target} is the one {where} rolled out")
        request = Request(request_id or new_id(), verb, state.revision, to_revision=target)
        line = (f"{where}: undo requested: the controller restores the DaemonSet's template from revision "
                f"{target}")
    return {"metadata": {"annotations": {ANNOTATION_STEER: request.to_json()}}}, line


async def find_plan(client: KubeClient, namespace: str, daemonset: str) -> JSON:
    """The RolloutPlan of the DaemonSet (read with list, as `kubectl get` would); one-line errors for no such
    DaemonSet, no plan, or two plans for it (the controller moves none then)."""
    listed = await client.get(plans_path(namespace))
    plans = [p for p in listed.get("items") or []
             if isinstance(p, dict) and (p.get("spec") or {}).get("daemonSet") == daemonset]
    if len(plans) > 1:
        names = ", ".join(sorted(name_of(p) for p in plans))
        raise SteerError(f'{len(plans)} rolloutplans name daemonset "{daemonset}" in namespace "{namespace}" '
                         f"({names}): the controller moves none of them; delete all but one")
    if plans:
        plan: JSON = plans[0]
        plan.setdefault("apiVersion", api.API_VERSION)
        plan.setdefault("kind", api.KIND)
        return plan
    try:
        await client.get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{daemonset}")
    except NotFound as exc:
        raise SteerError(f'daemonset "{daemonset}" not found in namespace "{namespace}"') from exc
    except Forbidden:
        pass  # allowed to read plans, not DaemonSets: the plan is what is missing either way
    raise SteerError(f'daemonset "{daemonset}" in namespace "{namespace}" has no rolloutplan (a RolloutPlan with '
                     f"spec.daemonSet: {daemonset}; see `kubectl explain rolloutplan`)")


def _changed_meanwhile(exc: Exception) -> bool:
    """A 409 (resourceVersion) or the refusal of a changed UID: the plan changed since it was read."""
    return isinstance(exc, Conflict) or (isinstance(exc, Invalid) and "uid" in str(exc).lower())


async def steer(client: KubeClient, namespace: str, daemonset: str, verb: str, *, to_revision: str = "") -> str:
    """Read the plan, decide, write one PATCH with UID and resourceVersion preconditions; on a refusal because
    the plan changed meanwhile, read and decide once more. Returns the line to print."""
    for attempt in (1, 2):
        plan = await find_plan(client, namespace, daemonset)
        patch, line = decide(plan, verb, to_revision=to_revision)
        if patch is None:
            return line
        m = meta(plan)
        body = {**patch, "metadata": {**patch.get("metadata", {}), "uid": m.get("uid"),
                                      "resourceVersion": m.get("resourceVersion")}}
        try:
            await client.patch(plan_path(namespace, name_of(plan)), body, CONTENT_MERGE_PATCH)
        except (Conflict, Invalid) as exc:
            if attempt == 2 or not _changed_meanwhile(exc):
                raise
            continue
        return line
    raise AssertionError("unreachable")


def history_rows(plan: Mapping[str, Any]) -> list[JSON]:
    """status.history, newest first, as `rollout history -o json` prints it."""
    return [h for h in (plan.get("status") or {}).get("history") or [] if isinstance(h, dict)]


def history_table(plan: Mapping[str, Any]) -> str:
    rows = history_rows(plan)
    if not rows:
        return f"{_where(plan)} has rolled no revision yet (status.history is empty)\n"
    cells = [("REVISION", "IMAGES", "PHASE", "FINISHED")] + [
        (str(h.get("revision") or ""), ",".join(str(i) for i in h.get("images") or []) or "-",
         str(h.get("phase") or ""), str(h.get("finishedAt") or "-")) for h in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(3)]
    return "".join("  ".join([*(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)), r[3]]).rstrip() + "\n"
                   for r in cells)
