"""The soak checker reports each kind of violation it exists for, and stays silent on a clean history.

Histories are built by hand in the shape the sim's audit log and the harness record them (a checker that
cannot fail proves nothing): one test per rule, each with a clean twin so that the rule is not merely noisy.
"""

from __future__ import annotations

import json
from typing import Any

from edgeagent.rollout.plan import parse_plan, rank
from tests.soak.checker import (
    History,
    Violation,
    check,
    credential_episodes,
    credential_summary,
    inplace_summary,
    report,
    tracebacks,
)
from tests.soak.daemon_gaps import ContainerLog

JSON = dict[str, Any]
CONTROLLER = "edgeagent-controller/0.1.0"
NODES = [f"edge-{i}" for i in range(1, 11)]


def agent(node: str) -> str:
    return f"edgeagent-agent/0.1.0 ({node})"


def sibling(node: str, *, hash_: str = "old", ready: bool = True, terminating: bool = False,
            held: bool = False) -> JSON:
    return {"uid": f"uid-{node}-{hash_}", "node": node, "hash": hash_, "ready": ready, "terminating": terminating,
            "held": held, "nodeReady": True}


def delete(node: str, *, by: str = CONTROLLER, uid: str | None = None, precondition: str | None = "same",
           outcome: str = "graceful", conditions: JSON | None = None, annotations: JSON | None = None,
           siblings: list[JSON] | None = None, t: float = 100.0, pod_hash: str = "old", ready: bool = True,
           node_labels: JSON | None = None, current: str = "new") -> JSON:
    uid = uid or f"uid-{node}-{pod_hash}"
    state: JSON = {
        "node": node, "labels": {"controller-revision-hash": pod_hash}, "terminating": False, "ready": ready,
        "conditions": conditions or {}, "nodeReady": True,
        "daemonset": {"name": "web", "uid": "ds-uid", "annotations": {
            "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate", **(annotations or {})},
            "currentHash": current, "siblings": siblings if siblings is not None else [sibling(n) for n in NODES],
            "nodes": {n: True for n in NODES}},
    }
    if node_labels is not None:
        state["nodeLabels"] = node_labels
    return {"time": t, "verb": "DELETE", "path": f"/api/v1/namespaces/default/pods/web-{node}", "userAgent": by,
            "code": 200, "delete": {"resource": "pods", "namespace": "default", "name": f"web-{node}", "uid": uid,
                                    "precondition_uid": uid if precondition == "same" else precondition,
                                    "outcome": outcome, "state": state}}


def clean(**extra: Any) -> History:
    """A history with nothing wrong: converged, every process stopped as planned."""
    values: JSON = {"seed": 7, "started_at": 0.0, "faults_stopped_at": 500.0, "converged_at": 520.0,
                    "convergence_bound": 120.0,
                    "rollouts": [{"name": "web", "exit": 0, "phase": None, "updated": 10, "total": 10}],
                    "processes": [{"name": "agent-edge-1", "code": -9, "expected": True, "t": 50.0}],
                    "logs": {"agent-edge-1": '{"event": "agent_listening"}\n'}}
    values.update(extra)
    return History(**values)


def only(history: History, invariant: str) -> list[Violation]:
    result = check(history)
    assert {v.invariant for v in result.violations} <= {invariant}, result.violations
    return result.violations


def test_a_clean_history_has_no_violation_and_counts_what_it_checked() -> None:
    history = clean(audit=[delete("edge-1", annotations={"apps.openyurt.io/max-unavailable": "2"})])
    result = check(history)
    assert result.ok, result.violations
    assert result.checked["eligible"] == 1 and result.checked["delete-once"] == 1 and result.checked["budget"] == 1


# 1. eligible ------------------------------------------------------------------------------------------


def test_controller_deleting_a_held_pod_is_reported() -> None:
    held = {"UpgradeHeld": {"status": "True", "reason": "HeldByOperator", "message": "site audit"}}
    found = only(clean(audit=[delete("edge-3", conditions=held)]), "eligible")
    assert len(found) == 1 and "held" in found[0].message and found[0].node == "edge-3"
    assert only(clean(audit=[delete("edge-3", conditions={"UpgradeHeld": {"status": "False"}})]), "eligible") == []


def test_controller_patching_a_held_pod_in_place_or_in_a_paused_daemonset_is_reported() -> None:
    """An in-place PATCH moves the pod as a DELETE does: the same rules; a refused one is not judged."""
    held = {"UpgradeHeld": {"status": "True", "reason": "HeldByOperator", "message": "site audit"}}
    found = only(clean(audit=[in_place(delete("edge-3", conditions=held))]), "eligible")
    assert len(found) == 1 and "controller patched in place" in found[0].message and "held" in found[0].message
    paused = in_place(delete("edge-2", annotations={"edgeagent.io/paused": "true"}))
    assert "paused" in only(clean(audit=[paused]), "eligible")[0].message
    assert only(clean(audit=[in_place(delete("edge-3", conditions=held), outcome="conflict")]), "eligible") == []
    assert check(clean(audit=[in_place(delete("edge-3"))])).checked["eligible"] == 1


def test_controller_deleting_in_a_paused_daemonset_is_reported() -> None:
    found = only(clean(audit=[delete("edge-2", annotations={"edgeagent.io/paused": "true"})]), "eligible")
    assert len(found) == 1 and "paused" in found[0].message


def test_agent_deleting_a_pod_without_pod_need_upgrade_is_reported() -> None:
    need = {"PodNeedUpgrade": {"status": "False", "reason": "", "message": "controllerrevision: x"}}
    found = only(clean(audit=[delete("edge-4", by=agent("edge-4"), conditions=need)]), "eligible")
    assert len(found) == 1 and "PodNeedUpgrade was False" in found[0].message
    ok = {"PodNeedUpgrade": {"status": "True"}}
    assert only(clean(audit=[delete("edge-4", by=agent("edge-4"), conditions=ok)]), "eligible") == []


def test_agent_deleting_another_nodes_pod_is_reported() -> None:
    ok = {"PodNeedUpgrade": {"status": "True"}}
    found = only(clean(audit=[delete("edge-4", by=agent("edge-5"), conditions=ok)]), "eligible")
    assert len(found) == 1 and "not to the agent's node edge-5" in found[0].message


def _plan_annotations(wave: int, phase: str = "progressing") -> JSON:
    state = {"revision": "new", "stableRevision": "old", "waves": 3, "wave": wave, "phase": phase,
             "counts": {"nodes": 10, "upgraded": 0, "deferred": 0, "failed": 0}, "failures": []}
    return {"edgeagent.io/rollout-steps": "1,50%,100%", "edgeagent.io/rollout-state": json.dumps(state)}


def _ranking() -> list[str]:
    plan, problems = parse_plan({"metadata": {"annotations": _plan_annotations(1)}})
    assert plan is not None and not problems
    return rank(plan, {n: {} for n in NODES}).order


def test_deleting_a_pod_of_a_wave_not_reached_is_reported() -> None:
    order = _ranking()
    first, last = order[0], order[-1]
    labels: JSON = {n: {} for n in NODES}
    reached = delete(first, annotations=_plan_annotations(1), node_labels=labels)
    assert only(clean(audit=[reached]), "wave") == []
    found = only(clean(audit=[delete(last, annotations=_plan_annotations(1), node_labels=labels)]), "wave")
    assert len(found) == 1 and "wave 3, the rollout had reached wave 1" in found[0].message
    # The same node once wave 3 is reached is fine.
    assert only(clean(audit=[delete(last, annotations=_plan_annotations(3), node_labels=labels)]), "wave") == []


def test_a_delete_one_wave_ahead_is_reported_and_one_in_the_wave_reached_is_not() -> None:
    """A check weakened by one wave (`wave > reached + 1`, or `wave >= reached`) fails here."""
    plan, _ = parse_plan({"metadata": {"annotations": _plan_annotations(1)}})
    assert plan is not None
    ranking = rank(plan, {n: {} for n in NODES})
    labels: JSON = {n: {} for n in NODES}
    second = ranking.nodes_of_wave(2)[0]
    found = only(clean(audit=[delete(second, annotations=_plan_annotations(1), node_labels=labels)]), "wave")
    assert len(found) == 1 and "wave 2, the rollout had reached wave 1" in found[0].message
    assert only(clean(audit=[delete(second, annotations=_plan_annotations(2), node_labels=labels)]), "wave") == []
    result = check(clean(audit=[delete(second, annotations=_plan_annotations(2), node_labels=labels)]))
    assert result.checked["wave"] == 1


def test_an_in_place_patch_ahead_of_the_wave_is_reported_when_its_state_is_recorded() -> None:
    order = _ranking()
    labels: JSON = {n: {} for n in NODES}
    entry = delete(order[-1], annotations=_plan_annotations(1), node_labels=labels)
    patch = {**entry, "verb": "PATCH", "patch": {**entry["delete"], "outcome": "patched"}}
    del patch["delete"]
    found = only(clean(audit=[patch]), "wave")
    assert len(found) == 1 and "patched in place" in found[0].message
    refused = {**patch, "patch": {**patch["patch"], "outcome": "conflict"}}
    assert only(clean(audit=[refused]), "wave") == []


def test_a_delete_judged_on_the_daemonset_it_was_sent_under_not_one_changed_while_it_was_on_its_way() -> None:
    """Seed-29 soak: the controller sent DELETEs in the last wave of a roll; a slow answer held them 2.7 s, and
    meanwhile a template change started a new roll at wave 1. The state recorded at the commit is the new roll's,
    which the controller could not have known: not a violation. The same DaemonSet write before the DELETE
    arrived, or after it was carried out, leaves it judged."""
    order = _ranking()
    labels: JSON = {n: {} for n in NODES}
    late = delete(order[-1], annotations=_plan_annotations(1), node_labels=labels, t=100.0)
    late["delete"]["time"] = 102.7  # arrived at 100.0, carried out at 102.7
    template = {"time": 101.2, "completed": 101.3, "verb": "PATCH", "code": 200, "userAgent": "soak-harness/1",
                "path": "/apis/apps/v1/namespaces/default/daemonsets/web"}
    assert only(clean(audit=[late, template]), "wave") == []
    for moment in (99.0, 103.0):
        before_or_after = {**template, "time": moment, "completed": moment + 0.1}
        found = only(clean(audit=[late, before_or_after]), "wave")
        assert len(found) == 1 and "the rollout had reached wave 1" in found[0].message
    other = {**template, "path": "/apis/apps/v1/namespaces/default/daemonsets/other"}
    assert len(only(clean(audit=[late, other]), "wave")) == 1
    refused = {**template, "code": 409}
    assert len(only(clean(audit=[late, refused]), "wave")) == 1


def test_controller_deleting_in_an_aborted_rollout_is_reported() -> None:
    order = _ranking()
    found = only(clean(audit=[delete(order[0], annotations=_plan_annotations(1, "aborted"),
                                     node_labels={n: {} for n in NODES})]), "eligible")
    assert len(found) == 1 and "rollout was aborted" in found[0].message


def test_a_delete_refused_by_its_precondition_is_not_judged() -> None:
    held = {"UpgradeHeld": {"status": "True"}}
    assert check(clean(audit=[delete("edge-3", conditions=held, outcome="conflict")])).ok


# 2. delete-once -----------------------------------------------------------------------------------------


def test_a_uid_deleted_twice_is_reported() -> None:
    first = delete("edge-1", t=100.0)
    second = delete("edge-1", t=101.0, by=agent("edge-1"), conditions={"PodNeedUpgrade": {"status": "True"}})
    found = only(clean(audit=[first, second]), "delete-once")
    assert len(found) == 1 and "deleted twice" in found[0].message and "uid-edge-1-old" in found[0].message


def test_a_delete_without_a_uid_precondition_is_reported() -> None:
    found = only(clean(audit=[delete("edge-1", precondition=None)]), "delete-once")
    assert len(found) == 1 and "without a UID precondition" in found[0].message


def test_a_delete_that_took_effect_on_another_uid_than_its_precondition_is_reported() -> None:
    """A check that compared the precondition with itself, or skipped effective DELETEs, fails here."""
    hit = delete("edge-1", uid="uid-replacement", precondition="uid-edge-1-old")
    found = only(clean(audit=[hit]), "delete-once")
    assert len(found) == 1 and "took effect on uid uid-replacement" in found[0].message
    assert "its precondition named uid-edge-1-old" in found[0].message
    assert only(clean(audit=[delete("edge-1", uid="uid-edge-1-old", precondition="uid-edge-1-old")]),
                "delete-once") == []


def test_a_second_attempt_refused_by_the_precondition_is_fine() -> None:
    first = delete("edge-1", t=100.0)
    again = delete("edge-1", t=101.0, uid="uid-replacement", precondition="uid-edge-1-old", outcome="conflict")
    assert check(clean(audit=[first, again])).ok


# 3. requests ------------------------------------------------------------------------------------------


def test_a_lost_accepted_request_is_reported() -> None:
    accepted = [{"t": 10.0, "node": "edge-1", "pod": "default/web-edge-1", "code": 202, "id": "r1"}]
    found = only(clean(accepted=accepted, requests={"edge-1": []}), "requests")
    assert len(found) == 1 and "lost" in found[0].message
    kept = {"edge-1": [{"id": "r1", "state": "succeeded"}]}
    assert check(clean(accepted=accepted, requests=kept)).ok


def test_a_request_stuck_in_a_non_terminal_state_is_reported() -> None:
    accepted = [{"t": 10.0, "node": "edge-1", "pod": "default/web-edge-1", "code": 200, "id": "r1"}]
    found = only(clean(accepted=accepted, requests={"edge-1": [{"id": "r1", "state": "verifying"}]}), "requests")
    assert len(found) == 1 and "still verifying" in found[0].message


def test_refused_requests_are_not_expected_anywhere() -> None:
    refused = [{"t": 10.0, "node": "edge-1", "pod": "default/web-edge-1", "code": 403, "id": None}]
    assert check(clean(accepted=refused, requests={"edge-1": []})).ok


# 4. budget ----------------------------------------------------------------------------------------------


def test_deleting_an_available_pod_beyond_max_unavailable_is_reported() -> None:
    down = [sibling(n, hash_="new", ready=False) if n in ("edge-2", "edge-3") else sibling(n) for n in NODES]
    found = only(clean(audit=[delete("edge-1", annotations={"apps.openyurt.io/max-unavailable": "2"},
                                     siblings=down)]), "budget")
    assert len(found) == 1 and "2 node(s) were already unavailable" in found[0].message
    # One down, budget two: the delete is the second.
    one_down = [sibling(n, hash_="new", ready=False) if n == "edge-2" else sibling(n) for n in NODES]
    assert check(clean(audit=[delete("edge-1", annotations={"apps.openyurt.io/max-unavailable": "2"},
                                     siblings=one_down)])).ok


def test_terminating_pods_count_against_the_budget_but_old_unready_ones_do_not() -> None:
    siblings = [sibling(n, terminating=True) if n in ("edge-2", "edge-3") else sibling(n) for n in NODES]
    found = only(clean(audit=[delete("edge-1", annotations={"apps.openyurt.io/max-unavailable": "20%"},
                                     siblings=siblings)]), "budget")
    assert len(found) == 1 and "edge-2, edge-3" in found[0].message
    stale = [sibling(n, ready=False) if n in ("edge-2", "edge-3") else sibling(n) for n in NODES]
    assert check(clean(audit=[delete("edge-1", annotations={"apps.openyurt.io/max-unavailable": "1"},
                                     siblings=stale)])).ok


def test_replacing_an_unavailable_pod_costs_no_budget() -> None:
    down = [sibling(n, hash_="new", ready=False) if n in ("edge-2", "edge-3") else sibling(n) for n in NODES]
    assert check(clean(audit=[delete("edge-1", ready=False, annotations={"apps.openyurt.io/max-unavailable": "1"},
                                     siblings=down)])).ok


def test_too_many_prepull_jobs_are_reported() -> None:
    jobs = [{"name": f"j{i}", "node": f"edge-{i}", "active": True} for i in range(1, 4)]
    found = only(clean(prepull_cap=2, prepull_samples=[{"t": 5.0, "jobs": jobs}]), "budget")
    assert len(found) == 1 and "3 pre-pull Jobs active at once, cap 2" in found[0].message
    twice = [{"name": "a", "node": "edge-1", "active": True}, {"name": "b", "node": "edge-1", "active": True}]
    found = only(clean(prepull_samples=[{"t": 5.0, "jobs": twice}]), "budget")
    assert len(found) == 1 and "on edge-1" in found[0].message


# 5. events-once ---------------------------------------------------------------------------------------


def event(name: str, reason: str, rid: str, count: int = 1, host: str = "edge-1") -> JSON:
    return {"metadata": {"name": name}, "reason": reason, "count": count,
            "message": f"upgrade request {rid}: pod default/web-{host}", "source": {"component": "edgeagent",
                                                                                 "host": host},
            "involvedObject": {"name": f"web-{host}"}}


def test_an_agent_event_created_twice_is_reported() -> None:
    events = [event("a", "UpgradeStarted", "r1"), event("b", "UpgradeStarted", "r1"),
              event("c", "UpgradeSucceeded", "r1")]
    found = only(clean(events=events), "events-once")
    assert len(found) == 1 and "UpgradeStarted for request r1 on edge-1 recorded 2 times" in found[0].message


def test_an_agent_event_counted_twice_is_reported() -> None:
    found = only(clean(events=[event("a", "UpgradeQueued", "r2", count=2)]), "events-once")
    assert len(found) == 1 and "recorded 2 times" in found[0].message
    assert check(clean(events=[event("a", "UpgradeQueued", "r2"), event("b", "UpgradeQueued", "r3")])).ok


# 6. convergence -----------------------------------------------------------------------------------------


def test_no_convergence_or_a_late_one_is_reported() -> None:
    found = only(clean(converged_at=None), "convergence")
    assert len(found) == 1 and "did not converge" in found[0].message
    found = only(clean(converged_at=700.0), "convergence")
    assert len(found) == 1 and "200.0 s after the last fault" in found[0].message


def test_rollout_status_disagreeing_with_the_pods_is_reported() -> None:
    wrong = [{"name": "web", "exit": 0, "phase": None, "updated": 9, "total": 10, "output": "wave 1/2"}]
    found = only(clean(rollouts=wrong), "convergence")
    assert len(found) == 1 and "exited 0 (expected 3" in found[0].message
    rolled_back = [{"name": "web", "exit": 0, "phase": "rolledBack", "updated": 10, "total": 10}]
    assert "expected 1" in only(clean(rollouts=rolled_back), "convergence")[0].message
    agree = [{"name": "web", "exit": 1, "phase": "rolledBack", "updated": 10, "total": 10}]
    assert check(clean(rollouts=agree)).ok


# 7. processes -------------------------------------------------------------------------------------------


def test_an_unplanned_exit_and_a_traceback_are_reported() -> None:
    died = [{"name": "controller-a", "code": 1, "expected": False, "t": 42.0}]
    found = only(clean(processes=died, logs={"controller-a": "boom\n"}), "processes")
    assert len(found) == 1 and "controller-a exited with 1" in found[0].message
    log = "ok\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n"
    found = only(clean(logs={"sim": log}), "processes")
    assert len(found) == 1 and "traceback in sim's log" in found[0].message
    assert found[0].evidence[-1] == "ValueError: bad"
    assert tracebacks("no trouble here") == []


# 8 credentials ------------------------------------------------------------------------------------------


def call(t: float, code: int, node: str = "edge-2", verb: str = "GET") -> JSON:
    return {"time": t, "verb": verb, "path": "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/x",
            "userAgent": agent(node), "code": code}


def test_an_agent_left_on_a_revoked_token_is_reported_and_one_that_recovered_is_counted() -> None:
    rotated = [{"t": 10.0, "at": 10.0, "kind": "cred_rotate", "target": "edge-2", "revoked": 10.1,
                "outcome": "refused", "refused": 10.2, "pokes": 0}]
    recovered = [call(9.0, 200), call(10.2, 401), call(10.7, 401), call(11.0, 503), call(12.5, 200),
                 call(13.0, 200), call(40.0, 401, "edge-3"), call(41.0, 201, "edge-3", "POST")]
    episodes = credential_episodes(recovered)
    assert episodes == {agent("edge-2"): [{"start": 10.2, "end": 12.5, "rejected": 2}],
                        agent("edge-3"): [{"start": 40.0, "end": 41.0, "rejected": 1}]}
    history = clean(schedule=rotated, credentials=episodes)
    assert only(history, "credentials") == []
    assert check(history).checked["credentials"] == 2
    assert credential_summary(history) == (
        "credentials: 1 rotation(s) revoked a token in use; 3 request(s) refused with 401 in 2 episode(s) of 2 "
        "client(s), all recovered; from the first 401 to the next accepted request: median 2.3 s, longest 2.3 s; "
        "rotations that met a 401 before the new token was written: 1 of 1 (0 after a poke), cap reached without "
        "a 401: 0")
    # The same agent whose every request after the rotation is refused: stuck for good.
    stuck = credential_episodes([call(9.0, 200), call(10.2, 401), call(12.5, 200), call(20.0, 401),
                                 call(20.5, 401), call(60.0, 401)])
    found = only(clean(schedule=rotated, credentials=stuck), "credentials")
    assert len(found) == 1 and found[0].node == "edge-2" and found[0].t == 20.0
    assert "refused with 401 3 time(s) from t=20.0 s on and never accepted again" in found[0].message
    assert "1 never recovered" in credential_summary(clean(schedule=rotated, credentials=stuck))


def test_the_summary_counts_rotations_that_met_a_401_were_poked_hit_the_cap_or_were_ended() -> None:
    def rotation(outcome: str | None, pokes: int = 0) -> JSON:
        act: JSON = {"t": 1.0, "kind": "cred_rotate", "target": "edge-2", "revoked": 1.1, "pokes": pokes}
        if outcome is not None:
            act["outcome"] = outcome
        return act

    schedule = [rotation("refused"), rotation("refused", pokes=2), rotation("refused", pokes=1), rotation("cap", 12),
                rotation("stopped", 3), {"t": 2.0, "kind": "cred_rotate", "target": "edge-3", "skipped": "503"}]
    text = credential_summary(clean(schedule=schedule))
    assert text.endswith("rotations that met a 401 before the new token was written: 3 of 5 (2 after a poke), "
                         "cap reached without a 401: 1, ended by the end of the faults: 1"), text
    # A history written before rotations had outcomes says so rather than counting them as anything.
    assert credential_summary(clean(schedule=[rotation(None)])).endswith(
        "met a 401 before the new token was written: 0 of 1 (0 after a poke), cap reached without a 401: 0, "
        "other: unknown 1")


# report -------------------------------------------------------------------------------------------------


def test_the_report_names_the_seed_the_schedule_and_the_history_around_a_violation() -> None:
    held = {"UpgradeHeld": {"status": "True"}}
    schedule = [{"t": 95.0, "at": 95.0, "kind": "hold", "target": "edge-3"},
                {"t": 20.0, "at": 20.0, "kind": "cut", "target": "edge-9"}]
    history = clean(seed=4242, schedule=schedule, audit=[delete("edge-3", conditions=held)])
    text = report(history, check(history))
    assert "seed 4242" in text and "make soak SEED=4242" in text
    assert "fault schedule: cut 1, hold 1" in text
    assert "VIOLATION [eligible]" in text
    assert '"kind": "hold"' in text and "edge-9" not in text  # only what is near, in time and place
    assert "DELETE /api/v1/namespaces/default/pods/web-edge-3 -> 200" in text


def test_a_history_survives_json() -> None:
    history = clean(audit=[delete("edge-1")], accepted=[{"t": 1.0, "node": "edge-1", "code": 202, "id": "x"}])
    assert History.from_json(history.to_json()) == history


# 10. stable ------------------------------------------------------------------------------------------------


# (The DELETEs that carry these states are of pods already on the revision rolled: judged by no other rule.)


def _state_annotations(revision: str, phase: str, stable: str | None, history: list[JSON] | None = None,
                       failures: list[JSON] | None = None) -> JSON:
    state: JSON = {"revision": revision, "stableRevision": stable, "waves": 3, "wave": 1, "phase": phase,
                   "counts": {"nodes": 10, "upgraded": 0, "deferred": 0, "failed": len(failures or [])},
                   "failures": failures or []}
    if history is not None:
        state["history"] = history
    return {"edgeagent.io/rollout-steps": "1,50%,100%", "edgeagent.io/rollout-state": json.dumps(state)}


def test_a_stable_revision_seen_aborted_and_never_complete_is_reported() -> None:
    aborted = delete("edge-1", t=100.0, annotations=_state_annotations("b", "aborted", "a"), current="b",
                     pod_hash="b")
    later = delete("edge-2", t=200.0, annotations=_state_annotations("c", "progressing", "b"), current="c",
                   pod_hash="c")
    found = only(clean(audit=[aborted, later]), "stable")
    assert len(found) == 1 and "names b as its stable revision" in found[0].message
    # b completed after all (seen complete, or a RolloutComplete Event names it): fine.
    done = delete("edge-3", t=150.0, annotations=_state_annotations("b", "complete", "a"), current="b", pod_hash="b")
    assert only(clean(audit=[aborted, done, later]), "stable") == []
    event = {"reason": "RolloutComplete", "involvedObject": {"kind": "DaemonSet", "namespace": "default",
                                                              "name": "web"},
             "message": "revision b (nginx:1.26) reached all 3 wave(s): 10/10 node(s) upgraded"}
    assert only(clean(audit=[aborted, later], events=[event]), "stable") == []


def test_a_stable_revision_its_own_history_shows_unfinished_is_reported() -> None:
    history = [{"revision": "c", "images": [], "phase": "progressing"},
               {"revision": "b", "images": [], "phase": "progressing", "finishedAt": "2027-01-15T08:00:00Z"}]
    state = delete("edge-1", annotations=_state_annotations("c", "progressing", "b", history), current="c",
                   pod_hash="c")
    found = only(clean(audit=[state]), "stable")
    assert len(found) == 1
    ok = [{**history[0]}, {**history[1], "phase": "complete"}]
    assert only(clean(audit=[delete("edge-1", annotations=_state_annotations("c", "progressing", "b", ok),
                                    current="c", pod_hash="c")]), "stable") == []


def test_a_rollback_restoring_a_revision_never_complete_is_reported() -> None:
    aborted = delete("edge-1", annotations=_state_annotations("b", "aborted", "a"), current="b", pod_hash="b")
    event = {"reason": "RolloutRolledBack", "involvedObject": {"kind": "DaemonSet", "namespace": "default",
                                                                "name": "web"},
             "message": "template restored to revision b (nginx:1.26), the last completed one"}
    found = only(clean(audit=[aborted], events=[event]), "stable")
    assert len(found) == 1 and "restored revision b" in found[0].message
    good = {**event, "message": "template restored to revision a (nginx:1.25), the last completed one"}
    assert only(clean(audit=[aborted], events=[good]), "stable") == []


# 11. forged --------------------------------------------------------------------------------------------------


def _event_post(node_of_agent: str | None, t: float, code: int = 201) -> JSON:
    return {"time": t, "verb": "POST", "path": "/api/v1/namespaces/default/events", "code": code,
            "userAgent": agent(node_of_agent) if node_of_agent else "kubectl/v1.32.0"}


def test_a_failure_counted_without_a_report_by_the_nodes_own_agent_is_reported() -> None:
    failure = [{"node": "edge-5", "pod": "default/web-edge-5", "reason": "agent: upgrade request r-1 failed"}]
    state = delete("edge-1", t=100.0, annotations=_state_annotations("c", "progressing", "a", failures=failure),
                   current="c", pod_hash="c")
    # Created by another node's agent, by an operator, or refused: forged (or never made).
    for post in (_event_post("edge-2", 90.0), _event_post(None, 90.0), _event_post("edge-5", 90.0, code=403)):
        found = only(clean(audit=[post, state]), "forged")
        assert len(found) == 1 and "edge-5" in found[0].message, post
    # Made by edge-5's agent after the state was seen: not what the state counted.
    assert len(only(clean(audit=[_event_post("edge-5", 110.0), state]), "forged")) == 1
    # Made by edge-5's own agent before: a real report.
    assert only(clean(audit=[_event_post("edge-5", 90.0), state]), "forged") == []
    # A failure the controller saw itself (a deadline) is not an agent's report.
    timeout = [{"node": "edge-5", "pod": "default/web-edge-5", "reason": "not available within 600s: x"}]
    seen = delete("edge-1", annotations=_state_annotations("c", "progressing", "a", failures=timeout), current="c",
                  pod_hash="c")
    assert only(clean(audit=[seen]), "forged") == []


# 4. budget, for in-place PATCHes ---------------------------------------------------------------------------


def in_place(entry: JSON, outcome: str = "patched") -> JSON:
    """The audit entry of an in-place PATCH with the same recorded state as a DELETE's."""
    patch = {**entry, "verb": "PATCH", "patch": {**entry["delete"], "outcome": outcome, "precondition_uid": None}}
    del patch["delete"]
    return patch


def test_an_in_place_patch_of_an_available_pod_beyond_max_unavailable_is_reported() -> None:
    """A budget rule that judged DELETEs only lets a controller patching every pod at once through."""
    down = [sibling(n, hash_="new", ready=False) if n in ("edge-2", "edge-3") else sibling(n) for n in NODES]
    entry = delete("edge-1", annotations={"apps.openyurt.io/max-unavailable": "2"}, siblings=down)
    found = only(clean(audit=[in_place(entry)]), "budget")
    assert len(found) == 1 and "controller patched in place available pod" in found[0].message
    assert "2 node(s) were already unavailable" in found[0].message
    assert only(clean(audit=[in_place(entry, outcome="conflict")]), "budget") == []  # refused: nothing moved
    one_down = [sibling(n, hash_="new", ready=False) if n == "edge-2" else sibling(n) for n in NODES]
    fine = in_place(delete("edge-1", annotations={"apps.openyurt.io/max-unavailable": "2"}, siblings=one_down))
    result = check(clean(audit=[fine]))
    assert result.ok and result.checked["budget"] == 1


# 12. inplace ---------------------------------------------------------------------------------------------------

RESTART = {"daemonsets": ["ip"], "restartSeconds": 0.4, "slack": 1.0, "maxHole": 2.0,
           "badImages": ["registry.local/soak/ip:3-bad"], "simGrace": 10.0}


def row(node: str, state: str, image: str = "registry.local/soak/ip:1", cid: str = "c1", uid: str = "u1",
        pod: str = "default/ip-abcde") -> JSON:
    return {"node": node, "pod": pod, "uid": uid, "container": "main", "image": image, "state": state,
            "containerID": cid, "restartCount": 0}


def sampled(states: list[tuple[float, list[JSON]]], latency: float = 0.05) -> JSON:
    """A ContainerLog from answers at the given times (each answered `latency` later)."""
    log = ContainerLog()
    for t, rows in states:
        log.add(t, t + latency, rows, ["ip"])
    return log.to_json()


def restart_through(node: str, down_from: float, down_to: float, image: str = "registry.local/soak/ip:2") -> JSON:
    """Samples every 0.5 s from t=100 to 130: running c1, not running from `down_from` to `down_to`, then c2."""
    states: list[tuple[float, list[JSON]]] = []
    t = 100.0
    while t <= 130.0:
        if t < down_from:
            states.append((t, [row(node, "running")]))
        elif t <= down_to:
            states.append((t, [row(node, "terminated")]))
        else:
            states.append((t, [row(node, "running", image=image, cid="c2")]))
        t += 0.5
    return sampled(states)


def cut(node: str, at: float, seconds: float) -> JSON:
    return {"t": at, "at": at, "kind": "link_cut", "target": node, "mode": "blackhole", "seconds": seconds}


def test_a_node_without_its_daemon_only_for_the_restart_is_fine_and_counted() -> None:
    history = clean(containers=restart_through("edge-1", 110.0, 110.5), inplace=RESTART,
                    schedule=[cut("edge-1", 102.0, 7.0)])
    result = check(history)
    assert result.ok, result.violations
    assert result.checked["inplace"] == 2  # one restart seen, its gap judged
    assert "1 container restart(s)" in inplace_summary(history) and "1 within 10 s of a link cut" in \
        inplace_summary(history)


def test_a_gap_that_spans_a_link_outage_is_reported_as_one() -> None:
    """The node ran nothing for the 8 s its link was cut: the recreate's failure, which in place must never show.
    A check that accepted gaps overlapping a cut (or judged only gaps outside cuts) fails here."""
    history = clean(containers=restart_through("edge-1", 110.0, 118.0), inplace=RESTART,
                    schedule=[cut("edge-1", 109.8, 8.5)])
    found = only(history, "inplace")
    assert len(found) == 1 and found[0].node == "edge-1"
    assert "ip on edge-1: no running container of the DaemonSet for at least 7.95 s" in found[0].message
    assert "its link was cut meanwhile (8.5 s from t=109.8)" in found[0].message
    assert "for a link outage" in found[0].message


def test_the_bound_is_the_restart_with_its_allowance_measured_from_inside_the_gap() -> None:
    """Samples 0.5 s apart answered after 0.05 s: a stretch of non-running samples from 110.0 to 111.5 lasted at
    least 1.45 s (bound 1.4: reported); from 110.0 to 111.0, at least 0.95 s (fine). A check that measured from the
    running samples around the gap, or doubled the bound, fails one of them."""
    over = only(clean(containers=restart_through("edge-2", 110.0, 111.5), inplace=RESTART), "inplace")
    assert len(over) == 1 and "at least 1.45 s" in over[0].message and "1.4 s with the allowance" in over[0].message
    assert "link" not in over[0].message  # no cut: said as it is
    assert only(clean(containers=restart_through("edge-2", 110.0, 111.0), inplace=RESTART), "inplace") == []


def test_a_bad_versions_gap_and_one_begun_while_the_sim_restarted_are_not_judged() -> None:
    bad = "registry.local/soak/ip:3-bad"
    states = [(100.0 + i * 0.5, [row("edge-1", "running")]) for i in range(10)]
    states += [(105.0 + i * 0.5, [row("edge-1", "waiting", image=bad, cid="c2")]) for i in range(40)]
    states += [(125.0, [row("edge-1", "running", cid="c3")])]
    assert check(clean(containers=sampled(states), inplace=RESTART)).ok
    # The same gap on a good image is reported: the exclusion is the image's, not the length's.
    good = [(t, [{**r, "image": "registry.local/soak/ip:2"} for r in rows]) for t, rows in states]
    assert len(only(clean(containers=sampled(good), inplace=RESTART), "inplace")) == 1
    restarted = [{"t": 104.0, "at": 104.5, "kind": "sim_restart", "target": "sim", "down": 1.0, "up": 106.0}]
    assert check(clean(containers=sampled(good), inplace=RESTART, schedule=restarted)).ok


def test_a_sampler_hole_splits_a_gap_and_a_recreate_under_a_cut_is_a_gap_too() -> None:
    # Not running at 110 and at 120, nothing sampled in between: it may have run meanwhile.
    holed = [(100.0, [row("edge-1", "running")]), (110.0, [row("edge-1", "terminated")]),
             (120.0, [row("edge-1", "waiting")]), (120.5, [row("edge-1", "running", cid="c2")])]
    assert check(clean(containers=sampled(holed), inplace=RESTART)).ok
    # The pod deleted (no row at all) for the length of a cut, its successor (another UID) running after.
    recreated = [(100.0 + i * 0.5, [row("edge-1", "running")]) for i in range(20)]
    recreated += [(110.0 + i * 0.5, []) for i in range(16)]
    recreated += [(118.0, [row("edge-1", "running", uid="u2", cid="c9")])]
    found = only(clean(containers=sampled(recreated), inplace=RESTART, schedule=[cut("edge-1", 109.0, 9.0)]),
                 "inplace")
    assert len(found) == 1 and "for a link outage" in found[0].message


def test_the_container_log_keeps_changes_only_and_tells_daemonsets_of_similar_names_apart() -> None:
    log = ContainerLog()
    other = {**row("edge-1", "terminated"), "pod": "default/ip-plan-zzzzz"}
    for t in (1.0, 2.0, 3.0):
        log.add(t, t + 0.1, [row("edge-1", "running"), other], ["ip", "ip-plan"])
    log.add(4.0, 4.1, [row("edge-1", "running", cid="c2")], ["ip", "ip-plan"])
    assert log.changes == {
        "ip/edge-1": [[0, "running", "registry.local/soak/ip:1", "u1", "c1"],
                      [3, "running", "registry.local/soak/ip:1", "u1", "c2"]],
        "ip-plan/edge-1": [[0, "terminated", "registry.local/soak/ip:1", "u1", "c1"], [3, "absent", "", "", ""]]}
    assert log.times == [[1.0, 1.1], [2.0, 2.1], [3.0, 3.1], [4.0, 4.1]]
    history = clean(containers=log.to_json(), inplace=RESTART)
    assert History.from_json(history.to_json()) == history
