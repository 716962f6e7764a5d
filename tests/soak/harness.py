"""The soak harness: one sim process, two leader-elected controllers, real agents on some nodes, several
DaemonSets, and a seeded schedule of faults; then the faults stop, the fleet must converge, and the checker
judges the recorded history.

Everything runs on loopback: the sim's admin port (never faulted by scope: the harness's User-Agent is
`soak-harness/1`, outside every fault rule), its per-node links, and each agent's own port.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from edgeagent.rollout.state import state_from_status
from edgeagent.sim.files import write_private
from tests.soak.checker import (
    History,
    Result,
    check,
    credential_episodes,
    credential_summary,
    inplace_summary,
    report,
)
from tests.soak.daemon_gaps import ContainerLog
from tests.soak.processes import Proc, clean_env
from tests.soak.schedule import Sizing, agent_nodes, maintenance_windows, make_schedule, node_name
from tests.support.identities import AGENT_SA, CONTROLLER_SA, collection_path, load_deploy
from tests.support.identities import NAMESPACE as SYSTEM_NS

JSON = dict[str, Any]
NS = "default"
HARNESS_AGENT = "soak-harness/1"
AGENT_LABEL = "soak.edgeagent.io/agent"
ZONE_LABEL = "topology.kubernetes.io/zone"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/edgeagent-system/leases/edgeagent-controller"
TERMINAL = {"succeeded", "failed", "cancelled", "obsolete"}
# Longer than the longest link cut plus the node grace and a flap: a good version on a node whose link was
# down must not count as failed; a crashing one still stops the roll after this long.
PROGRESS_DEADLINE = "90"
# How long an auto-pause on a good version lasts before the soak's operator resumes the roll.
OPERATOR_RESUME_AFTER = 20.0
# Rollout phases in which a plan has nothing more to do (`rollout status` exits 0 or 1, not 3).
PLANS_PATH = f"/apis/edgeagent.io/v1alpha1/namespaces/{NS}/rolloutplans"
PLAN_SETTLED = frozenset({"complete", "rolledBack", "aborted"})
# Rollout plans in the controller (either home: before and after edgeagent/rollout/): plan DaemonSets join once present.
PLAN_MODULES = ("edgeagent/rollout/machine.py", "edgeagent/controller/waves.py")
# deploy/'s identities: the agents and controllers run as their ServiceAccounts, bound by deploy/'s RBAC.
RBAC_KINDS = frozenset({"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})
TOKEN_SECONDS = 7 * 24 * 3600  # outlives any soak: a token stops working here only when revoked
# After revoking an agent's token, the new one reaches its file no sooner than this (seconds, drawn per rotation),
# and only once the agent has met a 401 with the old one (seen in the sim's audit log), so that its
# re-read-on-401 path runs: an idle agent with a healthy watch sends almost nothing for seconds, and would
# otherwise pick the new file up without ever being refused.
NEW_TOKEN_AFTER = (2.0, 10.0)
# An agent still not refused once its new token is due is poked every POKE_EVERY seconds (an operator's upgrade
# request for a pod that does not exist: the agent reads it from the API server, and nothing else can follow);
# the new token is written after ROTATION_CAP seconds whatever happened (the agent may be down, or cut off).
ROTATION_CAP = 30.0
POKE_EVERY = 2.0
POKE_POD = "soak-credential-poke"
# In-place restarts (checker rule 12): the sim's pull of a new image (`--image-pull-seconds`) and a container's
# start (the sim's default pod start-up), the most a restart costs the node; the allowance for a loaded machine
# (the sim's timers run late under the soak's load; a link cut lasts 2-25 s, so most outages are far beyond it);
# how often the nodes' containers are sampled, and the longest stretch without a sample that still counts as one gap.
PULL_SECONDS = 0.2
START_SECONDS = 0.2
RESTART_SLACK = 3.0
CONTAINER_SAMPLE_EVERY = 0.5
MAX_SAMPLE_HOLE = 2.0


@dataclass
class SoakConfig:
    seconds: float = 600.0
    seed: int = 1
    nodes: int = 200
    agents: int = 30
    workdir: Path | None = None
    keep: bool = False
    convergence_bound: float = 300.0
    rate_scale: float = 1.0
    kind_scale: dict[str, float] = field(default_factory=dict)  # per-kind rate multipliers (Sizing.kind_scale)
    prepull_cap: int = 10
    plans: bool | None = None  # None: plan DaemonSets when the controller supports rollout plans
    windowed_fraction: float = 0.34  # agents with maintenance windows that open and close every minute
    max_actions: int = 200_000  # the harness's own acts are bounded too
    heartbeat: float = 4.0
    node_grace: float = 12.0
    # `edgeagent sim --port-range`: the sim is restarted on its own 200-odd ports, and another sim on the machine
    # (a test run's) that drew one of them from the shared default range meanwhile made the restart fail (the
    # 1800 s soak of seed 23, twice). None: the sim's default range.
    sim_port_range: str | None = None
    out: Callable[[str], None] = print


@dataclass
class _DsState:
    name: str
    model: str
    plan: bool
    in_place: bool = False  # edgeagent.io/update-type: InPlaceIfPossible
    version: int = 1
    bad: bool = False
    bad_since: float = 0.0
    bad_image: str = ""  # the crashing image once it is out (in the template)
    bad_versions: int = 0  # bad versions put out so far: each one a new image (`act_bad_version`)

    def image(self, version: int | None = None, bad: bool = False) -> str:
        return f"registry.local/soak/{self.name}:{version or self.version}" + ("-bad" if bad else "")


def plan_phase(plan: JSON | None) -> str | None:
    """The phase in a RolloutPlan's status, in the state machine's spelling (None: no plan, or no status yet)."""
    status = (plan or {}).get("status") or {}
    phase = status.get("phase")
    if not phase:
        return None
    state, _ = state_from_status(status)
    return state.phase if state is not None else None


def plan_spec(ds: JSON) -> JSON:
    """The soak's plan for a DaemonSet (a RolloutPlan object named after it): four waves, a 5 s bake, rollback on
    failure; the AdvancedRollingUpdate one by zone."""
    spec: JSON = {"daemonSet": ds["metadata"]["name"], "steps": [1, "10%", "50%", "100%"], "bake": "5s",
                  "onFailure": "Rollback", "maxFailed": 1, "progressDeadlineSeconds": int(PROGRESS_DEADLINE)}
    strategy = (ds["metadata"].get("annotations") or {}).get("apps.openyurt.io/update-strategy")
    if strategy == "AdvancedRollingUpdate":
        spec["groupLabel"] = ZONE_LABEL
    return spec


def controller_has_plans(root: Path) -> bool:
    return any((root / module).exists() for module in PLAN_MODULES)


def free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports: all held open until all are chosen (one at a time, the kernel may hand
    out the same port twice, and two agents would then fight for it)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            sock = socket.socket()
            socks.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _can_mount_tmpfs() -> bool:
    """Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN): each agent's state directory is then a
    small tmpfs of its own, mounted here (so it outlives the agent's restarts), which the schedule fills up
    for a while. Root ignores file permissions, and a read-only remount fails (EBUSY) while SQLite holds its
    files open for writing, so a full disk is how a state directory becomes unwritable under a running agent."""
    with tempfile.TemporaryDirectory() as directory:
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", directory], capture_output=True,
                                  timeout=10, check=False)
            if done.returncode != 0:
                return False
            subprocess.run(["umount", directory], capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return True


STATE_TMPFS_SIZE = "16m"
FILLER = ".soak-filler"


def _fill(directory: Path) -> int:
    """Write zeros into `directory` until the filesystem is full (big chunks, then pages); bytes written."""
    written = 0
    with (directory / FILLER).open("ab", buffering=0) as out:
        for size in (1 << 20, 4096, 1):
            chunk = bytes(size)
            try:
                while True:
                    n = out.write(chunk)
                    if not n:
                        break
                    written += n
            except OSError:
                continue
    return written


def rotation_step(now: float, revoked: float, after: float, refused: float | None, last_poke: float | None, *,
                  cap: float = ROTATION_CAP, poke_every: float = POKE_EVERY) -> str:
    """What a credential rotation does next: "write" the new token, "poke" the agent, or "wait".

    The new token is written once the agent was refused (`refused`: when its first 401 came) and at least
    `after` seconds have passed since the revocation (the refused agent runs on the dead token meanwhile), or
    at `cap` seconds whatever happened. Until refused, the agent is poked every `poke_every` seconds from
    `after` on: it had that long to meet the 401 by itself."""
    if refused is not None:
        return "write" if now >= revoked + after else "wait"
    if now >= revoked + cap:
        return "write"
    if now >= revoked + after and (last_poke is None or now - last_poke >= poke_every):
        return "poke"
    return "wait"


def first_refusal(entries: Iterable[JSON], node: str, since: float) -> float | None:
    """When `node`'s agent first got 401 from the API server at or after `since` (audit entries), or None."""
    suffix = f" ({node})"
    times = [float(e["time"]) for e in entries
             if e.get("code") == 401 and isinstance(e.get("time"), (int, float)) and float(e["time"]) >= since
             and str(e.get("userAgent") or "").startswith("edgeagent-agent/")
             and str(e.get("userAgent") or "").endswith(suffix)]
    return min(times) if times else None


async def poke_agent(http: aiohttp.ClientSession, agent_url: str) -> int | None:
    """Make an agent talk to the API server: an operator's upgrade request for a pod that does not exist, which
    the agent reads from the cloud (401 with a revoked token, 404 otherwise; from its cache, 404, when its link
    is down). No request is recorded, nothing is deleted. The agent's answer, None if it gave none."""
    url = f"{agent_url}/openyurt.io/v1/namespaces/{NS}/pods/{POKE_POD}/upgrade"
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
        async with asyncio.timeout(5), http.post(url, headers={"Accept": "application/json"}) as resp:
            await resp.read()
            return resp.status
    return None


class AuditTail:
    """The 401 entries appended to the sim's audit log (JSON lines) since this was made: read incrementally,
    a half-written last line left for the next read (the sim may be killed in the middle of one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.offset = path.stat().st_size
        except OSError:
            self.offset = 0

    def read(self) -> list[JSON]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        out: list[JSON] = []
        for line in data[:end].splitlines():
            if b'"code":401' not in line:
                continue
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict):
                    out.append(entry)
        return out


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Soak:
    def __init__(self, cfg: SoakConfig) -> None:
        self.cfg = cfg
        self.root = Path(__file__).resolve().parents[2]
        self.work = cfg.workdir or Path(tempfile.mkdtemp(prefix="edgeagent-soak-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.simdir = self.work / "sim"
        self.logs = self.work / "logs"
        self.logs.mkdir(exist_ok=True)
        self.exits: list[JSON] = []
        self.plans = controller_has_plans(self.root) if cfg.plans is None else cfg.plans
        self.ds: dict[str, _DsState] = {
            "ota-a": _DsState("ota-a", "OTA", False),
            "aru-a": _DsState("aru-a", "AdvancedRollingUpdate", False),
            "aru-pp": _DsState("aru-pp", "AdvancedRollingUpdate", False),
        }
        # In place (issue 37): image-only template changes patch the pods, under the same link cuts.
        self.ds["ip-aru"] = _DsState("ip-aru", "AdvancedRollingUpdate", False, in_place=True)
        if self.plans:
            self.ds["aru-plan"] = _DsState("aru-plan", "AdvancedRollingUpdate", True)
            self.ds["ota-plan"] = _DsState("ota-plan", "OTA", True)
            self.ds["ip-plan"] = _DsState("ip-plan", "AdvancedRollingUpdate", True, in_place=True)
        self.sizing = Sizing(nodes=cfg.nodes, agents=cfg.agents,
                             daemonsets=tuple(n for n, d in self.ds.items() if not d.plan),
                             plan_daemonsets=tuple(n for n, d in self.ds.items() if d.plan),
                             ota_daemonsets=tuple(n for n, d in self.ds.items() if d.model == "OTA"),
                             inplace_daemonsets=tuple(n for n, d in self.ds.items() if d.in_place),
                             rate_scale=cfg.rate_scale, kind_scale=dict(cfg.kind_scale))
        self.agent_nodes = agent_nodes(self.sizing)
        self.tmpfs = _can_mount_tmpfs()
        self.mounted: list[Path] = []
        self.schedule = make_schedule(cfg.seed, cfg.seconds, self.sizing)
        if not self.tmpfs:
            self.schedule = [a for a in self.schedule if a["kind"] != "state_full"]
        self.sim: Proc | None = None
        self.controllers: dict[str, Proc] = {}
        self.agents: dict[str, Proc] = {}
        self.agent_ports: dict[str, int] = {}
        self.url = ""
        self.http: aiohttp.ClientSession | None = None
        self.done: Counter[str] = Counter()  # acts carried out, by kind
        self.skipped: Counter[str] = Counter()  # acts that found their target unavailable
        self.api_faults: Counter[str] = Counter()  # answers the sim faulted, by kind (summed over sim lives)
        self.accepted: list[JSON] = []
        self.prepull_samples: list[JSON] = []
        self.cut_token: dict[str, int] = {}
        self.sim_lock = asyncio.Lock()
        self.started_at = 0.0
        self.actions = 0
        self.pods_snapshot: list[JSON] = []
        self.running = False
        self.windowed = set(self.agent_nodes[:: max(1, round(1 / cfg.windowed_fraction))]) \
            if cfg.windowed_fraction > 0 else set()
        self.rng = random.Random(f"{cfg.seed}/harness")
        self.operator_releases = 0
        self.operator_resumes: Counter[str] = Counter()  # rolls auto-paused on a good version, resumed
        self.paused_since: dict[str, float] = {}
        self.unconverged = ""  # why the fleet was not converged at the last look
        self.creds = self.work / "creds"  # kubeconfigs and token files of the agents and controllers (0600)
        self.tokens: dict[str, str] = {}  # node -> the agent's current token
        self.tls: ssl.SSLContext | None = None  # trusts the sim's CA (from admin.kubeconfig)
        self.admin_token = ""
        self.rotations = 0
        self.containers = ContainerLog()  # what the in-place DaemonSets' nodes run (checker rule 12)
        self.bad_images: set[str] = set()  # every crashing image a template carried
        self.rotating: dict[str, asyncio.Lock] = {}  # node -> held while a rotation of its agent's token runs

    # ------------------------------------------------------------------------------------------ plumbing

    @property
    def client(self) -> aiohttp.ClientSession:
        assert self.http is not None
        return self.http

    async def api(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                  timeout: float = 10.0, ok: tuple[int, ...] = (200, 201)) -> JSON:
        """One admin call; raises on failure (callers decide whether to retry or skip)."""
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type, "Authorization": f"Bearer {self.admin_token}"}
        async with self.client.request(method, self.url + path, data=data, headers=headers, ssl=self.tls or True,
                                       timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            text = await resp.text()
            if resp.status not in ok:
                raise RuntimeError(f"{method} {path}: {resp.status} {text[:300]}")
            return json.loads(text) if text else {}

    async def retry(self, what: str, call: Callable[[], Awaitable[Any]], deadline: float = 60.0) -> Any:
        end = time.monotonic() + deadline
        while True:
            try:
                return await call()
            except (aiohttp.ClientError, TimeoutError, RuntimeError, OSError) as exc:
                if time.monotonic() > end:
                    raise RuntimeError(f"{what}: still failing after {deadline:.0f} s: {exc}") from exc
                await asyncio.sleep(0.5)

    async def wait_for(self, what: str, probe: Callable[[], Awaitable[bool]], deadline: float) -> float | None:
        """Poll until `probe` holds; the time it first held, or None at the deadline."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            try:
                if await probe():
                    return time.time()
            except (aiohttp.ClientError, TimeoutError, RuntimeError, OSError, KeyError, ValueError):
                pass
            await asyncio.sleep(1.0)
        self.cfg.out(f"soak: gave up waiting for {what} after {deadline:.0f} s; last seen: {self.unconverged}")
        return None

    # ------------------------------------------------------------------------------------------ set-up

    def _sim_argv(self) -> list[str]:
        return ["sim", "--dir", str(self.simdir), "--nodes", str(self.cfg.nodes), "--port", "0",
                "--authorization", "rbac", "--heartbeat-interval", str(self.cfg.heartbeat),
                "--node-grace", str(self.cfg.node_grace),
                "--pod-resync-delay", "1", "--bookmark-interval", "10", "--image-pull-seconds", "0.2",
                "--history", "200000", "--audit-log", str(self.work / "audit.jsonl"), "--log-format", "json",
                *(["--port-range", self.cfg.sim_port_range] if self.cfg.sim_port_range else [])]

    async def start_sim(self) -> None:
        assert self.sim is not None
        await self.sim.start()
        admin = self.simdir / "admin.kubeconfig"

        async def answering() -> bool:
            if not admin.exists():
                return False
            config = yaml.safe_load(admin.read_text())
            cluster = config["clusters"][0]["cluster"]
            self.url = cluster["server"]
            ca = base64.b64decode(cluster["certificate-authority-data"]).decode("ascii")
            self.tls = ssl.create_default_context(cadata=ca)
            self.admin_token = config["users"][0]["user"]["token"]
            await self.api("GET", "/version", timeout=2)
            return True

        if await self.wait_for("the sim to answer", answering, 60) is None:
            raise RuntimeError("the sim did not start; see " + str(self.sim.log))
        await self.register_images()

    async def register_images(self) -> None:
        for ds in self.ds.values():
            for version in range(1, ds.version + 3):
                await self.api("POST", "/sim/v1/images", {"image": ds.image(version, bad=True), "crash": True})

    def _unexpected(self, proc: Proc) -> None:
        """A process died on its own: recorded (a violation); restarted so that the run goes on."""
        self.cfg.out(f"soak: {proc.name} exited unexpectedly (see {proc.log})")
        if self.running:
            asyncio.get_running_loop().call_later(1.0, lambda: asyncio.ensure_future(self._restart(proc)))

    async def _restart(self, proc: Proc) -> None:
        if self.running and not proc.running:
            await proc.start()

    def daemonset(self, ds: _DsState) -> JSON:
        annotations = {"apps.openyurt.io/update-strategy": ds.model}
        if ds.model == "AdvancedRollingUpdate":
            annotations.update({"apps.openyurt.io/max-unavailable": "10%", "edgeagent.io/max-failed": "1",
                                "edgeagent.io/progress-deadline-seconds": PROGRESS_DEADLINE})
        if ds.name == "aru-pp":
            annotations.update({"edgeagent.io/pre-pull": "true", "apps.openyurt.io/max-unavailable": "5%"})
        if ds.in_place:
            annotations["edgeagent.io/update-type"] = "InPlaceIfPossible"
        if ds.in_place and ds.plan:
            annotations["edgeagent.io/pre-pull"] = "true"  # its restarts cost no pull
        spec: JSON = {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": ds.image()}]}
        if ds.model == "OTA":
            spec["nodeSelector"] = {AGENT_LABEL: "true"}
        return {"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": ds.name, "namespace": NS, "annotations": annotations},
                "spec": {"selector": {"matchLabels": {"app": ds.name}}, "updateStrategy": {"type": "OnDelete"},
                         "template": {"metadata": {"labels": {"app": ds.name}}, "spec": spec}}}

    async def setup(self) -> None:
        cfg = self.cfg
        self.http = aiohttp.ClientSession(headers={"User-Agent": HARNESS_AGENT})
        self.sim = Proc("sim", self._sim_argv(), self.logs / "sim.log", self.exits, self._unexpected)
        await self.start_sim()
        agents = set(self.agent_nodes)
        for i in range(1, cfg.nodes + 1):
            name = node_name(i)
            labels = {ZONE_LABEL: f"zone-{i % 5}"}
            if name in agents:
                labels[AGENT_LABEL] = "true"
            await self.retry("label nodes", functools.partial(
                self.api, "PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": labels}},
                content_type="application/merge-patch+json"))
        with contextlib.suppress(RuntimeError):
            await self.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": "edgeagent-system"}})
        for doc in load_deploy():
            if doc["kind"] in RBAC_KINDS or doc["kind"] == "CustomResourceDefinition":
                await self.api("POST", collection_path(doc), doc, ok=(200, 201, 409))
        await self.wait_for("RolloutPlans served", self.plans_served, 60)
        for ds in self.ds.values():
            manifest = self.daemonset(ds)
            if ds.plan:
                await self.api("POST", PLANS_PATH, {"apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan",
                                                    "metadata": {"name": ds.name, "namespace": NS},
                                                    "spec": plan_spec(manifest)})
            await self.api("POST", f"/apis/apps/v1/namespaces/{NS}/daemonsets", manifest)
        await self.wait_for("every pod running", self.pods_current, 300)
        self.creds.mkdir(mode=0o700, exist_ok=True)
        for ident in ("ctl-a", "ctl-b"):
            token = await self.mint(CONTROLLER_SA)
            kubeconfig = self.write_kubeconfig(f"controller-{ident}", self.url, {"token": token})
            argv = ["controller", "--kubeconfig", str(kubeconfig), "--leader-elect", "--identity", ident,
                    "--lease-duration", "4", "--metrics-port", "0", "--max-concurrent-prepulls", str(cfg.prepull_cap),
                    "--image-prepull-backoff", "2", "--log-format", "json"]
            self.controllers[ident] = Proc(f"controller-{ident}", argv, self.logs / f"controller-{ident}.log",
                                           self.exits, self._unexpected)
            await self.controllers[ident].start()
        windows = maintenance_windows(time.time(), cfg.seconds + 30)
        for node, port in zip(self.agent_nodes, free_ports(len(self.agent_nodes)), strict=True):
            self.agent_ports[node] = port
            state = self.work / "state" / node
            state.mkdir(parents=True, exist_ok=True)
            if self.tmpfs:
                await asyncio.to_thread(subprocess.run, ["mount", "-t", "tmpfs", "-o",
                                        f"size={STATE_TMPFS_SIZE},mode=0700", "tmpfs", str(state)],
                                        check=True, capture_output=True, timeout=10)
                self.mounted.append(state)
            self.tokens[node] = await self.mint(AGENT_SA)
            token_file = self.creds / f"{node}.token"
            write_private(token_file, self.tokens[node])
            link = yaml.safe_load((self.simdir / f"{node}.kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
            kubeconfig = self.write_kubeconfig(node, link, {"tokenFile": str(token_file)})
            argv = ["run", "--node-name", node, "--kubeconfig", str(kubeconfig),
                    "--port", str(port), "--state-dir", str(state), "--request-timeout", "3",
                    "--upgrade-timeout", "2", "--probe-interval", "0.5", "--probe-timeout", "1",
                    "--auto-upgrade", "--ready-timeout", "30", "--timezone", "UTC", "--log-format", "json"]
            if node in self.windowed:
                for spec in windows:
                    argv += ["--maintenance-window", spec]
            self.agents[node] = Proc(f"agent-{node}", argv, self.logs / f"agent-{node}.log", self.exits,
                                     self._unexpected)
            await self.agents[node].start()
        await self.wait_for("agents listening", self.agents_listening, 120)

    async def mint(self, service_account: str) -> str:
        """A ServiceAccount token of deploy/'s identity, as `kubectl create token` asks for one (TokenRequest)."""
        answer = await self.api("POST", f"/api/v1/namespaces/{SYSTEM_NS}/serviceaccounts/{service_account}/token",
                                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                 "spec": {"expirationSeconds": TOKEN_SECONDS}}, timeout=10)
        return str(answer["status"]["token"])

    def write_kubeconfig(self, name: str, server: str, user: JSON) -> Path:
        """A kubeconfig trusting the sim's CA: the sim's own per-node files hold node identities and are
        rewritten at each of its restarts, so the soak's components get theirs here."""
        admin = yaml.safe_load((self.simdir / "admin.kubeconfig").read_text())
        ca = admin["clusters"][0]["cluster"]["certificate-authority-data"]
        config = {"apiVersion": "v1", "kind": "Config", "current-context": name,
                  "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": ca}}],
                  "users": [{"name": name, "user": user}],
                  "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": NS}}]}
        path = self.creds / f"{name}.kubeconfig"
        write_private(path, yaml.safe_dump(config, sort_keys=False))
        return path

    async def agents_listening(self) -> bool:
        for port in self.agent_ports.values():
            async with self.client.get(f"http://127.0.0.1:{port}/v1/healthz",
                                       timeout=aiohttp.ClientTimeout(total=2)) as resp:
                if resp.status != 200:
                    return False
        return True

    # ------------------------------------------------------------------------------------------ state probes

    async def pods_current(self) -> bool:
        return await self.all_current(requests=False)

    async def plans_served(self) -> bool:
        try:
            await self.api("GET", PLANS_PATH, timeout=10)
        except RuntimeError:
            return False
        return True

    async def plans_by_name(self) -> dict[str, JSON]:
        """The RolloutPlans (named after their DaemonSets)."""
        return {p["metadata"]["name"]: p for p in (await self.api("GET", PLANS_PATH, timeout=10))["items"]}

    async def all_current(self, requests: bool = True) -> bool:
        """Every DaemonSet's pods are on its current revision, Ready, none terminating, every node Ready (and
        every agent's requests terminal)."""
        nodes = (await self.api("GET", "/api/v1/nodes", timeout=10))["items"]
        for node in nodes:
            ready = [c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"]
            if not ready or ready[0].get("status") != "True":
                self.unconverged = f"node {node['metadata']['name']} not Ready"
                return False
        plans = await self.plans_by_name()
        for ds in (await self.api("GET", f"/apis/apps/v1/namespaces/{NS}/daemonsets", timeout=10))["items"]:
            status, meta = ds.get("status") or {}, ds["metadata"]
            desired = status.get("desiredNumberScheduled")
            counts = {k: status.get(k) for k in ("desiredNumberScheduled", "currentNumberScheduled",
                                                 "updatedNumberScheduled", "numberReady")}
            self.unconverged = f"daemonset {meta['name']}: {counts}, generation {meta.get('generation')} " \
                               f"observed {status.get('observedGeneration')}"
            if status.get("observedGeneration") != meta.get("generation") or not desired:
                return False
            if not desired == status.get("updatedNumberScheduled") == status.get("numberReady") \
                    == status.get("currentNumberScheduled"):
                return False
            # A plan is done when its phase says so: the last wave bakes after its pods are all current.
            phase = plan_phase(plans.get(meta["name"]))
            if phase is not None and phase not in PLAN_SETTLED:
                self.unconverged = f"daemonset {meta['name']}: rollout phase {phase}"
                return False
        pods = (await self.api("GET", f"/api/v1/namespaces/{NS}/pods", timeout=10))["items"]
        terminating = [p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")]
        if terminating:
            self.unconverged = f"pods terminating: {terminating[:5]}"
            return False
        self.unconverged = "agents' requests not all terminal"
        return not requests or await self.requests_terminal()

    async def requests_terminal(self) -> bool:
        for node in self.agent_nodes:
            items = await self.agent_requests(node)
            if items is None or any(r.get("state") not in TERMINAL for r in items):
                return False
        return True

    async def agent_requests(self, node: str) -> list[JSON] | None:
        try:
            async with self.client.get(f"http://127.0.0.1:{self.agent_ports[node]}/openyurt.io/v1/upgrades",
                                       timeout=aiohttp.ClientTimeout(total=5)) as resp:
                if resp.status != 200:
                    return None
                body = await resp.json()
        except (aiohttp.ClientError, TimeoutError):
            return None
        items = body.get("items", body) if isinstance(body, dict) else body
        return list(items) if isinstance(items, list) else None

    # ------------------------------------------------------------------------------------------ acts

    async def run_schedule(self) -> None:
        start = self.started_at
        tasks: set[asyncio.Task[None]] = set()
        for act in self.schedule:
            delay = start + act["t"] - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.actions >= self.cfg.max_actions:
                self.skipped["max_actions"] += 1
                continue
            self.actions += 1
            act["at"] = time.time()
            task = asyncio.create_task(self._perform(act), name=f"act-{act['kind']}")
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        remaining = start + self.cfg.seconds - time.time()
        if remaining > 0:
            await asyncio.sleep(remaining)
        # Acts still running (a cut waiting to return, a hold to release) end now: the faults stop here.
        for task in list(tasks):
            task.cancel()
        for task in list(tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _perform(self, act: JSON) -> None:
        kind = act["kind"]
        handler = getattr(self, f"act_{kind}")
        try:
            await handler(act)
            self.done[kind] += 1
        except asyncio.CancelledError:
            self.done[kind] += 1  # begun, and undone by the clean-up
            raise
        except (aiohttp.ClientError, TimeoutError, RuntimeError, OSError, KeyError, ValueError) as exc:
            self.skipped[kind] += 1
            act["skipped"] = str(exc)[:200]

    async def _cut(self, node: str, mode: str) -> int:
        token = self.cut_token.get(node, 0) + 1
        self.cut_token[node] = token
        await self.api("POST", f"/sim/v1/nodes/{node}/disconnect?mode={mode}", timeout=5)
        return token

    async def _reconnect(self, node: str, token: int) -> None:
        if self.cut_token.get(node) == token:  # a later cut of the same node owns the link now
            await self.api("POST", f"/sim/v1/nodes/{node}/connect", timeout=5)

    async def act_link_cut(self, act: JSON) -> None:
        token = await self._cut(act["target"], act["mode"])
        try:
            await asyncio.sleep(act["seconds"])
        finally:
            await asyncio.shield(self._reconnect_quietly(act["target"], token))

    async def _reconnect_quietly(self, node: str, token: int) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, RuntimeError, OSError):
            await self._reconnect(node, token)

    async def act_flap(self, act: JSON) -> None:
        node, end = act["target"], time.monotonic() + act["seconds"]
        token = 0
        try:
            while time.monotonic() < end:
                token = await self._cut(node, act["mode"])
                self.done["flap_transition"] += 1
                await asyncio.sleep(act["period"])
                await self._reconnect(node, token)
                self.done["flap_transition"] += 1
                await asyncio.sleep(act["period"])
        finally:
            await asyncio.shield(self._reconnect_quietly(node, token))

    async def act_agent_kill(self, act: JSON) -> None:
        proc = self.agents[act["target"]]
        if not proc.running:
            raise RuntimeError(f"{proc.name} is not running")
        await proc.kill9()
        try:
            await asyncio.sleep(act["down"])
        finally:
            await asyncio.shield(proc.start())

    async def act_leader_kill(self, act: JSON) -> None:
        lease = await self.api("GET", LEASE, timeout=5)
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        proc = self.controllers.get(holder)
        if proc is None or not proc.running:
            raise RuntimeError(f"no running leader (holder {holder!r})")
        act["leader"] = holder
        await proc.kill9()
        try:
            await asyncio.sleep(act["down"])
        finally:
            await asyncio.shield(proc.start())

    async def collect_fault_totals(self) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, RuntimeError, OSError):
            body = await self.api("GET", "/sim/v1/faults", timeout=5)
            self.api_faults.update({k: int(v) for k, v in (body.get("injected") or {}).items()})
            # The next life of the sim counts from zero again.

    async def act_sim_restart(self, act: JSON) -> None:
        assert self.sim is not None
        async with self.sim_lock:
            await self.collect_fault_totals()
            await self.sim.signal(signal.SIGKILL if act["signal"] == "KILL" else signal.SIGTERM)
            for node in list(self.cut_token):
                self.cut_token[node] += 1  # every link comes back connected with the new process
            try:
                await asyncio.sleep(act["down"])
            finally:
                await asyncio.shield(self.start_sim())
                act["up"] = time.time()  # every kubelet restarted with it: rule 12 leaves this moment alone

    async def act_api_burst(self, act: JSON) -> None:
        scope = {"all": "edgeagent-", "agents": "edgeagent-agent/", "controller": "edgeagent-controller/"}.get(
            act["scope"], f"({act.get('target')})")
        body: JSON = {"rate": act["rate"], "durationSeconds": act["seconds"], "userAgent": scope}
        if act["burst"] == "slow":
            body["latencySeconds"] = act["latency"]
        else:
            body["codes"] = act["codes"]
        if act["burst"] == "lost":
            body.update(after=True, verbs=act["verbs"])
        async with self.sim_lock:
            await self.api("POST", "/sim/v1/faults", body, timeout=5)

    async def act_cred_rotate(self, act: JSON) -> None:
        """A new token for the agent, the old one revoked at once (its next request gets 401), and the new one
        written to the agent's token file once the agent has been refused (or after ROTATION_CAP seconds; see
        rotation_step), atomically as the kubelet swaps a projected token: the agent must re-read it on the
        401 and lose nothing meanwhile. Rotations of one agent take turns, so each revokes the token in use."""
        node = act["target"]
        after = self.rng.uniform(*NEW_TOKEN_AFTER)
        async with self.rotating.setdefault(node, asyncio.Lock()):
            await self._rotate(act, node, after)

    async def _rotate(self, act: JSON, node: str, after: float) -> None:
        audit = AuditTail(self.work / "audit.jsonl")
        since = time.time()
        async with self.sim_lock:  # a restarting sim holds the lock: both calls go to a sim that answers
            fresh = await self.mint(AGENT_SA)
            await self.api("POST", "/sim/v1/tokens/revoke", {"token": self.tokens[node]}, timeout=5)
        revoked = act["revoked"] = time.time()
        self.rotations += 1
        refused: float | None = None
        last_poke: float | None = None
        act["pokes"] = 0
        capped = False
        try:
            while True:
                if refused is None:
                    refused = first_refusal(audit.read(), node, since)
                step = rotation_step(time.time(), revoked, after, refused, last_poke)
                if step == "write":
                    capped = refused is None
                    break
                if step == "poke":
                    last_poke = time.time()
                    act["pokes"] += 1
                    await self._poke(node)
                await asyncio.sleep(0.25)
        finally:
            write_private(self.creds / f"{node}.token", fresh)
            self.tokens[node] = fresh
            act["written"] = time.time()
            # "stopped": the faults ended first, before a 401 or the cap (the new token is written all the same).
            act["outcome"] = "refused" if refused is not None else "cap" if capped else "stopped"
            if refused is not None:
                act["refused"] = refused

    async def _poke(self, node: str) -> None:
        await poke_agent(self.client, f"http://127.0.0.1:{self.agent_ports[node]}")

    async def act_state_full(self, act: JSON) -> None:
        state = self.work / "state" / act["target"]
        act["filled"] = await asyncio.to_thread(_fill, state)
        try:
            await asyncio.sleep(act["seconds"])
        finally:
            (state / FILLER).unlink(missing_ok=True)

    async def _agent(self, node: str, method: str, path: str, body: JSON | None = None) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.agent_ports[node]}{path}"
        async with self.client.request(method, url, json=body, headers={"Accept": "application/json"},
                                       timeout=aiohttp.ClientTimeout(total=15)) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text)
            except ValueError:
                return resp.status, text

    async def act_hold(self, act: JSON) -> None:
        node = act["target"]
        body: JSON = {"reason": "soak"}
        if act["until"]:
            body["until"] = _iso(time.time() + act["seconds"])
        status, answer = await self._agent(node, "POST", "/v1/hold", body)
        if status != 200:
            raise RuntimeError(f"hold {node}: {status} {answer}")
        try:
            await asyncio.sleep(act["seconds"])
        finally:
            if not act["until"]:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    await asyncio.shield(self._agent(node, "DELETE", "/v1/hold"))

    async def act_operator_upgrade(self, act: JSON) -> None:
        node = act["target"]
        mine = [p for p in self.pods_snapshot if (p.get("spec") or {}).get("nodeName") == node
                and (p["metadata"].get("labels") or {}).get("app", "").startswith("ota-")]
        # Operators mostly ask for pods that have an update (an answer of 200/202 has consequences to check).
        wanted = [p for p in mine if any(c.get("type") == "PodNeedUpgrade" and c.get("status") == "True"
                                         for c in (p.get("status") or {}).get("conditions") or [])]
        pods = sorted(p["metadata"]["name"] for p in (wanted if wanted and act["pick"] < 0.8 else mine))
        if not pods:
            raise RuntimeError(f"no OTA pod known on {node}")
        pod = pods[int(act["pick"] * len(pods)) % len(pods)]
        path = f"/openyurt.io/v1/namespaces/{NS}/pods/{pod}/upgrade" + ("?when=open" if act["when_open"] else "")
        sent = time.time()
        status, answer = await self._agent(node, "POST", path)
        rid = answer.get("id") if isinstance(answer, dict) else None
        self.accepted.append({"t": sent, "node": node, "pod": f"{NS}/{pod}", "code": status, "id": rid,
                              "whenOpen": act["when_open"]})
        act["answer"] = status

    async def _set_image(self, ds: _DsState, image: str, *, unpause: bool = False) -> None:
        patch: JSON = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}}
        if unpause:
            patch["metadata"] = {"annotations": {"edgeagent.io/paused": None}}
        await self.api("PATCH", f"/apis/apps/v1/namespaces/{NS}/daemonsets/{ds.name}", patch,
                       content_type="application/strategic-merge-patch+json", timeout=10)

    async def act_template(self, act: JSON) -> None:
        ds = self.ds[act["target"]]
        if ds.bad:
            raise RuntimeError(f"{ds.name} is on a bad version; no new version on top of it")
        await self.api("POST", "/sim/v1/images", {"image": ds.image(ds.version + 3, bad=True), "crash": True})
        await self._set_image(ds, ds.image(ds.version + 1))
        ds.version += 1

    async def act_bad_version(self, act: JSON) -> None:
        ds = self.ds[act["target"]]
        if ds.bad:
            raise RuntimeError(f"{ds.name} is already on a bad version")
        ds.bad, ds.bad_since = True, time.time()
        # Each bad version is a new image: the same one again is a revision the controller rolled back already,
        # which a plan holds (a rolled-back revision re-applied is never rolled again by itself), and the fleet
        # would wait for a rollback that by design does not come.
        ds.bad_versions += 1
        bad = ds.image(ds.version + 1, bad=True) + (f".{ds.bad_versions}" if ds.bad_versions > 1 else "")
        self.bad_images.add(bad)
        try:
            await self.retry(f"register {bad}", lambda: self.api("POST", "/sim/v1/images",
                                                                 {"image": bad, "crash": True}), 30)
            await self.retry(f"bad version of {ds.name}", lambda: self._set_image(ds, bad), 30)
        except BaseException:
            # Out or not: with a plan notice_rollbacks() settles it from the template; without, roll back.
            ds.bad_image = bad
            if not ds.plan:
                await asyncio.shield(self.operator_rollback(ds))
            raise
        ds.bad_image = bad
        if ds.plan:
            # The controller must abort and roll back by itself (on-failure: rollback); once the template is
            # no longer the bad one, new versions may come again. Not rolled back: the fleet cannot converge
            # and the checker says so.
            rolled_back = await self.wait_for(f"{ds.name} rolled back", lambda: self._template_is_not(ds, bad), 240)
            ds.bad = rolled_back is None
            act["rolledBack"] = rolled_back is not None
            return
        try:
            await asyncio.sleep(act["rollback_after"])
        finally:
            await asyncio.shield(self.operator_rollback(ds))

    async def _template_is_not(self, ds: _DsState, image: str) -> bool:
        found = await self.api("GET", f"/apis/apps/v1/namespaces/{NS}/daemonsets/{ds.name}", timeout=5)
        containers = found["spec"]["template"]["spec"]["containers"]
        return all(c.get("image") != image for c in containers)

    async def operator_rollback(self, ds: _DsState) -> None:
        """What an operator does after a bad version without a plan: the good image back, the roll resumed."""
        await self.retry(f"roll {ds.name} back", lambda: self._set_image(ds, ds.image(), unpause=True), 60)
        ds.bad, ds.bad_image = False, ""

    async def notice_rollbacks(self) -> None:
        """A plan's bad version is over once the controller has put the template back, whether or not the act
        that put it out still waits for that (the faults may have stopped, cancelling it, in the middle)."""
        for ds in self.ds.values():
            if ds.plan and ds.bad and ds.bad_image and await self._template_is_not(ds, ds.bad_image):
                ds.bad, ds.bad_image = False, ""

    async def operator_sweep(self) -> None:
        """An operator releases nodes held by a failed automatic upgrade once no bad version is out (the
        documented way out of `AutoUpgradeFailed`), and resumes a roll the controller paused on a good version;
        other holds are the schedule's business."""
        while True:
            await asyncio.sleep(5.0)
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, RuntimeError, OSError, KeyError):
                await self.notice_rollbacks()
                await self.resume_good_rolls()
            if any(ds.bad for ds in self.ds.values()):
                continue
            for node in self.agent_nodes:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError, KeyError):
                    status, body = await self._agent(node, "GET", "/v1/hold")
                    if status == 200 and isinstance(body, dict) and body.get("reason") == "AutoUpgradeFailed":
                        await self._agent(node, "DELETE", "/v1/hold")
                        self.operator_releases += 1

    async def resume_good_rolls(self) -> None:
        """`max-failed` pauses a roll when a pod of the new version is not available within the progress
        deadline. Under the storm that also happens to a good version (its node was cut or flapping for most of
        the deadline, the machine was loaded). An operator who finds such a pause checks the version, and when it
        is a good one (here: the template is the image the harness put out, no bad version is pending) removes
        the annotation, as the controller's Event says to; not at once, but once the pause has lasted
        OPERATOR_RESUME_AFTER seconds. Every resume is counted and reported, so the false pauses stay visible."""
        now = time.monotonic()
        for ds in self.ds.values():
            if ds.plan or ds.bad:
                continue  # a plan's failures are the controller's to roll back; a bad version is rolled back above
            found = await self.api("GET", f"/apis/apps/v1/namespaces/{NS}/daemonsets/{ds.name}", timeout=5)
            annotations = found["metadata"].get("annotations") or {}
            if annotations.get("edgeagent.io/paused") != "true":
                self.paused_since.pop(ds.name, None)
                continue
            images = [c.get("image") for c in found["spec"]["template"]["spec"]["containers"]]
            if images != [ds.image()] or ds.bad:
                continue
            since = self.paused_since.setdefault(ds.name, now)
            if now - since < OPERATOR_RESUME_AFTER:
                continue
            await self.api("PATCH", f"/apis/apps/v1/namespaces/{NS}/daemonsets/{ds.name}",
                           {"metadata": {"annotations": {"edgeagent.io/paused": None}}},
                           content_type="application/merge-patch+json", timeout=10)
            self.paused_since.pop(ds.name, None)
            self.operator_resumes[ds.name] += 1
            self.cfg.out(f"soak: operator resumed {ds.name}, auto-paused on a good version ({ds.image()})")

    # ------------------------------------------------------------------------------------------ samplers

    async def sample(self) -> None:
        """Pre-pull Jobs (for the cap) every second; the pods (for operators' targets) every few seconds."""
        n = 0
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, RuntimeError, OSError, KeyError):
                jobs = (await self.api("GET", "/apis/batch/v1/jobs", timeout=5))["items"]
                self.prepull_samples.append({"t": time.time(), "jobs": [
                    {"name": j["metadata"]["name"],
                     "node": (((j.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeName"),
                     "active": not any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                                       for c in (j.get("status") or {}).get("conditions") or [])}
                    for j in jobs if j["metadata"]["name"].startswith("image-pre-pull-")]})
                if n % 5 == 0:
                    self.pods_snapshot = (await self.api("GET", f"/api/v1/namespaces/{NS}/pods", timeout=10))["items"]
            n += 1
            await asyncio.sleep(1.0)

    async def sample_containers(self) -> None:
        """What every node really runs (the sim's kubelets, not the API's frozen view of a cut node), every
        CONTAINER_SAMPLE_EVERY seconds, for the in-place DaemonSets: checker rule 12. A failed answer (the sim
        restarting, a loaded machine) is no sample: the checker reads a long hole as not seen."""
        names = [n for n, d in self.ds.items() if d.in_place]
        while True:
            sent = time.time()
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, RuntimeError, OSError, KeyError, ValueError):
                rows = (await self.api("GET", "/sim/v1/containers", timeout=5))["items"]
                self.containers.add(sent, time.time(), rows, names, NS)
            await asyncio.sleep(max(0.0, sent + CONTAINER_SAMPLE_EVERY - time.time()))

    def inplace_settings(self) -> JSON:
        return {"daemonsets": [n for n, d in self.ds.items() if d.in_place],
                "restartSeconds": PULL_SECONDS + START_SECONDS, "slack": RESTART_SLACK, "maxHole": MAX_SAMPLE_HOLE,
                "badImages": sorted(self.bad_images), "simGrace": 10.0}

    # ------------------------------------------------------------------------------------------ end

    async def stop_faults(self) -> None:
        """Undo every fault still in force, and let the operators finish what they started."""
        async with self.sim_lock:
            if self.sim is not None and not self.sim.running:
                await self.start_sim()
        await self.collect_fault_totals()
        await self.retry("clear faults", lambda: self.api("DELETE", "/sim/v1/faults"))
        for i in range(1, self.cfg.nodes + 1):
            await self.retry("reconnect", functools.partial(self.api, "POST", f"/sim/v1/nodes/{node_name(i)}/connect"))
        for proc in [*self.controllers.values(), *self.agents.values()]:
            if not proc.running:
                await proc.start()
        for node in self.agent_nodes:
            (self.work / "state" / node / FILLER).unlink(missing_ok=True)
        for ds in self.ds.values():
            if ds.bad and not ds.plan:
                await self.operator_rollback(ds)
        await self.wait_for("agents listening", self.agents_listening, 60)
        for node in self.agent_nodes:  # holds, including AutoUpgradeFailed ones after a bad version
            await self.retry("release", functools.partial(self._agent, node, "DELETE", "/v1/hold"), 30)

    async def rollout_status(self) -> list[JSON]:
        out: list[JSON] = []
        daemonsets = {d["metadata"]["name"]: d for d in
                      (await self.api("GET", f"/apis/apps/v1/namespaces/{NS}/daemonsets"))["items"]}
        plans = await self.plans_by_name()
        for name in self.ds:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "edgeagent.cli", "rollout", "status", name, "-n", NS, "--kubeconfig",
                str(self.simdir / "admin.kubeconfig"), stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=clean_env())
            text, _ = await proc.communicate()
            ds = daemonsets.get(name) or {}
            status = ds.get("status") or {}
            phase = plan_phase(plans.get(name))
            out.append({"name": name, "exit": proc.returncode, "phase": phase,
                        "updated": status.get("updatedNumberScheduled"), "total": status.get("desiredNumberScheduled"),
                        "output": text.decode(errors="replace")[-3000:]})
        return out

    async def describe_stuck(self, pods: list[JSON], rollouts: list[JSON]) -> list[str]:
        """What a person needs to tell why the fleet did not converge, short enough at 200 nodes: for each
        DaemonSet not done, its pods counted by (revision, image, Ready, waiting reason, restarted, deleting) with
        a few names each, and its `rollout status`; the agents that hold, and how many do not. Pre-pull Jobs left
        over (each holds a slot of the cap)."""
        lines: list[str] = []
        stuck = {r["name"] for r in rollouts if r.get("updated") != r.get("total")
                 or (r.get("phase") is not None and r["phase"] not in PLAN_SETTLED)}
        groups: dict[tuple[str, ...], list[str]] = {}
        for pod in pods:
            meta, status = pod["metadata"], pod.get("status") or {}
            app = str((meta.get("labels") or {}).get("app"))
            if app not in stuck:
                continue
            ready = [str(c.get("status")) for c in status.get("conditions") or [] if c.get("type") == "Ready"]
            containers = status.get("containerStatuses") or [{}]
            waiting = ((containers[0].get("state") or {}).get("waiting") or {}).get("reason", "")
            key: tuple[str, ...] = (app, str((meta.get("labels") or {}).get("controller-revision-hash")),
                   str(pod["spec"]["containers"][0].get("image")), f"Ready {(ready or ['?'])[0]}",
                   f"waiting {waiting or '-'}", f"restarted {int(containers[0].get('restartCount') or 0) > 0}",
                   f"deleting {bool(meta.get('deletionTimestamp'))}")
            groups.setdefault(key, []).append(f"{meta['name']}@{pod['spec'].get('nodeName')}")
        for group, names in sorted(groups.items()):
            lines.append(f"soak: stuck {group[0]}: {len(names)} pod(s) on revision {', '.join(group[1:])}: "
                         f"{' '.join(sorted(names)[:4])}{' …' if len(names) > 4 else ''}")
        for r in rollouts:
            if r["name"] in stuck:
                lines.append(f"soak: rollout status {r['name']} (exit {r['exit']}):")
                lines.extend(f"soak:   {line}" for line in str(r.get("output") or "").splitlines()[-25:])
        unheld = 0
        for node in self.agent_nodes:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                status, body = await self._agent(node, "GET", "/v1/hold")
                if status == 200 and isinstance(body, dict) and not body.get("held"):
                    unheld += 1
                else:
                    lines.append(f"soak: hold of {node}: {status} {json.dumps(body)[:300]}")
        lines.append(f"soak: {unheld} agent(s) of {len(self.agent_nodes)} hold nothing")
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError, RuntimeError):
            jobs = (await self.api("GET", f"/apis/batch/v1/namespaces/{NS}/jobs", timeout=10))["items"]
            def state(job: JSON) -> str:
                conditions = (job.get("status") or {}).get("conditions") or []
                return ",".join(str(c.get("type")) for c in conditions if c.get("status") == "True") or "running"

            if jobs:
                lines.append(f"soak: {len(jobs)} Job(s) left: "
                             + " ".join(f"{j['metadata']['name']}({state(j)})" for j in jobs[:12]))
        return lines

    def read_audit(self) -> tuple[list[JSON], dict[str, list[JSON]]]:
        """The writes (the checker needs only those, and the file is large), and each client's episodes of 401s,
        which reads meet too."""
        entries: list[JSON] = []
        calls: list[JSON] = []
        path = self.work / "audit.jsonl"
        if not path.exists():
            return entries, {}
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                calls.append({k: entry.get(k) for k in ("time", "code", "userAgent")})
                if entry.get("verb") != "GET":
                    entries.append(entry)
        return entries, credential_episodes(calls)

    async def run(self) -> tuple[History, Result]:
        cfg = self.cfg
        out = cfg.out
        out(f"soak: seed {cfg.seed}, {cfg.seconds:.0f} s of faults, {cfg.nodes} nodes, {cfg.agents} agents, "
            f"DaemonSets {', '.join(self.ds)} (plans: {'yes' if self.plans else 'no'}), "
            f"{len(self.schedule)} scheduled acts; workdir {self.work}")
        history = History(seed=cfg.seed, schedule=self.schedule, prepull_cap=cfg.prepull_cap,
                          convergence_bound=cfg.convergence_bound)
        sampler: asyncio.Task[None] | None = None
        sweeper: asyncio.Task[None] | None = None
        watcher: asyncio.Task[None] | None = None
        try:
            await self.setup()
            self.running = True
            self.started_at = history.started_at = time.time()
            sampler = asyncio.create_task(self.sample(), name="sampler")
            sweeper = asyncio.create_task(self.operator_sweep(), name="operator")
            watcher = asyncio.create_task(self.sample_containers(), name="containers")
            await self.run_schedule()
            await self.stop_faults()
            history.faults_stopped_at = time.time()
            out(f"soak: faults stopped after {history.faults_stopped_at - self.started_at:.0f} s; converging")
            history.converged_at = await self.wait_for("convergence", self.all_current, cfg.convergence_bound)
            history.rollouts = await self.rollout_status()
            final = {kind: (await self.api("GET", path, timeout=30))["items"] for kind, path in (
                ("nodes", "/api/v1/nodes"), ("pods", f"/api/v1/namespaces/{NS}/pods"),
                ("daemonsets", f"/apis/apps/v1/namespaces/{NS}/daemonsets"))}
            (self.work / "final.json").write_text(json.dumps(final))  # for a person reading a failed run
            if history.converged_at is None:
                # CI keeps only what the run printed: say what the unconverged DaemonSets' pods, plans and nodes'
                # holds were, not only the counts.
                for line in await self.describe_stuck(final["pods"], history.rollouts):
                    out(line)
            history.events = (await self.api("GET", "/api/v1/events", timeout=30))["items"]
            for node in self.agent_nodes:
                items = await self.agent_requests(node)
                if items is not None:
                    history.requests[node] = items
        finally:
            self.running = False
            for task in (sampler, sweeper, watcher):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            for proc in [*self.agents.values(), *self.controllers.values()]:
                await proc.close()
            if self.sim is not None:
                await self.sim.close()
            for state in self.mounted:
                await asyncio.to_thread(subprocess.run, ["umount", str(state)], capture_output=True, timeout=30,
                                        check=False)
            if self.http is not None:
                await self.http.close()
        history.accepted = self.accepted
        history.prepull_samples = self.prepull_samples
        history.processes = self.exits
        history.logs = {p.name: p.log.read_text(errors="replace") for p in
                        [*([self.sim] if self.sim else []), *self.controllers.values(), *self.agents.values()]
                        if p.log.exists()}
        history.audit, history.credentials = self.read_audit()
        history.containers = self.containers.to_json()
        history.inplace = self.inplace_settings()
        result = check(history)
        (self.work / "history.json").write_text(history.to_json())
        self.summary(history, result)
        if result.ok and not cfg.keep:
            shutil.rmtree(self.work, ignore_errors=True)
        return history, result

    def faults_by_kind(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for kind, n in sorted(self.done.items()):
            kinds[kind] = n
        for kind, n in sorted(self.api_faults.items()):
            kinds[f"api_{kind}"] = n
        return kinds

    def summary(self, history: History, result: Result) -> None:
        out = self.cfg.out
        kinds = self.faults_by_kind()
        # `flap` is counted by its transitions; `api_burst` is an act (a rule), the `api_<code>` its faulted answers.
        acts = sum(n for k, n in kinds.items() if (not k.startswith("api_") or k == "api_burst") and k != "flap")
        api = sum(n for k, n in kinds.items() if k.startswith("api_") and k != "api_burst")
        out("soak: faults injected by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
        if self.skipped:
            out("soak: acts skipped (target unavailable at that moment): "
                + ", ".join(f"{k} {n}" for k, n in sorted(self.skipped.items())))
        out(f"soak: {acts + api} faults in all ({acts} acts of the schedule, {api} API answers faulted)")
        out(report(history, result))
        out("soak: " + credential_summary(history))
        out("soak: " + inplace_summary(history))
        if history.converged_at is not None and history.faults_stopped_at is not None:
            out(f"soak: converged {history.converged_at - history.faults_stopped_at:.1f} s after the last fault "
                f"(bound {history.convergence_bound:.0f} s)")
        accepted = [a for a in self.accepted if a.get("code") in (200, 202)]
        resumes = ", ".join(f"{k} {n}" for k, n in sorted(self.operator_resumes.items())) or "none"
        out(f"soak: operators sent {len(self.accepted)} upgrade requests, {len(accepted)} accepted, released "
            f"{self.operator_releases} AutoUpgradeFailed hold(s), resumed rolls auto-paused on a good version: "
            f"{resumes}; "
            f"{len(history.events)} Events; {len(history.audit)} audited writes")
        out(f"soak: history kept in {self.work / 'history.json'}" if (self.cfg.keep or not result.ok)
            else "soak: workdir removed (pass --keep to keep it)")
