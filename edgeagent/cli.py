"""Argument parsing only: every flag also reads `EDGEAGENT_<FLAG>`; each subcommand hands off to its app.

Exit codes: 0 success, 1 runtime failure, 2 usage error; errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from edgeagent import __version__, extras
from edgeagent.config import (
    DEFAULT_AGENT_PORT,
    DEFAULT_AGENT_URL,
    ROLLOUT_SUMMARY_ABOVE,
    AgentConfig,
    ClientConfig,
    ControllerConfig,
    LogConfig,
    RolloutConfig,
    SimConfig,
)
from edgeagent.kube.objects import is_dns1123_label, is_dns1123_subdomain

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_LOG_LEVELS = ("debug", "info", "warning", "error")
_LOG_FORMATS = ("auto", "json", "console")
_AUTHORIZATION_MODES = ("none", "rbac")
_SHELLS = ("bash", "zsh")
# shtab's completion actions (shtab.FILE, shtab.DIRECTORY), spelled out so that parsing never imports shtab.
_COMPLETE_FILES = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}
_COMPLETE_DIRS = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/", "tcsh": "d"}

# Flags that make a command *do* something rather than configure it: they never read the environment,
# so a variable left exported (EDGEAGENT_CANCEL=…) cannot turn a listing into a cancellation.
# The hold's own parameters belong to that one request too: an exported EDGEAGENT_FOR must not turn every
# later `edgeagent hold` into a timed one.
ACTION_FLAGS = {("upgrades", "--cancel"), ("hold", "--reason"), ("hold", "--until"), ("hold", "--for"),
                ("rollout undo", "--to-revision")}


class UsageError(Exception):
    pass


# The one prefix of every error line, from argparse, a command or a long-running process that cannot start.
ERROR_PREFIX = "edgeagent: error: "


# A shell reports 128 + SIGPIPE for a tool whose reader went away (`| head -1`): we end the same way, quietly.
EXIT_READER_GONE = 128 + 13


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors: the line names the flag, what it accepts and the command's help.

    argparse's own `error()` prints the whole usage block first; `--help` has that, an error needs one line.
    The prefix is every error's (`edgeagent: error: `), whoever finds it: argparse or a command.
    """

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        with contextlib.suppress(BrokenPipeError):
            print(f"{ERROR_PREFIX}{line} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


class _FromEnvironment:
    """argparse default of every configurable flag: resolved after parsing, for the chosen subcommand only."""

    def __repr__(self) -> str:
        return "<from environment>"


_FROM_ENV: Any = _FromEnvironment()


@dataclass(frozen=True)
class _EnvFlag:
    dest: str
    flag: str
    var: str
    fallback_env: str | None
    convert: Callable[[str], Any] | None  # None: a true/false switch
    default: Any

    def resolve(self, environ: Mapping[str, str]) -> Any:
        raw, source = environ.get(self.var), self.var
        if raw is None and self.fallback_env:
            raw, source = environ.get(self.fallback_env), self.fallback_env
        if raw is None:
            return False if self.convert is None else self.default
        if self.convert is None:
            word = raw.strip().lower()
            if word not in _TRUE | _FALSE:
                raise UsageError(f"{source}={raw!r}: expected true or false")
            return word in _TRUE
        try:
            return self.convert(raw)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            raise UsageError(f"{source}={raw!r}: {exc}") from exc


def env_name(flag: str) -> str:
    return "EDGEAGENT_" + flag.lstrip("-").replace("-", "_").upper()


def _remember(parser: argparse.ArgumentParser, spec: _EnvFlag) -> None:
    """Each subparser keeps its own list (as a parser default), so only the chosen command reads variables."""
    specs: list[_EnvFlag] | None = parser.get_default("_env_flags")
    if specs is None:
        specs = []
        parser.set_defaults(_env_flags=specs)
    specs.append(spec)


def _add(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    help: str,
    default: Any = None,
    type: Callable[[str], Any] = str,
    fallback_env: str | None = None,
    choices: tuple[str, ...] = (),
    short: str = "",
    metavar: str = "",
) -> None:
    """A flag whose default comes from its `EDGEAGENT_*` variable (then `fallback_env`, then `default`).

    `choices` only feed shell completion: `type` (a `_one_of`) checks the value and words the error.
    """
    var = env_name(flag)
    action = parser.add_argument(*([short] if short else []), flag, type=type, default=_FROM_ENV)
    if choices:
        action.choices = choices
        action.metavar = metavar or action.dest.upper()
    elif type is Path or type is _kubeconfig_file:
        # shtab reads `complete`: file names (directories for the ones named as such) after these flags.
        action.complete = _COMPLETE_DIRS if flag.endswith("dir") else _COMPLETE_FILES  # type: ignore[attr-defined]
    env_help = f"env {var}" + (f", then {fallback_env}" if fallback_env else "")
    shown = f"; default {default}" if default not in (None, "") else ""
    action.help = f"{help} ({env_help}{shown})"
    _remember(parser, _EnvFlag(action.dest, flag, var, fallback_env, type, default))


def _switch(parser: argparse.ArgumentParser, flag: str, *, help: str, short: str = "") -> None:
    var = env_name(flag)
    action = parser.add_argument(*([short] if short else []), flag, action="store_true", default=_FROM_ENV,
                                 help=f"{help} (env {var})")
    _remember(parser, _EnvFlag(action.dest, flag, var, None, None, False))


def _apply_environment(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    for spec in getattr(args, "_env_flags", None) or []:
        if getattr(args, spec.dest) is _FROM_ENV:
            setattr(args, spec.dest, spec.resolve(environ))


def _named(name: str) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
    """argparse prints a converter's __name__ in `invalid … value`: make it a word a user knows."""
    def rename(fn: Callable[[str], Any]) -> Callable[[str], Any]:
        fn.__name__ = name
        return fn
    return rename


# kubectl's TYPE/NAME forms of a DaemonSet (`kubectl rollout status ds/web`).
_DAEMONSET_PREFIXES = ("ds/", "daemonset/", "daemonsets/", "daemonset.apps/", "daemonsets.apps/")


@_named("DaemonSet name")
def _daemonset_name(text: str) -> str:
    """NAME or kubectl's ds/NAME; a name the API server would refuse is a usage error (exit 2), never a lookup
    that fails later (an empty name once printed `DaemonSet /: not managed` and exited 3, "in progress")."""
    name = text
    for prefix in _DAEMONSET_PREFIXES:
        if text.lower().startswith(prefix):
            name = text[len(prefix):]
            break
    else:
        if "/" in text:
            raise argparse.ArgumentTypeError(f"{text!r} is not a DaemonSet: give NAME or ds/NAME")
    if not name:
        raise argparse.ArgumentTypeError("the DaemonSet name is empty")
    if not is_dns1123_subdomain(name):
        raise argparse.ArgumentTypeError(f"{name!r} is not a DaemonSet name (lower-case letters, digits, '-' and "
                                         "'.', at most 253, starting and ending with a letter or digit)")
    return name


@_named("namespace")
def _namespace(text: str) -> str:
    if not is_dns1123_label(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a namespace (a DNS-1123 label: lower-case letters, "
                                         "digits and '-', at most 63, starting and ending with a letter or digit)")
    return text
def _finite(text: str) -> float:
    """`nan` and `inf` parse as floats but mean no duration: a timeout of `nan` never fires, nor does `inf`."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


@_named("number")
def _positive_float(text: str) -> float:
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


@_named("number")
def _non_negative_float(text: str) -> float:
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


@_named("name")
def _node_name(text: str) -> str:
    """The name of a Node object: a DNS-1123 subdomain. Any other cannot exist, and the agent would wait for it
    for ever. Empty is left to the check that says the flag is required."""
    if text and not is_dns1123_subdomain(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a node name: a node name is a DNS-1123 subdomain "
                                         "(lower-case alphanumerics, '-' and '.', at most 253 characters)")
    return text


@_named("file")
def _kubeconfig_file(text: str) -> Path:
    """`KUBECONFIG=` (set but empty) read as `.`, and then "kubeconfig not found: .": say what it is instead."""
    if not text.strip():
        raise argparse.ArgumentTypeError("set but empty: name a kubeconfig file, or unset it to use the in-cluster "
                                         "config")
    return Path(text)


@_named("id")
def _request_id(text: str) -> str:
    """An upgrade request's id as `edgeagent upgrades` lists it; '' would turn a cancellation into a listing."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text):
        raise argparse.ArgumentTypeError(f"expected a request id as `edgeagent upgrades` lists it, got {text!r}")
    return text


@_named("port")
def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {value}")
    return value


@_named("count")
def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


@_named("port range")
def _port_range(text: str) -> tuple[int, int]:
    first_text, sep, last_text = text.partition("-")
    try:
        first, last = int(first_text), int(last_text)
    except ValueError:
        first = last = -1
    if not sep or not 1024 <= first <= last <= 65535:
        raise argparse.ArgumentTypeError(f"expected FIRST-LAST with 1024 <= FIRST <= LAST <= 65535, got {text!r}")
    return first, last


@_named("count")
def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _window_flags(parser: argparse.ArgumentParser) -> None:
    """`--maintenance-window` is repeatable; its variable holds several specs separated by `;`."""
    var = env_name("--maintenance-window")
    parser.add_argument(
        "--maintenance-window", action="append", default=None, metavar="SPEC",
        help=f"accept upgrades only inside this window, '[DAYS] HH:MM-HH:MM' in local time (DAYS: *, Sat, "
             "Mon-Fri, Sat,Sun; may cross midnight); repeatable, or several separated by ';' in the variable; "
             f"none: always open (env {var})")
    _add(parser, "--timezone", help="IANA time zone of the maintenance windows (default: the node's local zone)",
         default="")


def _windows(args: argparse.Namespace) -> tuple[tuple[str, ...], str]:
    """The specs (flags win over the variable) and zone, checked here so a bad one exits 2 with one line."""
    from edgeagent.agent.policy.windows import WindowSpecError, load_zone, parse_windows, split_env_windows

    specs = tuple(args.maintenance_window or split_env_windows(os.environ.get(env_name("--maintenance-window"), "")))
    try:
        parse_windows(specs)
        if args.timezone:
            load_zone(args.timezone)
    except WindowSpecError as exc:
        raise UsageError(str(exc)) from exc
    return specs, args.timezone


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    @_named("choice")
    def convert(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(choices)}")
        return value
    return convert


@_named("URL")
def _agent_url(text: str) -> str:
    """`127.0.0.1:10267` means `http://127.0.0.1:10267`: the scheme is optional, as for curl."""
    url = text.strip()
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected the agent's address, e.g. http://127.0.0.1:10267 or "
                                         f"127.0.0.1:10267; got {text!r}")
    return url.rstrip("/")


def _logging_flags(parser: argparse.ArgumentParser) -> None:
    _add(parser, "--log-level", help="debug, info, warning or error", default="info", type=_one_of(_LOG_LEVELS),
         choices=_LOG_LEVELS)
    _add(parser, "--log-format", help="auto (JSON unless a terminal), json or console", default="auto",
         type=_one_of(_LOG_FORMATS), choices=_LOG_FORMATS)


def _client_flags(parser: argparse.ArgumentParser) -> None:
    _add(parser, "--agent", help="URL of the local agent", default=DEFAULT_AGENT_URL, type=_agent_url)
    _add(parser, "--token-file", help="file holding the agent's bearer token", type=Path)
    _switch(parser, "--json", help="print JSON instead of text")


def _daemonset_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("daemonset", metavar="DS", type=_daemonset_name, help="NAME, or ds/NAME as kubectl writes it")


def _cluster_flags(parser: argparse.ArgumentParser, *, namespace_help: str = "namespace") -> None:
    """-n, --kubeconfig and --context, as kubectl reads them: without -n, the context's namespace, else default."""
    _add(parser, "--namespace", short="-n", default="", type=_namespace,
         help=f"{namespace_help}; without it, the kubeconfig context's, else default")
    _add(parser, "--kubeconfig", help="kubeconfig file, else in-cluster config", type=_kubeconfig_file,
         fallback_env="KUBECONFIG")
    _add(parser, "--context", help="the kubeconfig context to use, instead of its current-context", default="")


def _command(sub: Any, name: str, summary: str, details: str) -> argparse.ArgumentParser:
    """A subcommand whose --help page opens with what it does (the summary, then the details)."""
    description = summary[0].upper() + summary[1:] + "." + (" " + details if details else "")
    parser: argparse.ArgumentParser = sub.add_parser(name, help=summary, description=description)
    # Which parser an unrecognized argument belongs to (see parse_args): the innermost chosen command's.
    parser.set_defaults(_parser=parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="edgeagent",
        description="Edge node upgrade agent and cloud controller for Kubernetes DaemonSets.",
    )
    parser.add_argument("--version", action="version", version=f"edgeagent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = _command(sub, "run", "run the node agent",
                   "Serves this node's pods on 127.0.0.1:10267 from a persisted cache and upgrades DaemonSet pods "
                   "on request, queueing requests on disk while the cloud is unreachable.")
    _add(run, "--node-name", help="this node's name", fallback_env="NODE_NAME", type=_node_name)
    _add(run, "--kubeconfig", help="kubeconfig file, else in-cluster config", type=_kubeconfig_file,
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
    _switch(run, "--auto-prepull", help="ask for the image pre-pull of each new revision of this node's pods "
            "by itself (once per pod and revision, remembered across restarts)")
    _add(run, "--ready-timeout", help="seconds a deleted pod's replacement has to be Ready on the new revision "
         "before the upgrade counts as failed", default=300.0, type=_positive_float)
    _switch(run, "--auto-upgrade", help="upgrade this node's pods whose PodNeedUpgrade is True by itself, one at "
            "a time, whenever the node is open; a replacement not Ready within --ready-timeout holds the node "
            "(AutoUpgradeFailed) until released")
    _logging_flags(run)

    ctl = _command(sub, "controller", "run the cloud-side controller",
                   "Keeps PodNeedUpgrade on the pods of OTA DaemonSets and replaces the pods of "
                   "AdvancedRollingUpdate DaemonSets within their unavailability budget.")
    _add(ctl, "--kubeconfig", help="kubeconfig file, else in-cluster config", type=_kubeconfig_file,
         fallback_env="KUBECONFIG")
    _switch(ctl, "--leader-elect", help="take a coordination.k8s.io Lease before acting")
    _add(ctl, "--lease-namespace", default="",
         help="namespace of the leader Lease; default: the namespace the controller runs in (in-cluster), "
              "else edgeagent-system, where deploy/ grants it Leases")
    _add(ctl, "--lease-name", help="name of the leader Lease", default="edgeagent-controller")
    _add(ctl, "--identity", help="holder identity (default: hostname and pid)", default="")
    _add(ctl, "--lease-duration", help="seconds a lease is valid", default=15.0, type=_positive_float)
    _add(ctl, "--metrics-bind", help="address for /metrics and /healthz", default="127.0.0.1")
    _add(ctl, "--metrics-port", help="port for /metrics and /healthz (0: none)", default=10268, type=_port)
    _switch(ctl, "--no-image-prepull", help="do not answer image pre-pull requests (PodImageReady) with Jobs")
    _add(ctl, "--max-concurrent-prepulls", help="image pre-pull Jobs at once, cluster-wide (one per node)",
         default=20, type=_count)
    _add(ctl, "--image-prepull-retries", help="retries of a failed image pre-pull", default=3,
         type=_non_negative_int)
    _add(ctl, "--image-prepull-backoff", help="seconds before the first retry of a failed pre-pull; doubles per "
         "failure, at most 300", default=10.0, type=_positive_float)
    _add(ctl, "--image-prepull-deadline", help="seconds a pre-pull Job may run (its activeDeadlineSeconds)",
         default=600.0, type=_positive_float)
    _logging_flags(ctl)

    sim = _command(sub, "sim", "run a simulated cluster on loopback",
                   "A simulated Kubernetes API server with a DaemonSet controller and kubelet-like nodes whose "
                   "links can be cut; writes admin.kubeconfig and <node>.kubeconfig to --dir.")
    _add(sim, "--nodes", help="number of simulated nodes", default=3, type=_count)
    _add(sim, "--bind", help="address of the API server", default="127.0.0.1")
    _add(sim, "--port", help="API server port (0: any free port)", default=0, type=_port)
    _add(sim, "--port-range", help="FIRST-LAST: draw the ports the sim picks itself (--port 0, node links) from "
         "this range only (default: 20000 up to the kernel's ephemeral range); a sim that is restarted on its "
         "ports while other sims run on the machine needs a range of its own", type=_port_range)
    _add(sim, "--dir", help="where kubeconfigs are written (default: a new temporary directory)", type=Path)
    _add(sim, "--node-grace", help="seconds without heartbeat before a node turns Unknown", default=40.0,
         type=_positive_float)
    _add(sim, "--heartbeat-interval", help="seconds between node heartbeats", default=10.0,
         type=_positive_float)
    _add(sim, "--pod-resync-delay", help="seconds after a node's link returns before its kubelet re-reports "
         "its pods' statuses (the node's Lease and Ready go first)", default=5.0, type=_non_negative_float)
    _add(sim, "--bookmark-interval", help="seconds between watch bookmarks (the real server: about 60)",
         default=60.0, type=_positive_float)
    _add(sim, "--image-pull-seconds", help="seconds a node takes to pull an image it does not have",
         default=0.5, type=_non_negative_float)
    _add(sim, "--node-images", help="images each new node has from the start and lists in status.images (a "
         "real node lists dozens; the kubelet reports at most 50)", default=0, type=_non_negative_int)
    _add(sim, "--history", help="watch events kept for resuming watches and paging lists (older: 410 Expired); "
         "a large cluster's heartbeats need more to cover the minutes a real API server keeps",
         default=10000, type=_count)
    _add(sim, "--event-ttl", help="seconds an Event is kept after its last write, then deleted (kube-apiserver's "
         "--event-ttl: 3600)", default=3600.0, type=_positive_float)
    _add(sim, "--authorization", help="none: anyone may do anything; rbac: bearer tokens, RBAC and the Node "
         "authorizer as on kube-apiserver", default="none", type=_one_of(_AUTHORIZATION_MODES),
         choices=_AUTHORIZATION_MODES)
    _switch(sim, "--no-node-links", help="give nodes no link of their own and no kubeconfig (one socket per node "
            "otherwise): for controller benchmarks at 100,000 nodes, where no agent runs")
    _add(sim, "--audit-log", help="append every API request (verb, path, client, status code; for a pod DELETE, and "
         "a PATCH of a pod's spec (an in-place upgrade), the pod's state at that instant) to this file as JSON "
         "lines; kept across restarts", type=Path)
    _switch(sim, "--no-control-plane-events", help="write no Scheduled, RegisteredNode or NodeNotReady Events "
            "(a real scheduler's and node controller's): for benchmarks at 10,000+ nodes, where they double the "
            "writes of creating a DaemonSet's pods")
    _logging_flags(sim)

    demo = _command(sub, "demo", "run the OpenYurt upgrade scenario on a simulated cluster, narrated",
                    "Every command it shows really runs (kubectl and curl must be installed) and what it "
                    "printed is shown. Exits 0 only if every narrated step really happened.")
    _switch(demo, "--keep", help="at the end, leave the cluster, controller and agents running until Ctrl-C")
    health = _command(sub, "healthcheck", "probe the edgeagent process in this container (the image's HEALTHCHECK)",
                      "Finds the running `edgeagent run` or `controller` process (PID 1, or the only one; "
                      "--pid names it where several run), reads its flags and EDGEAGENT_* variables as it did, "
                      "and probes the health endpoint on the address and port it really uses. "
                      "Exit 0 healthy, 1 unhealthy.")
    _add(health, "--pid", help="the process to probe (default: PID 1 if it is edgeagent, else the only "
         "edgeagent run/controller process)", type=_count)

    completion = _command(sub, "completion", "print a shell completion script",
                          "Prints a completion script for bash or zsh: `source <(edgeagent completion bash)`, or "
                          "save it where the shell looks (docs/operations.md shows where).")
    completion.add_argument("shell", choices=_SHELLS, metavar="SHELL", help="bash or zsh")

    pods = _command(sub, "pods", "list the pods the local agent knows",
                    "Asks the agent's GET /pods (its cache: also while the cloud is unreachable).")
    _client_flags(pods)
    upgrade = _command(sub, "upgrade", "ask the local agent to upgrade a pod",
                       "Deletes the pod through the cloud so its DaemonSet recreates it from the new template, "
                       "or queues the request while the cloud is unreachable. Exit 0 in both cases.")
    upgrade.add_argument("pod", metavar="NS/NAME")
    _client_flags(upgrade)
    imagepull = _command(sub, "imagepull", "ask the local agent to pre-pull a pod's next image",
                         "Sets the pod's PodImageReady False/WaitPullImage for its pending version "
                         "(POST .../imagepull); the controller pulls the images on this node and turns it True. "
                         "Needs the cloud.")
    imagepull.add_argument("pod", metavar="NS/NAME")
    _client_flags(imagepull)
    upgrades = _command(sub, "upgrades", "list (or cancel) the local agent's upgrade requests",
                        "Lists the agent's upgrade requests, newest first; --cancel ID cancels one that is "
                        "still queued.")
    upgrades.add_argument("--cancel", metavar="ID", type=_request_id,
                          help="cancel the queued request with this id (an action: no environment variable)")
    _client_flags(upgrades)

    hold = _command(sub, "hold", "hold all upgrades of this node",
                    "Asks the local agent (POST /v1/hold) to accept no upgrade until released; works while the "
                    "cloud is unreachable and survives restarts. Prints the node's site policy afterwards.")
    # Parameters of this one request, like --cancel: no environment variable (see ACTION_FLAGS).
    hold.add_argument("--reason", help="why; shown in the pods' UpgradeHeld condition (no environment variable)")
    hold.add_argument("--until", help="release by itself at this RFC 3339 time (e.g. 2026-11-22T18:00:00Z; "
                                      "no environment variable)")
    hold.add_argument("--for", metavar="DURATION", help="release by itself after this long (90s, 30m, 2h, 1d, "
                                                        "1h30m; no environment variable)")
    _client_flags(hold)
    release = _command(sub, "release", "release this node's hold",
                       "Asks the local agent (DELETE /v1/hold) to drop the hold, an operator's or an "
                       "AutoUpgradeFailed one; maintenance windows still apply.")
    _client_flags(release)

    rollout = _command(sub, "rollout", "DaemonSet rollout commands",
                       "Read and steer the RolloutPlan (edgeagent.io/v1alpha1) of a DaemonSet. Also a kubectl plugin: "
                       "`kubectl edgeagent rollout ...`.")
    rollout_sub = rollout.add_subparsers(dest="rollout_command", required=True, metavar="COMMAND")
    status = _command(rollout_sub, "status", "where a DaemonSet's rollout stands, per node or summed up",
                      "Reads the RolloutPlan's status and each node's state (the fleet's states). Above "
                      f"{ROLLOUT_SUMMARY_ABOVE} nodes it prints a summary (per state and wave, failed and "
                      "deferred nodes named) unless --all or -o wide. Exit 0 when complete, 3 in progress, "
                      "1 aborted, rolled back or on an error.")
    _daemonset_arg(status)
    _cluster_flags(status)
    _add(status, "--output", short="-o", help="json (the plan's status and every node) or wide (every node)",
         default="", type=_one_of(("wide", "json")), choices=("wide", "json"))
    _switch(status, "--all", help="every node, however many")
    _switch(status, "--watch", help="print what changes until the rollout ends")
    _add(status, "--timeout", help="with --watch, give up after this many seconds (0: never)", default=0.0,
         type=_non_negative_float)
    # verb: (summary, what it does, what makes it fail): each help page names only its own errors.
    steering = {
        "promote": ("end the current wave's bake now: the next wave starts",
                    "Asks the controller (annotation edgeagent.io/steer on the RolloutPlan) to end the bake of the "
                    "wave `rollout status` shows; a promote never skips a wave."),
        "pause": ("pause the rollout (spec.paused: true)", "No pod moves and no wave starts until `rollout resume`."),
        "resume": ("resume a paused rollout (spec.paused: false)", ""),
        "abort": ("stop the rollout, and roll back if onFailure says so",
                  "Asks the controller to stop the rollout of the revision shown; with onFailure: Rollback it "
                  "restores the stable revision."),
        "retry": ("go on with an aborted rollout",
                  "After Aborted: the controller clears the failures of the current revision and goes on from "
                  "the current wave."),
        "undo": ("roll back to the stable revision, or to --to-revision",
                 "Asks the controller to restore the DaemonSet's template from a revision whose rollout completed "
                 "(status.history)."),
    }
    for verb, (summary, description) in steering.items():
        command = _command(rollout_sub, verb, summary, (description + " " if description else "") + "One write of "
                           "the RolloutPlan (UID and resourceVersion preconditions). Exit 0 once written or "
                           "already so, 1 on an error (no such DaemonSet, no plan, nothing to do, a previous "
                           "request not handled yet).")
        _daemonset_arg(command)
        _cluster_flags(command)
        if verb == "undo":
            command.add_argument("--to-revision", default=None, metavar="R",
                                 help="a revision (hash) of status.history whose rollout completed (no environment "
                                 "variable: it is a parameter of this one request)")
    history = _command(rollout_sub, "history", "the revisions the plan rolled, newest first",
                       "From the RolloutPlan's status.history: revision, images, how its rollout ended and when.")
    _daemonset_arg(history)
    _cluster_flags(history)
    _add(history, "--output", short="-o", help="json", default="", type=_one_of(("json",)),
         choices=("json",))
    _fleet_commands(sub)
    _complete_daemonset_names(parser)
    return parser


# Shell completion of DaemonSet names: a function in the completion script asks `edgeagent fleet -o name`
# (with the command line's --kubeconfig, --context and -n), so names come from the cluster the command will talk to.
_DAEMONSETS_BASH = r"""
_edgeagent_daemonsets() {
  local args=() i w
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    case "$w" in
      --kubeconfig|--context|-n|--namespace) args+=("$w" "${COMP_WORDS[i+1]}") ;;
      -A|--all-namespaces) args+=("$w") ;;
    esac
  done
  edgeagent fleet -o name "${args[@]}" 2>/dev/null | sed 's|^.*/||' | grep -- "^$1"
}
_edgeagent_fleet_what() {
  if [[ " ${COMP_WORDS[*]:1:COMP_CWORD-1} " == *" nodes "* ]]; then _edgeagent_daemonsets "$1"
  else compgen -W nodes -- "$1"; fi
}
"""
_DAEMONSETS_ZSH = r"""
_edgeagent_daemonsets() {
  local -a args names
  local i
  for ((i = 2; i < CURRENT; i++)); do
    case "${words[i]}" in
      --kubeconfig|--context|-n|--namespace) args+=("${words[i]}" "${words[i+1]}") ;;
      -A|--all-namespaces) args+=("${words[i]}") ;;
    esac
  done
  names=(${(f)"$(edgeagent fleet -o name $args 2>/dev/null | sed 's|^.*/||')"})
  compadd -a names
}
_edgeagent_fleet_what() {
  if (( ${words[(I)nodes]} && ${words[(I)nodes]} < CURRENT )); then _edgeagent_daemonsets
  else compadd nodes; fi
}
"""


def _complete_daemonset_names(parser: argparse.ArgumentParser) -> None:
    """Every `DS` argument (rollout verbs, `fleet nodes DS`) completes to the cluster's DaemonSet names."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _complete_daemonset_names(child)
        elif action.dest in ("daemonset", "what") and not action.option_strings:
            function = "_edgeagent_daemonsets" if action.dest == "daemonset" else "_edgeagent_fleet_what"
            action.complete = {"bash": function, "zsh": function,  # type: ignore[attr-defined]
                               "preamble": {"bash": _DAEMONSETS_BASH, "zsh": _DAEMONSETS_ZSH}}


_OUTPUT_FORMATS = ("wide", "json", "name")


@_named("format")
def _output_format(text: str) -> str:
    value = text.strip().lower()
    if value not in ("", *_OUTPUT_FORMATS):
        raise argparse.ArgumentTypeError(f"{text!r} is not wide, json or name")
    return value


def _fleet_flags(parser: argparse.ArgumentParser) -> None:
    _add(parser, "--namespace", short="-n", help="namespace of the DaemonSets; without it, the kubeconfig context's, "
         "else default", default="", type=_namespace)
    _switch(parser, "--all-namespaces", short="-A", help="DaemonSets of every namespace")
    _add(parser, "--output", short="-o", help="wide (more columns), json, or name (daemonset.apps/NAME per line)",
         default="", type=_output_format,
         choices=_OUTPUT_FORMATS, metavar="{" + ",".join(_OUTPUT_FORMATS) + "}")
    _add(parser, "--selector", short="-l", default="",
         help="label selector: on DaemonSets, or on nodes with `fleet nodes` (e.g. zone=north)")
    _switch(parser, "--watch", short="-w", help="after the table, print only the rows that change (Ctrl-C to stop)")
    _add(parser, "--kubeconfig", help="kubeconfig file, else in-cluster config", type=_kubeconfig_file,
         fallback_env="KUBECONFIG")
    _add(parser, "--context", help="the kubeconfig context to use, instead of its current-context", default="")


def _fleet_commands(sub: Any) -> None:
    """`fleet`, `fleet nodes [DS]` and `dashboard`: read-only views of every managed DaemonSet (edgeagent.fleet)."""
    fleet = _command(sub, "fleet", "the whole fleet at a glance, one line per managed DaemonSet",
                     "Lists every DaemonSet annotated apps.openyurt.io/update-strategy with its revision, how many "
                     "nodes are up to date, its rollout wave and phase, and how many nodes are held, offline or "
                     "failed. `fleet nodes [DS]` shows one line per node instead. Read-only.")
    _fleet_flags(fleet)
    views = fleet.add_subparsers(dest="fleet_view", required=False, metavar="VIEW",
                                 help="`nodes`: one line per node instead (edgeagent fleet nodes --help)")
    nodes = _command(views, "nodes", "one line per node of the fleet",
                     "Shows each node's readiness, hold, next maintenance window, the revision each managed "
                     "DaemonSet runs there and the last upgrade outcome; with DS, only the nodes of that DaemonSet. "
                     "-l selects nodes. Read-only.")
    nodes.add_argument("daemonset", nargs="?", default="", metavar="DS",
                       help="only the nodes of this DaemonSet (in -n NAMESPACE)")
    _fleet_flags(nodes)
    # Flags given before `nodes` (`fleet -o wide nodes`) are the fleet parser's: the nodes parser must not reset
    # them to its defaults, so its own defaults are left out of the result (argparse.SUPPRESS).
    for action in nodes._actions:
        if action.option_strings and action.default is _FROM_ENV:
            action.default = argparse.SUPPRESS

    dash = _command(sub, "dashboard", "serve a live web page of the fleet on loopback (read-only by default)",
                    "Like `kubectl proxy`, it uses your kubeconfig and adds no credential or object in the cluster: "
                    "each managed DaemonSet's rollout, a grid of every node coloured by state, node details on "
                    "click and the latest edgeagent Events, kept live from watches. It sends no write request "
                    "unless --allow-actions is given.")
    _add(dash, "--kubeconfig", help="kubeconfig file, else in-cluster config", type=_kubeconfig_file,
         fallback_env="KUBECONFIG")
    _add(dash, "--context", help="the kubeconfig context to use, instead of its current-context", default="")
    _add(dash, "--bind", help="address to listen on; anything but loopback needs --allow-remote",
         default="127.0.0.1")
    _add(dash, "--port", help="port to listen on (0: any free port)", default=8080, type=_port)
    _switch(dash, "--allow-remote", help="serve on a non-loopback --bind (a warning is printed): anyone who "
            "reaches it sees the fleet as your kubeconfig lets you")
    _switch(dash, "--allow-actions", help="promote, pause, resume and abort buttons on each rollout, writing the "
            "RolloutPlan as `edgeagent rollout VERB` does with your kubeconfig's credentials (loopback only)")
    _logging_flags(dash)


def _fleet_config(args: argparse.Namespace) -> Any:
    from edgeagent.fleet.command import FleetConfig

    nodes = args.fleet_view == "nodes"
    daemonset = args.daemonset if nodes else ""
    if daemonset and args.all_namespaces:
        raise UsageError("-A and a DaemonSet name exclude each other: give -n NS with the name")
    return FleetConfig(namespace=args.namespace, all_namespaces=args.all_namespaces, output=args.output,
                       selector=args.selector, nodes=nodes, daemonset=daemonset, kubeconfig=args.kubeconfig,
                       watch=args.watch, context=args.context or None)


def _dashboard_config(args: argparse.Namespace) -> Any:
    from edgeagent.fleet.settings import DashboardConfig, is_loopback

    warning = ""
    if not is_loopback(args.bind):
        if not args.allow_remote:
            raise UsageError(f"--bind {args.bind}: the dashboard serves only loopback (127.0.0.1, ::1, localhost) "
                             "unless --allow-remote is given")
        if args.allow_actions:
            # The page has no login: anyone who reached it could read its token and steer with your credentials.
            raise UsageError(f"--allow-actions with --bind {args.bind}: anyone who reached the page could steer "
                             "rollouts with your credentials (it has no login); the buttons are served on loopback "
                             "only (from another machine, use an SSH tunnel: ssh -L 8080:127.0.0.1:8080)")
        warning = (f"serving the dashboard on {args.bind}: anyone who can reach it sees the fleet as your "
                   "kubeconfig lets you (no login)")
    return DashboardConfig(kubeconfig=args.kubeconfig, bind=args.bind, port=args.port, log=_log(args),
                           warning=warning, context=args.context or None, allow_actions=args.allow_actions)


def _log(args: argparse.Namespace) -> LogConfig:
    return LogConfig(level=args.log_level, format=args.log_format)


def _check_sim_dir(args: argparse.Namespace) -> None:
    """`--dir` names a directory, new or existing: say so here rather than let mkdir say `[Errno 17]`."""
    directory = getattr(args, "dir", None)
    if directory is None:
        return
    path = Path(directory)
    for existing in (path, *path.parents):
        if existing.exists():
            if not existing.is_dir():
                where = "exists" if existing == path else f"is under {existing}, which exists"
                raise UsageError(f"--dir {directory}: {where} and is not a directory (give a directory, new or "
                                 "existing)")
            return


def _dispatch(args: argparse.Namespace) -> int:
    command = args.command
    if command == "run":
        if not args.node_name:
            raise UsageError("--node-name (or NODE_NAME) is required")
        windows, timezone = _windows(args)
        agent_cfg = AgentConfig(
            node_name=args.node_name, kubeconfig=args.kubeconfig, bind=args.bind, port=args.port,
            state_dir=args.state_dir, token_file=args.token_file,
            insecure_allow_remote=args.insecure_allow_remote, request_timeout=args.request_timeout,
            upgrade_timeout=args.upgrade_timeout, probe_interval=args.probe_interval,
            probe_timeout=args.probe_timeout, failures_to_disconnect=args.failures_to_disconnect,
            successes_to_connect=args.successes_to_connect, maintenance_windows=windows, timezone=timezone,
            auto_prepull=args.auto_prepull, log=_log(args),
            ready_timeout=args.ready_timeout, auto_upgrade=args.auto_upgrade,
        )
        from edgeagent.agent import app as agent_app

        return agent_app.main(agent_cfg)
    if command == "controller":
        controller_cfg = ControllerConfig(
            kubeconfig=args.kubeconfig, leader_elect=args.leader_elect, lease_namespace=args.lease_namespace,
            lease_name=args.lease_name, identity=args.identity, lease_duration=args.lease_duration,
            metrics_bind=args.metrics_bind, metrics_port=args.metrics_port,
            image_prepull=not args.no_image_prepull, max_concurrent_prepulls=args.max_concurrent_prepulls,
            image_prepull_retries=args.image_prepull_retries, image_prepull_backoff=args.image_prepull_backoff,
            image_prepull_deadline=args.image_prepull_deadline, log=_log(args),
        )
        from edgeagent.controller import app as controller_app

        return controller_app.main(controller_cfg)
    if command == "sim":
        extras.require("sim", "edgeagent sim")
        _check_sim_dir(args)
        sim_cfg = SimConfig(nodes=args.nodes, bind=args.bind, port=args.port, dir=args.dir,
                        node_grace=args.node_grace, heartbeat_interval=args.heartbeat_interval,
                        pod_resync_delay=args.pod_resync_delay, bookmark_interval=args.bookmark_interval,
                        image_pull_seconds=args.image_pull_seconds, node_images=args.node_images,
                        history=args.history, event_ttl=args.event_ttl,
                        authorization=args.authorization, node_links=not args.no_node_links,
                        audit_log=args.audit_log, control_plane_events=not args.no_control_plane_events,
                        port_range=args.port_range, log=_log(args))
        from edgeagent.sim import app as sim_app  # the `sim` extra

        return sim_app.main(sim_cfg)
    if command == "healthcheck":
        from edgeagent import healthcheck

        return healthcheck.main(parse_args, args.pid)
    if command == "completion":
        import shtab  # only here: completion is the one command that needs it

        print(shtab.complete(build_parser(), shell=args.shell), end="")
        return 0
    if command == "demo":
        extras.require("sim", "edgeagent demo")
        from edgeagent.demo import scenario  # the `sim` extra

        return scenario.main(bool(args.keep))
    if command in ("pods", "upgrade", "upgrades", "imagepull"):
        client = ClientConfig(agent=args.agent, token_file=args.token_file, json=args.json)
        if command in ("upgrade", "imagepull"):
            namespace, name = _pod_name(args.pod)
        from edgeagent.agent.client import commands as client_cli

        if command == "pods":
            return client_cli.pods(client)
        if command == "upgrade":
            return client_cli.upgrade(client, namespace, name)
        if command == "imagepull":
            return client_cli.imagepull(client, namespace, name)
        return client_cli.upgrades(client, args.cancel)
    if command in ("hold", "release"):
        client = ClientConfig(agent=args.agent, token_file=args.token_file, json=args.json)
        from edgeagent.agent.client import hold as hold_cli

        if command == "release":
            return hold_cli.release(client)
        return hold_cli.hold(client, args.reason or "", _hold_until(args))
    if command == "rollout":
        if "timeout" in args._given and args.timeout and not args.watch:
            # Without --watch, status prints once and exits at once: a timeout given there would be ignored.
            raise UsageError(f"--timeout {args.timeout:g} applies only with --watch (status without --watch "
                             "prints once and exits); add --watch")
        rollout_cfg = RolloutConfig(daemonset=args.daemonset, namespace=args.namespace, kubeconfig=args.kubeconfig,
                                    watch=getattr(args, "watch", False), timeout=getattr(args, "timeout", 0.0),
                                    action=args.rollout_command, context=args.context or None,
                                    output=getattr(args, "output", ""), all_nodes=getattr(args, "all", False),
                                    to_revision=getattr(args, "to_revision", None) or "")
        from edgeagent.rollout import command as rollout_command

        return rollout_command.main(rollout_cfg)
    if command == "fleet":
        from edgeagent.fleet import command as fleet_command

        return fleet_command.main(_fleet_config(args))
    if command == "dashboard":
        from edgeagent.fleet import dashboard

        return dashboard.main(_dashboard_config(args))
    raise UsageError(f"unknown command {command!r}")


def _pod_name(text: str) -> tuple[str, str]:
    """NS/NAME checked here, so `upgrade a/b/c` is a usage error rather than a 404 from the agent."""
    from edgeagent.kube.objects import is_dns1123_label, is_dns1123_subdomain

    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name:
        raise UsageError(f"expected NS/NAME, got {text!r}")
    if not is_dns1123_label(namespace):
        raise UsageError(f"NS/NAME {text!r}: namespace {namespace!r} is not a DNS-1123 label (lower-case "
                         "letters, digits and '-', at most 63 characters)")
    if not is_dns1123_subdomain(name):
        raise UsageError(f"NS/NAME {text!r}: name {name!r} is not a DNS-1123 subdomain (lower-case letters, "
                         "digits, '-' and '.', at most 253 characters)")
    return namespace, name


def _hold_until(args: argparse.Namespace) -> datetime | None:
    from edgeagent.agent.policy.times import MAX_HOLD, parse_time
    from edgeagent.durations import parse_duration

    flag = "--until" if args.until else "--for"
    if args.until and getattr(args, "for"):
        raise UsageError("--until and --for exclude each other: give one")
    now = datetime.now(UTC)
    too_long = UsageError(f"{flag} {args.until or getattr(args, 'for')}: a timed hold may last at most "
                          f"{MAX_HOLD.days} days; for a hold until released, give neither --until nor --for")
    try:
        if args.until:
            until = parse_time(args.until)
        elif getattr(args, "for"):
            seconds = parse_duration(getattr(args, "for"))
            if seconds == 0:
                raise ValueError(f"{getattr(args, 'for')!r}: a timed hold lasts more than zero; for a hold until "
                                 "released, give neither --until nor --for")
            until = now + timedelta(seconds=seconds)
        else:
            return None
    except OverflowError:  # more days than a date can hold
        raise too_long from None
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from exc
    if until - now > MAX_HOLD:
        raise too_long
    return until


# `hold --for -5m`: argparse takes `-5m` for an unknown flag and says only "expected one argument"; attached
# (`--for=-5m`), the value reaches the duration parser, whose error says what a duration is.
_DASHED_VALUE_FLAGS = {"--for", "--until"}


def _attach_dashed_values(argv: list[str]) -> list[str]:
    out: list[str] = []
    for token in argv:
        if out and out[-1] in _DASHED_VALUE_FLAGS and token.startswith("-") and not token.startswith("--") \
                and token not in ("-h",):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def parse_args(argv: Sequence[str] | None = None, *,
               environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Flags, then the environment variables of the chosen subcommand's own flags, then defaults.

    `environ`: another process's environment (the image's healthcheck reads the agent's).
    """
    parser = build_parser()
    args, unknown = parser.parse_known_args(_attach_dashed_values(list(sys.argv[1:] if argv is None else argv)))
    if unknown:
        # argparse would blame the top-level command; the arguments were given to the chosen subcommand.
        owner: argparse.ArgumentParser = getattr(args, "_parser", None) or parser
        owner.error(f"unrecognized argument{'s' if len(unknown) > 1 else ''}: {' '.join(unknown)}")
    # Flags given on the command line (not from a variable or a default): some only make sense with others.
    args._given = {spec.dest for spec in getattr(args, "_env_flags", None) or []
                   if getattr(args, spec.dest) is not _FROM_ENV}
    _apply_environment(args, os.environ if environ is None else environ)
    return args


def _only_broken_pipes(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_broken_pipes(inner) for inner in exc.exceptions)
    return isinstance(exc, BrokenPipeError)


def _reader_gone() -> int:
    """Our reader closed the pipe (`| head -1`, `| true`): end quietly, as a tool stopped by SIGPIPE does.

    stdout is pointed at /dev/null so the interpreter's final flush of what is still buffered cannot raise
    (and print "Exception ignored ... BrokenPipeError") on the way out.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout closed or not a real file (tests capture it)
        pass
    return EXIT_READER_GONE


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _dispatch(parse_args(argv))
        sys.stdout.flush()
        return code
    except UsageError as exc:
        try:
            print(f"edgeagent: error: {exc}", file=sys.stderr)
        except BrokenPipeError:
            return _reader_gone()
        return 2
    except extras.MissingExtra as exc:
        print(f"edgeagent: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        if _only_broken_pipes(exc):
            return _reader_gone()
        raise


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["DEFAULT_AGENT_PORT", "main"]
