"""Issue 14 test gap: the informer re-checks its selectors itself, on lists and on watch events.

A server (or a proxy in front of it) that ignores or misapplies the selector must not make the agent serve
another node's pods. Here a test-local API server over real HTTP does exactly that, since the sim filters
correctly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from edgeagent.kube.client import KubeClient, Timeouts
from edgeagent.kube.informer import Informer
from tests.support.waiting import eventually


def _pod(name: str, node: str, rv: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": rv},
            "spec": {"nodeName": node}}


class CarelessServer:
    """Lists every pod whatever the field selector; its watch then reports `a` moved to another node as a
    MODIFIED (a real server would send DELETED to a watcher whose selector it no longer matches)."""

    def __init__(self) -> None:
        self.release_watch = asyncio.Event()
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
                                      "items": [_pod("a", "edge-1", "5"), _pod("b", "edge-2", "6")]})
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        event = {"type": "MODIFIED", "object": _pod("a", "edge-2", "11")}
        await response.write(json.dumps(event).encode() + b"\n")
        await self.release_watch.wait()
        return response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._pods)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        self.release_watch.set()
        if self._runner is not None:
            await self._runner.cleanup()


@contextlib.asynccontextmanager
async def careless() -> AsyncIterator[CarelessServer]:
    server = CarelessServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_list_and_watch_are_rechecked_against_the_selector(tmp_path: Any) -> None:
    async with careless() as server:
        kubeconfig = tmp_path / "kc"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": server.url}}],
            "users": [{"name": "u", "user": {}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }))
        client = await KubeClient.connect(kubeconfig, Timeouts(connect=1, request=2))
        informer = Informer(client, "/api/v1/pods", field_selector="spec.nodeName=edge-1", idle_timeout=30)
        events: list[tuple[str, str]] = []
        informer.add_handler(lambda t, obj, old: events.append((t, obj["metadata"]["name"])))
        task = asyncio.create_task(informer.run())
        try:
            # The list held edge-2's pod b too: never cached. Then `a` left the node: dropped locally.
            await eventually(lambda: events == [("ADDED", "a"), ("DELETED", "a")], what="a added then dropped")
            assert informer.items == {}
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.close()
