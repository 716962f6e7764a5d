"""The speed limit of our stack: a bare aiohttp app answering `GET /pods` with fixed bytes.

The agent's `GET /pods` is aiohttp plus its own handler (a cached bytes lookup, timing and a metrics
series; no app middleware). This is aiohttp alone, serving the very bytes the agent served, with the
same content type and no access log, so `agent requests/s ÷ this` shows what the agent's own code
costs. `--middleware` adds one pass-through app middleware, to show what any middleware costs.

    .venv/bin/python bench/bare_server.py BODY_FILE PORT [--middleware]
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler


@web.middleware
async def passthrough(request: web.Request, handler: Handler) -> web.StreamResponse:
    return await handler(request)


def main() -> int:
    body = Path(sys.argv[1]).read_bytes()
    port = int(sys.argv[2])
    middlewares = [passthrough] if "--middleware" in sys.argv[3:] else []

    async def pods(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application(middlewares=middlewares)
    app.router.add_get("/pods", pods)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, handle_signals=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
