"""`edgeagent rollout status DS [-n NS] [--watch] [--timeout S]`: where a DaemonSet's upgrade stands, per node.

Uses the same node classification as the controller's planner, so what it prints is what the controller
acts on: `up to date`, `outdated`, `NotReady` (skipped until it returns), `unavailable` (being
replaced, or a new pod not yet available) and `held` (its site said not now: `UpgradeHeld` is True, with
the reason).

With a rollout plan (`edgeagent.io/rollout-steps`) it reads the controller's `edgeagent.io/rollout-state`
and ranks the nodes with the very functions the controller uses (`edgeagent.rollout.plan`), so each node
is shown in its wave: upgraded, upgrading (its wave is reached), waiting for wave K, deferred (NotReady, or
held with the site's reason) or failed (the reason the controller recorded). The header says `wave k/n`,
the phase and the bake time left.

Exit 0 when the rollout is complete, 3 while it is still in progress (also when `--watch` times out), 1
when it was aborted or rolled back, or on an error (one line on stderr).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TextIO

from edgeagent.config import RolloutConfig
from edgeagent.contract import (
    ANNOTATION_PAUSED,
    ANNOTATION_ROLLED_BACK_FROM,
    ANNOTATION_UPDATE_STRATEGY,
    LABEL_REVISION_HASH,
)
from edgeagent.controller.revisions import current_hash, newest_revision, owned_by, revision_hash
from edgeagent.controller.rolling import NodeState, NodeView, held_reason, node_state, node_views
from edgeagent.controller.settings import Strategy, roll_settings, select
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable, Timeouts, user_agent
from edgeagent.kube.errors import NotFound
from edgeagent.kube.kubeconfig import load_problem
from edgeagent.kube.objects import annotations_of, labels_of, name_of
from edgeagent.rollout.plan import Plan, Ranking, format_duration, parse_plan, rank
from edgeagent.rollout.state import (
    PHASE_ABORTED,
    PHASE_BAKING,
    PHASE_COMPLETE,
    PHASE_PAUSED,
    PHASE_ROLLED_BACK,
    RolloutState,
    state_of,
)

JSON = dict[str, Any]

EXIT_COMPLETE = 0
EXIT_ERROR = 1
# A rollout that was aborted or rolled back: the version did not make it (scripts must not read it as done).
EXIT_STOPPED = 1
# Scripts tell "not yet" (3) from "broken" (1).
EXIT_IN_PROGRESS = 3
EXIT_USAGE = 2
POLL_INTERVAL = 1.0


class RolloutError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class PlanState:
    """What a node is in a rollout plan (the STATE column when the DaemonSet has a plan)."""

    UPGRADED = "upgraded"
    UPGRADING = "upgrading"
    OFFERED = "upgrade offered"  # OTA: PodNeedUpgrade is True, the node's user decides when
    WAITING = "waiting for wave"
    DEFERRED = "deferred"
    FAILED = "failed"
    ORDER = (UPGRADED, UPGRADING, OFFERED, WAITING, DEFERRED, FAILED)


@dataclass(frozen=True)
class NodeRow:
    node: str
    state: NodeState
    pod: str
    revision: str
    # Why a held node waits: "<reason>: <message>" of its pod's UpgradeHeld condition.
    note: str = ""
    # With a plan: the node's wave (0: not ranked) and what it is in the plan (a PlanState value).
    wave: int = 0
    plan_state: str = ""


@dataclass(frozen=True)
class PlanView:
    """The plan, the controller's state of it (None until the controller wrote one) and the time it was read."""

    plan: Plan
    state: RolloutState | None
    state_problem: str | None
    waves: int
    now: float
    # The state is about the revision shown (not an older one the controller has not replaced yet).
    current: bool
    ranking: Ranking
    rolled_back_from: str = ""

    @property
    def stopped(self) -> bool:
        return self.state is not None and self.state.phase in (PHASE_ABORTED, PHASE_ROLLED_BACK)

    def bake_left(self) -> float | None:
        if self.state is None or self.state.phase != PHASE_BAKING:
            return None
        ends = self.state.bake_ends_at(self.plan)
        return None if ends is None else max(0.0, ends - self.now)

    def describe(self) -> list[str]:
        plan = self.plan
        lines = [f"plan: steps {','.join(str(s) for s in plan.steps)}, bake {format_duration(plan.bake_seconds)}"
                 + (f", groups by label {plan.group_label}" if plan.group_label else "")
                 + f", on-failure {plan.on_failure}"]
        state = self.state
        if state is None:
            why = f" ({self.state_problem})" if self.state_problem else ""
            lines.append(f"wave 0/{self.waves}: not started by the controller yet{why}")
            return lines
        if not self.current and not self.stopped:
            lines.append(f"wave 0/{self.waves}: not started by the controller yet (its state is about revision "
                         f"{state.revision})")
            return lines
        phase = f"wave {state.wave}/{state.waves}: {state.phase}"
        left = self.bake_left()
        if left is not None:
            phase += f", bake left {format_duration(left)}"
        elif state.phase == PHASE_PAUSED:
            phase += f" ({ANNOTATION_PAUSED})"
        counts = (f"{state.upgraded} of {state.nodes} node(s) upgraded, {state.deferred} deferred, "
                  f"{state.failed} failed")
        lines.append(f"{phase}; {counts}")
        if state.phase == PHASE_ROLLED_BACK:
            back_to = state.stable_revision or "the previous revision"
            lines.append(f"revision {state.revision} was rolled back to {back_to}"
                         + (f"; {ANNOTATION_ROLLED_BACK_FROM}={self.rolled_back_from}: it is not rolled again"
                            if self.rolled_back_from else ""))
        if self.stopped:
            for failure in state.failures:
                lines.append(f"failed: {failure.get('node', '?')} ({failure.get('pod', '?')}): "
                             f"{failure.get('reason', '')}")
        return lines


@dataclass(frozen=True)
class Status:
    namespace: str
    name: str
    strategy: str
    revision: str
    revision_settled: bool
    paused: bool
    rows: tuple[NodeRow, ...]
    plan: PlanView | None = None

    @property
    def complete(self) -> bool:
        if self.plan is not None and self.plan.state is not None and self.plan.current:
            return self.plan.state.phase == PHASE_COMPLETE
        return self.revision_settled and all(row.state is NodeState.UP_TO_DATE for row in self.rows)

    @property
    def exit_code(self) -> int:
        if self.plan is not None and self.plan.stopped:
            return EXIT_STOPPED
        return EXIT_COMPLETE if self.complete else EXIT_IN_PROGRESS

    def render(self) -> str:
        strategy = self.strategy or "not managed by edgeagent"
        lines = [f"DaemonSet {self.namespace}/{self.name}: {strategy}, revision {self.revision or '?'}"
                 + ("" if self.revision_settled else " (new revision pending)")
                 + (", paused" if self.paused else "")]
        planned = self.plan is not None and any(r.plan_state for r in self.rows)
        if self.plan is not None:
            lines += self.plan.describe()
        noted = any(r.note for r in self.rows)
        columns: list[tuple[str, list[str]]] = [("NODE", [r.node for r in self.rows])]
        if planned:
            columns += [("WAVE", [str(r.wave or "-") for r in self.rows]),
                        ("STATE", [_plan_state_text(r) for r in self.rows])]
        else:
            columns.append(("STATE", [str(r.state) for r in self.rows]))
        columns += [("POD", [r.pod for r in self.rows]), ("REVISION", [r.revision for r in self.rows])]
        if noted:
            columns.append(("WHY", [r.note for r in self.rows]))
        lines += _table(columns)
        if planned:
            counts = Counter(r.plan_state for r in self.rows)
            summary = ", ".join(f"{counts.get(s, 0)} {'waiting' if s == PlanState.WAITING else s}"
                                for s in PlanState.ORDER if counts.get(s) or s in (PlanState.UPGRADED,))
        else:
            node_counts = Counter(row.state for row in self.rows)
            summary = ", ".join(f"{node_counts.get(state, 0)} {state}" for state in NodeState)
        lines.append(f"{len(self.rows)} node(s): {summary}")
        lines.append(self._verdict())
        return "\n".join(lines)

    def _verdict(self) -> str:
        plan = self.plan
        if plan is not None and plan.state is not None and plan.stopped:
            if plan.state.phase == PHASE_ROLLED_BACK:
                return f"rollout rolled back (revision {plan.state.revision} failed)"
            return f"rollout aborted (revision {plan.state.revision})"
        return "rollout complete" if self.complete else "rollout in progress"


def _plan_state_text(row: NodeRow) -> str:
    return f"{PlanState.WAITING} {row.wave}" if row.plan_state == PlanState.WAITING else row.plan_state


def _table(columns: list[tuple[str, list[str]]]) -> list[str]:
    widths = [max([len(h)] + [len(v) for v in col]) for h, col in columns[:-1]] + [0]
    rows = list(zip(*(col for _, col in columns), strict=True))
    out = ["  ".join(h.ljust(w) for (h, _), w in zip(columns, widths, strict=True)).rstrip()]
    for cells in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return out


def build_status(ds: JSON, pods: list[JSON], nodes: list[JSON], revisions: list[JSON], now: float) -> Status:
    owned_pods = [p for p in pods if owned_by(p, ds)]
    hash_ = current_hash(ds, revisions)
    settled = hash_ is not None
    if hash_ is None:
        newest = newest_revision(ds, revisions)
        hash_ = revision_hash(ds, newest) if newest is not None else ""
    settings, _ = roll_settings(ds)
    by_name = {name_of(n): n for n in nodes}
    views = node_views(ds, owned_pods, by_name, hash_)
    selection = select(ds)
    strategy = selection.strategy.value if selection.strategy else ""
    if not strategy and annotations_of(ds).get(ANNOTATION_UPDATE_STRATEGY):
        strategy = f"ignored ({selection.problem})"
    plan_view = _plan_view(ds, views, by_name, hash_, now)
    failures = _failures(plan_view)
    rows = []
    for view in views:
        pod = view.new or view.old or (view.terminating[0] if view.terminating else None)
        held = held_reason(view)
        state = node_state(view, settings.min_ready_seconds, now)
        note = f"{held[0]}: {held[1]}" if held is not None else ""
        wave, plan_state = 0, ""
        if plan_view is not None:
            wave, plan_state, note = _in_plan(plan_view, view, state, note, failures,
                                              ota=selection.strategy is Strategy.OTA)
        rows.append(NodeRow(
            node=view.name,
            state=state,
            pod=name_of(pod) if pod else "",
            revision=labels_of(pod).get(LABEL_REVISION_HASH, "") if pod else "",
            note=note,
            wave=wave,
            plan_state=plan_state,
        ))
    if plan_view is not None:
        # In the order the nodes receive the revision: the table reads wave by wave.
        position = {name: i for i, name in enumerate(plan_view.ranking.order)}
        rows.sort(key=lambda row: (position.get(row.node, len(position)), row.node))
    return Status(
        namespace=str(ds["metadata"].get("namespace") or ""),
        name=name_of(ds),
        strategy=strategy,
        revision=hash_,
        revision_settled=settled,
        paused=str(annotations_of(ds).get(ANNOTATION_PAUSED, "")).lower() == "true",
        rows=tuple(rows),
        plan=plan_view,
    )


def _plan_view(ds: JSON, views: list[NodeView], nodes: dict[str, JSON], hash_: str, now: float) -> PlanView | None:
    plan, _ = parse_plan(ds)
    if plan is None:
        return None
    state, problem = state_of(ds)
    ranking = rank(plan, {v.name: labels_of(v.node) if v.node is not None else {} for v in views})
    return PlanView(plan=plan, state=state, state_problem=problem, waves=ranking.waves, now=now,
                    current=state is not None and state.revision == hash_,
                    ranking=ranking, rolled_back_from=str(annotations_of(ds).get(ANNOTATION_ROLLED_BACK_FROM) or ""))


def _failures(plan_view: PlanView | None) -> dict[str, str]:
    if plan_view is None or plan_view.state is None or not (plan_view.current or plan_view.stopped):
        return {}
    return {f.get("node", ""): f.get("reason", "") for f in plan_view.state.failures}


def _in_plan(plan_view: PlanView, view: NodeView, state: NodeState, note: str, failures: dict[str, str], *,
             ota: bool) -> tuple[int, str, str]:
    """(wave, plan state, why) of one node."""
    wave = plan_view.ranking.wave_of(view.name) or 0
    if state is NodeState.UP_TO_DATE:
        return wave, PlanState.UPGRADED, note
    if view.name in failures:
        return wave, PlanState.FAILED, failures[view.name]
    live = plan_view.state if plan_view.current else None
    # Rolled back: the template is the last good revision again and reaches every node the usual way.
    rolled_back = plan_view.stopped and not plan_view.current
    reached = rolled_back or (live is not None and wave <= live.wave)
    if not reached:
        why = "NotReady" if state is NodeState.NOT_READY else note
        return wave, PlanState.WAITING, why
    if state is NodeState.NOT_READY:
        return wave, PlanState.DEFERRED, "NotReady"
    if state is NodeState.HELD:
        return wave, PlanState.DEFERRED, f"held: {note}"
    return wave, PlanState.OFFERED if ota and state is NodeState.OUTDATED else PlanState.UPGRADING, note


async def fetch_daemonset(client: KubeClient, namespace: str, name: str) -> JSON:
    try:
        return await client.get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
    except NotFound as exc:
        raise RolloutError(f'daemonset "{name}" not found in namespace "{namespace}"') from exc


async def fetch_status(client: KubeClient, namespace: str, name: str) -> Status:
    ds = await fetch_daemonset(client, namespace, name)
    pods = await client.get(f"/api/v1/namespaces/{namespace}/pods")
    nodes = await client.get("/api/v1/nodes")
    revisions = await client.get(f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions")
    return build_status(ds, list(pods.get("items") or []), list(nodes.get("items") or []),
                        list(revisions.get("items") or []), time.time())


async def connect(cfg: RolloutConfig) -> KubeClient:
    try:
        return await KubeClient.connect(cfg.kubeconfig, Timeouts(connect=3, request=10), agent=user_agent("cli"))
    except FileNotFoundError as exc:  # a file the operator named is not there: usage, like --token-file
        raise RolloutError(str(exc), EXIT_USAGE) from exc
    except Exception as exc:  # malformed kubeconfig
        raise RolloutError(load_problem(exc, cfg.kubeconfig or "KUBECONFIG")) from exc


async def run_status(cfg: RolloutConfig, out: TextIO) -> int:
    client = await connect(cfg)
    try:
        deadline = time.monotonic() + cfg.timeout if cfg.timeout > 0 else None
        last = ""
        while True:
            status = await fetch_status(client, cfg.namespace, cfg.daemonset)
            text = status.render()
            if text != last:
                print(text if not last else "\n" + text, file=out, flush=True)
                last = text
            code = status.exit_code
            if code != EXIT_IN_PROGRESS or not cfg.watch:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                print(f"timed out after {cfg.timeout:g}s waiting for the rollout", file=out, flush=True)
                return EXIT_IN_PROGRESS
            await asyncio.sleep(POLL_INTERVAL)
    finally:
        await client.close()


def run_reporting_errors(command: Callable[[RolloutConfig, TextIO], Coroutine[Any, Any, int]], cfg: RolloutConfig, *,
                         out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run one `rollout` subcommand; any error is one line on stderr and exit 1."""
    try:
        return asyncio.run(command(cfg, out or sys.stdout))
    except RolloutError as exc:
        print(f"edgeagent: error: {exc}", file=err or sys.stderr)
        return exc.exit_code
    except KubeError as exc:
        print(f"edgeagent: error: the API server refused: {exc}", file=err or sys.stderr)
    except KubeUnreachable as exc:
        print(f"edgeagent: error: cannot reach the API server: {exc}", file=err or sys.stderr)
    return EXIT_ERROR


def main(cfg: RolloutConfig, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_reporting_errors(run_status, cfg, out=out, err=err)
