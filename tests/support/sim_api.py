"""Test helpers for the bare API server: a raw-request/watch wrapper around kubernetes_asyncio and object builders."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client as k8s

from edgeagent.sim.resources import NODES, PODS
from edgeagent.sim.server import ServerSettings
from edgeagent.sim.store import Store

JSON = dict[str, Any]

# Short enough that bookmark and RV-wait tests take a fraction of a second.
TEST_SETTINGS = ServerSettings(bookmark_interval=0.2, too_large_rv_wait=0.3, disconnect_poll=0.1)


@dataclass
class Reply:
    status: int
    headers: Any
    raw: bytes

    @property
    def body(self) -> Any:
        return json.loads(self.raw)


@dataclass
class Watcher:
    """A watch stream read line by line in the background, the way kubernetes_asyncio reads it."""

    response: aiohttp.ClientResponse
    lines: list[bytes] = field(default_factory=list)
    done: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def events(self) -> list[JSON]:
        return [json.loads(line) for line in self.lines]

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def of_type(self, type_: str) -> list[JSON]:
        return [e for e in self.events if e["type"] == type_]

    async def _read(self) -> None:
        try:
            while True:
                line = await self.response.content.readline()
                if not line:
                    break
                self.lines.append(line)
        finally:
            self.done = True


class Api:
    def __init__(self, store: Store, url: str, client: k8s.ApiClient, server_app: web.Application) -> None:
        self.store = store
        self.server_app = server_app
        self.url = url
        self.client = client
        self.core = k8s.CoreV1Api(client)
        self.apps = k8s.AppsV1Api(client)
        self.coordination = k8s.CoordinationV1Api(client)
        self._watchers: list[Watcher] = []

    async def call(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Reply:
        """One request through kubernetes_asyncio's REST layer, raw (no exception on non-2xx)."""
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        url = self.url + path
        if isinstance(body, bytes):
            # Bytes go out untouched (the REST layer would JSON-encode them for a JSON content type).
            session = self.client.rest_client.pool_manager
            response = await session.request(method, url, params=query, data=body, headers=headers)
        else:
            items = list(query.items()) if isinstance(query, dict) else list(query or [])
            # The bundled rest.pyi types query_params as a dict, but rest.py only urlencode()s it, which takes
            # (key, value) pairs too; pairs keep repeated keys, which a dict cannot.
            response = await self.client.rest_client.request(
                method,
                url,
                query_params=items or None,  # type: ignore[arg-type]
                headers=headers,
                body=body,
                _preload_content=False,
            )
        async with response:
            return Reply(response.status, response.headers, await response.read())

    async def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        reply = await self.call(method, path, **kwargs)
        assert 200 <= reply.status < 300, (reply.status, reply.raw)
        return reply.body

    async def watch(self, path: str, **query: Any) -> Watcher:
        """Open `GET path?watch=1&...` and collect its lines until it ends."""
        params = {"watch": "1", **{k: str(v) for k, v in query.items()}}
        session = self.client.rest_client.pool_manager
        response = await session.get(self.url + path, params=params, timeout=aiohttp.ClientTimeout(total=None))
        assert response.status == 200, (response.status, await response.read())
        watcher = Watcher(response)
        watcher.task = asyncio.create_task(watcher._read())
        self._watchers.append(watcher)
        return watcher

    async def close(self) -> None:
        for watcher in self._watchers:
            watcher.response.close()
            if watcher.task is not None:
                watcher.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await watcher.task
        await self.client.close()


def pod(
    name: str,
    *,
    namespace: str = "default",
    node: str | None = "edge-1",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> JSON:
    body: JSON = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}], **spec},
    }
    if node is not None:
        body["spec"]["nodeName"] = node
    return body


def node(name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"conditions": []}}


def daemonset(name: str, *, namespace: str = "default", image: str = "registry.local/agent:1") -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "agent", "image": image}]},
            },
        },
    }


def create_pod(store: Store, name: str, **kwargs: Any) -> JSON:
    """Seed state directly in the store (the HTTP behaviour under test is elsewhere)."""
    return store.create(PODS, pod(name, **kwargs))


def create_node(store: Store, name: str) -> JSON:
    return store.create(NODES, node(name))
