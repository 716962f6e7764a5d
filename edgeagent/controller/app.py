"""`edgeagent controller`: informers always, reconcile workers only while holding the leader Lease.

The standby keeps its caches warm, so a takeover starts reconciling at once instead of listing the
cluster first. One TaskGroup owns the informers, the elector (or the workers directly without
`--leader-elect`), the garbage collector's schedule (gc_schedule.py) and the metrics server; SIGTERM
releases the Lease so the standby need not wait for it to expire.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid

from aiohttp import web

from edgeagent import log
from edgeagent.config import ControllerConfig
from edgeagent.controller import gc_schedule
from edgeagent.controller.leader import LeaderElector
from edgeagent.controller.metrics import ControllerMetrics
from edgeagent.controller.prepull import PrepullSettings
from edgeagent.controller.reconciler import Controller
from edgeagent.kube.client import KubeClient, Timeouts, user_agent
from edgeagent.kube.kubeconfig import load_problem, own_namespace
from edgeagent.service import bound_port, describe, run_until_signalled

_log = log.get("edgeagent.controller")

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2


class ControllerError(Exception):
    """A start-up problem with one clear line for the operator, and the exit code it maps to."""

    def __init__(self, message: str, exit_code: int = EXIT_RUNTIME) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _Shutdown(Exception):
    pass


def default_identity() -> str:
    """Unique per process, readable in `kubectl get lease -o yaml`: host, pid and a random suffix."""
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


class ControllerApp:
    """One controller process; tests run several in one event loop and read `controller`/`elector`."""

    def __init__(self, cfg: ControllerConfig, *, release_lease: bool = True, workers: int = 4,
                 serve_metrics: bool | None = None) -> None:
        self.cfg = cfg
        # `--metrics-port 0` means no server; tests ask for one on an ephemeral port with serve_metrics=True.
        self.serve_metrics = cfg.metrics_port != 0 if serve_metrics is None else serve_metrics
        self.identity = cfg.identity or default_identity()
        self.metrics = ControllerMetrics()
        self.release_lease = release_lease
        self.workers = workers
        self.controller: Controller | None = None
        self.elector: LeaderElector | None = None
        self.metrics_port: int | None = None

    @property
    def is_leader(self) -> bool:
        if not self.cfg.leader_elect:
            return self.controller is not None
        return self.elector is not None and self.elector.is_leader

    async def run(self, *, ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
        cfg = self.cfg
        stop = stop or asyncio.Event()
        timeouts = Timeouts(connect=min(3.0, cfg.request_timeout), request=cfg.request_timeout)
        try:
            client = await KubeClient.connect(cfg.kubeconfig, timeouts, agent=user_agent("controller"))
        except FileNotFoundError as exc:  # a file the operator named is not there: usage, like --token-file
            raise ControllerError(str(exc), EXIT_USAGE) from exc
        except Exception as exc:  # a malformed kubeconfig surfaces as many different exception types
            raise ControllerError(load_problem(exc, cfg.kubeconfig or "KUBECONFIG")) from exc
        runner: web.AppRunner | None = None
        try:
            prepull = PrepullSettings(enabled=cfg.image_prepull, max_concurrent=cfg.max_concurrent_prepulls,
                                      retries=cfg.image_prepull_retries, backoff=cfg.image_prepull_backoff,
                                      deadline=cfg.image_prepull_deadline)
            controller = Controller(client, metrics=self.metrics, identity=self.identity, workers=self.workers,
                                    prepull=prepull)
            self.controller = controller
            runner = await self._start_metrics_server(controller)
            if cfg.leader_elect:
                self.elector = LeaderElector(
                    client, namespace=cfg.lease_namespace or own_namespace(), name=cfg.lease_name,
                    identity=self.identity,
                    lease_duration=cfg.lease_duration, renew_interval=cfg.renew_interval,
                    release_on_exit=self.release_lease, on_change=lambda leading: self.metrics.leader.set(leading),
                )
            else:
                self.metrics.leader.set(1)
            _log.info("controller_starting", identity=self.identity, leader_elect=cfg.leader_elect,
                      metrics_port=self.metrics_port)
            if ready is not None:
                ready.set()
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(controller.run_informers(), name="informers")
                    group.create_task(gc_schedule.run(), name="gc-schedule")
                    if self.elector is not None:
                        group.create_task(self.elector.run(controller.run_workers), name="leader-election")
                    else:
                        group.create_task(controller.run_workers(), name="workers")
                    group.create_task(self._wait_stop(stop), name="shutdown")
            except* _Shutdown:
                pass
        finally:
            if runner is not None:
                await runner.cleanup()
            await client.close()
            _log.info("controller_stopped", identity=self.identity)

    async def _wait_stop(self, stop: asyncio.Event) -> None:
        await stop.wait()
        raise _Shutdown

    async def _start_metrics_server(self, controller: Controller) -> web.AppRunner | None:
        cfg = self.cfg
        if not self.serve_metrics:
            return None

        async def metrics(_: web.Request) -> web.Response:
            body, content_type = self.metrics.render()
            return web.Response(body=body, headers={"Content-Type": content_type})

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            if controller.synced:
                return web.Response(text="ok")
            return web.Response(status=503, text="caches not synced")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        for prefix in ("", "/v1"):
            app.router.add_get(f"{prefix}/healthz", healthz)
            app.router.add_get(f"{prefix}/readyz", readyz)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, cfg.metrics_bind, cfg.metrics_port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ControllerError(
                f"cannot listen on {cfg.metrics_bind}:{cfg.metrics_port}: {exc.strerror or exc}"
            ) from exc
        self.metrics_port = bound_port(runner, cfg.metrics_port)
        return runner


def main(cfg: ControllerConfig) -> int:
    log.configure(cfg.log)
    try:
        asyncio.run(run_until_signalled(lambda stop: ControllerApp(cfg).run(stop=stop), _log))
    except ControllerError as exc:
        print(f"edgeagent: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:
        _log.error("controller_failed", error=describe(exc), exc_info=True)
        print(f"edgeagent: error: controller failed: {describe(exc)}", file=sys.stderr)
        return EXIT_RUNTIME
    return EXIT_OK


__all__ = ["ControllerApp", "ControllerError", "default_identity", "main"]
