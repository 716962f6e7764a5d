"""`rollout status` as a view of the fleet's one state model (issues 35 and 36): its counts are the fleet's,
its header never contradicts its table, above 50 nodes it prints a bounded summary, `--watch` prints changes."""

from __future__ import annotations

from typing import Any

from edgeagent.rollout.listing import Listed
from edgeagent.rollout.node_state import FAILURE_CONDITION, State
from edgeagent.rollout.status import Status, build_status, changes
from tests.unit.test_controller_objects import T0, daemonset, node, pod, revision

JSON = dict[str, Any]
OTA = {"apps.openyurt.io/update-strategy": "OTA"}
NEW, OLD = "new", "old"


def plan(steps: list[Any], status: JSON | None = None, **spec: Any) -> JSON:
    return {"apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan",
            "metadata": {"name": "web", "namespace": "default", "uid": "plan-uid"},
            "spec": {"daemonSet": "web", "steps": steps, **spec}, "status": status or {}}


def plan_status(phase: str, wave: int, waves: int, **extra: Any) -> JSON:
    return {"revision": NEW, "phase": phase, "wave": wave, "waves": waves,
            "counts": {"nodes": 0, "upgraded": 0, "waiting": 0, "deferred": 0, "failed": 0}, **extra}


def fleet(n: int, state_of: Any, the_plan: JSON | None) -> Listed:
    """n nodes edge-0..; `state_of(i)` says what node i shows: up, old, failed, offline or held."""
    ds = daemonset(annotations=OTA)
    pods, nodes = [], []
    for i in range(n):
        name = f"edge-{i}"
        kind = state_of(i)
        extra = []
        if kind == "failed":
            extra = [{"type": FAILURE_CONDITION, "status": "True", "reason": "ReplacementNotReady",
                      "message": f"revision {NEW}: CrashLoopBackOff"}]
        if kind == "held":
            extra = [{"type": "UpgradeHeld", "status": "True", "reason": "OperatorHold", "message": "site closed"}]
        # A failure counts only when its node reports it about the pod's own revision (the new one).
        new = kind in ("up", "failed")
        pods.append(pod(f"web-{i}", name, NEW if new else OLD, extra_conditions=extra, generation=2 if new else 1))
        nodes.append(node(name, ready=kind != "offline"))
    return Listed(daemonsets=[ds], pods=pods, nodes=nodes, events=[], revisions=[revision(ds, NEW, 2)],
                  plans=[the_plan] if the_plan is not None else [])


def test_at_1000_nodes_a_summary_under_60_lines_naming_the_failed_and_deferred_nodes() -> None:
    def kind(i: int) -> str:
        return "failed" if i % 33 == 0 else "offline" if i % 17 == 1 else "held" if i % 97 == 2 else \
            "up" if i % 2 else "old"

    listed = fleet(1000, kind, plan([1, "10%", "50%", "100%"], plan_status("Progressing", 3, 4)))
    status = build_status(listed, "default", "web", T0)
    text = status.render(every_node=False)
    lines = text.splitlines()
    assert len(lines) < 60, text
    counts = status.counts()
    assert sum(counts.values()) == 1000
    for state, n in counts.items():
        if n:
            assert any(line.split("  ")[0].strip() == state and line.endswith(str(n)) for line in lines), state
    # Each failed and each offline node is named (at most 40 per list, the rest counted).
    failed = [r.node for r in status.rows if r.state is State.FAILED]
    offline = [r.node for r in status.rows if r.state is State.OFFLINE]
    assert len(failed) == 31 and all(n in text for n in failed)
    assert "  ReplacementNotReady: CrashLoopBackOff (31): " in text
    assert len(offline) > 20 and all(n in text for n in offline[:40])
    assert f"and {len(offline) - 40} more" in text
    assert any(line.startswith("WAVE") for line in lines)  # counts per wave
    assert lines[-2] == "(a summary of 1000 nodes: --all or -o wide lists every node)"
    every = status.render(every_node=True).splitlines()
    assert len(every) > 1000


def test_50_nodes_are_a_table_51_a_summary() -> None:
    for n, table in ((50, True), (51, False)):
        status = build_status(fleet(n, lambda i: "up", None), "default", "web", T0)
        lines = status.render(every_node=False).splitlines()
        assert any(line.startswith("NODE ") for line in lines) is table
        assert any(line.startswith("STATE ") for line in lines) is not table


def test_paused_header_counts_are_the_tables() -> None:
    """Paused after the first wave: the header does not say "0 of 6 upgraded" above an up-to-date row."""
    status = build_status(fleet(6, lambda i: "up" if i < 2 else "old",
                                plan([1, "50%", "100%"], plan_status("Paused", 1, 3), paused=True)),
                          "default", "web", T0)
    lines = status.render(every_node=False).splitlines()
    up = sum(1 for r in status.rows if r.state is State.UP_TO_DATE)
    assert up == 2
    assert lines[2].startswith("wave 1/3: Paused (spec.paused: true); 6 node(s): 2 up to date, ")
    table_states = [line.split()[2:] for line in lines[3:-1]]
    assert sum(1 for cells in table_states if cells[:3] == ["up", "to", "date"]) == up
    assert lines[-1] == "rollout in progress"


def test_an_operator_abort_is_not_a_failure() -> None:
    steer = {"id": "0123456789ab", "verb": "abort", "result": "Done", "message": "", "at": "2026-01-01T00:00:00Z"}
    status = build_status(fleet(3, lambda i: "up" if i == 0 else "old",
                                plan([1, "100%"], plan_status("Aborted", 1, 2, steer=steer))), "default", "web", T0)
    text = status.render(every_node=False)
    assert "was aborted by the operator (rollout abort)" in text
    assert "failed" not in text and "failure" not in text  # (the plan line says onFailure)
    assert status.exit_code == 1
    rolled = plan_status("RolledBack", 1, 2, stableRevision=OLD, steer={**steer, "verb": "undo"})
    status = build_status(fleet(3, lambda i: "old", plan([1, "100%"], rolled)), "default", "web", T0)
    text = status.render(every_node=False)
    assert "rolled back to old by the operator (rollout undo)" in text
    assert "failed" not in text and "failure" not in text
    failed = plan_status("RolledBack", 1, 2, stableRevision=OLD,
                         counts={"nodes": 3, "upgraded": 0, "waiting": 2, "deferred": 0, "failed": 1},
                         failures=[{"node": "edge-0", "pod": "default/web-0", "reason": "CrashLoopBackOff"}])
    text = build_status(fleet(3, lambda i: "old", plan([1, "100%"], failed)), "default", "web",
                        T0).render(every_node=False)
    assert "rolled back to old after 1 failure(s)" in text
    assert "failed: edge-0 (default/web-0): CrashLoopBackOff" in text
    assert "not restored yet" not in text


def test_a_rollback_whose_template_restore_is_pending_says_so() -> None:
    pending = {"type": "TemplateRestored", "status": "False", "reason": "Pending", "observedGeneration": 2,
               "message": "the DaemonSet's template is to be restored from revision new to revision old"}
    rolled = plan_status("RolledBack", 1, 2, stableRevision=OLD, conditions=[pending])
    text = build_status(fleet(3, lambda i: "old", plan([1, "100%"], rolled)), "default", "web",
                        T0).render(every_node=False)
    assert "template is not restored yet (TemplateRestored=False)" in text
    done = plan_status("RolledBack", 1, 2, stableRevision=OLD, conditions=[{**pending, "status": "True"}])
    text = build_status(fleet(3, lambda i: "old", plan([1, "100%"], done)), "default", "web",
                        T0).render(every_node=False)
    assert "not restored yet" not in text


def test_watch_prints_the_nodes_that_changed_and_the_header_lines_that_changed() -> None:
    the_plan = plan([1, "50%", "100%"], plan_status("Progressing", 1, 3))
    before = build_status(fleet(6, lambda i: "up" if i == 0 else "old", the_plan), "default", "web", T0)
    after_plan = plan([1, "50%", "100%"], plan_status("Progressing", 2, 3))
    after = build_status(fleet(6, lambda i: "up" if i < 2 else "old", after_plan), "default", "web", T0)
    moved = changes(before, after, every_node=False)
    assert moved[0].startswith("wave 2/3: Progressing; 6 node(s): 2 up to date")
    was = {r.node: r.state for r in before.rows}
    changed = {r.node for r in after.rows if was[r.node] is not r.state}
    assert {line.split(":")[0] for line in moved[1:]} == changed and "edge-0" not in changed
    assert any(line.startswith("edge-1: ") and line.endswith("-> up to date") for line in moved)
    assert not any(line.startswith(("NODE", "DaemonSet", "rolloutplan")) for line in moved)
    assert changes(after, after, every_node=False) == []


def test_many_moves_at_scale_are_counted_not_listed() -> None:
    the_plan = plan([1, "50%", "100%"], plan_status("Progressing", 3, 3))
    before: Status = build_status(fleet(200, lambda i: "old", the_plan), "default", "web", T0)
    after = build_status(fleet(200, lambda i: "up" if i < 100 else "old", the_plan), "default", "web", T0)
    moved = changes(before, after, every_node=False)
    assert len(moved) <= 3
    assert moved[-1] == "100 node(s) moved: 100 now up to date"
    assert len(changes(before, after, every_node=True)) > 100
