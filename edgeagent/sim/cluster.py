"""SimCluster: the simulated cluster wired together — store, REST server, controllers, nodes and their links.

Everything that needs "a Kubernetes cluster" (integration tests, the demo, `edgeagent sim`) starts one of
these. The admin URL is never cut; each node reaches the API through its own link, so a test can partition
one node (its agent and its kubelet) while the test itself keeps full access.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from edgeagent import log
from edgeagent.aio import cancel_and_wait
from edgeagent.config import SimConfig
from edgeagent.kube.objects import is_dns1123_subdomain
from edgeagent.sim import errors
from edgeagent.sim.addresses import client_host, exposure_warning, url_host
from edgeagent.sim.audit import AuditLog
from edgeagent.sim.auth import REVOKED_FILE, load_signing_key, node_user
from edgeagent.sim.auth_http import ADMIN, AuthLayer
from edgeagent.sim.auth_tls import ServerTLS, ensure_server_tls
from edgeagent.sim.cluster_events import SchedulerEvents
from edgeagent.sim.daemonsets import DaemonSetController
from edgeagent.sim.delete_context import pod_state
from edgeagent.sim.event_ttl import EventExpiry
from edgeagent.sim.faults import FaultInjector
from edgeagent.sim.files import write_private
from edgeagent.sim.gc import OwnerGarbageCollector
from edgeagent.sim.images import ImageCatalog, ImageSpec
from edgeagent.sim.jobs import JobController
from edgeagent.sim.kubelet import NodeLifecycleController, NodeSimulator
from edgeagent.sim.links import CUT_MODES, Link
from edgeagent.sim.persist import Snapshot, StateError, StateFile
from edgeagent.sim.ports import free_stable_port
from edgeagent.sim.server import ServerSettings, create_app
from edgeagent.sim.store import Store

JSON = dict[str, Any]
T = TypeVar("T")

_log = log.get("edgeagent.sim.cluster")


def kubeconfig(server: str, *, user: str, context: str, credentials: JSON | None = None,
               ca_pem: str | None = None) -> JSON:
    """A kubeconfig loadable by kubectl and kubernetes_asyncio: plain http, or https trusting `ca_pem`."""
    cluster: JSON = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode("ascii")).decode("ascii")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": user, "user": dict(credentials or {})}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user, "namespace": "default"}}],
        "current-context": context,
    }


def _json_response(body: JSON | list[Any], status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


def _error_response(exc: errors.ApiError) -> web.Response:
    return _json_response(exc.status, exc.code)


async def _parsed_body(request: web.Request, parse: Callable[[Any], T]) -> T:
    """The request's JSON body as `parse` reads it (a /sim/v1 control request: a fault rule, an image's
    behaviour): a body that is not JSON, or that `parse` refuses with a ValueError, is a 400 saying why."""
    try:
        body = await request.json()
    except ValueError as exc:
        raise errors.bad_request(f"body is not JSON: {exc}") from exc
    try:
        return parse(body)
    except ValueError as exc:
        raise errors.bad_request(str(exc)) from exc


class SimCluster:
    def __init__(self, config: SimConfig, *, node_names: list[str] | None = None) -> None:
        names = list(node_names) if node_names is not None else [f"edge-{i}" for i in range(1, config.nodes + 1)]
        bad = [n for n in names if not is_dns1123_subdomain(n)]
        if bad:
            raise ValueError(f"node names must be DNS-1123 subdomains: {', '.join(map(repr, bad))}")
        if len(set(names)) != len(names):
            raise ValueError(f"node names must be unique: {names}")
        self.config = config
        self.node_names: list[str] = names
        self.store = Store(history=config.history)
        self.audit = AuditLog(path=config.audit_log)
        if config.audit_log is not None:
            self.store.delete_context = functools.partial(pod_state, self.store)
        self.faults = FaultInjector()
        self.url = ""
        self.dir = Path(config.dir) if config.dir is not None else Path()
        self.links: dict[str, Link] = {}
        self.nodes = NodeSimulator(self.store, config, names, self._reachable)
        self.node_lifecycle = NodeLifecycleController(self.store, config)
        self.daemonsets = DaemonSetController(self.store)
        self.jobs = JobController(self.store, pod_backoff=config.kubelet_backoff)
        self.gc = OwnerGarbageCollector(self.store)
        self.event_expiry = EventExpiry(self.store, config.event_ttl)
        self.scheduler_events = SchedulerEvents(self.store)
        self.auth: AuthLayer | None = None
        self.tls: ServerTLS | None = None
        self._own_dir = False
        self._state: StateFile | None = None
        self.resumed = False  # True when the store was loaded from an earlier run's state in `dir`
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task[None] | None = None

    # Lifecycle ----------------------------------------------------------------------------------------

    async def __aenter__(self) -> SimCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("SimCluster already started")
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        if self.config.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="edgeagent-sim-"))
            self._own_dir = True
            snapshot = None
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
            snapshot = self._open_state()
        settings = ServerSettings(bookmark_interval=self.config.bookmark_interval)
        rbac = self.config.authorization == "rbac"
        key = load_signing_key(self.dir if rbac else None)
        self.auth = AuthLayer(self.store, self.config.authorization, key,
                              revocations=self.dir / REVOKED_FILE if rbac else None)
        app = create_app(self.store, extra_routes=self._add_routes, settings=settings, audit=self.audit,
                         auth=self.auth, faults=self.faults)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        if self.auth.enforcing:
            self.tls = ensure_server_tls(self.dir, self.config.bind)
        # A restarted sim keeps its ports, so the kubeconfigs running clients loaded stay valid.
        kept_port = snapshot.api_port if snapshot is not None and not self.config.port else None
        # Port 0: one below the ephemeral range, so that a restart can bind it again (see sim/ports.py).
        site = web.TCPSite(self._runner, self.config.bind,
                           kept_port or self.config.port or free_stable_port(self.config.bind, self.config.port_range),
                           ssl_context=self.tls.context() if self.tls is not None else None)
        try:
            await site.start()
        except OSError as exc:
            if kept_port is None:
                raise
            raise OSError(exc.errno, f"cannot keep the API server port {kept_port} of the earlier run: "
                                     f"{exc.strerror}") from exc
        port = self._runner.addresses[0][1]
        scheme = "https" if self.tls is not None else "http"
        host = client_host(self.config.bind)  # kubeconfigs must name an address one can dial, never 0.0.0.0
        self.url = f"{scheme}://{url_host(host)}:{port}"
        for name in self.node_names if self.config.node_links else ():
            link = Link(name, host, int(port), bind=self.config.bind, scheme=scheme, port_range=self.config.port_range)
            self.links[name] = link
            link_port = snapshot.link_ports.get(name, 0) if snapshot is not None else 0
            try:
                await link.start(link_port)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot keep node {name}'s link port {link_port} of the earlier run: "
                                         f"{exc.strerror}") from exc
        if self._state is not None:
            self._state.save_ports(int(port), {name: link.port for name, link in self.links.items()})
        self._write_kubeconfigs()
        self.nodes.register()
        self._task = asyncio.create_task(self._run(), name="sim-controllers")
        _log.info("simulated_cluster_started", url=self.url, dir=str(self.dir), nodes=len(self.node_names))
        warning = exposure_warning(self.config.bind, self.config.authorization)
        if warning is not None:
            _log.warning("simulated_cluster_exposed_without_authorization", bind=self.config.bind, detail=warning)

    def _open_state(self) -> Snapshot | None:
        """Resume the store from `dir` (or save the new one there); from now on every commit is written through."""
        self._state = StateFile(self.dir)
        snapshot = self._state.load()
        if snapshot is not None:
            try:
                self.store.restore(snapshot.resource_version, snapshot.objects)
            except ValueError as exc:  # objects of a kind no saved CRD defines
                self._state.close()
                raise StateError(f"{self._state.path} cannot be loaded: {exc}; nothing was loaded") from exc
            self.images.restore(snapshot.images)  # already checked by load()
            self.resumed = True
            _log.info("simulated_cluster_state_resumed", dir=str(self.dir),
                      resource_version=snapshot.resource_version)
        else:
            self._state.save_all(self.store)
        self.store.persist = self._state.record
        self.images.persist = self._state.save_images
        return snapshot

    async def _run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.nodes.run(), name="sim-kubelets")
            tg.create_task(self.node_lifecycle.run(), name="sim-node-lifecycle")
            tg.create_task(self.daemonsets.run(), name="sim-daemonsets")
            tg.create_task(self.jobs.run(), name="sim-jobs")
            tg.create_task(self.gc.run(), name="sim-gc")
            tg.create_task(self.event_expiry.run(), name="sim-event-ttl")
            if self.config.control_plane_events:
                tg.create_task(self.scheduler_events.run(), name="sim-scheduler-events")

    async def stop(self) -> None:
        """Idempotent; re-raises a controller crash after cleaning up, so a test cannot miss it."""
        failure: BaseException | None = None
        task, self._task = self._task, None
        if task is not None:
            if task.done() and not task.cancelled():
                failure = task.exception()
            await cancel_and_wait(task)
        for link in self.links.values():
            await link.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        state, self._state = self._state, None
        if state is not None:
            self.store.persist = None
            self.images.persist = None
            state.close()
        if self.auth is not None:
            self.auth.close()
        self.audit.close()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self._own_dir = False
        if failure is not None:
            raise RuntimeError(f"a simulated-cluster controller crashed: {failure!r}") from failure

    # Files and URLs -----------------------------------------------------------------------------------

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    def node_kubeconfig(self, node: str) -> Path:
        self._link(node)
        return self.dir / f"{node}.kubeconfig"

    def node_url(self, node: str) -> str:
        return self._link(node).url

    def _write_kubeconfigs(self) -> None:
        def dump(path: Path, config: JSON) -> None:
            write_private(path, yaml.safe_dump(config, sort_keys=False))

        auth = self.auth
        assert auth is not None
        ca = self.tls.ca_pem() if self.tls is not None else None
        for name, link in self.links.items():
            dump(self.dir / f"{name}.kubeconfig", kubeconfig(link.url, user=f"system:node:{name}", context=name,
                                                            credentials=auth.credentials(node_user(name)), ca_pem=ca))
        # Last, so that a reader who sees admin.kubeconfig finds the node files too.
        dump(self.admin_kubeconfig, kubeconfig(self.url, user="admin", context="sim",
                                               credentials=auth.credentials(ADMIN), ca_pem=ca))

    # Links and node health ----------------------------------------------------------------------------

    def _link(self, node: str) -> Link:
        link = self.links.get(node)
        if link is None and node not in self.node_names:
            raise KeyError(f"unknown node {node!r}; nodes: {', '.join(self.node_names)}")
        if link is None and not self.config.node_links:
            raise RuntimeError(f"node {node!r} has no link: the cluster runs without node links (--no-node-links)")
        if link is None:
            raise RuntimeError("SimCluster not started")
        return link

    def _reachable(self, node: str) -> bool:
        link = self.links.get(node)
        return link is None or link.connected

    async def disconnect(self, node: str, mode: str = "blackhole") -> None:
        """Cut the node's link: its kubeconfig stops working and its kubelet stops heartbeating."""
        await self._link(node).disconnect(mode)

    async def connect(self, node: str) -> None:
        await self._link(node).connect()
        self.nodes.kubelet(node).wake()

    def link_mode(self, node: str) -> str:
        return self._link(node).mode

    def set_node_ready(self, node: str, ready: bool) -> None:
        """Make the node's kubelet report Ready=False (runtime trouble) or True again, link untouched."""
        self._link(node)
        self.nodes.kubelet(node).set_ready(ready)

    # /sim/v1 routes -----------------------------------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_get("/sim/v1/nodes", self._h_nodes)
        app.router.add_post("/sim/v1/nodes/{node}/disconnect", self._h_disconnect)
        app.router.add_post("/sim/v1/nodes/{node}/connect", self._h_connect)
        app.router.add_get("/sim/v1/nodes/{node}/containers", self._h_containers)
        app.router.add_get("/sim/v1/containers", self._h_all_containers)
        app.router.add_get("/sim/v1/deletes", self._h_deletes)
        app.router.add_get("/sim/v1/audit", self._h_audit)
        app.router.add_get("/sim/v1/images", self._h_images)
        app.router.add_post("/sim/v1/images", self._h_set_image)
        app.router.add_get("/sim/v1/faults", self._h_faults)
        app.router.add_post("/sim/v1/faults", self._h_add_fault)
        app.router.add_delete("/sim/v1/faults", self._h_clear_faults)
        app.router.add_delete("/sim/v1/faults/{id}", self._h_clear_faults)

    def _node_link(self, request: web.Request) -> tuple[str, Link]:
        node = request.match_info["node"]
        link = self.links.get(node)
        if link is None:
            raise errors.not_found("nodes", node)
        return node, link

    def _link_status(self, node: str, link: Link) -> JSON:
        return {"node": node, "mode": link.mode, "url": link.url, "kubeconfig": str(self.node_kubeconfig(node))}

    async def _h_nodes(self, request: web.Request) -> web.Response:
        return _json_response({"items": [self._link_status(n, link) for n, link in self.links.items()]})

    async def _h_disconnect(self, request: web.Request) -> web.Response:
        try:
            node, link = self._node_link(request)
            mode = request.query.get("mode", "blackhole")
            if mode not in CUT_MODES:
                raise errors.bad_request(f'unknown disconnect mode "{mode}": must be refuse or blackhole')
        except errors.ApiError as exc:
            return _error_response(exc)
        await self.disconnect(node, mode)
        return _json_response(self._link_status(node, link))

    async def _h_connect(self, request: web.Request) -> web.Response:
        try:
            node, link = self._node_link(request)
        except errors.ApiError as exc:
            return _error_response(exc)
        await self.connect(node)
        return _json_response(self._link_status(node, link))

    async def _h_containers(self, request: web.Request) -> web.Response:
        """What the node really runs, as its kubelet sees it (the API's view freezes while its link is cut)."""
        node = request.match_info["node"]
        if node not in self.nodes.kubelets:
            return _error_response(errors.not_found("nodes", node))
        return _json_response({"items": self.nodes.kubelet(node).containers()})

    async def _h_all_containers(self, request: web.Request) -> web.Response:
        """What every node really runs: the items of each node's `containers`, each with its `node`."""
        return _json_response({"items": self.nodes.containers()})

    async def _h_deletes(self, request: web.Request) -> web.Response:
        return _json_response({"items": list(self.store.deletes)})

    async def _h_audit(self, request: web.Request) -> web.Response:
        return _json_response({"items": list(self.audit.entries)})

    # Faults -------------------------------------------------------------------------------------------

    async def _h_faults(self, request: web.Request) -> web.Response:
        return _json_response(self.faults.as_json())

    async def _h_add_fault(self, request: web.Request) -> web.Response:
        try:
            rule = await _parsed_body(request, self.faults.add)
        except errors.ApiError as exc:
            return _error_response(exc)
        shown = rule.as_json(time.monotonic())
        _log.info("fault_rule_added", **{k: v for k, v in shown.items() if k != "injected"})
        return _json_response(shown, 201)

    async def _h_clear_faults(self, request: web.Request) -> web.Response:
        text = request.match_info.get("id")
        if text is not None and not text.isdigit():
            return _error_response(errors.bad_request(f"fault id must be a number, not {text!r}"))
        removed = self.faults.clear(int(text) if text is not None else None)
        if text is not None and not removed:
            return _error_response(errors.not_found("faults", text))
        return _json_response({"removed": removed})

    # Images -------------------------------------------------------------------------------------------

    @property
    def images(self) -> ImageCatalog:
        return self.nodes.catalog

    def set_image(self, image: str, *, pull_seconds: float | None = None, missing: bool = False,
                  crash: bool = False, ready_seconds: float = 0.0) -> None:
        """What the registry does with `image` from now on (pods in back-off retry at once)."""
        self.images.set(ImageSpec(image, pull_seconds, missing, crash, ready_seconds))

    async def _h_images(self, request: web.Request) -> web.Response:
        return _json_response({"defaultPullSeconds": self.images.default_pull_seconds,
                               "items": self.images.items()})

    async def _h_set_image(self, request: web.Request) -> web.Response:
        try:
            spec = await _parsed_body(request, ImageCatalog.parse)
        except errors.ApiError as exc:
            return _error_response(exc)
        self.images.set(spec)
        return _json_response(spec.as_json(self.images.default_pull_seconds))
