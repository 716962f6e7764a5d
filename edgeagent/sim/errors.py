"""Kubernetes `Status` failures exactly as the real API server words them.

Clients (kubectl, kubernetes_asyncio, our own agent) branch on `reason` and `code` and people grep the
`message`, so every builder mirrors the text of k8s.io/apimachinery/pkg/api/errors (and the apiserver
storage layer) rather than inventing friendlier wording. Empty `details` fields are left out because the
real server serialises them with `omitempty`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

JSON = dict[str, Any]

OPTIMISTIC_LOCK_MESSAGE = "the object has been modified; please apply your changes to the latest version and try again"
LIST_TOO_OLD_MESSAGE = "The resourceVersion for the provided list is too old."
TOO_LARGE_RV_CAUSE = "Too large resource version"
PATCH_CONTENT_TYPES: tuple[str, ...] = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


class ApiError(Exception):
    """A failure the HTTP layer turns into `status` with HTTP status `code`; in-process callers inspect it directly."""

    def __init__(self, code: int, status: JSON) -> None:
        super().__init__(str(status.get("message", "")))
        self.code = code
        self.status = status

    @property
    def reason(self) -> str:
        return str(self.status.get("reason", ""))

    @property
    def message(self) -> str:
        return str(self.status.get("message", ""))

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason}: {self.message!r})"


def status_body(code: int, reason: str, message: str, *, details: JSON | None = None) -> JSON:
    """A Failure Status with the real server's key order (kind, apiVersion, metadata, status, message, ...)."""
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _error(code: int, reason: str, message: str, details: JSON | None = None) -> ApiError:
    return ApiError(code, status_body(code, reason, message, details=details))


def qualified(name: str, group: str) -> str:
    """`pods` / `daemonsets.apps`: schema.GroupResource.String(), also used for GroupKind (`DaemonSet.apps`)."""
    return f"{name}.{group}" if group else name


def _details(name: str, group: str, kind: str, **extra: Any) -> JSON:
    details: JSON = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    details.update({k: v for k, v in extra.items() if v})
    return details


def not_found(resource_plural: str, name: str, group: str = "") -> ApiError:
    return _error(
        404,
        "NotFound",
        f'{qualified(resource_plural, group)} "{name}" not found',
        _details(name, group, resource_plural),
    )


def not_found_path() -> ApiError:
    """An unknown URL or resource type: the server has no route, so there is no object name to report."""
    return _error(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(resource_plural: str, name: str, group: str = "") -> ApiError:
    return _error(
        409,
        "AlreadyExists",
        f'{qualified(resource_plural, group)} "{name}" already exists',
        _details(name, group, resource_plural),
    )


def conflict(resource_plural: str, name: str, message: str, group: str = "") -> ApiError:
    return _error(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource_plural, group)} "{name}": {message}',
        _details(name, group, resource_plural),
    )


def conflict_modified(resource_plural: str, name: str, group: str = "") -> ApiError:
    """Stale `metadata.resourceVersion` on update/patch: the optimistic-concurrency 409 clients retry on."""
    return conflict(resource_plural, name, OPTIMISTIC_LOCK_MESSAGE, group)


def precondition_failed_uid(kind: str, name: str, expected: str, actual: str, group: str = "") -> ApiError:
    """DeleteOptions.preconditions.uid mismatch; the apiserver reports the Kind (not the plural) here."""
    return conflict(
        kind,
        name,
        f"the UID in the precondition ({expected}) does not match the UID in record ({actual}). "
        "The object might have been deleted and then recreated",
        group,
    )


def precondition_failed_rv(kind: str, name: str, expected: str, actual: str, group: str = "") -> ApiError:
    return conflict(
        kind,
        name,
        f"the ResourceVersion in the precondition ({expected}) does not match the ResourceVersion in record "
        f"({actual}). The object might have been modified",
        group,
    )


def _render_value(value: Any) -> str:
    """Go's field.Invalid renders strings quoted and numbers/bools bare; JSON gives the same for those."""
    try:
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def field_invalid(field: str, value: Any, detail: str) -> JSON:
    """A StatusCause for field.Invalid (e.g. `metadata.uid: Invalid value: "a": field is immutable`)."""
    message = f"Invalid value: {_render_value(value)}"
    if detail:
        message += f": {detail}"
    return {"reason": "FieldValueInvalid", "message": message, "field": field}


def field_required(field: str, detail: str = "") -> JSON:
    message = "Required value" + (f": {detail}" if detail else "")
    return {"reason": "FieldValueRequired", "message": message, "field": field}


def field_forbidden(field: str, detail: str) -> JSON:
    message = "Forbidden" + (f": {detail}" if detail else "")
    return {"reason": "FieldValueForbidden", "message": message, "field": field}


def field_not_supported(field: str, value: Any, supported: Sequence[str]) -> JSON:
    message = f"Unsupported value: {_render_value(value)}"
    if supported:
        message += ": supported values: " + ", ".join(json.dumps(s) for s in supported)
    return {"reason": "FieldValueNotSupported", "message": message, "field": field}


def _cause_text(cause: JSON) -> str:
    field = str(cause.get("field", ""))
    message = str(cause.get("message", ""))
    return f"{field}: {message}" if field else message


def invalid(kind: str, name: str, causes: list[JSON], group: str = "") -> ApiError:
    """422 Invalid: message is `Kind "name" is invalid: <aggregate>`; one cause is bare, several are `[a, b]`."""
    texts: list[str] = []
    for cause in causes:
        text = _cause_text(cause)
        if text not in texts:  # utilerrors.NewAggregate dedups identical messages
            texts.append(text)
    aggregate = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return _error(
        422,
        "Invalid",
        f'{qualified(kind, group)} "{name}" is invalid: {aggregate}',
        _details(name, group, kind, causes=[dict(c) for c in causes]),
    )


def invalid_by_resource(resource_plural: str, name: str, message: str, group: str = "") -> ApiError:
    """422 from admission (a policy's denial): names the resource, one cause without a field."""
    return _error(422, "Invalid", f'{qualified(resource_plural, group)} "{name}" is invalid: {message}',
                  _details(name, group, resource_plural, causes=[{"message": message}]))


def bad_request(message: str) -> ApiError:
    return _error(400, "BadRequest", message)


def unauthorized(message: str = "Unauthorized") -> ApiError:
    return _error(401, "Unauthorized", message)


def forbidden(resource_plural: str, name: str, message: str, group: str = "") -> ApiError:
    what = qualified(resource_plural, group)
    prefix = f'{what} "{name}"' if name else what
    return _error(403, "Forbidden", f"{prefix} is forbidden: {message}", _details(name, group, resource_plural))


def method_not_allowed(action: str, resource_plural: str, group: str = "") -> ApiError:
    """E.g. `create is not supported on resources of kind "nodes"` (errors.NewMethodNotSupported)."""
    return _error(
        405,
        "MethodNotAllowed",
        f'{action} is not supported on resources of kind "{qualified(resource_plural, group)}"',
        _details("", group, resource_plural),
    )


def not_acceptable(accepted: Iterable[str]) -> ApiError:
    return _error(406, "NotAcceptable", "only the following media types are accepted: " + ", ".join(accepted))


def unsupported_media_type(content_type: str, accepted: Iterable[str] = PATCH_CONTENT_TYPES) -> ApiError:
    """415 for a body in a format the endpoint cannot decode.

    The real message lists only the accepted types, not the offending one, so `content_type` only keeps
    call sites self-explanatory; it is deliberately not echoed (matching negotiation.NewUnsupportedMediaTypeError).
    """
    del content_type
    return _error(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: " + ", ".join(accepted),
    )


def gone(message: str = LIST_TOO_OLD_MESSAGE) -> ApiError:
    """410 Expired (errors.NewResourceExpired): what clients see when a resourceVersion fell out of history."""
    return _error(410, "Expired", message)


def list_too_old() -> ApiError:
    return gone(LIST_TOO_OLD_MESSAGE)


def expired_watch_event(requested_rv: int, oldest_rv: int) -> JSON:
    """The single ERROR event a watch from a compacted RV receives on a 200 stream before it closes."""
    return {
        "type": "ERROR",
        "object": status_body(410, "Expired", f"too old resource version: {requested_rv} ({oldest_rv})"),
    }


def too_many_requests(message: str, retry_after_seconds: int = 1) -> ApiError:
    return _error(429, "TooManyRequests", message, {"retryAfterSeconds": retry_after_seconds})


def internal_error(message: str) -> ApiError:
    return _error(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})


def server_timeout(resource_plural: str, operation: str, retry_after_seconds: int = 1, group: str = "") -> ApiError:
    return _error(
        500,
        "ServerTimeout",
        f"The {operation} operation against {qualified(resource_plural, group)} could not be completed at this time, "
        "please try again.",
        _details("", group, resource_plural, retryAfterSeconds=retry_after_seconds),
    )


def service_unavailable(message: str) -> ApiError:
    return _error(503, "ServiceUnavailable", message)


def timeout(message: str, retry_after_seconds: int = 0) -> ApiError:
    """504 Timeout (errors.NewTimeoutError prefixes `Timeout: `)."""
    details: JSON = {"retryAfterSeconds": retry_after_seconds} if retry_after_seconds else {}
    return _error(504, "Timeout", f"Timeout: {message}", details)


def too_large_rv(requested: int | None = None, current: int | None = None, retry_after_seconds: int = 1) -> ApiError:
    """A list/get asked for a resourceVersion the server has not reached yet (after waiting for it).

    The real server says `Timeout: Too large resource version: N, current: M` and adds a
    ResourceVersionTooLarge cause, which is what client-go's IsTooLargeResourceVersion checks.
    """
    text = TOO_LARGE_RV_CAUSE
    if requested is not None:
        text += f": {requested}"
        if current is not None:
            text += f", current: {current}"
    details: JSON = {"causes": [{"reason": "ResourceVersionTooLarge", "message": TOO_LARGE_RV_CAUSE}]}
    if retry_after_seconds:
        details["retryAfterSeconds"] = retry_after_seconds
    return _error(504, "Timeout", f"Timeout: {text}", details)


def success_status(resource_plural: str, name: str, uid: str = "", group: str = "") -> JSON:
    """What DELETE returns for kinds other than pods: a Success Status naming what was deleted."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": _details(name, group, resource_plural, uid=uid),
    }
