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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from edgeagent.durations import format_duration
from edgeagent.fleet import model, table
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable, Timeouts, user_agent
from edgeagent.kube.errors import NotFound
from edgeagent.kube.kubeconfig import load_problem
from edgeagent.kube.timeutil import human_duration

JSON = dict[str, Any]
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
DASH = "-"


@dataclass(frozen=True)
class FleetConfig:
    namespace: str = "default"
    all_namespaces: bool = False
    output: str = ""  # "", "wide" or "json"
    selector: str = ""
    nodes: bool = False  # `fleet nodes`
    daemonset: str = ""  # `fleet nodes DS`
    kubeconfig: Path | None = None
    request_timeout: float = 15.0  # seconds for each list call (not a flag; tests shorten it)


class FleetError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Listed:
    daemonsets: list[JSON]
    pods: list[JSON]
    nodes: list[JSON]
    events: list[JSON]
    revisions: list[JSON]


async def _items(client: KubeClient, path: str, query: dict[str, str | int | bool] | None = None) -> list[JSON]:
    """Every item of a list, page by page (a 10,000-node fleet must not be one response)."""
    items: list[JSON] = []
    token = ""
    while True:
        params: dict[str, str | int | bool] = {**(query or {}), "limit": 500}
        if token:
            params["continue"] = token
        page = await client.get(path, query=params)
        items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return items


async def fetch(client: KubeClient, cfg: FleetConfig) -> Listed:
    scope = "" if cfg.all_namespaces else f"/namespaces/{cfg.namespace}"
    if cfg.daemonset:
        try:
            daemonsets = [await client.get(f"/apis/apps/v1/namespaces/{cfg.namespace}/daemonsets/{cfg.daemonset}")]
        except NotFound as exc:
            raise FleetError(f'daemonset "{cfg.daemonset}" not found in namespace "{cfg.namespace}"') from exc
        if not model.is_managed(daemonsets[0]):
            raise FleetError(f'daemonset "{cfg.daemonset}" in namespace "{cfg.namespace}" is not managed by '
                             "edgeagent (it has no apps.openyurt.io/update-strategy annotation)")
    else:
        ds_query: dict[str, str | int | bool] = {"labelSelector": cfg.selector} if cfg.selector and not cfg.nodes \
            else {}
        daemonsets = await _items(client, f"/apis/apps/v1{scope}/daemonsets", ds_query)
    node_query: dict[str, str | int | bool] = {"labelSelector": cfg.selector} if cfg.selector and cfg.nodes else {}
    pods, nodes, events, revisions = await asyncio.gather(
        _items(client, f"/api/v1{scope}/pods"),
        _items(client, "/api/v1/nodes", node_query),
        _items(client, f"/api/v1{scope}/events", {"fieldSelector": f"source={model.AGENT_COMPONENT}"}),
        _items(client, f"/apis/apps/v1{scope}/controllerrevisions"),
    )
    return Listed(daemonsets, pods, nodes, events, revisions)


def _wave(view: model.DaemonSetView) -> str:
    return f"{view.wave}/{view.waves}" if view.wave is not None and view.waves is not None else DASH


def daemonsets_table(fleet: model.Fleet, cfg: FleetConfig) -> str:
    headers = ["NAME", "MODEL", "REVISION", "UP-TO-DATE", "WAVE", "PHASE", "HELD", "OFFLINE", "FAILED"]
    if cfg.output == "wide":
        headers += ["UPGRADING", "WAITING", "BAKE LEFT"]
    if cfg.all_namespaces:
        headers.insert(0, "NAMESPACE")
    rows = []
    for ds in fleet.daemonsets:
        row = [ds.name, ds.model, ds.revision or DASH, f"{ds.up_to_date}/{ds.desired}", _wave(ds), ds.phase,
               str(ds.held), str(ds.count(model.State.OFFLINE)), str(ds.count(model.State.FAILED))]
        if cfg.output == "wide":
            row += [str(ds.count(model.State.UPGRADING)), str(ds.count(model.State.WAITING)),
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
    revision = pod.revision or "?"
    return revision if pod.current else f"{revision} (outdated)"


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
        row = [node.name, node.ready, node.held[0] if node.held else DASH, node.next_window or DASH,
               *[_version(node.versions.get(key)) for key in keys], _outcome(node, now)]
        if cfg.output == "wide":
            why = node.held[1] if node.held else next((p.why for p in node.versions.values() if p.why), "")
            seen = f"{human_duration(now - node.last_seen)} ago" if node.last_seen is not None else DASH
            row += [node.state.value, seen, why or DASH]
        rows.append(row)
    return table.render(headers, rows)


def as_json(fleet: model.Fleet, cfg: FleetConfig) -> str:
    if cfg.nodes:
        doc: JSON = {"kind": "FleetNodeList", "items": [n.to_json() for n in fleet.nodes]}
    else:
        doc = {"kind": "FleetList", "items": [d.to_json() for d in fleet.daemonsets]}
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def render(listed: Listed, cfg: FleetConfig, now: float) -> tuple[str, str]:
    """(stdout, stderr) for what was listed."""
    fleet = model.build(listed.daemonsets, listed.pods, listed.nodes, listed.events, now, listed.revisions)
    if cfg.nodes:
        in_ds = {n for ds in fleet.daemonsets for n in ds.pods}
        if cfg.daemonset:
            fleet.nodes = [n for n in fleet.nodes if n.name in in_ds]
    if cfg.output == "json":
        return as_json(fleet, cfg), ""
    where = "any namespace" if cfg.all_namespaces else f"{cfg.namespace} namespace"
    if cfg.nodes:
        if not fleet.nodes:
            return "", "No nodes found.\n"
        return nodes_table(fleet, cfg, now), ""
    if not fleet.daemonsets:
        return "", f"No managed DaemonSets found in {where}.\n"
    return daemonsets_table(fleet, cfg), ""


async def run(cfg: FleetConfig) -> tuple[str, str]:
    try:
        client = await KubeClient.connect(cfg.kubeconfig, Timeouts(connect=min(3.0, cfg.request_timeout),
                                                                   request=cfg.request_timeout),
                                          agent=user_agent("fleet"))
    except FileNotFoundError as exc:  # a file the operator named is not there: usage, as for every command
        raise FleetError(str(exc), EXIT_USAGE) from exc
    except Exception as exc:  # a malformed kubeconfig surfaces as many different exception types
        raise FleetError(load_problem(exc, cfg.kubeconfig or "KUBECONFIG")) from exc
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
    try:
        text, note = asyncio.run(run(cfg))
    except FleetError as exc:
        print(f"edgeagent: error: {exc}", file=err)
        return exc.exit_code
    if note:
        err.write(note)
    out.write(text)
    out.flush()
    return EXIT_OK
