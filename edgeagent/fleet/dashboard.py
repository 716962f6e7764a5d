"""`edgeagent dashboard`: a live web page of the fleet, served on loopback with the user's kubeconfig.

Like `kubectl proxy`, it acts with the credentials of the person who started it and adds nothing to the
cluster: informers (list + watch) on DaemonSets, ControllerRevisions, pods, nodes and edgeagent Events feed
a `LiveFleet`, and every browser tab gets a server-sent event stream: one snapshot, then a few bytes per
node whose state changed (`["edge-17","o"]`), a node's labels when they change (the page filters and groups
on them), the waves of each rolling plan when the planner's ranking changes, DaemonSet summaries (with the
images of the revisions they name) at most four times a second, new Events, and the connection's health.
The page is static HTML, CSS and a small script shipped in this package (no build step, no CDN). The only
requests it sends to the API server are GETs (lists and watches), unless it was started with `--allow-actions`:
then each rollout's card has promote, pause, resume and abort buttons, and a press is the CLI verb's own write
(edgeagent.fleet.actions, which also guards that one POST route against other web sites). Without the flag
there is no such route and the server answers GET and HEAD only.

Loopback only unless `--allow-remote` (checked in cli.py): the page shows the fleet with the operator's
rights and has no login. On loopback, requests naming another Host are refused, so a web page elsewhere
cannot read it through DNS rebinding (kubectl proxy's `--accept-hosts` does the same).
"""

from __future__ import annotations

import asyncio
import importlib.resources
import json
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily

from edgeagent import log
from edgeagent.aio import wait_event
from edgeagent.fleet import actions
from edgeagent.fleet.live import LiveFleet, slim_daemonset, slim_event, slim_node, slim_pod, slim_revision
from edgeagent.fleet.settings import DashboardConfig, is_loopback
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable, Timeouts, user_agent
from edgeagent.kube.informer import Informer
from edgeagent.kube.kubeconfig import load_problem
from edgeagent.kube.timeutil import format_time
from edgeagent.rollout import model, plan_source

JSON = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_log = log.get("edgeagent.dashboard")

EXIT_ERROR = 1
EXIT_USAGE = 2  # docs/cli.md: a file named by --kubeconfig that is not there

STATIC_FILES = {"index.html": "text/html", "dashboard.css": "text/css", "dashboard.js": "text/javascript"}
SUMMARY_INTERVAL = 0.25
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
KEEPALIVE_SECONDS = 15.0
# A tab that reads slower than the fleet changes is dropped past this much unsent data; its EventSource
# reconnects and starts again from a fresh snapshot, so it never shows a stale cell.
MAX_PENDING_BYTES = 8 * 1024 * 1024
# A blackholed API server is noticed after this long without a byte on a watch (bookmarks keep it alive).
IDLE_TIMEOUT = 20.0
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def frame(event: str, data: object) -> bytes:
    """One server-sent event: compact JSON on one `data:` line."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()



def _unserved(informer: Informer) -> bool:
    """The RolloutPlans of a cluster that does not serve them (no CRD installed): no plans, not a broken link."""
    return informer.name == plan_source.RESOURCE and informer.last_code == 404

class _Client:
    """One browser tab's stream: frames queue here and its writer sends whatever is waiting in one write."""

    def __init__(self) -> None:
        self.pending: deque[bytes] = deque()
        self.pending_bytes = 0
        self.wake = asyncio.Event()
        self.dropped = False

    def push(self, data: bytes) -> None:
        if self.dropped:
            return
        if self.pending_bytes + len(data) > MAX_PENDING_BYTES:
            self.dropped = True
            self.pending.clear()
        else:
            self.pending.append(data)
            self.pending_bytes += len(data)
        self.wake.set()


class _FleetCollector:
    """`edgeagent_fleet_nodes{namespace,daemonset,state}`: the cells' states, as `fleet -o json` counts them."""

    def __init__(self, fleet: LiveFleet) -> None:
        self.fleet = fleet

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("edgeagent_fleet_nodes", "Nodes of a managed DaemonSet by state, as the fleet "
                                   "views count them (each node in exactly one state)",
                                   labels=["namespace", "daemonset", "state"])
        for key, counts in sorted(self.fleet.counts().items()):
            namespace, _, name = key.partition("/")
            for state, value in counts.items():
                family.add_metric([namespace, name, state], value)
        yield family


class Dashboard:
    def __init__(self, cfg: DashboardConfig) -> None:
        self.cfg = cfg
        self.fleet = LiveFleet()
        self.client: KubeClient | None = None
        self.informers: list[Informer] = []
        self._clients: set[_Client] = set()
        self._health: JSON = {"state": "connecting"}
        self._kick = asyncio.Event()
        self.bytes_pushed = 0  # every byte sent to every tab (for the benchmark)
        self.node_bytes = 0  # of which node-change frames
        self.static = {name: (importlib.resources.files("edgeagent.fleet") / "static" / name).read_bytes()
                       for name in STATIC_FILES}
        # The page's token for the action route (none without --allow-actions: the page shows no buttons).
        self.token = actions.new_token() if cfg.allow_actions else ""
        if self.token:
            self.static["index.html"] = _with_token(self.static["index.html"], self.token)
        self.fleet.add_node_listener(self._on_node_change)
        self.fleet.add_event_listener(lambda ev: self._broadcast(frame("ev", ev)))
        self.fleet.add_label_listener(lambda node, labels: self._broadcast(frame("nl", [node, labels])))
        self._waves_sent: object = None

    # ------------------------------------------------------------------------------ cluster side

    async def connect(self) -> None:
        """Load the kubeconfig (errors here are the operator's to fix: they end the command)."""
        self.client = await KubeClient.connect(self.cfg.kubeconfig, Timeouts(connect=3, request=15),
                                               agent=user_agent("dashboard"), context=self.cfg.context)
        kinds: list[tuple[str, str, Callable[[str, JSON, JSON | None], None], Callable[[JSON], JSON] | None,
                          str | None]] = [
            ("daemonsets.apps", "/apis/apps/v1/daemonsets", self.fleet.on_daemonset, slim_daemonset, None),
            ("controllerrevisions.apps", "/apis/apps/v1/controllerrevisions", self.fleet.on_revision, slim_revision,
             None),
            ("nodes", "/api/v1/nodes", self.fleet.on_node, slim_node, None),
            ("pods", "/api/v1/pods", self.fleet.on_pod, slim_pod, None),
            (plan_source.RESOURCE, f"{plan_source.GROUP_PATH}/{plan_source.PLURAL}", self.fleet.on_plan, None, None),
            ("events", "/api/v1/events", self.fleet.on_event, slim_event, f"source={model.AGENT_COMPONENT}"),
            ("events", "/api/v1/events", self.fleet.on_event, slim_event, f"source={model.CONTROLLER_COMPONENT}"),
        ]
        for name, path, handler, transform, fields in kinds:
            informer = Informer(self.client, path, name=name + (f" ({fields})" if fields else ""),
                                field_selector=fields, transform=transform,
                                idle_timeout=IDLE_TIMEOUT, backoff_max=5.0)
            informer.add_handler(handler)
            informer.add_health_listener(lambda _healthy: self._kick.set())
            self.informers.append(informer)
        self.client.credentials.add_listener(lambda _rejected: self._kick.set())

    def synced(self) -> bool:
        return all(i.synced.is_set() or _unserved(i) for i in self.informers)

    def health(self) -> JSON:
        """What the page says about its link to the cluster, with what to check when it is broken."""
        assert self.client is not None
        host = self.client.host
        kubeconfig = str(self.cfg.kubeconfig) if self.cfg.kubeconfig else "the kubeconfig (KUBECONFIG)"
        # A 403 first: the credentials were accepted, one permission is missing (never "credentials refused").
        forbidden = [i for i in self.informers if not i.healthy and i.last_code == 403]
        if forbidden:
            resources = list(dict.fromkeys(i.name.split(" ")[0] for i in forbidden))
            missing = ", ".join(resources)
            return {"state": "forbidden", "server": host,
                    "problem": f"The API server at {host} accepted the credentials of {kubeconfig} but does not "
                               f"allow them to list and watch {missing} at cluster scope (all namespaces): "
                               f"{forbidden[0].last_error}",
                    "check": [f"kubectl auth can-i list {resources[0]} -A and kubectl auth can-i watch "
                              f"{resources[0]} -A answer yes for your user",
                              "the dashboard reads with list and watch only: a role granting list and watch on "
                              "daemonsets, controllerrevisions, pods, nodes and events in every namespace is "
                              "enough (docs/fleet.md shows one)",
                              "the page goes on by itself once the permission is granted"]}
        if self.client.credentials.rejected and not any(i.last_code == 403 for i in self.informers):
            return {"state": "refused", "server": host,
                    "problem": f"The API server at {host} refused the credentials of {kubeconfig}: "
                               f"{self.client.credentials.last_error}",
                    "check": ["the token or client certificate in the kubeconfig has not expired or been rotated",
                              f"kubectl --kubeconfig {kubeconfig} get nodes works",
                              "your user may list and watch daemonsets, controllerrevisions, pods, nodes "
                              "and events (kubectl auth can-i watch pods -A)"]}
        broken = [i for i in self.informers if not i.healthy and i.last_error and not _unserved(i)]
        if broken:
            return {"state": "unreachable", "server": host,
                    "problem": f"Cannot reach the API server at {host}: {broken[0].last_error}",
                    "check": ["the cluster (or `edgeagent sim`) is running",
                              f"the server address in {kubeconfig} is right",
                              "your network, VPN or proxy lets this machine reach it",
                              "the page reconnects by itself once it is reachable"]}
        if not self.synced():
            return {"state": "connecting", "server": host}
        return {"state": "ok", "server": host}

    async def run_informers(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                group.create_task(informer.run(), name=f"informer-{informer.name}")
            group.create_task(self._publish(), name="dashboard-publish")

    async def _publish(self) -> None:
        """DaemonSet summaries (batched) and health changes, to every tab."""
        while True:
            # Not wait_for: on 3.11 it can swallow the cancellation that stops this loop (see edgeagent.aio).
            await wait_event(self._kick, SUMMARY_INTERVAL)
            self._kick.clear()
            if self.fleet.batching and self.synced():
                self.fleet.finish_batch()
                self.fleet.dirty.clear()
                self._broadcast(frame("snapshot", self.snapshot()))
            if not self.fleet.batching:
                self.fleet.tick()  # cells whose pods became available (minReadySeconds) with no event
                if self.fleet.waves_version() != self._waves_sent:
                    self._broadcast(frame("waves", self.fleet.waves()))
                    self._waves_sent = self.fleet.waves_version()
            health = self.health()
            if health != self._health:
                self._health = health
                _log.info("cluster_link", **{k: v for k, v in health.items() if k != "check"})
                self._broadcast(frame("health", health))
            if self.fleet.dirty:
                dirty, self.fleet.dirty = self.fleet.dirty, set()
                summaries = self.fleet.summaries(dirty)
                gone = self.fleet.removed(dirty)
                if summaries:
                    self._broadcast(frame("ds", summaries))
                if gone:
                    self._broadcast(frame("dsgone", gone))

    # ------------------------------------------------------------------------------ page side

    def _on_node_change(self, node: str, code: str | None) -> None:
        data = frame("n", [node, code])
        self.node_bytes += len(data) * len(self._clients)
        self._broadcast(data)

    def _broadcast(self, data: bytes) -> None:
        for client in self._clients:
            client.push(data)

    def close_streams(self) -> None:
        """End every tab's stream (at shutdown: an open EventSource would otherwise hold the server up)."""
        for client in self._clients:
            client.dropped = True
            client.wake.set()

    def snapshot(self) -> JSON:
        """Everything a page starts from: nodes are [name, state code, index into `labels`]."""
        nodes, labels = self.fleet.labelled_grid()
        waves = self.fleet.waves()
        self._waves_sent = self.fleet.waves_version()
        return {"health": self.health(), "daemonsets": self.fleet.summaries(), "nodes": nodes, "labels": labels,
                "waves": waves, "events": list(self.fleet.events), "now": time.time()}

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._h_index)
        app.router.add_get("/static/{name}", self._h_static)
        app.router.add_get("/api/snapshot", self._h_snapshot)
        app.router.add_get("/api/nodes/{name}", self._h_node)
        app.router.add_get("/api/stream", self._h_stream)
        app.router.add_get("/healthz", self._h_healthz)
        app.router.add_get("/metrics", self._h_metrics)
        if self.cfg.allow_actions:
            app.router.add_post(actions.ROUTE, self._h_action)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        steering = self.cfg.allow_actions and request.method == "POST" and request.path.startswith("/api/actions/")
        if request.method not in ("GET", "HEAD") and not steering:
            why = ("only the rollout actions (POST /api/actions/...) accept anything but GET" if self.cfg.allow_actions
                   else "the dashboard is read-only (started without --allow-actions)")
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"], text=why + "\n")
        host = (request.host or "").rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
        if is_loopback(self.cfg.bind) and not is_loopback(host):
            raise web.HTTPForbidden(text=f"Host {request.host!r} is not this machine's loopback address\n")
        response = await handler(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    async def _h_index(self, request: web.Request) -> web.Response:
        return web.Response(body=self.static["index.html"], content_type="text/html", charset="utf-8")

    async def _h_static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            raise web.HTTPNotFound()
        return web.Response(body=self.static[name], content_type=STATIC_FILES[name], charset="utf-8")

    async def _h_snapshot(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())

    async def _h_node(self, request: web.Request) -> web.Response:
        detail = self.fleet.node_details(request.match_info["name"])
        if detail is None:
            raise web.HTTPNotFound(text="no such node\n")
        detail["lastSeen"] = await self._last_seen(request.match_info["name"])
        return web.json_response(detail)

    async def _last_seen(self, name: str) -> str | None:
        """The node's Lease `renewTime` (its heartbeat), read when a node's panel opens: a list by name, not a
        get (a viewer's rights), and not an informer (10,000 Leases renewed every 10 s would cost the page)."""
        if self.client is None:
            return None
        try:
            listed = await self.client.get(LEASES_PATH, query={"fieldSelector": f"metadata.name={name}", "limit": 1})
        except (KubeError, KubeUnreachable) as exc:
            _log.debug("lease_unreadable", node=name, error=str(exc))
            return None
        renewed = model.lease_renewals(i for i in listed.get("items") or [] if isinstance(i, dict)).get(name)
        return format_time(renewed) if renewed is not None else None

    async def _h_action(self, request: web.Request) -> web.Response:
        """A button's press: the CLI verb's write, after the checks that the page itself sent it."""
        refusal = actions.cross_site_refusal(request.headers, request.host, self.token)
        if refusal is not None:
            _log.warning("action_refused", path=request.path, origin=request.headers.get("Origin"), why=refusal)
            return web.Response(status=403, text=refusal + "\n")
        namespace, name, verb = (request.match_info[k] for k in ("namespace", "name", "verb"))
        bad = actions.bad_target(namespace, name, verb)
        if bad is not None:
            return web.Response(status=404, text=bad + "\n")
        assert self.client is not None
        status, line = await actions.act(self.client, namespace, name, verb)
        _log.info("action", verb=verb, daemonset=f"{namespace}/{name}", status=status, result=line)
        return web.Response(status=status, text=line + "\n")

    async def _h_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(_FleetCollector(self.fleet)),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _h_healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _h_stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                               "X-Accel-Buffering": "no", **SECURITY_HEADERS})
        await response.prepare(request)
        client = _Client()
        first = frame("snapshot", self.snapshot())
        self._clients.add(client)
        try:
            await response.write(first)
            self.bytes_pushed += len(first)
            while not client.dropped:
                await wait_event(client.wake, KEEPALIVE_SECONDS)
                client.wake.clear()
                if client.dropped:
                    break
                if not client.pending:
                    await response.write(b": keepalive\n\n")
                    continue
                chunk = b"".join(client.pending)
                client.pending.clear()
                client.pending_bytes = 0
                await response.write(chunk)
                self.bytes_pushed += len(chunk)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(client)
        return response


TOKEN_TAG = b'<meta name="edgeagent-token" content="">'


def _with_token(page: bytes, token: str) -> bytes:
    """The page with its token in the meta tag the script reads (only the page itself can read it)."""
    if TOKEN_TAG not in page:
        raise RuntimeError("static/index.html lost its edgeagent-token meta tag")
    return page.replace(TOKEN_TAG, f'<meta name="edgeagent-token" content="{token}">'.encode())


class DashboardError(Exception):
    """Why the dashboard cannot start, in one line, with the exit code docs/cli.md gives it."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


async def serve(cfg: DashboardConfig, *, ready: Callable[[str], None] | None = None,
                stop: asyncio.Event | None = None) -> None:
    """Run until `stop` is set (or SIGINT/SIGTERM when run as the command).

    Raises DashboardError when the kubeconfig cannot be used or the address cannot be served; the client
    session is closed on every way out (an unclosed one makes aiohttp print `Unclosed client session`)."""
    dashboard = Dashboard(cfg)
    try:
        await dashboard.connect()
    except FileNotFoundError as exc:  # a file the operator named is not there: usage, as for every command
        raise DashboardError(str(exc), EXIT_USAGE) from exc
    except Exception as exc:  # a malformed kubeconfig surfaces as many different exception types
        raise DashboardError(load_problem(exc, cfg.kubeconfig or "KUBECONFIG")) from exc
    try:
        await _serve_page(dashboard, cfg, ready, stop or asyncio.Event())
    finally:
        if dashboard.client is not None:
            await dashboard.client.close()


async def _serve_page(dashboard: Dashboard, cfg: DashboardConfig, ready: Callable[[str], None] | None,
                      stop: asyncio.Event) -> None:
    runner = web.AppRunner(dashboard.app(), handle_signals=False, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, cfg.bind, cfg.port)
        try:
            await site.start()
        except OSError as exc:  # a busy port, an address not on this machine, a name that does not resolve
            raise DashboardError(f"cannot serve on {cfg.bind}:{cfg.port}: {exc.strerror or exc}") from exc
        port = int(runner.addresses[0][1]) if runner.addresses else cfg.port  # the real one for --port 0
        host = f"[{cfg.bind}]" if ":" in cfg.bind else cfg.bind
        url = f"http://{host}:{port}/"
        async with asyncio.TaskGroup() as group:
            informers = group.create_task(dashboard.run_informers(), name="dashboard-informers")
            if ready is not None:
                ready(url)
            await stop.wait()
            informers.cancel()
    finally:
        dashboard.close_streams()
        await runner.cleanup()


def main(cfg: DashboardConfig) -> int:
    log.configure(cfg.log, stream=sys.stderr)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def announce(url: str) -> None:
            if cfg.warning:
                print(f"edgeagent: warning: {cfg.warning}", file=sys.stderr, flush=True)
            mode = ("promote, pause, resume and abort buttons write with your credentials" if cfg.allow_actions
                    else "read-only")
            print(f"edgeagent dashboard: serving {url} ({mode}; Ctrl-C to stop)", flush=True)

        await serve(cfg, ready=announce, stop=stop)

    try:
        asyncio.run(run())
    except DashboardError as exc:
        print(f"edgeagent: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0
