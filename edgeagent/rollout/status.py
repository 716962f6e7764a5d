"""`edgeagent rollout status DS`: where a DaemonSet's rollout stands, read from its RolloutPlan
(`edgeagent.io/v1alpha1`) and from what its nodes show.

The plan's `status` (phase, wave, bake left, failures) and each node's state computed by the one state model
(`node_state.node_state`, through `model`), read with the same lists as `edgeagent fleet nodes DS`
(`listing`: list rights are enough): the counts are the fleet's, and the header is written from the same counts
as the table, so the two never disagree. Above `ROLLOUT_SUMMARY_ABOVE` nodes it prints a summary (nodes per
state, per wave, the failed and the offline or held nodes named) unless `--all` or `-o wide`; `--watch` prints
what changes, never the table again (`changes`). `command` connects, runs it and prints.

Exit 0 when the rollout is complete, 3 while in progress (also when `--watch` times out), 1 when it was
aborted or rolled back, or on an error (one line on stderr).
"""

from __future__ import annotations

import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from edgeagent.config import ROLLOUT_SUMMARY_ABOVE
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import labels_of, meta, name_of
from edgeagent.rollout import listing, model, plan_source
from edgeagent.rollout import node_state as rules
from edgeagent.rollout.node_state import State
from edgeagent.rollout.plan import format_duration
from edgeagent.rollout.restore import pending_in_status

JSON = dict[str, Any]

EXIT_COMPLETE = 0
EXIT_ERROR = 1
# A rollout that was aborted or rolled back: the version did not make it (scripts must not read it as done).
EXIT_STOPPED = 1
# Scripts tell "not yet" (3) from "broken" (1).
EXIT_IN_PROGRESS = 3
# In a summary, at most this many nodes are named per list (the rest are counted).
NAMED_IN_SUMMARY = 40
SUMMARY_WIDTH = 110

STOPPED_PHASES = (rules.PHASE_ABORTED, rules.PHASE_ROLLED_BACK)


class RolloutError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class NodeRow:
    node: str
    wave: int | None
    state: State
    why: str
    pod: str
    revision: str

    def to_json(self) -> JSON:
        return {"node": self.node, "wave": self.wave, "state": self.state.value, "why": self.why, "pod": self.pod,
                "revision": self.revision}


@dataclass(frozen=True)
class Status:
    """One read of a DaemonSet's rollout: its fleet view (the one state model) and its RolloutPlan."""

    view: model.DaemonSetView
    plan: JSON | None  # the RolloutPlan object, None without one
    rows: tuple[NodeRow, ...]  # in the order the nodes receive the revision (wave by wave)
    now: float
    # The DaemonSet controller has not observed the DaemonSet's latest template yet: a new revision is coming.
    pending: bool = False

    @property
    def status(self) -> JSON:
        return dict((self.plan or {}).get("status") or {})

    @property
    def phase(self) -> str:
        return self.view.phase

    @property
    def stopped(self) -> bool:
        return self.plan is not None and self.phase in STOPPED_PHASES

    @property
    def complete(self) -> bool:
        return not self.pending and self.phase == rules.PHASE_COMPLETE

    @property
    def exit_code(self) -> int:
        if self.stopped:
            return EXIT_STOPPED
        return EXIT_COMPLETE if self.complete else EXIT_IN_PROGRESS

    def counts(self) -> dict[str, int]:
        return rules.counts(r.state for r in self.rows)

    def to_json(self) -> JSON:
        return {"kind": "RolloutStatus", "namespace": self.view.namespace, "name": self.view.name,
                "model": self.view.model, "revision": self.view.revision, "phase": self.view.phase,
                "wave": self.view.wave, "waves": self.view.waves, "bakeLeftSeconds": self.view.bake_left,
                "nodes": len(self.rows), "states": self.counts(),
                "rolloutPlan": name_of(self.plan) if self.plan is not None else None,
                "status": self.status if self.plan is not None else None,
                "items": [r.to_json() for r in self.rows]}

    # ---------------------------------------------------------------------------------------------- text

    def header(self) -> list[str]:
        view = self.view
        lines = [f"DaemonSet {view.namespace}/{view.name}: {view.model}, revision {view.revision or '?'}"
                 + (" (new revision pending)" if self.pending else "")]
        if self.plan is not None:
            lines.append(self._plan_line())
        lines.append(self._phase_line())
        lines += self._stop_lines()
        return lines

    def _plan_line(self) -> str:
        assert self.plan is not None
        spec = self.plan.get("spec") or {}
        steps = ",".join(str(s) for s in spec.get("steps") or [])
        text = (f"rolloutplan {name_of(self.plan)}: steps {steps}, bake {spec.get('bake') or '0s'}, onFailure "
                f"{spec.get('onFailure') or 'Pause'}")
        if spec.get("groupLabel"):
            text += f", groups by label {spec['groupLabel']}"
        return text

    def _phase_line(self) -> str:
        """Phase and counts, from the same counts as the table (never a count the table contradicts)."""
        view = self.view
        counts = self.counts()
        summed = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no node"
        where = f"wave {view.wave}/{view.waves}: " if view.wave is not None and view.waves is not None else ""
        phase = view.phase or "?"
        if view.bake_left is not None:
            phase += f", bake left {format_duration(view.bake_left)}"
        if self.plan is not None and not self.status:
            phase = "not started by the controller yet (the plan has no status)"
        elif self.plan is not None and (self.plan.get("spec") or {}).get("paused") is True:
            phase += " (spec.paused: true)"
        return f"{where}{phase}; {len(self.rows)} node(s): {summed}"

    def _stop_lines(self) -> list[str]:
        if not self.stopped:
            return []
        status = self.status
        failed = int((status.get("counts") or {}).get("failed") or 0)
        found = status.get("steer")
        steer: JSON = found if isinstance(found, dict) else {}
        by_operator = steer.get("verb") in ("abort", "undo") and steer.get("result") == "Done"
        why = ("by the operator (rollout " + str(steer.get("verb")) + ")" if by_operator and not failed
               else f"after {failed} failure(s)" if failed else "")
        lines: list[str] = []
        if self.phase == rules.PHASE_ROLLED_BACK:
            lines.append(f"revision {status.get('revision')} was rolled back to {status.get('stableRevision') or '?'}"
                         + (f" {why}" if why else "") + ": it is not rolled again by itself")
            if pending_in_status(status):
                lines.append("the DaemonSet's template is not restored yet (TemplateRestored=False): the controller "
                             "restores it while the DaemonSet is unchanged")
        else:
            lines.append(f"the rollout of revision {status.get('revision')} was aborted" + (f" {why}" if why else "")
                         + ": `rollout retry` goes on, `rollout undo` rolls back")
        for failure in status.get("failures") or []:
            if isinstance(failure, dict):
                lines.append(f"failed: {failure.get('node', '?')} ({failure.get('pod', '?')}): "
                             f"{failure.get('reason', '')}")
        return lines

    def verdict(self) -> str:
        if self.stopped:
            word = "rolled back" if self.phase == rules.PHASE_ROLLED_BACK else "aborted"
            return f"rollout {word} (revision {self.status.get('revision')})"
        return "rollout complete" if self.complete else "rollout in progress"

    def table(self) -> list[str]:
        planned = any(r.wave is not None for r in self.rows)
        columns: list[tuple[str, list[str]]] = [("NODE", [r.node for r in self.rows])]
        if planned:
            columns.append(("WAVE", [str(r.wave or "-") for r in self.rows]))
        columns += [("STATE", [r.state.value for r in self.rows]), ("POD", [r.pod or "-" for r in self.rows]),
                    ("REVISION", [r.revision or "-" for r in self.rows]), ("WHY", [r.why for r in self.rows])]
        return _table(columns)

    def summary(self) -> list[str]:
        """At fleet scale: nodes per state, per wave, and the nodes that need a look named (bounded)."""
        counts = self.counts()
        lines = ["STATE                 NODES"] + [f"{s:<22}{n}" for s, n in counts.items() if n]
        waves = sorted({r.wave for r in self.rows if r.wave is not None})
        if waves:
            shown = [s for s in State if counts[s.value]]
            by_wave = {w: Counter(r.state for r in self.rows if r.wave == w) for w in waves}
            columns: list[tuple[str, list[str]]] = [("WAVE", [str(w) for w in waves]),
                                                    ("NODES", [str(sum(by_wave[w].values())) for w in waves])]
            columns += [(s.value.upper(), [str(by_wave[w][s]) for w in waves]) for s in shown]
            lines += ["", *_table(columns)]
        for state in (State.FAILED, State.OFFLINE, State.HELD):
            named = [r for r in self.rows if r.state is state]
            if named:
                lines.append("")
                lines += _named(state.value, named, by_why=state is State.FAILED)
        lines.append(f"(a summary of {len(self.rows)} nodes: --all or -o wide lists every node)")
        return lines

    def render(self, *, every_node: bool) -> str:
        body = self.table() if every_node or len(self.rows) <= ROLLOUT_SUMMARY_ABOVE else self.summary()
        return "\n".join([*self.header(), *body, self.verdict()])


def _named(title: str, rows: list[NodeRow], *, by_why: bool) -> list[str]:
    """The nodes of one state by name (at most NAMED_IN_SUMMARY, the rest counted); failed ones grouped by why,
    the most common reasons first (at most three reasons named)."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        groups.setdefault(row.why if by_why else "", []).append(row.node)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    lines = [f"{title} ({len(rows)}):"]
    budget = NAMED_IN_SUMMARY
    for why, names in ordered[:3]:
        shown = names[:budget]
        budget -= len(shown)
        text = ", ".join(shown) + (f", and {len(names) - len(shown)} more" if len(names) > len(shown) else "")
        lines += textwrap.wrap(f"{why} ({len(names)}): {text}" if why else text, SUMMARY_WIDTH,
                               initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
    if len(ordered) > 3:
        lines.append(f"  and {sum(len(n) for _, n in ordered[3:])} more node(s) with {len(ordered) - 3} other "
                     "reason(s)")
    return lines


def _table(columns: list[tuple[str, list[str]]]) -> list[str]:
    widths = [max([len(h)] + [len(v) for v in col]) for h, col in columns[:-1]] + [0]
    rows = list(zip(*(col for _, col in columns), strict=True))
    out = ["  ".join(h.ljust(w) for (h, _), w in zip(columns, widths, strict=True)).rstrip()]
    for cells in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return out


def build_status(listed: listing.Listed, namespace: str, name: str, now: float) -> Status:
    """The DaemonSet's view through the fleet's one state model, with each node's wave when a plan rolls."""
    fleet = model.build(listed.daemonsets, listed.pods, listed.nodes, listed.events, now, listed.revisions,
                        plans=listed.plans)
    view = next((v for v in fleet.daemonsets if v.namespace == namespace and v.name == name), None)
    if view is None:
        raise RolloutError(f'daemonset "{name}" not found in namespace "{namespace}"')
    by_ds = plan_source.index(listed.plans)
    plan = by_ds.get((namespace, name))
    if (namespace, name) in by_ds and plan is None:
        raise RolloutError(f'two or more rolloutplans name daemonset "{name}" in namespace "{namespace}": the '
                           "controller moves none of them; delete all but one")
    ds = listed.daemonsets[0]
    status = rules.relevant(plan_source.status_of(ds, by_ds), view.revision)
    spec = plan_source.plan_of(ds, by_ds)
    nodes = {name_of(n): n for n in listed.nodes}
    ranking = plan_source.ranking(spec, status, {n: labels_of(nodes.get(n) or {}) for n in view.pods})
    rows = [NodeRow(node=n, wave=ranking.wave_of(n) if ranking is not None else None, state=cell.state,
                    why=cell.why, pod=cell.pod, revision=cell.revision) for n, cell in view.pods.items()]
    if ranking is not None:
        position = {node: i for i, node in enumerate(ranking.order)}
        rows.sort(key=lambda r: (position.get(r.node, len(position)), r.node))
    generation = model.int_or_none(meta(ds).get("generation"))
    observed = model.int_or_none((ds.get("status") or {}).get("observedGeneration"))
    pending = generation is not None and (observed is None or observed < generation)
    return Status(view=view, plan=plan, rows=tuple(rows), now=now, pending=pending)


async def fetch_status(client: KubeClient, namespace: str, name: str) -> Status:
    """Read the lists `edgeagent fleet nodes DS` reads, and build the status from them."""
    try:
        listed = await listing.fetch(client, listing.Query(namespace=namespace, nodes=True, daemonset=name))
    except listing.ListError as exc:
        raise RolloutError(str(exc)) from exc
    return build_status(listed, namespace, name, time.time())


def changes(before: Status, after: Status, *, every_node: bool) -> list[str]:
    """What `--watch` prints after the first table: the header lines that changed, and the nodes whose state
    changed (above the summary size, only their number per state when many moved at once)."""
    lines = [line for line in after.header() if line not in before.header()]
    was = {r.node: r.state for r in before.rows}
    moved = [r for r in after.rows if was.get(r.node) is not r.state]
    if every_node or len(after.rows) <= ROLLOUT_SUMMARY_ABOVE or len(moved) <= NAMED_IN_SUMMARY // 4:
        lines += [f"{r.node}: {was[r.node].value + ' -> ' if r.node in was else ''}{r.state.value}"
                  + (f" ({r.why})" if r.why else "") for r in moved]
    elif moved:
        tally = Counter(r.state.value for r in moved)
        lines.append(f"{len(moved)} node(s) moved: " + ", ".join(f"{n} now {s}" for s, n in tally.items()))
    return lines
