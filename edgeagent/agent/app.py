"""`edgeagent run`: wires the node agent together and owns its start-up and shutdown.

Start-up order is the point of this module. The snapshot is loaded and the HTTP server listens before
the cloud is contacted at all, so `GET /pods` answers at once on a node that boots offline. Then one
TaskGroup owns every long-running part (informer, snapshot persister, link monitor, drainer, systemd
watchdog, shutdown waiter): if one fails the others are cancelled, and SIGTERM stops the server first
(no new requests), then cancels the tasks (the persister writes its last snapshot), then closes the
database, so a restart finds a consistent file.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import sys
from collections.abc import Callable
from datetime import tzinfo
from pathlib import Path
from typing import Any

from aiohttp import web

from edgeagent import log
from edgeagent.agent.api.token_file import read_token_file
from edgeagent.agent.link.cache import PodCache
from edgeagent.agent.link.monitor import LinkMonitor
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.agent.policy.autoprepull import AutoPrepuller
from edgeagent.agent.policy.held import HeldPublisher
from edgeagent.agent.policy.site import Clock, PolicyStatus, SitePolicy
from edgeagent.agent.policy.windows import Window, WindowSpecError, load_zone, local_zone, parse_windows
from edgeagent.agent.sdnotify import SdNotifier
from edgeagent.agent.state.store import ACTIVE_STATES, VERIFYING, StateStore, StateUnavailable
from edgeagent.config import AgentConfig
from edgeagent.kube.client import KubeClient, Timeouts, user_agent
from edgeagent.kube.informer import Informer
from edgeagent.kube.kubeconfig import load_problem
from edgeagent.kube.objects import share_strings
from edgeagent.service import bound_port, describe, run_until_signalled

_log = log.get("edgeagent.agent")

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2

# Seconds in-flight requests get to finish once SIGTERM stopped the listener.
SHUTDOWN_GRACE = 3.0
# The watch must notice a dead stream on its own too (the link monitor is faster, this is the backstop).
WATCH_IDLE_TIMEOUT = 60.0


class AgentError(Exception):
    """A start-up problem with one clear line for the operator, and the exit code it maps to."""

    def __init__(self, message: str, exit_code: int = EXIT_RUNTIME) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _Shutdown(Exception):
    """Raised inside the TaskGroup to cancel its siblings once a stop was asked for."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(cfg: AgentConfig) -> str | None:
    """Apply the bind rules and return the bearer token (None: no token required).

    A non-loopback address exposes the upgrade endpoint to the network, which can delete pods: it needs
    a token, or an explicit, loudly named opt-out.
    """
    token = read_token(cfg.token_file) if cfg.token_file is not None else None
    if not is_loopback(cfg.bind) and token is None and not cfg.insecure_allow_remote:
        raise AgentError(
            f"refusing to listen on non-loopback address {cfg.bind}: set --token-file (bearer token for "
            "mutating endpoints) or --insecure-allow-remote",
            EXIT_USAGE,
        )
    return token


def read_token(path: Path) -> str:
    """The token, or a usage error naming the file: a bad token file must stop start-up, not open the API."""
    try:
        return read_token_file(path)
    except OSError as exc:
        raise AgentError(f"cannot read token file {path}: {exc.strerror or exc}", EXIT_USAGE) from exc
    except UnicodeDecodeError as exc:
        raise AgentError(f"token file {path} is not UTF-8 text", EXIT_USAGE) from exc
    except ValueError as exc:  # empty
        raise AgentError(str(exc), EXIT_USAGE) from exc


class Agent:
    """One agent run; `port` is the bound port once `ready` is set (useful with `--port 0`)."""

    def __init__(self, cfg: AgentConfig, *, notifier: SdNotifier | None = None, clock: Clock | None = None) -> None:
        self.cfg = cfg
        # The site policy's wall clock; tests inject one that stands just before a window.
        self.clock = clock
        self.policy: SitePolicy | None = None
        self.held: HeldPublisher | None = None
        self.auto_prepull: AutoPrepuller | None = None
        self.notifier = notifier or SdNotifier()
        self.port: int | None = None
        self.metrics = AgentMetrics()
        self.informer: Informer | None = None
        self.cache: PodCache | None = None
        self.link: LinkMonitor | None = None
        self.state: StateStore | None = None
        self.outcomes: Any = None  # edgeagent.agent.outcomes.Outcomes once serving
        self._runner: web.AppRunner | None = None
        self._server_stopped = False

    @property
    def url(self) -> str:
        host = self.cfg.bind if ":" not in self.cfg.bind else f"[{self.cfg.bind}]"
        return f"http://{host}:{self.port}"

    async def run(self, *, ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
        """Serve until `stop` is set or the task is cancelled; raise AgentError on a start-up problem."""
        cfg = self.cfg
        token = check_bind(cfg)
        windows, tz = site_windows(cfg)
        stop = stop or asyncio.Event()
        client = await self._connect_client()
        try:
            self.state = await self._open_state()
            try:
                self.policy = SitePolicy(self.state, windows, tz, clock=self.clock)
                await self._serve(client, self.state, self.policy, token, ready, stop)
            finally:
                await self.state.close()
                _log.info("state_store_closed", state_dir=str(cfg.state_dir))
        finally:
            await client.close()
            self.notifier.close()

    async def _connect_client(self) -> KubeClient:
        cfg = self.cfg
        timeouts = Timeouts(connect=min(3.0, cfg.request_timeout), request=cfg.request_timeout)
        try:
            return await KubeClient.connect(cfg.kubeconfig, timeouts, agent=user_agent("agent", cfg.node_name))
        except FileNotFoundError as exc:  # a file the operator named is not there: usage, like --token-file
            raise AgentError(str(exc), EXIT_USAGE) from exc
        except Exception as exc:  # a malformed kubeconfig surfaces as many different exception types
            raise AgentError(load_problem(exc, cfg.kubeconfig or "KUBECONFIG / in-cluster config")) from exc

    async def _open_state(self) -> StateStore:
        try:
            return await StateStore.open(self.cfg.state_dir)
        except (StateUnavailable, OSError) as exc:
            raise AgentError(f"cannot open state directory {self.cfg.state_dir}: {exc}") from exc

    async def _serve(self, client: KubeClient, state: StateStore, policy: SitePolicy, token: str | None,
                     ready: asyncio.Event | None, stop: asyncio.Event) -> None:
        # Imported here: these modules belong to the upgrade half of the agent and import this one's parts.
        from edgeagent.agent.api.http import create_app
        from edgeagent.agent.outcomes import Outcomes
        from edgeagent.agent.requests.drainer import Drainer
        from edgeagent.agent.requests.upgrade import UpgradeService

        cfg = self.cfg
        metrics = self.metrics
        try:
            await policy.load()
        except StateUnavailable as exc:
            _log.error("hold_unreadable", error=str(exc), hint="a hold set earlier is not known until the state "
                                                                "directory is readable again")
        informer = Informer(
            client, "/api/v1/pods", field_selector=f"spec.nodeName={cfg.node_name}", name="pods",
            watch_timeout_seconds=cfg.watch_timeout_seconds, idle_timeout=WATCH_IDLE_TIMEOUT,
            transform=share_strings,  # equal objects, repeated strings stored once (agent RSS at 1,000 pods)
        )
        cache = PodCache(informer, state, cfg.node_name, metrics=metrics)
        pods, rv = await state.load_snapshot()
        if pods or rv:
            informer.seed(pods, rv)
        _log.info("snapshot_loaded", pods=len(informer.items), resource_version=rv or None)
        metrics.track_informer(informer)
        metrics.track_policy(policy.status)
        link = LinkMonitor(
            client, cfg.node_name, interval=cfg.probe_interval, timeout=cfg.probe_timeout,
            failures_to_disconnect=cfg.failures_to_disconnect, successes_to_connect=cfg.successes_to_connect,
            informer=informer, metrics=metrics, queued=lambda: _waiting(state, policy),
        )
        link.add_listener(self._on_link)
        self.informer, self.cache, self.link = informer, cache, link
        upgrades = UpgradeService(
            client=client, cache=cache, link=link, state=state, node_name=cfg.node_name,
            upgrade_timeout=cfg.upgrade_timeout, request_timeout=cfg.request_timeout, metrics=metrics,
            ready_timeout=cfg.ready_timeout,
        )
        drainer = Drainer(client=client, link=link, state=state, node_name=cfg.node_name,
                          request_timeout=cfg.request_timeout, metrics=metrics, policy=policy,
                          ready_timeout=cfg.ready_timeout, cache=cache)
        outcomes = Outcomes(cfg=cfg, client=client, state=state, informer=informer, cache=cache, link=link,
                            upgrades=upgrades, metrics=metrics, policy=policy)
        self.outcomes = outcomes
        upgrades.on_queued.append(drainer.notify)
        upgrades.on_queued.append(link.notify)
        policy.add_listener(lambda status: _on_open(status, drainer.notify, link.notify))  # ?when=open entries
        held = HeldPublisher(client=client, cache=cache, informer=informer, link=link, policy=policy,
                             request_timeout=cfg.request_timeout)
        self.held = held
        if cfg.auto_prepull:
            self.auto_prepull = AutoPrepuller(cache=cache, informer=informer, link=link, state=state,
                                              upgrades=upgrades)
        link.add_listener(drainer.on_link)
        app = create_app(cache=cache, upgrades=upgrades, state=state, link=link, metrics=metrics, token=token,
                         max_body_bytes=cfg.max_body_bytes, policy=policy)

        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
        self._runner = runner
        await runner.setup()
        try:
            site = web.TCPSite(runner, cfg.bind, cfg.port)
            try:
                await site.start()
            except OSError as exc:
                raise AgentError(f"cannot listen on {cfg.bind}:{cfg.port}: {exc.strerror or exc}") from exc
            self.port = bound_port(runner, cfg.port)
            _log.info("agent_listening", bind=cfg.bind, port=self.port, node=cfg.node_name,
                      pods=len(informer.items), auth="token" if token else "none")
            self.notifier.ready(self._status(False))
            if ready is not None:
                ready.set()
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(informer.run(), name="informer")
                    tg.create_task(cache.run(), name="snapshot-persister")
                    tg.create_task(link.run(), name="link-monitor")
                    tg.create_task(link.watch_credentials(), name="credential-watch")
                    tg.create_task(drainer.run(), name="drainer")
                    tg.create_task(policy.run(), name="site-policy")
                    tg.create_task(held.run(), name="upgrade-held")
                    if self.auto_prepull is not None:
                        tg.create_task(self.auto_prepull.run(), name="auto-prepull")
                    for task_name, coro in outcomes.tasks().items():
                        tg.create_task(coro, name=task_name)
                    tg.create_task(self.notifier.run_watchdog(), name="watchdog")
                    tg.create_task(self._wait_stop(stop), name="shutdown")
            except* _Shutdown:
                pass
        finally:
            await self._stop_server()
            _log.info("agent_stopped", node=cfg.node_name)

    async def _wait_stop(self, stop: asyncio.Event) -> None:
        await stop.wait()
        # Stop accepting first, so nothing new reaches the tasks that are about to be cancelled.
        await self._stop_server()
        raise _Shutdown

    async def _stop_server(self) -> None:
        if self._server_stopped or self._runner is None:
            return
        self._server_stopped = True
        _log.info("agent_stopping", grace_seconds=SHUTDOWN_GRACE, why="no new requests, finishing in-flight ones")
        self.notifier.stopping()
        await self._runner.cleanup()

    def _on_link(self, connected: bool) -> None:
        if connected and self.informer is not None:
            # The watch may be sleeping in backoff; the cloud is back, so resync now, not in 10 s.
            self.informer.kick()
        self.notifier.status(self._status(connected))

    def _status(self, connected: bool) -> str:
        pods = len(self.informer.items) if self.informer is not None else 0
        link = "connected" if connected else "disconnected"
        return f"serving {pods} pods on port {self.port}; cloud link {link}"


def site_windows(cfg: AgentConfig) -> tuple[tuple[Window, ...], tzinfo]:
    """The parsed maintenance windows and their zone; a bad spec or zone is a usage error (exit 2)."""
    try:
        windows = parse_windows(cfg.maintenance_windows)
        tz = load_zone(cfg.timezone) if cfg.timezone else local_zone()
    except WindowSpecError as exc:
        raise AgentError(str(exc), EXIT_USAGE) from exc
    return windows, tz


async def _waiting(state: StateStore, policy: SitePolicy) -> int:
    """Requests that wait for the cloud (queued, or running when a crash interrupted them), or for a live pod
    cache (verifying: a failure verdict needs to know the cache is not frozen by a silent cut).

    A `?when=open` request waits for the site, not the cloud, while the node is held: it must not keep the
    link probing for the days until its window (the policy's listener wakes the monitor when it opens).
    """
    counts = await state.counts()
    active = sum(counts.get(name, 0) for name in ACTIVE_STATES)
    if active and not policy.is_open():
        active -= sum(1 for entry in await state.pending() if entry.when_open)
    return active + counts.get(VERIFYING, 0)


def _on_open(status: PolicyStatus, *wake: Callable[[], None]) -> None:
    if status.open:
        for fn in wake:
            fn()


async def run_agent(cfg: AgentConfig, *, ready: asyncio.Event | None = None,
                    stop: asyncio.Event | None = None) -> None:
    """Run one agent until `stop` is set or the task is cancelled (tests use Agent to learn the port)."""
    await Agent(cfg).run(ready=ready, stop=stop)


def main(cfg: AgentConfig) -> int:
    # The queue and the pod snapshot are this node's business only: 0600 files, as under systemd's
    # UMask=0077, also in a container or a shell whose umask is 022.
    os.umask(0o077)
    log.configure(cfg.log)
    try:
        asyncio.run(run_until_signalled(lambda stop: Agent(cfg).run(stop=stop), _log))
    except AgentError as exc:
        print(f"edgeagent: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:
        _log.error("agent_failed", error=describe(exc), exc_info=True)
        print(f"edgeagent: error: agent failed: {describe(exc)}", file=sys.stderr)
        return EXIT_RUNTIME
    return EXIT_OK


__all__ = ["Agent", "AgentError", "check_bind", "main", "run_agent"]
