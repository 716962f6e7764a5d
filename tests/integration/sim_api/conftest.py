"""A bare simulated API server (Store + HTTP, no controllers) and a kubernetes_asyncio client for it.

These tests pin the API semantics themselves, so nothing else may write to the store: no DaemonSet
controller, no kubelet. `api` is a started server with test timings; `api_factory` builds one with a
different history size or server settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from edgeagent.sim.server import ServerSettings, create_app
from edgeagent.sim.store import Store
from tests.support.sim_api import TEST_SETTINGS, Api

ApiFactory = Callable[..., Awaitable[Api]]


@pytest.fixture
async def api_factory() -> AsyncIterator[ApiFactory]:
    started: list[tuple[Api, web.AppRunner]] = []

    async def factory(*, history: int = 10000, settings: ServerSettings = TEST_SETTINGS) -> Api:
        store = Store(history=history)
        app = create_app(store, settings=settings)
        runner = web.AppRunner(app, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}"
        client = k8s.ApiClient(k8s.Configuration(host=url))
        api = Api(store, url, client, app)
        started.append((api, runner))
        return api

    try:
        yield factory
    finally:
        for api, runner in reversed(started):
            await api.close()
            await runner.cleanup()


@pytest.fixture
async def api(api_factory: ApiFactory) -> Api:
    return await api_factory()
