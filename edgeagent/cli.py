"""Argument parsing only: every flag also reads `EDGEAGENT_<FLAG>`; each subcommand hands off to its app.

Exit codes: 0 success, 1 runtime failure, 2 usage error; errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edgeagent import __version__
from edgeagent.config import (
    DEFAULT_AGENT_PORT,
    DEFAULT_AGENT_URL,
    AgentConfig,
    ClientConfig,
    ControllerConfig,
    LogConfig,
    RolloutConfig,
    SimConfig,
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class UsageError(Exception):
    pass


def env_name(flag: str) -> str:
    return "EDGEAGENT_" + flag.lstrip("-").replace("-", "_").upper()


def _add(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    help: str,
    default: Any = None,
    type: Callable[[str], Any] = str,
    fallback_env: str | None = None,
) -> None:
    """A flag whose default comes from its `EDGEAGENT_*` variable (then `fallback_env`, then `default`)."""
    var = env_name(flag)
    raw = os.environ.get(var)
    source = var
    if raw is None and fallback_env:
        raw, source = os.environ.get(fallback_env), fallback_env
    value = default
    if raw is not None:
        try:
            value = type(raw)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{source}={raw!r}: {exc}") from exc
    env_help = f"env {var}" + (f", then {fallback_env}" if fallback_env else "")
    shown = f"; default {default}" if default not in (None, "") else ""
    parser.add_argument(flag, type=type, default=value, help=f"{help} ({env_help}{shown})")


def _switch(parser: argparse.ArgumentParser, flag: str, *, help: str) -> None:
    var = env_name(flag)
    raw = os.environ.get(var, "").strip().lower()
    if raw not in _TRUE | _FALSE:
        raise UsageError(f"{var}={raw!r}: expected true or false")
    parser.add_argument(flag, action="store_true", default=raw in _TRUE, help=f"{help} (env {var})")


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError("port must be 0..65535")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be >= 1")
    return value


def _window_flags(parser: argparse.ArgumentParser) -> None:
    """`--maintenance-window` is repeatable; its variable holds several specs separated by `;`."""
    from edgeagent.agent.windows import split_env_windows

    var = env_name("--maintenance-window")
    parser.add_argument(
        "--maintenance-window", action="append", default=None, metavar="SPEC",
        help=f"accept upgrades only inside this window, '[DAYS] HH:MM-HH:MM' in local time (DAYS: *, Sat, "
             "Mon-Fri, Sat,Sun; may cross midnight); repeatable, or several separated by ';' in the variable; "
             f"none: always open (env {var})")
    parser.set_defaults(env_maintenance_windows=split_env_windows(os.environ.get(var, "")))
    _add(parser, "--timezone", help="IANA time zone of the maintenance windows (default: the node's local zone)",
         default="")


def _windows(args: argparse.Namespace) -> tuple[tuple[str, ...], str]:
    """The specs (flags win over the variable) and zone, checked here so a bad one exits 2 with one line."""
    from edgeagent.agent.windows import WindowSpecError, load_zone, parse_windows

    specs = tuple(args.maintenance_window if args.maintenance_window else args.env_maintenance_windows)
    try:
        parse_windows(specs)
        if args.timezone:
            load_zone(args.timezone)
    except WindowSpecError as exc:
        raise UsageError(str(exc)) from exc
    return specs, args.timezone


def _logging_flags(parser: argparse.ArgumentParser) -> None:
    _add(parser, "--log-level", help="debug, info, warning or error", default="info")
    _add(parser, "--log-format", help="auto (JSON unless a terminal), json or console", default="auto")


def _client_flags(parser: argparse.ArgumentParser) -> None:
    _add(parser, "--agent", help="URL of the local agent", default=DEFAULT_AGENT_URL)
    _add(parser, "--token-file", help="file holding the agent's bearer token", type=Path)
    _switch(parser, "--json", help="print JSON instead of text")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgeagent",
        description="Edge node upgrade agent and cloud controller for Kubernetes DaemonSets.",
    )
    parser.add_argument("--version", action="version", version=f"edgeagent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the node agent")
    _add(run, "--node-name", help="this node's name", fallback_env="NODE_NAME")
    _add(run, "--kubeconfig", help="kubeconfig file, else in-cluster config", type=Path,
         fallback_env="KUBECONFIG")
    _add(run, "--bind", help="address to listen on; non-loopback needs --token-file or "
         "--insecure-allow-remote", default="127.0.0.1")
    _add(run, "--port", help="port to listen on", default=DEFAULT_AGENT_PORT, type=_port)
    _add(run, "--state-dir", help="directory for the pod snapshot and upgrade queue",
         default=Path("/var/lib/edgeagent"), type=Path)
    _add(run, "--token-file", help="bearer token required on mutating endpoints", type=Path)
    _switch(run, "--insecure-allow-remote", help="allow a non-loopback bind without a token")
    _add(run, "--request-timeout", help="seconds allowed for each cloud API call", default=5.0,
         type=_positive_float)
    _add(run, "--upgrade-timeout", help="seconds an online upgrade's DELETE may take before the "
         "request is queued instead", default=3.0, type=_positive_float)
    _add(run, "--probe-interval", help="seconds between cloud link probes", default=2.0, type=_positive_float)
    _add(run, "--probe-timeout", help="seconds before a probe counts as failed", default=2.0,
         type=_positive_float)
    _add(run, "--failures-to-disconnect", help="consecutive failed probes before the link counts as cut",
         default=2, type=_count)
    _add(run, "--successes-to-connect", help="consecutive good probes before the link counts as back",
         default=1, type=_count)
    _window_flags(run)
    _logging_flags(run)

    ctl = sub.add_parser("controller", help="run the cloud-side controller")
    _add(ctl, "--kubeconfig", help="kubeconfig file, else in-cluster config", type=Path,
         fallback_env="KUBECONFIG")
    _switch(ctl, "--leader-elect", help="take a coordination.k8s.io Lease before acting")
    _add(ctl, "--lease-namespace", help="namespace of the leader Lease", default="kube-system")
    _add(ctl, "--lease-name", help="name of the leader Lease", default="edgeagent-controller")
    _add(ctl, "--identity", help="holder identity (default: hostname and pid)", default="")
    _add(ctl, "--lease-duration", help="seconds a lease is valid", default=15.0, type=_positive_float)
    _add(ctl, "--metrics-bind", help="address for /metrics and /healthz", default="127.0.0.1")
    _add(ctl, "--metrics-port", help="port for /metrics and /healthz (0: none)", default=10268, type=_port)
    _logging_flags(ctl)

    sim = sub.add_parser("sim", help="run a simulated cluster on loopback")
    _add(sim, "--nodes", help="number of simulated nodes", default=3, type=_count)
    _add(sim, "--bind", help="address of the API server", default="127.0.0.1")
    _add(sim, "--port", help="API server port (0: any free port)", default=0, type=_port)
    _add(sim, "--dir", help="where kubeconfigs are written (default: a new temporary directory)", type=Path)
    _add(sim, "--node-grace", help="seconds without heartbeat before a node turns Unknown", default=40.0,
         type=_positive_float)
    _add(sim, "--heartbeat-interval", help="seconds between node heartbeats", default=10.0,
         type=_positive_float)
    _add(sim, "--pod-resync-delay", help="seconds after a node's link returns before its kubelet re-reports "
         "its pods' statuses (the node's Lease and Ready go first)", default=5.0, type=_non_negative_float)
    _add(sim, "--bookmark-interval", help="seconds between watch bookmarks (the real server: about 60)",
         default=60.0, type=_positive_float)
    _logging_flags(sim)

    sub.add_parser("demo", help="run the OpenYurt upgrade scenario on a simulated cluster, narrated")

    pods = sub.add_parser("pods", help="list the pods the local agent knows")
    _client_flags(pods)
    upgrade = sub.add_parser("upgrade", help="ask the local agent to upgrade a pod")
    upgrade.add_argument("pod", metavar="NS/NAME")
    _client_flags(upgrade)
    upgrades = sub.add_parser("upgrades", help="list (or cancel) the local agent's upgrade requests")
    _add(upgrades, "--cancel", help="cancel the queued request with this id")
    _client_flags(upgrades)

    rollout = sub.add_parser("rollout", help="DaemonSet rollout commands")
    rollout_sub = rollout.add_subparsers(dest="rollout_command", required=True, metavar="COMMAND")
    status = rollout_sub.add_parser("status", help="per-node state of a DaemonSet's upgrade")
    status.add_argument("daemonset", metavar="DS")
    status.add_argument("-n", "--namespace", default=os.environ.get("EDGEAGENT_NAMESPACE", "default"),
                        help="namespace (env EDGEAGENT_NAMESPACE; default default)")
    _add(status, "--kubeconfig", help="kubeconfig file, else in-cluster config", type=Path,
         fallback_env="KUBECONFIG")
    _switch(status, "--watch", help="keep printing until the rollout completes")
    _add(status, "--timeout", help="with --watch, give up after this many seconds (0: never)", default=0.0,
         type=float)
    return parser


def _log(args: argparse.Namespace) -> LogConfig:
    if args.log_format not in ("auto", "json", "console"):
        raise UsageError(f"--log-format: {args.log_format!r} is not auto, json or console")
    return LogConfig(level=args.log_level, format=args.log_format)


def _dispatch(args: argparse.Namespace) -> int:
    command = args.command
    if command == "run":
        if not args.node_name:
            raise UsageError("--node-name (or NODE_NAME) is required")
        windows, timezone = _windows(args)
        cfg: Any = AgentConfig(
            node_name=args.node_name, kubeconfig=args.kubeconfig, bind=args.bind, port=args.port,
            state_dir=args.state_dir, token_file=args.token_file,
            insecure_allow_remote=args.insecure_allow_remote, request_timeout=args.request_timeout,
            upgrade_timeout=args.upgrade_timeout, probe_interval=args.probe_interval,
            probe_timeout=args.probe_timeout, failures_to_disconnect=args.failures_to_disconnect,
            successes_to_connect=args.successes_to_connect, maintenance_windows=windows, timezone=timezone,
            log=_log(args),
        )
        return _call("edgeagent.agent.app", cfg)
    if command == "controller":
        cfg = ControllerConfig(
            kubeconfig=args.kubeconfig, leader_elect=args.leader_elect, lease_namespace=args.lease_namespace,
            lease_name=args.lease_name, identity=args.identity, lease_duration=args.lease_duration,
            metrics_bind=args.metrics_bind, metrics_port=args.metrics_port, log=_log(args),
        )
        return _call("edgeagent.controller.app", cfg)
    if command == "sim":
        cfg = SimConfig(nodes=args.nodes, bind=args.bind, port=args.port, dir=args.dir,
                        node_grace=args.node_grace, heartbeat_interval=args.heartbeat_interval,
                        pod_resync_delay=args.pod_resync_delay, bookmark_interval=args.bookmark_interval,
                        log=_log(args))
        return _call("edgeagent.sim.app", cfg)
    if command == "demo":
        return _call("edgeagent.demo", None)
    if command in ("pods", "upgrade", "upgrades"):
        client = ClientConfig(agent=args.agent, token_file=args.token_file, json=args.json)
        if command == "upgrade":
            namespace, sep, name = args.pod.partition("/")
            if not sep or not namespace or not name:
                raise UsageError(f"expected NS/NAME, got {args.pod!r}")
        module = importlib.import_module("edgeagent.agent.client_cli")
        if command == "pods":
            return int(module.pods(client))
        if command == "upgrade":
            return int(module.upgrade(client, namespace, name))
        return int(module.upgrades(client, args.cancel))
    if command == "rollout":
        cfg = RolloutConfig(daemonset=args.daemonset, namespace=args.namespace, kubeconfig=args.kubeconfig,
                            watch=args.watch, timeout=args.timeout)
        return _call("edgeagent.controller.rollout", cfg)
    raise UsageError(f"unknown command {command!r}")


def _call(module_name: str, cfg: Any) -> int:
    module = importlib.import_module(module_name)
    result = module.main(cfg) if cfg is not None else module.main()
    return int(result or 0)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return _dispatch(args)
    except UsageError as exc:
        print(f"edgeagent: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["DEFAULT_AGENT_PORT", "main"]
