"""`edgeagent rollout status DS [-n NS] [--watch] [--timeout S]`: where a DaemonSet's upgrade stands, per node.

Uses the same node classification as the controller's planner, so what it prints is what the controller
acts on: `up to date`, `outdated`, `NotReady` (skipped until it returns), `unavailable` (being
replaced, or a new pod not yet available) and `held` (its site said not now: `UpgradeHeld` is True, with
the reason). Exit 0 when every node runs an available pod of the current revision, 3 while the rollout
is still in progress (also when `--watch` times out), 1 on an error (one line on stderr).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, TextIO

from edgeagent.config import RolloutConfig
from edgeagent.contract import ANNOTATION_PAUSED, ANNOTATION_UPDATE_STRATEGY, LABEL_REVISION_HASH
from edgeagent.controller.revisions import current_hash, newest_revision, owned_by, revision_hash
from edgeagent.controller.rolling import NodeState, held_reason, node_state, node_views
from edgeagent.controller.settings import roll_settings, select
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable, Timeouts, user_agent
from edgeagent.kube.kubeconfig import load_problem
from edgeagent.kube.objects import annotations_of, labels_of, name_of

JSON = dict[str, Any]

EXIT_COMPLETE = 0
EXIT_ERROR = 1
# docs/cli.md (exit codes): scripts tell "not yet" (3) from "broken" (1).
EXIT_IN_PROGRESS = 3
EXIT_USAGE = 2
POLL_INTERVAL = 1.0


class RolloutError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class NodeRow:
    node: str
    state: NodeState
    pod: str
    revision: str
    # Why a held node waits: "<reason>: <message>" of its pod's UpgradeHeld condition.
    note: str = ""


@dataclass(frozen=True)
class Status:
    namespace: str
    name: str
    strategy: str
    revision: str
    revision_settled: bool
    paused: bool
    rows: tuple[NodeRow, ...]

    @property
    def complete(self) -> bool:
        return self.revision_settled and all(row.state is NodeState.UP_TO_DATE for row in self.rows)

    def render(self) -> str:
        strategy = self.strategy or "not managed by edgeagent"
        lines = [f"DaemonSet {self.namespace}/{self.name}: {strategy}, revision {self.revision or '?'}"
                 + ("" if self.revision_settled else " (new revision pending)")
                 + (", paused" if self.paused else "")]
        noted = any(r.note for r in self.rows)
        columns: list[tuple[str, list[str]]] = [
            ("NODE", [r.node for r in self.rows]), ("STATE", [str(r.state) for r in self.rows]),
            ("POD", [r.pod for r in self.rows]), ("REVISION", [r.revision for r in self.rows]),
        ]
        if noted:
            columns.append(("WHY", [r.note for r in self.rows]))
        widths = [max([len(h)] + [len(v) for v in col]) for h, col in columns[:-1]] + [0]
        header = tuple(h for h, _ in columns)
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        for row in self.rows:
            cells = (row.node, str(row.state), row.pod, row.revision, *((row.note,) if noted else ()))
            lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        counts = Counter(row.state for row in self.rows)
        summary = ", ".join(f"{counts.get(state, 0)} {state}" for state in NodeState)
        lines.append(f"{len(self.rows)} node(s): {summary}")
        lines.append("rollout complete" if self.complete else "rollout in progress")
        return "\n".join(lines)


def build_status(ds: JSON, pods: list[JSON], nodes: list[JSON], revisions: list[JSON], now: float) -> Status:
    owned_pods = [p for p in pods if owned_by(p, ds)]
    hash_ = current_hash(ds, revisions)
    settled = hash_ is not None
    if hash_ is None:
        newest = newest_revision(ds, revisions)
        hash_ = revision_hash(ds, newest) if newest is not None else ""
    settings, _ = roll_settings(ds)
    views = node_views(ds, owned_pods, {name_of(n): n for n in nodes}, hash_)
    rows = []
    for view in views:
        pod = view.new or view.old or (view.terminating[0] if view.terminating else None)
        held = held_reason(view)
        rows.append(NodeRow(
            node=view.name,
            state=node_state(view, settings.min_ready_seconds, now),
            pod=name_of(pod) if pod else "",
            revision=labels_of(pod).get(LABEL_REVISION_HASH, "") if pod else "",
            note=f"{held[0]}: {held[1]}" if held is not None else "",
        ))
    selection = select(ds)
    strategy = selection.strategy.value if selection.strategy else ""
    if not strategy and annotations_of(ds).get(ANNOTATION_UPDATE_STRATEGY):
        strategy = f"ignored ({selection.problem})"
    return Status(
        namespace=str(ds["metadata"].get("namespace") or ""),
        name=name_of(ds),
        strategy=strategy,
        revision=hash_,
        revision_settled=settled,
        paused=str(annotations_of(ds).get(ANNOTATION_PAUSED, "")).lower() == "true",
        rows=tuple(rows),
    )


async def fetch_status(client: KubeClient, namespace: str, name: str) -> Status:
    try:
        ds = await client.get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
    except KubeError as exc:
        if exc.code == 404:
            raise RolloutError(f'daemonset "{name}" not found in namespace "{namespace}"') from exc
        raise
    pods = await client.get(f"/api/v1/namespaces/{namespace}/pods")
    nodes = await client.get("/api/v1/nodes")
    revisions = await client.get(f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions")
    return build_status(ds, list(pods.get("items") or []), list(nodes.get("items") or []),
                        list(revisions.get("items") or []), time.time())


async def run_status(cfg: RolloutConfig, out: TextIO) -> int:
    try:
        client = await KubeClient.connect(cfg.kubeconfig, Timeouts(connect=3, request=10),
                                        agent=user_agent("cli"))
    except FileNotFoundError as exc:  # a file the operator named is not there: usage, like --token-file
        raise RolloutError(str(exc), EXIT_USAGE) from exc
    except Exception as exc:  # malformed kubeconfig
        raise RolloutError(load_problem(exc, cfg.kubeconfig or "KUBECONFIG")) from exc
    try:
        deadline = time.monotonic() + cfg.timeout if cfg.timeout > 0 else None
        last = ""
        while True:
            status = await fetch_status(client, cfg.namespace, cfg.daemonset)
            text = status.render()
            if text != last:
                print(text if not last else "\n" + text, file=out, flush=True)
                last = text
            if status.complete:
                return EXIT_COMPLETE
            if not cfg.watch:
                return EXIT_IN_PROGRESS
            if deadline is not None and time.monotonic() >= deadline:
                print(f"timed out after {cfg.timeout:g}s waiting for the rollout", file=out, flush=True)
                return EXIT_IN_PROGRESS
            await asyncio.sleep(POLL_INTERVAL)
    finally:
        await client.close()


def main(cfg: RolloutConfig, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        return asyncio.run(run_status(cfg, out))
    except RolloutError as exc:
        print(f"edgeagent: error: {exc}", file=err)
        return exc.exit_code
    except KubeError as exc:
        print(f"edgeagent: error: the API server refused: {exc}", file=err)
    except KubeUnreachable as exc:
        print(f"edgeagent: error: cannot reach the API server: {exc}", file=err)
    return EXIT_ERROR
