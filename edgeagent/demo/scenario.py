"""`edgeagent demo`: OpenYurt's DaemonSet upgrade scenario, end to end, narrated — and checked.

OpenYurt's two DaemonSet upgrade models on a simulated three-node edge cluster, nginx 1.19.4 -> 1.19.5:
AdvancedRollingUpdate with two nodes cut off (only the connected node upgrades; the others follow on
reconnection), then OTA (PodNeedUpgrade flips; the node's user upgrades through the agent, once
online, once offline with the request queued across an agent crash). The controller and the agents
run as real `edgeagent` processes; every command shown (kubectl, curl, `edgeagent pods`, …) really
runs and what it printed is shown. Every claim printed was checked first; the exit code is 0 only if
all of them held, else 1 with one line naming the step that failed. `--keep` leaves the cluster
running at the end, until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import structlog
import yaml

from edgeagent import log
from edgeagent.config import LogConfig, SimConfig
from edgeagent.contract import CONDITION_POD_IMAGE_READY, CONDITION_POD_NEED_UPGRADE, CONDITION_UPGRADE_HELD
from edgeagent.demo.cluster import CONTAINER, NAMESPACE, Cluster, PodView, by_node, daemonset, summary
from edgeagent.demo.narration import Narrator, StepFailed
from edgeagent.demo.processes import AgentHttp, Proc, Ran, child_env, free_port, run_command
from edgeagent.kube.client import KubeClient, Timeouts
from edgeagent.rollout.state import state_from_status

JSON = dict[str, Any]

OLD = "nginx:1.19.4"
NEW = "nginx:1.19.5"
# The OTA part rolls on to a version no node has pulled yet, so pre-pulling it shows.
OTA_NEW = "nginx:1.19.6"
# A slow site link: pulling OTA_NEW takes this long on every node (the sim's registry setting).
SLOW_PULL = 4.0
# The RolloutPlan CRD the rollout-plan part applies (the repository's deploy/).
CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "crd-rolloutplan.yaml"
# The rollout-plan part rolls nginx on to a version whose container exits at once (the sim's registry says so).
BAD = "nginx:1.19.7"
# How long a new pod may take to become available before it counts as failed (short, for the demo).
PLAN_DEADLINE = 3
NODES = ["edge-1", "edge-2", "edge-3"]
CONNECTED, CUT_A, CUT_B = NODES
ARU_DS = "nginx"
OTA_DS = "nginx-ota"
ONLINE_NODE, OFFLINE_NODE, NO_AGENT_NODE = NODES

# Fast timings (the cluster's are in start_cluster) so the whole story fits in well under a minute.
AGENT_FLAGS = ["--probe-interval", "0.25", "--probe-timeout", "0.5", "--failures-to-disconnect", "2",
               "--request-timeout", "1.5", "--upgrade-timeout", "1.5"]
# Deadlines for single transitions; generous against a busy machine, each far below what a hang would take.
WAIT = 15.0
SHUTDOWN_WAIT = 10.0
# Nothing in the demo may hang it: this bounds the whole run, clean-up included (not the --keep wait).
OVERALL_DEADLINE = 150.0
# The OTA pods as kubectl shows them with the condition the upgrade is about.
OTA_COLUMNS = ("NAME:.metadata.name,NODE:.spec.nodeName,IMAGE:.spec.containers[0].image,"
               "READY:.status.containerStatuses[0].ready,"
               f'NEED-UPGRADE:.status.conditions[?(@.type=="{CONDITION_POD_NEED_UPGRADE}")].status')
HELD_COLUMNS = (f'HELD:.status.conditions[?(@.type=="{CONDITION_UPGRADE_HELD}")].status,'
                f'IMAGE-READY:.status.conditions[?(@.type=="{CONDITION_POD_IMAGE_READY}")].status')
# The DaemonSet's Events as kubectl shows them, oldest first.
EVENT_COLUMNS = "LAST-SEEN:.lastTimestamp,TYPE:.type,REASON:.reason,MESSAGE:.message"
# Curl prints the HTTP status on a line of its own after the body.
STATUS_LINE = r"\n%{http_code}\n"  # curl turns the \n into newlines itself


# The programs the demo runs for the commands it shows.
TOOLS = ("kubectl", "curl", "cat")


class MissingTool(Exception):
    """A program the demo runs for real is not installed."""


class Demo:
    """The scenario. Owns the simulated cluster, the child processes and the HTTP sessions."""

    def __init__(self, narrator: Narrator, workdir: Path, *, keep: bool = False) -> None:
        self.n = narrator
        self.workdir = workdir
        self.keep = keep
        self.tools = {name: _which(name) for name in TOOLS}
        self.env = child_env()
        self.logs = workdir / "logs"
        self.sim: Any = None  # SimCluster (imported lazily: its import pulls in the whole simulator)
        self.client: KubeClient | None = None
        self.session: aiohttp.ClientSession | None = None
        self.procs: dict[str, Proc] = {}
        self.agent_ports: dict[str, int] = {}
        self.deadline: asyncio.Timeout | None = None
        self.ports_given: set[int] = set()  # handed to a child that may not have bound it yet

    # ------------------------------------------------------------------------------------------ plumbing

    @property
    def cluster(self) -> Cluster:
        if self.client is None:
            raise RuntimeError("cluster client not connected")
        return Cluster(self.client)

    def agent(self, node: str) -> AgentHttp:
        if self.session is None:
            raise RuntimeError("HTTP session not open")
        return AgentHttp(self.session, self.agent_ports[node])

    async def close(self) -> None:
        """Whatever happened: every child process ends, every connection closes, the cluster stops."""
        for proc in self.procs.values():
            await proc.terminate(timeout=3.0)
        if self.session is not None:
            await self.session.close()
        if self.client is not None:
            await self.client.close()
        if self.sim is not None:
            with contextlib.suppress(Exception):
                await self.sim.stop()

    def _require_alive(self, name: str) -> None:
        proc = self.procs[name]
        if not proc.running:
            tail = " | ".join(proc.log_tail(1)) or "no output"
            raise self.n.fail(f"{proc.name} exited with code {proc.returncode}; its last log line: {tail}")

    async def pods_until(self, app: str, condition: Callable[[list[PodView]], bool], what: str) -> list[PodView]:
        async def probe() -> tuple[list[PodView] | None, str]:
            pods = await self.cluster.pods(app)
            return (pods if condition(pods) else None), summary(pods)

        return await self.n.wait_for(probe, timeout=WAIT, what=what)

    async def nodes_until(self, want: dict[str, bool], what: str) -> None:
        async def probe() -> tuple[bool | None, str]:
            states = await self.cluster.node_states()
            seen = ", ".join(f"{k}={'Ready' if v else 'NotReady'}" for k, v in states.items())
            return (True if all(states.get(k) == v for k, v in want.items()) else None), seen

        await self.n.wait_for(probe, timeout=WAIT, what=what)

    async def show(self, argv: list[str], shown: str, *, max_lines: int | None = None, expect: int = 0) -> Ran:
        """Print a command, run it for real, print what it printed; an exit code other than `expect` fails the
        step (`rollout status` exits 1 for a rollout that was rolled back: that is the point being shown)."""
        self.n.command(shown)
        ran = await run_command(argv, shown=shown, env=self.env)
        self.n.output(ran.out, max_lines=max_lines)
        if ran.code != expect:
            raise self.n.fail(f"`{self.n.shorten(shown)}` exited {ran.code}: {ran.err.strip() or 'no message'}")
        return ran

    async def kubectl(self, *args: str, max_lines: int | None = None) -> Ran:
        return await self.show([self.tools["kubectl"], *args], "kubectl " + shlex.join(args), max_lines=max_lines)

    async def curl(self, *args: str) -> Ran:
        return await self.show([self.tools["curl"], *args], "curl " + shlex.join(args))

    async def edgeagent(self, *args: str, expect: int = 0) -> Ran:
        return await self.show([sys.executable, "-m", "edgeagent.cli", *args], "edgeagent " + shlex.join(args),
                               expect=expect)

    async def show_nodes(self) -> None:
        await self.kubectl("get", "nodes", "-o", "wide")

    async def show_pods(self, app: str, *, ota: bool = False) -> None:
        if ota:
            await self.kubectl("get", "pods", "-l", f"app={app}", "-o", f"custom-columns={OTA_COLUMNS}")
        else:
            await self.kubectl("get", "pods", "-l", f"app={app}", "-o", "wide")

    async def link(self, node: str, *, cut: bool) -> None:
        """Cut (blackhole) or restore a node's link through the simulator's HTTP API."""
        url = f"{self.sim.url}/sim/v1/nodes/{node}/" + ("disconnect?mode=blackhole" if cut else "connect")
        await self.curl("-sS", "--fail-with-body", "-X", "POST", url)

    async def apply(self, manifest: JSON) -> None:
        """Write the DaemonSet's manifest, show it, and `kubectl apply` it."""
        path = self.workdir / f"{manifest['metadata']['name']}-daemonset.yaml"
        path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
        await self.show([self.tools["cat"], str(path)], f"cat {path}")
        await self.kubectl("apply", "-f", str(path))

    async def agent_call(self, node: str, path: str, *, accept_json: bool = False) -> tuple[str, str]:
        """`curl -X POST` to a node's agent; returns (HTTP status, body) from what curl printed."""
        headers = ["-H", "Accept: application/json"] if accept_json else []
        ran = await self.curl("-sS", "-X", "POST", *headers, "-w", STATUS_LINE,
                              f"http://127.0.0.1:{self.agent_ports[node]}{path}")
        body, _, status = ran.out.rstrip("\n").rpartition("\n")
        return status, body

    def deletes_of(self, uids: set[str]) -> list[JSON]:
        """The sim's audit log of DELETE calls: proves that nothing was even attempted on a pod."""
        return [d for d in self.sim.store.deletes if d.get("resource") == "pods" and d.get("uid") in uids]

    def controller_args(self, metrics_port: int) -> list[str]:
        return ["controller", "--kubeconfig", str(self.sim.admin_kubeconfig), "--metrics-port", str(metrics_port),
                "--log-format", "json"]

    def agent_proc(self, node: str) -> Proc:
        if node not in self.agent_ports:
            self.agent_ports[node] = free_port(self.ports_given)
            self.ports_given.add(self.agent_ports[node])
        port = self.agent_ports[node]
        args = ["run", "--node-name", node, "--kubeconfig", str(self.sim.node_kubeconfig(node)),
                "--port", str(port), "--state-dir", str(self.workdir / "agents" / node), *AGENT_FLAGS,
                "--log-format", "json"]
        return Proc(f"agent on {node}", args, self.logs / f"agent-{node}.log")

    async def start_agent(self, node: str) -> Proc:
        proc = self.agent_proc(node)
        self.procs[f"agent-{node}"] = proc
        await proc.start()
        self.started(proc)
        return proc

    def started(self, proc: Proc) -> None:
        """A background process: its command line, then where its output goes (it prints nothing here)."""
        self.n.command(proc.command_line + f" > {proc.log_path} 2>&1 &")

    # ------------------------------------------------------------------------------------------ the story

    async def run(self) -> None:
        self.n.banner("edgeagent demo: OpenYurt's DaemonSet upgrade models on a simulated edge cluster")
        self.n.say(f"nginx {OLD.split(':')[1]} -> {NEW.split(':')[1]} on three edge nodes with "
                   f"AdvancedRollingUpdate, then {OLD.split(':')[1]} -> {OTA_NEW.split(':')[1]} with OTA (the "
                   "scenario of OpenYurt's \"DaemonSet upgrade model\" page), plus what the node's site adds: "
                   "holds and image pre-pull. Each claim below is checked before it is printed; every command shown "
                   "really runs, and below it is what it printed.")
        self.n.say(f"Work directory: {self.workdir} (shown as $DEMO in commands).")
        self.n.alias(str(self.workdir), "$DEMO")
        await self.start_cluster()
        await self.start_controller()
        self.n.part("AdvancedRollingUpdate",
                    "OpenYurt's answer to a native DaemonSet rolling update stalling when edge nodes lose their "
                    "link to the cloud: NotReady nodes are skipped, and upgraded when they come back.")
        before = await self.aru_create()
        await self.aru_cut()
        upgraded = await self.aru_update(before)
        await self.aru_reconnect(upgraded)
        self.n.part("OTA (over-the-air, node-driven)",
                    "The controller only announces an update through the pod condition PodNeedUpgrade; the user "
                    "on the node decides when, through the node agent's API (YurtHub's endpoints in OpenYurt).")
        ota_before = await self.ota_create()
        await self.ota_agents()
        await self.ota_update(ota_before)
        await self.ota_hold_and_prepull(ota_before)
        await self.ota_upgrade_when_open(ota_before)
        queued = await self.ota_offline_upgrade(ota_before)
        await self.ota_crash_restart(ota_before, queued)
        await self.ota_reconnect(ota_before, queued)
        self.n.part("Rollout plans (waves, bake time, automatic rollback)",
                    "At thousands of nodes nobody watches a rollout node by node: a plan rolls the new version "
                    "wave by wave, each wave proving itself before the next, and takes a bad version back by "
                    "itself.")
        await self.plan_bad_version()
        if self.keep:
            await self.hold_open()
        await self.shutdown()

    async def start_cluster(self) -> None:
        from edgeagent.sim.cluster import SimCluster

        self.n.step("Start a simulated cluster with three edge nodes",
                    "A Kubernetes API server simulation on 127.0.0.1 with three kubelet-like nodes. Each node "
                    "reaches the API through its own TCP link that the demo can cut (blackhole: packets vanish, "
                    "as in a real partition). Nodes that miss heartbeats for 2 s turn NotReady (40 s in a real "
                    "cluster).")
        config = SimConfig(nodes=len(NODES), dir=self.workdir / "cluster", heartbeat_interval=0.25, node_grace=2.0,
                           pod_startup=0.2, pod_termination=0.2,
                           # Pods re-reported after their node's return, scaled like node_grace (real: seconds).
                           pod_resync_delay=0.5)
        self.sim = SimCluster(config, node_names=NODES)
        await self.sim.start()
        self.client = await KubeClient.connect(self.sim.admin_kubeconfig, Timeouts(connect=3.0, request=5.0))
        self.session = aiohttp.ClientSession()
        # kubectl below uses the cluster's admin kubeconfig (and a cache of its own, not the user's).
        self.env.update(KUBECONFIG=str(self.sim.admin_kubeconfig), KUBECACHEDIR=str(self.workdir / "kube-cache"))
        self.n.command(f"export KUBECONFIG={self.sim.admin_kubeconfig}")
        await self.nodes_until(dict.fromkeys(NODES, True), "all three nodes Ready")
        await self.show_nodes()
        self.n.ok(f"3 nodes Ready; API server at {self.sim.url}, kubeconfigs in {self.n.shorten(str(self.sim.dir))}")

    async def start_controller(self) -> None:
        self.n.step("Start the controller",
                    "`edgeagent controller` plays the part of OpenYurt's daemonPodUpdater controller "
                    "(yurt-manager): a separate process on the admin kubeconfig that keeps PodNeedUpgrade on "
                    "OTA pods and rolls AdvancedRollingUpdate DaemonSets on Ready nodes.")
        metrics_port = free_port(self.ports_given)
        self.ports_given.add(metrics_port)
        proc = Proc("controller", self.controller_args(metrics_port), self.logs / "controller.log")
        self.procs["controller"] = proc
        await proc.start()
        self.started(proc)
        assert self.session is not None
        session = self.session

        async def probe() -> tuple[bool | None, str]:
            self._require_alive("controller")
            async with session.get(f"http://127.0.0.1:{metrics_port}/healthz",
                                   timeout=aiohttp.ClientTimeout(total=2)) as resp:
                return (True if resp.status == 200 else None), f"/healthz answered {resp.status}"

        await self.n.wait_for(probe, timeout=WAIT, what="the controller's /healthz to answer 200")
        self.n.ok(f"controller running (pid {proc.pid}), /healthz on 127.0.0.1:{metrics_port} answers 200")

    # AdvancedRollingUpdate -------------------------------------------------------------------------------

    async def aru_create(self) -> dict[str, PodView]:
        self.n.step(f"Create DaemonSet {ARU_DS} ({OLD}) with update strategy AdvancedRollingUpdate",
                    "OpenYurt's manifest: annotation apps.openyurt.io/update-strategy: AdvancedRollingUpdate, "
                    "apps.openyurt.io/max-unavailable: 50%, and updateStrategy OnDelete, so that the DaemonSet "
                    "controller itself never deletes a pod: the upgrade controller decides which go when.")
        await self.apply(daemonset(ARU_DS, "AdvancedRollingUpdate", OLD, max_unavailable="50%"))
        pods = await self.pods_until(ARU_DS, lambda ps: _one_ready_per_node(ps, OLD), f"3 Ready {OLD} pods")
        await self.show_pods(ARU_DS)
        self.n.ok(f"one Ready {OLD} pod on each node")
        return {p.node: p for p in pods}

    async def aru_cut(self) -> None:
        self.n.step(f"Cut the links of {CUT_A} and {CUT_B}",
                    "Like unplugging their network (`docker network disconnect` in OpenYurt's walk-through): "
                    "their links now drop every packet. Their "
                    "kubelets cannot renew their leases, so after the grace period the node lifecycle "
                    "controller marks them NotReady and sets their pods' Ready condition to False. (kubectl "
                    "still shows those pods 1/1 Running: READY counts the containers as their kubelet last "
                    "reported them, as on a real cluster.)")
        for node in (CUT_A, CUT_B):
            await self.link(node, cut=True)
        await self.nodes_until({CONNECTED: True, CUT_A: False, CUT_B: False}, f"{CUT_A} and {CUT_B} NotReady")
        # The pods' Ready=False comes after the node's NotReady: by then the controller has seen both.
        await self.pods_until(ARU_DS, lambda ps: all(not p.ready for p in ps if p.node in (CUT_A, CUT_B)),
                              f"the pods on {CUT_A} and {CUT_B} marked not ready")
        await self.show_nodes()
        await self.show_pods(ARU_DS)
        self.n.ok(f"{CUT_A} and {CUT_B} NotReady, {CONNECTED} Ready; the pods on the cut-off nodes are not ready")

    async def aru_update(self, before: dict[str, PodView]) -> PodView:
        self.n.step(f"Update the image to {NEW} while two nodes are cut off",
                    "A native rolling update stalls here: the two unreachable pods use up maxUnavailable, and "
                    "deleting them would leave them Terminating for as long as their kubelets are cut off. "
                    f"AdvancedRollingUpdate skips NotReady nodes: the pod on {CONNECTED} is deleted and "
                    f"recreated from the new template; no DELETE is even sent for the pods on {CUT_A} and "
                    f"{CUT_B}, whose kubelets could not act on it.")
        await self.kubectl("set", "image", f"ds/{ARU_DS}", f"{CONTAINER}={NEW}")
        old_uid = before[CONNECTED].uid
        pods = await self.pods_until(ARU_DS, lambda ps: _replaced(ps, CONNECTED, old_uid, NEW),
                                     f"the pod on {CONNECTED} replaced by a Ready {NEW} pod")
        await self.show_pods(ARU_DS)
        self.n.ok(f"{CONNECTED}: {before[CONNECTED].name} replaced by {by_node(pods)[CONNECTED][0].name} ({NEW})")
        for node in (CUT_A, CUT_B):
            mine = by_node(pods).get(node, [])
            self.n.check(len(mine) == 1 and mine[0].uid == before[node].uid and mine[0].image == OLD
                         and mine[0].live, f"{node} still runs its {OLD} pod {before[node].name}",
                         f"saw: {summary(mine)}")
        attempted = self.deletes_of({before[CUT_A].uid, before[CUT_B].uid})
        self.n.check(not attempted, f"no DELETE was sent for the pods on {CUT_A} and {CUT_B}",
                     f"the API server recorded: {attempted}")
        return by_node(pods)[CONNECTED][0]

    async def aru_reconnect(self, upgraded: PodView) -> None:
        self.n.step(f"Reconnect {CUT_A} and {CUT_B}",
                    "Heartbeats resume, the nodes turn Ready, and the controller upgrades their pods by itself, "
                    "within the 50% budget; nobody re-applies anything.")
        for node in (CUT_A, CUT_B):
            await self.link(node, cut=False)
        await self.nodes_until(dict.fromkeys(NODES, True), "all nodes Ready again")
        self.n.ok("all nodes Ready")
        pods = await self.pods_until(ARU_DS, lambda ps: _one_ready_per_node(ps, NEW), f"every pod on {NEW}")
        await self.show_pods(ARU_DS)
        self.n.ok(f"every node runs a Ready {NEW} pod")
        mine = by_node(pods)[CONNECTED][0]
        self.n.check(mine.uid == upgraded.uid, f"the already upgraded pod on {CONNECTED} was left alone",
                     f"it was replaced: {upgraded.name} -> {mine.name}")

    # OTA -------------------------------------------------------------------------------------------------

    async def ota_create(self) -> dict[str, PodView]:
        self.n.step(f"Create DaemonSet {OTA_DS} ({OLD}) with update strategy OTA",
                    "Annotation apps.openyurt.io/update-strategy: OTA and updateStrategy OnDelete. The "
                    "controller adds the condition PodNeedUpgrade=False to each pod: it runs the current "
                    "revision.")
        await self.apply(daemonset(OTA_DS, "OTA", OLD))
        pods = await self.pods_until(
            OTA_DS, lambda ps: _one_ready_per_node(ps, OLD) and all(p.need_upgrade == "False" for p in ps),
            f"3 Ready {OLD} pods with PodNeedUpgrade=False")
        await self.show_pods(OTA_DS, ota=True)
        self.n.ok("one Ready pod per node, PodNeedUpgrade=False on each")
        return {p.node: p for p in pods}

    async def ota_agents(self) -> None:
        self.n.step(f"Start a node agent on {ONLINE_NODE} and on {OFFLINE_NODE}",
                    "`edgeagent run` serves YurtHub's OTA endpoints (GET /pods, POST .../upgrade). Each uses its "
                    "node's kubeconfig, so it talks through that node's link, keeps its state (SQLite) in its own "
                    "directory, and listens on a free port here (127.0.0.1:10267 on a real node).")
        for node in (ONLINE_NODE, OFFLINE_NODE):
            await self.start_agent(node)
        for node in (ONLINE_NODE, OFFLINE_NODE):
            await self.wait_agent(node, connected=True)
        node = ONLINE_NODE
        self.n.say(f"What the agent on {node} serves (its cache of the pods bound to {node}):")
        await self.edgeagent("pods", "--agent", f"http://127.0.0.1:{self.agent_ports[node]}")
        agent_pods = await self.agent(node).pods()
        cloud = {p.name for p in await self.cluster.pods(ARU_DS) + await self.cluster.pods(OTA_DS) if p.node == node}
        names = {PodView.of(p).name for p in agent_pods}
        self.n.check(names == cloud and all(PodView.of(p).node == node for p in agent_pods),
                     f"the agent on {node} serves exactly the pods bound to {node}",
                     f"agent: {sorted(names)}, cloud: {sorted(cloud)}")

    async def wait_agent(self, node: str, *, connected: bool) -> JSON:
        agent = self.agent(node)

        async def probe() -> tuple[JSON | None, str]:
            self._require_alive(f"agent-{node}")
            ready = await agent.readyz()
            link = ready.get("link") or {}
            synced = bool((ready.get("cache") or {}).get("synced"))
            ok = link.get("connected") is connected and (synced or not connected)
            return (ready if ok else None), f"link connected={link.get('connected')}, cache synced={synced}"

        state = "connected and synced" if connected else "disconnected"
        return await self.n.wait_for(probe, timeout=WAIT, what=f"the agent on {node} to report its link {state}")

    async def ota_update(self, before: dict[str, PodView]) -> None:
        self.n.step(f"Update {OTA_DS} to {OTA_NEW}: PodNeedUpgrade flips to True",
                    "The controller sets PodNeedUpgrade=True (message `controllerrevision: <new hash>`) on every "
                    "pod of the old revision. OTA deletes nothing by itself: all pods keep running the old image.")
        await self.kubectl("set", "image", f"ds/{OTA_DS}", f"{CONTAINER}={OTA_NEW}")
        uids = {p.uid for p in before.values()}
        pods = await self.pods_until(
            OTA_DS, lambda ps: len(ps) == 3 and all(p.need_upgrade == "True" for p in ps),
            "PodNeedUpgrade=True on all three pods")
        await self.show_pods(OTA_DS, ota=True)
        self.n.ok("PodNeedUpgrade=True on all three pods")
        self.n.check({p.uid for p in pods} == uids and all(p.image == OLD for p in pods),
                     f"no pod was replaced: all still run {OLD}", f"saw: {summary(pods)}")

    async def ota_hold_and_prepull(self, before: dict[str, PodView]) -> None:
        node = ONLINE_NODE
        pod = before[node]
        agent = f"http://127.0.0.1:{self.agent_ports[node]}"
        self.n.step(f"On {node}: the site is busy: hold the node, pre-pull the new image meanwhile",
                    f"The site's link is slow: pulling {OTA_NEW} takes {SLOW_PULL:g} s here (set in the simulated "
                    "registry). The operator holds the node, so no upgrade happens while the site is busy; the "
                    "agent publishes that on the node's pods (UpgradeHeld=True). The download can happen "
                    "anyway: `edgeagent imagepull` sets PodImageReady=False (WaitPullImage) and the controller "
                    "pulls the images with a Job on the node, then sets PodImageReady=True.")
        await self.curl("-sS", "--fail-with-body", "-X", "POST", f"{self.sim.url}/sim/v1/images", "-d",
                        json.dumps({"image": OTA_NEW, "pullSeconds": SLOW_PULL}))
        await self.edgeagent("hold", "--reason", "site busy", "--agent", agent)
        await self.edgeagent("imagepull", f"default/{pod.name}", "--agent", agent)
        assert self.client is not None
        client = self.client

        async def conditions() -> tuple[JSON | None, str]:
            current = await client.get(f"/api/v1/namespaces/default/pods/{pod.name}")
            found = {c.get("type"): c for c in (current.get("status") or {}).get("conditions") or []}
            held, image = found.get(CONDITION_UPGRADE_HELD) or {}, found.get(CONDITION_POD_IMAGE_READY) or {}
            ok = held.get("status") == "True" and image.get("status") == "True"
            return (found if ok else None), (f"UpgradeHeld={held.get('status')}, "
                                             f"PodImageReady={image.get('status')} ({image.get('reason')})")

        found = await self.n.wait_for(conditions, timeout=WAIT + SLOW_PULL,
                                      what=f"UpgradeHeld=True and PodImageReady=True on {pod.name}")
        await self.kubectl("get", "pods", "-l", f"app={OTA_DS}", "-o", f"custom-columns={OTA_COLUMNS},{HELD_COLUMNS}")
        held_reason = found[CONDITION_UPGRADE_HELD].get("reason")
        pull_reason = found[CONDITION_POD_IMAGE_READY].get("reason")
        self.n.ok(f"{pod.name}: UpgradeHeld=True ({held_reason}), PodImageReady=True ({pull_reason}): {OTA_NEW} is on "
                  f"{node}, nothing was upgraded")
        current = by_node(await self.cluster.pods(OTA_DS))[node]
        self.n.check(len(current) == 1 and current[0].uid == pod.uid and current[0].image == OLD,
                     f"{pod.name} still runs {OLD}", f"saw: {summary(current)}")

    async def ota_upgrade_when_open(self, before: dict[str, PodView]) -> None:
        node = ONLINE_NODE
        pod = before[node]
        agent = f"http://127.0.0.1:{self.agent_ports[node]}"
        self.n.step(f"On {node}: upgrade when the site opens -> 202; the held node waits, then catches up",
                    "With ?when=open the request is queued until the node is open (no hold, inside its "
                    "maintenance windows). Without it, the request is OpenYurt's explicit one and acts at once, "
                    "hold or not. When the operator releases the hold, the agent applies it, and since the image "
                    f"is already on {node}, the new pod runs within a moment instead of after a "
                    f"{SLOW_PULL:g} s pull.")
        path = AgentHttp.upgrade_path("default", pod.name) + "?when=open"
        status, text = await self.agent_call(node, path, accept_json=True)
        request_id = _request_id(text)
        self.n.check(status == "202" and bool(request_id), "202: queued until the node is open",
                     f"got {status} {text!r}")
        await asyncio.sleep(1.0)  # long enough for a wrong upgrade to have started
        current = by_node(await self.cluster.pods(OTA_DS))[node]
        self.n.check(len(current) == 1 and current[0].uid == pod.uid and current[0].live,
                     f"a second later {pod.name} still runs: the held node waits", f"saw: {summary(current)}")
        await self.edgeagent("release", "--agent", agent)
        released = asyncio.get_running_loop().time()
        pods = await self.pods_until(
            OTA_DS, lambda ps: _replaced(ps, node, pod.uid, OTA_NEW) and by_node(ps)[node][0].need_upgrade == "False",
            f"the pod on {node} replaced by a Ready {OTA_NEW} pod with PodNeedUpgrade=False")
        took = asyncio.get_running_loop().time() - released
        await self.show_pods(OTA_DS, ota=True)
        await self.edgeagent("upgrades", "--agent", agent)
        self.n.ok(f"{pod.name} replaced by {by_node(pods)[node][0].name}: {OTA_NEW}, PodNeedUpgrade=False, "
                  f"Ready {took:.1f} s after the release (the pull alone takes {SLOW_PULL:g} s)")

    async def ota_offline_upgrade(self, before: dict[str, PodView]) -> str:
        node = OFFLINE_NODE
        pod = before[node]
        self.n.step(f"On {node}: cut the link, upgrade anyway -> 202 queued",
                    "In OpenYurt this request fails (YurtHub's DELETE cannot reach the cloud; retry later). Our "
                    "agent's call to the cloud times out (--upgrade-timeout), so it checks the request against "
                    "its cached copy of the pod, stores it durably (SQLite, fsync) and only then answers 202 "
                    "with the request's id. An idle agent does not probe the link (the watch is its liveness "
                    "signal); with a request queued it probes again and reports the link down.")
        await self.link(node, cut=True)
        path = AgentHttp.upgrade_path("default", pod.name)
        status, text = await self.agent_call(node, path, accept_json=True)
        request_id = _request_id(text)
        self.n.check(status == "202" and bool(request_id), "202 with the id of the queued request",
                     f"got {status} {text!r}")
        cloud = by_node(await self.cluster.pods(OTA_DS)).get(node, [])
        self.n.check(len(cloud) == 1 and cloud[0].uid == pod.uid and cloud[0].live,
                     f"{pod.name} is untouched in the cloud for now", f"saw: {summary(cloud)}")
        await self.wait_agent(node, connected=False)
        self.n.ok(f"the agent on {node} reports its cloud link disconnected (/v1/readyz)")
        agent = self.agent(node)

        async def waiting() -> tuple[bool | None, str]:
            # The drainer may have tried it once before the link was counted down: wait until it is back in
            # the queue, so the crash below does not interrupt an attempt in flight.
            states = {str(r.get("id")): str(r.get("state")) for r in await agent.upgrades()}
            return (True if states.get(request_id) == "queued" else None), f"requests: {states}"

        await self.n.wait_for(waiting, timeout=WAIT, what=f"request {request_id} waiting in the queue")
        return request_id

    async def ota_crash_restart(self, before: dict[str, PodView], request_id: str) -> None:
        node = OFFLINE_NODE
        pod = before[node]
        self.n.step(f"Kill the agent on {node} (SIGKILL) and restart it, still offline",
                    "A power cut or an OOM kill: no shutdown code runs. The restarted agent answers GET /pods at "
                    "once from its on-disk snapshot although the cloud is unreachable, and the queued request "
                    "is still there.")
        old = self.procs[f"agent-{node}"]
        self.n.command(f"kill -9 {old.pid}")
        code = await old.kill()
        self.n.check(code == -9, "the agent died of SIGKILL", f"exit status {code}")
        await self.start_agent(node)
        await self.wait_agent(node, connected=False)
        agent = self.agent(node)
        agent_url = f"http://127.0.0.1:{self.agent_ports[node]}"
        await self.edgeagent("pods", "--agent", agent_url)
        agent_pods = await agent.pods()
        self.n.check(any(PodView.of(p).uid == pod.uid for p in agent_pods),
                     f"offline, the restarted agent serves {pod.name} from its snapshot",
                     f"it served: {[PodView.of(p).name for p in agent_pods]}")
        await self.edgeagent("upgrades", "--agent", agent_url)
        requests = await agent.upgrades()
        entry = next((r for r in requests if r.get("id") == request_id), None)
        self.n.check(entry is not None and entry.get("state") == "queued",
                     f"request {request_id} survived the crash, still queued", f"the queue holds: {requests}")

    async def ota_reconnect(self, before: dict[str, PodView], request_id: str) -> None:
        node = OFFLINE_NODE
        pod = before[node]
        self.n.step(f"Reconnect {node}: the queued upgrade is applied",
                    "The agent sees the link return, re-checks the request against fresh cloud state (same UID, "
                    "still needs the upgrade) and deletes the pod with a UID precondition, so a pod that was "
                    f"replaced meanwhile is never touched. {NO_AGENT_NODE} has no agent and nobody asked: its pod "
                    "keeps the old image with PodNeedUpgrade=True; OTA never forces an upgrade.")
        await self.link(node, cut=False)
        agent = self.agent(node)

        async def probe() -> tuple[JSON | None, str]:
            entry = next((r for r in await agent.upgrades() if r.get("id") == request_id), None)
            if entry is None:
                raise self.n.fail(f"request {request_id} vanished from the agent's queue")
            state = entry.get("state")
            if state in ("failed", "cancelled", "obsolete"):
                raise self.n.fail(f"request {request_id} ended {state}: {entry.get('message')}")
            return (entry if state == "succeeded" else None), f"state {state}: {entry.get('message')}"

        await self.n.wait_for(probe, timeout=WAIT, what=f"request {request_id} to succeed")
        await self.edgeagent("upgrades", "--agent", f"http://127.0.0.1:{self.agent_ports[node]}")
        self.n.ok(f"request {request_id} succeeded")
        deletes = self.deletes_of({pod.uid})
        self.n.check(any(d.get("precondition_uid") == pod.uid for d in deletes),
                     f"the DELETE carried the precondition uid={pod.uid}", f"the API server recorded: {deletes}")
        pods = await self.pods_until(
            OTA_DS, lambda ps: _replaced(ps, node, pod.uid, OTA_NEW) and by_node(ps)[node][0].need_upgrade == "False",
            f"the pod on {node} replaced by a Ready {OTA_NEW} pod with PodNeedUpgrade=False")
        await self.show_pods(OTA_DS, ota=True)
        self.n.ok(f"{pod.name} replaced by {by_node(pods)[node][0].name}: {OTA_NEW}, PodNeedUpgrade=False")
        rest = by_node(pods).get(NO_AGENT_NODE, [])
        self.n.check(len(rest) == 1 and rest[0].uid == before[NO_AGENT_NODE].uid and rest[0].image == OLD
                     and rest[0].need_upgrade == "True",
                     f"{NO_AGENT_NODE} still runs {OLD} with PodNeedUpgrade=True, waiting for its user",
                     f"saw: {summary(rest)}")

    # Rollout plans ---------------------------------------------------------------------------------------

    async def plan_bad_version(self) -> None:
        self.n.step(f"Give {ARU_DS} a rollout plan and roll out {BAD}, a version that never starts",
                    f"A RolloutPlan (a custom resource: deploy/crd-rolloutplan.yaml) names {ARU_DS}: steps 1,100%, "
                    f"one canary node first, then the rest, after a 30 s bake. {BAD}'s container exits at once (so "
                    f"the simulated registry is told). With maxFailed 1, a new pod not available within "
                    f"{PLAN_DEADLINE} s stops the rollout, and onFailure: Rollback restores the last completed "
                    "template by itself: no pod outside the canary wave is touched, and the bad revision is marked "
                    "RolledBack in the plan's status so that it is not rolled again.")
        before = {p.node: p for p in await self.cluster.pods(ARU_DS) if p.live}
        await self.curl("-sS", "--fail-with-body", "-X", "POST", f"{self.sim.url}/sim/v1/images", "-d",
                        json.dumps({"image": BAD, "crash": True}))
        await self.kubectl("apply", "-f", str(CRD_FILE))
        await self.kubectl("wait", "--for", "condition=established", "--timeout=60s",
                           "crd/rolloutplans.edgeagent.io")
        plan = {"apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan",
                "metadata": {"name": ARU_DS, "namespace": NAMESPACE},
                "spec": {"daemonSet": ARU_DS, "steps": [1, "100%"], "bake": "30s", "onFailure": "Rollback",
                         "maxFailed": 1, "progressDeadlineSeconds": PLAN_DEADLINE}}
        path = self.workdir / f"{ARU_DS}-rolloutplan.yaml"
        path.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
        await self.show([self.tools["cat"], str(path)], f"cat {path}")
        await self.kubectl("apply", "-f", str(path))
        await self.plan_state_until(lambda st: st.get("phase") == "complete",
                                    "the controller to take the plan up (its status: the current revision complete)")
        await self.kubectl("set", "image", f"ds/{ARU_DS}", f"{CONTAINER}={BAD}")
        state = await self.plan_state_until(lambda st: st.get("phase") == "rolledBack",
                                            "the controller to roll the bad version back")
        pods = await self.pods_until(ARU_DS, lambda ps: _one_ready_per_node(ps, NEW),
                                     f"every node back on a Ready {NEW} pod")
        await self.kubectl("get", "rolloutplans")
        await self.kubectl("get", "events", "--field-selector",
                           f"involvedObject.kind=RolloutPlan,involvedObject.name={ARU_DS}",
                           "--sort-by=.lastTimestamp", "-o", f"custom-columns={EVENT_COLUMNS}")
        self.n.ok(f"the rollout stopped in wave {state.get('wave')}/{state.get('waves')} and rolled back by itself")
        ds = await self.cluster.daemonset(ARU_DS)
        image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
        marked = [h.get("revision") for h in state.get("history") or [] if h.get("phase") == "rolledBack"]
        self.n.check(image == NEW and marked == [state.get("revision")],
                     f"the template is {NEW} again and the bad revision {state.get('revision')} is marked RolledBack "
                     "in the plan's status.history", f"template image {image}, rolled back {marked!r}, state {state}")
        canary = {p.node for p in pods if p.uid != before[p.node].uid}
        untouched = {node for node in before if node not in canary}
        self.n.check(len(canary) == 1 and not self.deletes_of({before[node].uid for node in untouched}),
                     f"only the canary {', '.join(sorted(canary))} was touched: no DELETE was sent for the pods on "
                     f"{', '.join(sorted(untouched))}", f"replaced: {sorted(canary)}; pods {summary(pods)}")

    async def plan_state_until(self, condition: Callable[[JSON], bool], what: str) -> JSON:
        """The plan's status (in the state machine's spelling) once `condition` holds."""
        async def probe() -> tuple[JSON | None, str]:
            plan = await self.cluster.client.get(
                f"/apis/edgeagent.io/v1alpha1/namespaces/{NAMESPACE}/rolloutplans/{ARU_DS}")
            status = plan.get("status") or {}
            parsed = state_from_status(status)[0] if status.get("phase") else None
            state: JSON = json.loads(parsed.to_json()) if parsed is not None else {}
            return (state if state and condition(state) else None), f"status {status}"

        return await self.n.wait_for(probe, timeout=WAIT, what=what)

    async def hold_open(self) -> None:
        """--keep: everything stays up until Ctrl-C (or SIGTERM); then the usual shutdown follows."""
        node = ONLINE_NODE
        self.n.step("Keep the cluster running (--keep)",
                    "Everything started above keeps running, so you can look around by hand. It all stops "
                    "when this demo process ends.")
        self.n.say(f"In another terminal: export KUBECONFIG={self.sim.admin_kubeconfig}; then e.g. "
                   f"`kubectl get pods -o wide`, `edgeagent pods --agent http://127.0.0.1:{self.agent_ports[node]}` "
                   f"(the agent on {node}), `curl -X POST {self.sim.url}/sim/v1/nodes/{node}/disconnect`.")
        self.n.say(f"See the fleet in a browser (read-only, on loopback): `edgeagent dashboard --kubeconfig "
                   f"{self.sim.admin_kubeconfig} --port 8080`, then open http://127.0.0.1:8080/ .")
        self.n.say(f"To stop: press Ctrl-C here, or `kill {os.getpid()}`.")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        if self.deadline is not None:
            self.deadline.reschedule(None)  # waiting for the user is not the demo hanging
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            _cancel_on_sigterm(loop)
            if self.deadline is not None:
                self.deadline.reschedule(loop.time() + OVERALL_DEADLINE)

    async def shutdown(self) -> None:
        self.n.step("Shut everything down",
                    "SIGTERM to the agents and the controller, as systemd or the kubelet would send it: each "
                    "stops taking requests, finishes what is in flight, closes its database and exits 0. Then "
                    "the simulated cluster stops.")
        for proc in self.procs.values():
            if not proc.running:
                continue
            code = await proc.terminate(timeout=SHUTDOWN_WAIT)
            self.n.check(code == 0, f"{proc.name} (pid {proc.pid}) exited 0 on SIGTERM",
                         f"it exited with {code if code is not None else 'nothing (killed after the deadline)'}; "
                         f"its last log line: {' | '.join(proc.log_tail(1))}")
        sim, self.sim = self.sim, None
        await sim.stop()
        self.n.ok("simulated cluster stopped")


def _one_ready_per_node(pods: list[PodView], image: str) -> bool:
    grouped = by_node(pods)
    return set(grouped) == set(NODES) and all(
        len(ps) == 1 and ps[0].ready and ps[0].live and ps[0].image == image for ps in grouped.values())


def _request_id(text: str) -> str:
    """The `id` of a JSON upgrade answer; "" when the body is not one (the check then shows the body)."""
    try:
        body = json.loads(text)
    except ValueError:
        return ""
    return str(body.get("id") or "") if isinstance(body, dict) else ""


def _replaced(pods: list[PodView], node: str, old_uid: str, image: str) -> bool:
    """The node's old pod is gone and exactly one Ready pod of `image` runs there."""
    mine = by_node(pods).get(node, [])
    return len(mine) == 1 and mine[0].uid != old_uid and mine[0].live and mine[0].ready and mine[0].image == image


def _which(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise MissingTool(f"`{program}` is not installed (or not on PATH): the demo runs it for real")
    return path


def _missing_tools() -> list[str]:
    return [name for name in TOOLS if shutil.which(name) is None]


def _cancel_on_sigterm(loop: asyncio.AbstractEventLoop) -> None:
    """SIGTERM must not orphan the agents and the controller: cancel, so that close() stops them."""
    task = asyncio.current_task()
    if task is not None:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)


async def _run(narrator: Narrator, workdir: Path, keep: bool) -> None:
    demo = Demo(narrator, workdir, keep=keep)
    loop = asyncio.get_running_loop()
    _cancel_on_sigterm(loop)
    try:
        async with asyncio.timeout(OVERALL_DEADLINE) as deadline:
            demo.deadline = deadline
            await demo.run()
    except TimeoutError as exc:
        raise narrator.fail(f"the demo did not finish within {OVERALL_DEADLINE:g}s") from exc
    finally:
        await demo.close()
        loop.remove_signal_handler(signal.SIGTERM)


def run_demo(out: TextIO = sys.stdout, err: TextIO = sys.stderr, *, keep: bool = False) -> int:
    """The whole demo in a fresh work directory, kept only if something failed (it holds the logs)."""
    missing = _missing_tools()
    if missing:
        # Before anything starts: no work directory, no "logs kept in" pointing at an empty log.
        print(f"edgeagent demo needs {' and '.join(missing)} on PATH (it runs every command it shows for real): "
              f"install {'it' if len(missing) == 1 else 'them'} and run it again", file=err, flush=True)
        return 1
    narrator = Narrator(out)
    workdir = Path(tempfile.mkdtemp(prefix="edgeagent-demo-"))
    logs = workdir / "logs"
    logs.mkdir()
    code = 1
    saved_logging = structlog.get_config()
    with (logs / "demo.log").open("a", encoding="utf-8") as log_file:
        # The in-process simulator logs to a file: the narration is what the user reads.
        log.configure(LogConfig(level="info", format="json"), stream=log_file)
        try:
            asyncio.run(_run(narrator, workdir, keep))
            code = 0
        except StepFailed as exc:
            print(f"DEMO FAILED at {exc}", file=err, flush=True)
        except MissingTool as exc:
            print(f"DEMO FAILED before it started: {exc}", file=err, flush=True)
        except (KeyboardInterrupt, asyncio.CancelledError) as exc:
            signal_name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
            print(f"DEMO INTERRUPTED by {signal_name} at step {narrator.step_no} ({narrator.title}); "
                  "every process it started was stopped", file=err, flush=True)
            code = 130 if isinstance(exc, KeyboardInterrupt) else 143
        except Exception as exc:
            print(f"DEMO FAILED at step {narrator.step_no} ({narrator.title}): unexpected "
                  f"{type(exc).__name__}: {exc}", file=err, flush=True)
        finally:
            structlog.configure(**saved_logging)
    if code != 0:
        print(f"logs kept in {logs}", file=err, flush=True)
        return code
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nDemo complete: {narrator.checks} checks passed in {narrator.elapsed:.1f}s.", file=out, flush=True)
    return 0


def main(keep: bool = False) -> int:
    return run_demo(keep=keep)


__all__ = ["main", "run_demo"]
