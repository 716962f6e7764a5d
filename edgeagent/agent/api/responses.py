"""How the agent's HTTP API answers: text by default, JSON for clients that ask for it.

Its own module so that every route module (http.py, hold_api.py) renders errors the same way without
importing each other.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

JSON = dict[str, Any]

CONTENT_JSON = "application/json"

_WORDS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
          409: "Conflict", 413: "RequestEntityTooLarge", 500: "InternalError", 502: "BadGateway",
          503: "ServiceUnavailable"}


def wants_json(request: web.Request) -> bool:
    return CONTENT_JSON in request.headers.get("Accept", "")


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=json.dumps(body, separators=(",", ":")).encode(), status=status,
                        content_type=CONTENT_JSON, headers=headers)


def text_response(message: str, status: int = 200, headers: dict[str, str] | None = None, *,
                  exact: bool = False) -> web.Response:
    """A text body ends with a newline, so `curl` leaves the shell prompt on its own line.

    `exact`: the bodies OpenYurt clients compare byte for byte stay as YurtHub sends them, without one:
    `200 Start updating pod ns/name`, `200 Image pre-pull requested for pod ns/name` and the health `OK`
    (the OpenYurt compatibility in docs/contract.md).
    """
    return web.Response(text=message if exact else message + "\n", status=status, headers=headers)


def message_response(request: web.Request, status: int, message: str, *, word: str | None = None,
                     extra: JSON | None = None, headers: dict[str, str] | None = None,
                     exact: bool = False) -> web.Response:
    """Text `message` by default; `{"status", "message", ...extra}` for JSON clients."""
    if wants_json(request):
        body: JSON = {"status": word or _WORDS.get(status, "OK" if status < 400 else "Error"), "message": message}
        body.update(extra or {})
        return json_response(body, status, headers)
    return text_response(message, status, headers, exact=exact)
