"""Bearer-token protection of the agent's mutating endpoints.

Reads stay open (`GET /pods` is what local workloads poll, like YurtHub's); anything that can delete a
pod or change the queue needs the token when one is configured. The comparison is constant-time so
the token cannot be guessed byte by byte from response timings, and the token is never logged — not
even the wrong one a client sent.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web

MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Unauthorized(Exception):
    """No or a wrong bearer token on a mutating request."""


def token_matches(authorization: str | None, token: str) -> bool:
    """True when `authorization` is `Bearer <token>` (scheme case-insensitive), compared in constant time."""
    if not authorization:
        return False
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode("utf-8"), token.encode("utf-8"))


def check_request(request: web.Request, token: str | None) -> None:
    """Raise Unauthorized unless the request may proceed."""
    if token is None or request.method not in MUTATING_METHODS:
        return
    if not token_matches(request.headers.get("Authorization"), token):
        raise Unauthorized(f"{request.method} {request.path} needs 'Authorization: Bearer <token>' "
                           "with the agent's token (missing or wrong)")
