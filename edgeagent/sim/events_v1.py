"""`events.k8s.io/v1` Events: another view of the core/v1 Events, as on the real server.

kube-apiserver stores one kind of Event and serves it under both groups: an Event created through
events.k8s.io/v1 is listed by `kubectl get events` (core/v1) and the other way round. The fields map one
to one (`regarding` = `involvedObject`, `note` = `message`, `reportingController` = `reportingComponent`,
`deprecatedSource` = `source`, `deprecatedFirstTimestamp` = `firstTimestamp`, …). Creating through
events.k8s.io/v1 is validated strictly (eventTime, reportingController, reportingInstance, action and
reason required; the deprecated fields must stay unset), as the real server does. Field selectors name
the core fields (`involvedObject.name=…`), since both views select on the one stored Event.
"""

from __future__ import annotations

from typing import Any

from edgeagent.sim import errors

JSON = dict[str, Any]

GROUP = "events.k8s.io"
API_VERSION = f"{GROUP}/v1"

# events.k8s.io/v1 name → core/v1 name, for the fields whose names differ.
_RENAMED = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_TO_V1 = {core: v1 for v1, core in _RENAMED.items()}
_SAME = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason", "type", "related")

def to_v1(core: JSON) -> JSON:
    out: JSON = {"kind": "Event", "apiVersion": API_VERSION}
    for key, value in core.items():
        if key in ("kind", "apiVersion"):
            continue
        out[_TO_V1.get(key, key)] = value
    return out


def to_core(event: JSON) -> JSON:
    out: JSON = {"kind": "Event", "apiVersion": "v1"}
    for key, value in event.items():
        if key in ("kind", "apiVersion"):
            continue
        out[_RENAMED.get(key, key)] = value
    return out


def validate_create(event: JSON) -> None:
    """The strict validation of events.k8s.io/v1 creates (422 listing every problem)."""
    name = str((event.get("metadata") or {}).get("name") or "")
    causes: list[JSON] = []
    for field in ("eventTime",):
        if not event.get(field):
            causes.append(errors.field_required(field, ""))
    if event.get("type") not in ("Normal", "Warning"):
        causes.append(errors.field_invalid("type", "", f"has invalid value: {event.get('type') or ''}"))
    for field in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount", "deprecatedSource"):
        if event.get(field):
            causes.append(errors.field_invalid(field, "", "needs to be unset"))
    for field in ("reportingController", "reportingInstance", "action", "reason"):
        if not event.get(field):
            causes.append(errors.field_required(field, ""))
    if causes:
        raise errors.invalid("Event", name, causes, GROUP)
