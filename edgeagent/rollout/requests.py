"""Steering requests on a RolloutPlan, as the controller reads them: the `edgeagent.io/steer` annotation (one
request at a time, compact JSON with a random `id`) and `spec.paused`, turned into the state machine's
`Steering`; and the record of each handled request in `status.steer`.

Why an id: an annotation stays on the plan after it was handled, so the controller acts on a request only
while its id differs from `status.steer.id`, and records the outcome in the same status write as the
transition it causes. A restarted controller reads the same status and never acts on the same id twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from edgeagent.kube.objects import annotations_of
from edgeagent.kube.timeutil import format_time

JSON = dict[str, Any]

ANNOTATION_STEER = "edgeagent.io/steer"

VERB_PROMOTE = "promote"
VERB_ABORT = "abort"
VERB_RETRY = "retry"
VERB_UNDO = "undo"
VERBS = (VERB_PROMOTE, VERB_ABORT, VERB_RETRY, VERB_UNDO)

RESULT_DONE = "Done"
RESULT_IGNORED = "Ignored"


@dataclass(frozen=True)
class SteerRequest:
    """One request: `revision` is the plan's status.revision the operator saw; `wave` only for promote;
    `to_revision` only for undo (None: the stable revision)."""

    id: str
    verb: str
    revision: str
    wave: int | None = None
    to_revision: str | None = None


def steer_request(plan: JSON) -> tuple[SteerRequest | None, str | None]:
    """The plan's pending request: (request, None); (None, None) when there is none or it was handled already
    (its id is `status.steer.id`); (None, why) for an annotation that is not a request (recorded Ignored with
    that message, under the id it has, if any)."""
    raw = annotations_of(plan).get(ANNOTATION_STEER)
    if raw is None or not str(raw).strip():
        return None, None
    handled = handled_id(plan)
    try:
        body = json.loads(str(raw))
    except ValueError:
        return None, None if handled == str(raw) else f"{ANNOTATION_STEER} is not JSON"
    if not isinstance(body, dict):
        return None, f"{ANNOTATION_STEER} is not a JSON object"
    ident = body.get("id")
    if not isinstance(ident, str) or not ident:
        return None, f"{ANNOTATION_STEER} has no id"
    if ident == handled:
        return None, None
    verb = body.get("verb")
    if verb not in VERBS:
        return SteerRequest(ident, str(verb), ""), f"unknown verb {verb!r}: one of {', '.join(VERBS)}"
    wave = body.get("wave")
    to_revision = body.get("toRevision")
    return SteerRequest(
        id=ident, verb=str(verb), revision=str(body.get("revision") or ""),
        wave=wave if isinstance(wave, int) and not isinstance(wave, bool) else None,
        to_revision=str(to_revision) if isinstance(to_revision, str) and to_revision else None,
    ), None


def handled_id(plan: JSON) -> str | None:
    steer = (plan.get("status") or {}).get("steer")
    found = steer.get("id") if isinstance(steer, dict) else None
    return str(found) if found else None


def steer_record(request: SteerRequest, result: str, message: str, now: float) -> JSON:
    """`status.steer`: the request's id and verb, what came of it, and when."""
    return {"id": request.id, "verb": request.verb, "result": result, "message": message, "at": format_time(now)}


def paused_of(plan: JSON) -> bool:
    return (plan.get("spec") or {}).get("paused") is True
