"""`edgeagent fleet` and `edgeagent fleet nodes [DS]`: the whole fleet at a glance, as kubectl would print it.

Read-only: one list each of DaemonSets, pods, nodes, the agents' Events and ControllerRevisions (which
name the current revision; no new API object, nothing written), turned into rows by `model.build`.
Errors are one line on stderr: exit 2 for a --kubeconfig that is not there (a usage error, as for every
command), 1 for anything else (docs/cli.md).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from edgeagent import log
from edgeagent.durations import format_duration
from edgeagent.fleet import table
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable, Timeouts, user_agent
from edgeagent.kube.kubeconfig import DEFAULT_NAMESPACE, load_problem
from edgeagent.kube.timeutil import human_duration
from edgeagent.rollout import listing, model
from edgeagent.rollout import node_state as state
from edgeagent.rollout.listing import Listed

JSON = dict[str, Any]
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
DASH = "-"


@dataclass(frozen=True)
class FleetConfig:
    namespace: str = "default"  # "": the kubeconfig context's namespace, else default (as kubectl)
    all_namespaces: bool = False
    output: str = ""  # "", "wide", "json" or "name"
    selector: str = ""
    nodes: bool = False  # `fleet nodes`
    daemonset: str = ""  # `fleet nodes DS`
    kubeconfig: Path | None = None
    watch: bool = False  # `--watch`: then only the rows that change
    request_timeout: float = 15.0  # seconds for each list call (not a flag; tests shorten it)
    context: str | None = None  # a kubeconfig context instead of its current-context

    def query(self) -> listing.Query:
        return listing.Query(namespace=self.namespace, all_namespaces=self.all_namespaces,
                             daemonset=self.daemonset, selector=self.selector, nodes=self.nodes)


class FleetError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


WATCH_INTERVAL = 2.0  # seconds between two reads of `--watch`


async def fetch(client: KubeClient, cfg: FleetConfig) -> Listed:
    """The lists the view reads (`rollout.listing`, shared with `rollout status`); a list it cannot read is
    one line of ours."""
    try:
        return await listing.fetch(client, cfg.query())
    except listing.ListError as exc:
        raise FleetError(str(exc)) from exc


def _wave(view: model.DaemonSetView) -> str:
    return f"{view.wave}/{view.waves}" if view.wave is not None and view.waves is not None else DASH


def daemonsets_table(fleet: model.Fleet, cfg: FleetConfig) -> str:
    headers = ["NAME", "MODEL", "REVISION", "UP-TO-DATE", "WAVE", "PHASE", "HELD", "OFFLINE", "FAILED"]
    if cfg.output == "wide":
        headers += ["UPGRADING", "WAITING", "STOPPED", "BAKE LEFT"]
    if cfg.all_namespaces:
        headers.insert(0, "NAMESPACE")
    rows = []
    for ds in fleet.daemonsets:
        row = [ds.name, ds.model, ds.revision or DASH, f"{ds.up_to_date}/{ds.desired}", _wave(ds), ds.phase,
               str(ds.held), str(ds.count(model.State.OFFLINE)), str(ds.count(model.State.FAILED))]
        if cfg.output == "wide":
            row += [str(ds.count(model.State.UPGRADING)), str(ds.count(model.State.WAITING)),
                    str(ds.count(model.State.STOPPED)),
                    format_duration(ds.bake_left) if ds.bake_left is not None else DASH]
        if cfg.all_namespaces:
            row.insert(0, ds.namespace)
        rows.append(row)
    return table.render(headers, rows)


def _outcome(node: model.NodeView, now: float) -> str:
    if not node.outcomes:
        return DASH
    last = node.outcomes[0]
    return f"{last.reason} ({human_duration(now - last.time)} ago)"


def _version(pod: model.PodView | None) -> str:
    if pod is None:
        return DASH
    if not pod.pod:
        return "(no pod)"
    revision = pod.revision or "?"
    return revision if pod.current else f"{revision} (outdated)"


def _held(node: model.NodeView) -> str:
    """The agent's hold reason; `-` when its agent says open; `unknown` when no agent reported a policy."""
    if node.held:
        return node.held[0]
    return DASH if node.policy == state.POLICY_OPEN else state.POLICY_UNKNOWN


def _next_window(node: model.NodeView) -> str:
    if node.next_window:
        return node.next_window
    return DASH if node.policy != state.POLICY_UNKNOWN else state.POLICY_UNKNOWN


def nodes_table(fleet: model.Fleet, cfg: FleetConfig, now: float) -> str:
    keys = [ds.key for ds in fleet.daemonsets]
    # One VERSION column per DaemonSet, headed by its name (with its namespace where names repeat).
    names = [ds.name for ds in fleet.daemonsets]
    version_headers = ["VERSION" if len(keys) == 1 else
                       (ds.name if names.count(ds.name) == 1 else ds.key).upper() for ds in fleet.daemonsets]
    headers = ["NODE", "READY", "HELD", "NEXT WINDOW", *version_headers, "LAST OUTCOME"]
    if cfg.output == "wide":
        headers += ["STATE", "LAST SEEN", "WHY"]
    rows = []
    for node in fleet.nodes:
        row = [node.name, node.ready, _held(node), _next_window(node),
               *[_version(node.versions.get(key)) for key in keys], _outcome(node, now)]
        if cfg.output == "wide":
            seen = f"{human_duration(max(0.0, now - node.last_seen))} ago" if node.last_seen is not None else DASH
            row += [node.state.value, seen, node.why or DASH]
        rows.append(row)
    return table.render(headers, rows)


def as_json(fleet: model.Fleet, cfg: FleetConfig) -> str:
    if cfg.nodes:
        doc: JSON = {"kind": "FleetNodeList", "items": [n.to_json() for n in fleet.nodes]}
    else:
        doc = {"kind": "FleetList", "items": [d.to_json() for d in fleet.daemonsets]}
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def view(listed: Listed, cfg: FleetConfig, now: float) -> model.Fleet:
    """The fleet as this view shows it: with DS, only its nodes; with `-l` on nodes, only those selected."""
    fleet = model.build(listed.daemonsets, listed.pods, listed.nodes, listed.events, now, listed.revisions,
                        listed.leases, listed.plans)
    if cfg.nodes:
        in_ds = {n for ds in fleet.daemonsets for n in ds.pods}
        if cfg.daemonset:
            fleet.nodes = [n for n in fleet.nodes if n.name in in_ds]
        if listed.selected is not None:
            fleet.nodes = [n for n in fleet.nodes if n.name in listed.selected]
    return fleet


def render(listed: Listed, cfg: FleetConfig, now: float) -> tuple[str, str]:
    """(stdout, stderr) for what was listed."""
    fleet = view(listed, cfg, now)
    notes = "".join(f"{note}\n" for note in listed.notes)
    if cfg.output == "json":
        return as_json(fleet, cfg), notes
    if cfg.output == "name":  # as kubectl's -o name (shell completion reads it)
        names = [f"node/{n.name}" for n in fleet.nodes] if cfg.nodes else \
            [f"daemonset.apps/{d.name}" for d in fleet.daemonsets]
        return "".join(f"{name}\n" for name in names), notes
    where = "any namespace" if cfg.all_namespaces else f"{cfg.namespace} namespace"
    if cfg.nodes:
        if not fleet.nodes:
            return "", notes + "No nodes found.\n"
        return nodes_table(fleet, cfg, now), notes
    if not fleet.daemonsets:
        return "", f"No managed DaemonSets found in {where}.\n"
    return daemonsets_table(fleet, cfg), ""


def rows_of(fleet: model.Fleet, cfg: FleetConfig, now: float) -> tuple[str, dict[str, tuple[str, object]]]:
    """For `--watch`: the header ("" for JSON) and, per row (node or namespace/name), its line and what it
    says, without the times that move by themselves (LAST SEEN, bake left), so only real changes print."""
    items: list[model.NodeView] | list[model.DaemonSetView] = fleet.nodes if cfg.nodes else fleet.daemonsets
    keys = [n.name for n in fleet.nodes] if cfg.nodes else [d.key for d in fleet.daemonsets]
    docs = [item.to_json() for item in items]
    signatures = [{k: v for k, v in doc.items() if k not in ("lastSeen", "bakeLeftSeconds")} for doc in docs]
    if cfg.output == "json":
        lines = [json.dumps(doc, separators=(",", ":")) for doc in docs]
        header = ""
    elif cfg.output == "name":
        lines = [f"node/{key}" if cfg.nodes else f"daemonset.apps/{key.split('/', 1)[1]}" for key in keys]
        header = ""
    else:
        text = nodes_table(fleet, cfg, now) if cfg.nodes else daemonsets_table(fleet, cfg)
        header, *lines = text.rstrip("\n").split("\n")
    return header, {key: (line, sig) for key, line, sig in zip(keys, lines, signatures, strict=True)}


def in_namespace(cfg: FleetConfig, client: KubeClient) -> FleetConfig:
    """Without -n: the kubeconfig context's namespace, else default (as kubectl)."""
    return cfg if cfg.namespace else replace(cfg, namespace=client.namespace or DEFAULT_NAMESPACE)


async def _connect(cfg: FleetConfig) -> KubeClient:
    try:
        client = await KubeClient.connect(cfg.kubeconfig, Timeouts(connect=min(3.0, cfg.request_timeout),
                                                                   request=cfg.request_timeout),
                                          agent=user_agent("fleet"), context=cfg.context)
    except FileNotFoundError as exc:  # a file the operator named is not there: usage, as for every command
        raise FleetError(str(exc), EXIT_USAGE) from exc
    except Exception as exc:  # a malformed kubeconfig surfaces as many different exception types
        raise FleetError(load_problem(exc, cfg.kubeconfig or "KUBECONFIG")) from exc
    return client


async def watch(cfg: FleetConfig, out: TextIO, err: TextIO, *, interval: float = WATCH_INTERVAL) -> None:
    """`--watch`: the table once, then only the rows that changed (as `kubectl get -w`), read every
    `interval` seconds. A lost API server is one warning line, and one when it is back; a refusal ends it."""
    client = await _connect(cfg)
    cfg = in_namespace(cfg, client)
    shown: dict[str, object] | None = None
    down = False
    try:
        while True:
            try:
                listed = await fetch(client, cfg)
            except KubeUnreachable as exc:
                if not down:
                    print(f"edgeagent: warning: cannot reach the API server at {client.host}: {exc}; retrying",
                          file=err, flush=True)
                down = True
                await asyncio.sleep(interval)
                continue
            except KubeError as exc:
                raise FleetError(f"the API server at {client.host} refused: {exc}") from exc
            if down:
                print(f"edgeagent: the API server at {client.host} is reachable again", file=err, flush=True)
                down = False
            header, rows = rows_of(view(listed, cfg, time.time()), cfg, time.time())
            if shown is None:
                err.write("".join(f"{note}\n" for note in listed.notes))
                out.write("".join(f"{line}\n" for line in ([header] if header else []) + [r[0] for r in rows.values()]))
            else:
                out.write("".join(f"{line}\n" for key, (line, sig) in rows.items() if shown.get(key) != sig))
                out.write("".join(f"{key} (gone)\n" for key in shown if key not in rows))
            out.flush()
            shown = {key: sig for key, (_, sig) in rows.items()}
            await asyncio.sleep(interval)
    finally:
        await client.close()


async def run(cfg: FleetConfig) -> tuple[str, str]:
    client = await _connect(cfg)
    cfg = in_namespace(cfg, client)
    try:
        listed = await fetch(client, cfg)
    except KubeUnreachable as exc:
        raise FleetError(f"cannot reach the API server at {client.host}: {exc}") from exc
    except KubeError as exc:
        raise FleetError(f"the API server at {client.host} refused: {exc}") from exc
    finally:
        await client.close()
    return render(listed, cfg, time.time())


def main(cfg: FleetConfig, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    # stdout is the table or the JSON, nothing else; every failure is one line of ours on stderr, so the kube
    # client's own log lines (a 403 logged as a credential problem, a retry) stay out of both.
    with log.quiet(err):
        try:
            if cfg.watch:
                asyncio.run(watch(cfg, out, err))  # until Ctrl-C
                return EXIT_OK
            text, note = asyncio.run(run(cfg))
        except KeyboardInterrupt:
            return EXIT_OK
        except FleetError as exc:
            print(f"edgeagent: error: {exc}", file=err)
            return exc.exit_code
    if note:
        err.write(note)
    out.write(text)
    out.flush()
    return EXIT_OK
