"""What the test fronts of the simulated API server (faulty_proxy.py, tls_apiserver.py) share: a server on a
free loopback port that hands every request to one handler, and the forwarding of a request to the sim with its
answer streamed back as it comes (a watch stays a watch through the front)."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterable

import aiohttp
from aiohttp import web

# Headers of one hop, which the front's own connections set: never copied from one side to the other.
HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


async def listen(handler: Callable[[web.Request], Awaitable[web.StreamResponse]], *,
                 ssl_context: ssl.SSLContext | None = None,
                 client_max_size: int = 1024 ** 2) -> tuple[web.AppRunner, str]:
    """Serve every method and path with `handler` on 127.0.0.1 and a free port: the runner (cleaned up to stop)
    and the URL (https with `ssl_context`)."""
    app = web.Application(client_max_size=client_max_size)
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    scheme = "https" if ssl_context is not None else "http"
    return runner, f"{scheme}://127.0.0.1:{runner.addresses[0][1]}"


async def forward(session: aiohttp.ClientSession, upstream: str, request: web.Request, *,
                  drop: Iterable[str] = HOP_HEADERS, answer_headers: bool = True,
                  extra_headers: Iterable[tuple[str, str]] = ()) -> web.StreamResponse:
    """Send `request` on to `upstream` without the request headers named in `drop` (lowercase) and stream the
    answer back. `answer_headers`: copy the answer's headers (but the hop's); otherwise only its content type.
    `extra_headers` are added to the answer."""
    dropped = frozenset(drop)
    headers = {k: v for k, v in request.headers.items() if k.lower() not in dropped}
    body = await request.read()
    async with session.request(request.method, upstream + request.path_qs, headers=headers,
                               data=body or None) as answer:
        response = web.StreamResponse(status=answer.status)
        if answer_headers:
            for key, value in answer.headers.items():
                if key.lower() not in HOP_HEADERS:
                    response.headers.add(key, value)
        else:
            response.content_type = answer.content_type
        for key, value in extra_headers:
            response.headers.add(key, value)
        await response.prepare(request)
        async for chunk in answer.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response
