"""What every agent benchmark shares: the sim and the agent as separate processes, pods, RSS, percentiles.

The simulated cluster runs as `edgeagent sim` and each agent as `edgeagent run`, both child processes
(via `edgeagent.demo.processes`), so the agent's event loop never shares a core-bound loop with the API
server it watches or with the load generator. The machine has only 2 cores, so a load generator, an
agent and the sim still compete for them: figures are for this machine, measured on loopback only.

Every figure is printed as one line `name value unit` (`report`), which `run_all.py` collects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from edgeagent.demo.processes import Proc, free_port

JSON = dict[str, Any]
NAMESPACE = "default"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


def report(name: str, value: float, unit: str) -> None:
    """One figure, in the format `run_all.py` parses."""
    print(f"{name} {value:.3f} {unit}", flush=True)


def note(text: str) -> None:
    """Context for a human reader; `run_all.py` passes `#` lines through."""
    print(f"# {text}", flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): an actually observed value, never an interpolation."""
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident set size of a process in MiB (VmRSS), as `ps` and cgroup memory accounting see it; `VmHWM` is
    its peak so far, which a figure read between two collections could miss."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {pid}")


def parse_time(text: str) -> float:
    """RFC 3339 with a Z (as the agent writes it) → epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def bench_pod(name: str, node: str, *, owner: str | None = None) -> JSON:
    """A pod about as large as a real DaemonSet pod (env, resources, tolerations, volumes), bound to `node`.

    With `owner`, it claims to belong to a DaemonSet of that name that does not exist, so nobody
    recreates it and any number of upgradeable pods can share one node.
    """
    metadata: JSON = {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {"app": "edge-app", "controller-revision-hash": "5d8f7c9b4", "pod-template-generation": "1"},
        "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9100"},
    }
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner,
                                        "uid": f"{owner}-uid", "controller": True, "blockOwnerDeletion": True}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "app",
                "image": "registry.local/edge-app:1.2.3",
                "args": ["--listen=:9100", "--log-level=info"],
                "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "ports": [{"containerPort": 9100, "name": "metrics", "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/edge-app", "readOnly": True}],
            }],
            "volumes": [{"name": "config", "configMap": {"name": "edge-app-config"}}],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
            ],
        },
    }


class Sim:
    """`edgeagent sim` as a child process, driven over HTTP (admin API and its /sim/v1 routes)."""

    def __init__(self, workdir: Path, nodes: int = 1, extra: Sequence[str] = ()) -> None:
        self.dir = workdir / "sim"
        self.proc = Proc("sim", ["sim", "--nodes", str(nodes), "--dir", str(self.dir), "--log-format", "json",
                                 "--log-level", "warning", *extra], workdir / "sim.log")
        self.url = ""
        self.http: aiohttp.ClientSession | None = None

    async def start(self, timeout: float = 30) -> None:
        await self.proc.start()
        admin = self.dir / "admin.kubeconfig"
        deadline = time.monotonic() + timeout
        while not admin.exists():  # written last, atomically, once the API server listens
            if not self.proc.running or time.monotonic() > deadline:
                raise RuntimeError(f"sim did not start: {self.proc.log_tail()}")
            await asyncio.sleep(0.05)
        config = yaml.safe_load(admin.read_text())
        self.url = str(config["clusters"][0]["cluster"]["server"])
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30),
                                          connector=aiohttp.TCPConnector(limit=64))

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.close()
        await self.proc.terminate(10)

    def kubeconfig(self, node: str) -> Path:
        return self.dir / f"{node}.kubeconfig"

    def _session(self) -> aiohttp.ClientSession:
        if self.http is None:
            raise RuntimeError("sim not started")
        return self.http

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      ok: tuple[int, ...] = (200, 201)) -> JSON:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self._session().request(method, self.url + path, data=data, headers=headers) as resp:
            text = await resp.text()
            if resp.status not in ok:
                raise RuntimeError(f"{method} {path}: {resp.status} {text[:300]}")
            out = json.loads(text) if text else {}
            return out if isinstance(out, dict) else {"items": out}

    async def create_pods(self, pods: list[JSON], concurrency: int = 16) -> list[JSON]:
        semaphore = asyncio.Semaphore(concurrency)

        async def one(pod: JSON) -> JSON:
            async with semaphore:
                return await self.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)

        return list(await asyncio.gather(*(one(p) for p in pods)))

    async def patch_pod(self, name: str, patch: JSON, *, status: bool = False,
                        content_type: str = MERGE_PATCH) -> JSON:
        suffix = "/status" if status else ""
        return await self.request("PATCH", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}{suffix}", patch, content_type)

    async def need_upgrade(self, names: list[str], concurrency: int = 16) -> None:
        """Set PodNeedUpgrade True (what the OTA controller does), so the agent may upgrade these pods."""
        semaphore = asyncio.Semaphore(concurrency)
        condition = {"status": {"conditions": [{"type": "PodNeedUpgrade", "status": "True",
                                                "message": "controllerrevision: 6f9c8d7b5"}]}}

        async def one(name: str) -> None:
            async with semaphore:
                await self.patch_pod(name, condition, status=True, content_type=STRATEGIC_PATCH)

        await asyncio.gather(*(one(n) for n in names))

    async def node_pods(self, node: str) -> list[JSON]:
        listing = await self.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
        return list(listing["items"])

    async def wait_running(self, node: str, count: int, timeout: float = 60) -> None:
        """Until the kubelet reports `count` pods on `node` Running: its status writes are over."""
        deadline = time.monotonic() + timeout
        while True:
            pods = await self.node_pods(node)
            if len(pods) == count and all((p.get("status") or {}).get("phase") == "Running" for p in pods):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} pods on {node} not Running after {timeout}s")
            await asyncio.sleep(0.2)

    async def wait_quiet(self, node: str, quiet: float = 3.0, timeout: float = 120) -> None:
        """Until no pod on `node` has changed for `quiet` seconds: start-up writes (the kubelet's statuses, the
        agent publishing `UpgradeHeld` on every DaemonSet pod) are over."""
        deadline = time.monotonic() + timeout
        last, since = "", time.monotonic()
        while True:
            listing = await self.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
            newest = max((int(p["metadata"]["resourceVersion"]) for p in listing["items"]), default=0)
            now = time.monotonic()
            if str(newest) != last:
                last, since = str(newest), now
            elif now - since >= quiet:
                return
            if now > deadline:
                raise RuntimeError(f"pods on {node} still changing after {timeout}s")
            await asyncio.sleep(0.25)

    async def disconnect(self, node: str, mode: str) -> None:
        await self.request("POST", f"/sim/v1/nodes/{node}/disconnect?mode={mode}")

    async def connect(self, node: str) -> None:
        await self.request("POST", f"/sim/v1/nodes/{node}/connect")

    async def deletes(self) -> list[JSON]:
        return list((await self.request("GET", "/sim/v1/deletes"))["items"])


class Agent:
    """`edgeagent run` as a child process on a port chosen up front (so its start can be timed from outside)."""

    def __init__(self, workdir: Path, sim: Sim, node: str, *, state_dir: Path | None = None,
                 flags: Sequence[str] = (), label: str = "agent", kubeconfig: Path | None = None) -> None:
        self.port = free_port()
        self.node = node
        self.state_dir = state_dir or workdir / f"state-{node}"
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["run", "--node-name", node, "--kubeconfig", str(kubeconfig or sim.kubeconfig(node)),
                "--port", str(self.port),
                "--state-dir", str(self.state_dir), "--log-format", "json", *flags]
        self.proc = Proc(label, args, workdir / f"{label}-{node}.log")
        self.http: aiohttp.ClientSession | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def start(self, *, wait: bool = True) -> None:
        self.http = self.http or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        await self.proc.start()
        if wait:
            await self.wait_listening()

    async def wait_listening(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.proc.running:
                raise RuntimeError(f"agent exited: {self.proc.log_tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                status, _ = await self.get("/v1/healthz")
                if status == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent not listening after {timeout}s: {self.proc.log_tail()}")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        await self.proc.terminate(10)
        if self.http is not None:
            await self.http.close()
            self.http = None

    async def get(self, path: str) -> tuple[int, bytes]:
        assert self.http is not None
        async with self.http.get(self.url + path, headers={"Accept": "application/json"}) as resp:
            return resp.status, await resp.read()

    async def readyz(self) -> JSON:
        status, body = await self.get("/v1/readyz")
        if status != 200:
            raise RuntimeError(f"readyz answered {status}")
        return dict(json.loads(body))

    async def upgrade(self, name: str) -> tuple[int, JSON]:
        assert self.http is not None
        path = f"/openyurt.io/v1/namespaces/{NAMESPACE}/pods/{name}/upgrade"
        async with self.http.post(self.url + path, headers={"Accept": "application/json"}) as resp:
            return resp.status, dict(await resp.json())

    async def upgrades(self) -> list[JSON]:
        status, body = await self.get("/openyurt.io/v1/upgrades")
        if status != 200:
            raise RuntimeError(f"upgrade list answered {status}")
        return list(json.loads(body)["items"])

    async def wait_for(self, what: str, probe: Any, timeout: float = 60, interval: float = 0.02) -> Any:
        """Poll an async probe until truthy; a benchmark that cannot reach its state fails loudly."""
        deadline = time.monotonic() + timeout
        while True:
            result = await probe()
            if result:
                return result
            if not self.proc.running:
                raise RuntimeError(f"agent exited while waiting for {what}: {self.proc.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout}s waiting for {what}; last: {result!r}")
            await asyncio.sleep(interval)

    async def wait_pods(self, count: int, timeout: float = 60) -> None:
        async def probe() -> bool:
            ready = await self.readyz()
            return bool(ready["cache"]["synced"]) and int(ready["cache"]["pods"]) == count

        await self.wait_for(f"{count} pods in the agent's cache", probe, timeout)

    async def wait_link(self, connected: bool, timeout: float = 60, interval: float = 0.01) -> JSON:
        async def probe() -> JSON | None:
            link = dict((await self.readyz())["link"])
            return link if link["connected"] == connected else None

        result: JSON = await self.wait_for(f"link connected={connected}", probe, timeout, interval)
        return result


@contextlib.asynccontextmanager
async def workdir(prefix: str) -> AsyncIterator[Path]:
    """A scratch directory for state dirs and logs; kept (and named) when EDGEAGENT_BENCH_KEEP is set."""
    path = Path(tempfile.mkdtemp(prefix=f"edgeagent-bench-{prefix}-"))
    try:
        yield path
    finally:
        if os.environ.get("EDGEAGENT_BENCH_KEEP"):
            note(f"work directory kept: {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


async def post_upgrades(agent: Agent, names: list[str], concurrency: int = 8) -> list[tuple[int, JSON]]:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(name: str) -> tuple[int, JSON]:
        async with semaphore:
            return await agent.upgrade(name)

    return list(await asyncio.gather(*(one(n) for n in names)))


# The real API server sends a watch bookmark about once a minute; the sim's default is faster (tests).
REALISTIC_BOOKMARK_SECONDS = 60


def realistic_bookmark_args() -> list[str]:
    """`edgeagent sim` flags for the real server's bookmark cadence, or [] (with a note) on a sim without them."""
    import subprocess
    import sys

    helped = subprocess.run([sys.executable, "-m", "edgeagent.cli", "sim", "--help"], capture_output=True, text=True,
                            check=False).stdout
    if "--bookmark-interval" in helped:
        return ["--bookmark-interval", str(REALISTIC_BOOKMARK_SECONDS)]
    note("this sim has no --bookmark-interval: watch bookmarks come at its default cadence, not once a minute")
    return []


def proxied_kubeconfig(source: Path, target: Path, server: str) -> Path:
    """A copy of `source` whose cluster points at `server` (a counting proxy in front of the same link)."""
    config = yaml.safe_load(source.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = server
    target.write_text(yaml.safe_dump(config))
    return target


def server_of(kubeconfig: Path) -> tuple[str, int]:
    """Host and port of the first cluster's server URL."""
    from urllib.parse import urlsplit

    url = urlsplit(str(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]))
    return url.hostname or "127.0.0.1", int(url.port or 80)
