"""Frozen settings for each subcommand, built by cli.py from flags and `EDGEAGENT_*` variables.

Components take one of these instead of argparse namespaces so that tests can build them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_AGENT_PORT = 10267
DEFAULT_AGENT_URL = f"http://127.0.0.1:{DEFAULT_AGENT_PORT}"


@dataclass(frozen=True)
class LogConfig:
    level: str = "info"
    format: str = "auto"  # auto | json | console


@dataclass(frozen=True)
class AgentConfig:
    node_name: str
    kubeconfig: Path | None = None
    bind: str = "127.0.0.1"
    port: int = DEFAULT_AGENT_PORT
    state_dir: Path = Path("/var/lib/edgeagent")
    token_file: Path | None = None
    insecure_allow_remote: bool = False
    # Every cloud call is bounded; a blackholed link must turn into a queued request, not a hang.
    request_timeout: float = 5.0
    # Connected upgrades: how long the DELETE may take before the request is queued instead.
    upgrade_timeout: float = 3.0
    probe_interval: float = 2.0
    probe_timeout: float = 2.0
    failures_to_disconnect: int = 2
    successes_to_connect: int = 1
    watch_timeout_seconds: int = 240
    max_body_bytes: int = 64 * 1024
    # Site policy (agent/policy/site.py): `[DAYS] HH:MM-HH:MM` specs, none = always open; "" = the node's zone.
    maintenance_windows: tuple[str, ...] = ()
    # Ask for the pre-pull of every new revision by itself (agent/policy/autoprepull.py).
    auto_prepull: bool = False
    timezone: str = ""
    log: LogConfig = field(default_factory=LogConfig)
    # Verified outcomes: how long a deleted pod's replacement has to be Ready on the new revision.
    ready_timeout: float = 300.0
    # Upgrade this node's pods by itself, one at a time, whenever the site policy says the node is open.
    auto_upgrade: bool = False


@dataclass(frozen=True)
class ControllerConfig:
    kubeconfig: Path | None = None
    leader_elect: bool = False
    lease_namespace: str = ""  # "": the namespace the controller runs in, else edgeagent-system
    lease_name: str = "edgeagent-controller"
    identity: str = ""
    lease_duration: float = 15.0
    renew_interval: float = 5.0
    metrics_bind: str = "127.0.0.1"
    metrics_port: int = 10268
    request_timeout: float = 10.0
    # Image pre-pull (docs/api.md, `POST …/imagepull`).
    image_prepull: bool = True
    max_concurrent_prepulls: int = 20
    image_prepull_retries: int = 3
    image_prepull_backoff: float = 10.0
    image_prepull_deadline: float = 600.0
    log: LogConfig = field(default_factory=LogConfig)


@dataclass(frozen=True)
class SimConfig:
    nodes: int = 3
    bind: str = "127.0.0.1"
    port: int = 0
    dir: Path | None = None
    # How long a node may miss heartbeats before the node controller marks it Unknown.
    node_grace: float = 40.0
    heartbeat_interval: float = 10.0
    # How long the kubelet simulation takes to finish a graceful pod deletion (capped grace).
    pod_termination: float = 0.5
    # How long a new pod takes to become Running and Ready.
    pod_startup: float = 0.2
    # After a cut link returns, the kubelet re-reports its pods' statuses this many seconds after the node's
    # Lease and Ready (a real kubelet's status manager resyncs every 10 s, so the gap is a few seconds).
    pod_resync_delay: float = 5.0
    # Watch bookmarks for clients that ask for them: the real server sends about one a minute (plus one
    # shortly before timeoutSeconds); tests and benches may shorten it.
    bookmark_interval: float = 60.0
    # How long pulling an image takes (per image and node; POST /sim/v1/images overrides per image).
    image_pull_seconds: float = 0.5
    # Images every new node has from the start (a real node lists dozens: pause, kube-proxy, CNI, logging...),
    # so that `status.images` weighs what it weighs on a real cluster's nodes.
    node_images: int = 0
    # The kubelet's initial back-off for failed image pulls and crashing containers (doubles, capped at 300 s).
    kubelet_backoff: float = 10.0
    history: int = 10000
    # How long an Event is kept after its last write (kube-apiserver's --event-ttl, 1 h): then it is gone and
    # watchers see it DELETED.
    event_ttl: float = 3600.0
    # "none": every request may do everything; "rbac": tokens, RBAC, Node authorizer (sim/auth_http.py).
    authorization: str = "none"
    # Each node reaches the API through its own cuttable TCP link (one listening socket per node). Off:
    # nodes have no link and no kubeconfig, so 100,000 nodes fit in the file-descriptor and port limits
    # (controller benchmarks, where no agent runs and no link is cut).
    node_links: bool = True
    # Append-only JSON-lines audit file (sim/audit.py); pod DELETEs then also record the pod's state.
    audit_log: Path | None = None
    # The Events a real scheduler and node controller write (Scheduled, RegisteredNode, NodeNotReady:
    # sim/cluster_events.py). Off for scale benchmarks: they double the writes of creating a DaemonSet's pods.
    control_plane_events: bool = True
    # Where the ports the sim picks itself come from (its API port when --port is 0, its node links): None is
    # 20000 up to the kernel's ephemeral range (sim/ports.py). A sim that must restart on its own ports while
    # other sims run on the machine gets a range of its own, so none of them can take a port in between.
    port_range: tuple[int, int] | None = None
    log: LogConfig = field(default_factory=LogConfig)


@dataclass(frozen=True)
class ClientConfig:
    """The local commands that talk to a node's agent (`pods`, `upgrade`, `upgrades`)."""

    agent: str = DEFAULT_AGENT_URL
    token_file: Path | None = None
    json: bool = False
    timeout: float = 10.0


# `rollout status` on a DaemonSet of more nodes than this prints a summary unless asked for every node.
ROLLOUT_SUMMARY_ABOVE = 50


@dataclass(frozen=True)
class RolloutConfig:
    daemonset: str
    # "": the kubeconfig context's namespace, else "default" (as kubectl).
    namespace: str = ""
    kubeconfig: Path | None = None
    watch: bool = False
    timeout: float = 0.0
    # "status", "history", or a steering verb of edgeagent.rollout.steer.VERBS.
    action: str = "status"
    context: str | None = None  # a kubeconfig context instead of its current-context
    output: str = ""  # status: "", "wide" or "json"; history: "" or "json"
    all_nodes: bool = False  # status --all: every node, however many
    to_revision: str = ""  # undo --to-revision
