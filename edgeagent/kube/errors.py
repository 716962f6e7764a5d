"""What a failed call to a Kubernetes API server means, as a small tree of exceptions.

Callers write `except NotFound`, never `if exc.code == 404`: the meaning is named where it is used, and a
status the code did not think of still lands in the right branch (any 5xx is a `ServerError`).

    ApiError                      every failed call
    ├── KubeUnreachable           no answer: refused, reset, timed out, TLS failure (raised from the cause)
    └── KubeError                 the server answered with a status outside 2xx (.code, .reason, .message)
        ├── ClientError           4xx: the request as sent will not succeed
        │   ├── BadRequest        400
        │   ├── Unauthorized      401  credentials missing, expired or rotated away
        │   ├── Forbidden         403  RBAC (or an admission plugin) says no
        │   ├── NotFound          404  the object (or its namespace) does not exist
        │   ├── Conflict          409  a precondition (UID, resourceVersion) failed or it already exists
        │   ├── Gone              410  a watch or list resourceVersion too old: relist
        │   ├── Invalid           422  the object fails validation (also: an immutable field changed)
        │   └── TooManyRequests   429  throttled (API priority and fairness): retry later
        └── ServerError           5xx: the server could not do it now (etcd, restart, timeout): retry later

`KubeError(code, ...)` still builds the right subclass (`KubeError(404)` is a `NotFound`), so `exc.code`
keeps working where a number is what is wanted (logs, messages).
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


class ApiError(Exception):
    """A call to the API server that did not succeed, answered or not."""


class KubeUnreachable(ApiError):
    """The API server could not be reached or did not answer in time (as opposed to answering with an error).

    `server`: the URL that was tried, when the client knows it, so that a command can name it in its one line."""

    server: str = ""


class KubeError(ApiError):
    """A failed API call the server answered, carrying its `Status` object when it sent one."""

    code: int

    def __new__(cls, code: int, status: JSON | None = None, message: str | None = None) -> KubeError:
        # KubeError(404) is a NotFound: one constructor for every status, the class says what it means.
        target = cls if cls is not KubeError else class_for(code)
        return super().__new__(target)

    def __init__(self, code: int, status: JSON | None = None, message: str | None = None) -> None:
        self.code = code
        self.status = status or {}
        self.reason: str = str(self.status.get("reason") or "")
        self.message: str = message or str(self.status.get("message") or f"HTTP {code}")
        super().__init__(f"{code} {self.reason}: {self.message}" if self.reason else f"{code}: {self.message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (KubeError, (self.code, self.status, self.message))

    @property
    def retryable(self) -> bool:
        """The server could not do it now (overload, restart, throttling): the same call may succeed later."""
        return isinstance(self, ServerError | TooManyRequests)


class ClientError(KubeError):
    """4xx: the request as sent will not succeed."""


class BadRequest(ClientError):
    """400."""


class Unauthorized(ClientError):
    """401: credentials missing, expired or rotated away."""


class Forbidden(ClientError):
    """403: RBAC or an admission plugin refused."""


class NotFound(ClientError):
    """404: the object does not exist (any more)."""


class Conflict(ClientError):
    """409: a precondition (UID, resourceVersion) failed, or the object already exists."""


class Gone(ClientError):
    """410: the resourceVersion is too old for a watch or list; relist."""


class Invalid(ClientError):
    """422: the object fails validation."""


class TooManyRequests(ClientError):
    """429: throttled; retry later."""


class ServerError(KubeError):
    """5xx: the server could not do it now."""


_BY_CODE: dict[int, type[KubeError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone, 422: Invalid,
    429: TooManyRequests,
}


def class_for(code: int) -> type[KubeError]:
    """The most specific class for an HTTP status (any other 4xx: ClientError; 5xx: ServerError)."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if 400 <= code <= 499:
        return ClientError
    if code >= 500:
        return ServerError
    return KubeError


__all__ = [
    "ApiError", "BadRequest", "ClientError", "Conflict", "Forbidden", "Gone", "Invalid", "KubeError",
    "KubeUnreachable", "NotFound", "ServerError", "TooManyRequests", "Unauthorized", "class_for",
]
