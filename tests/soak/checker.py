"""The soak's invariants, checked over a recorded history: pure functions, no I/O, no clock.

A soak run records what happened (the sim's audit log with each pod DELETE's state at that instant, the
Events, every agent's request list, the operators' accepted requests, pre-pull Job samples, convergence and
`rollout status` at the end, process exits and log excerpts, each client's episodes of rejected credentials)
into a `History`; `check(history)` returns every violation of the invariants below, and `report()` prints
each with the seed, the fault schedule and the minimal history around it, so that the run can be replayed with
the same seed.

The checker reads the history in its own words, independently of the controller's and agent's code (it
parses the budget and the DaemonSet annotations itself): a checker that shares the implementation's reading
would share its bugs. Where the sim's recorded state cannot tell whether an act was wrong, the check errs
towards silence (documented per rule), so that every report is a real defect.

1. ``eligible``: no DELETE (nor, by the controller's AdvancedRollingUpdate, in-place PATCH) of a pod that was
   not eligible at that moment -- by the controller: its node held
   (`UpgradeHeld` True), its DaemonSet paused, its rollout plan stopped, or its node in a wave not reached
   yet; by an agent: the pod not `PodNeedUpgrade` True, or bound to another node, or in a wave not reached.
   The DaemonSet's part is judged at the commit unless the DaemonSet was written while the DELETE was on its
   way (a slow answer holds a request before the store sees it): the deleter could not know that change.
2. ``delete-once``: no pod UID deleted twice (two DELETEs that took effect), and every DELETE by our
   components carries a UID precondition naming the pod it hit.
3. ``requests``: every request an agent accepted (200 or 202 with an id) is in that agent's list at the end,
   in a terminal state (none lost across kill -9, none stuck).
4. ``budget``: a controller DELETE of an available pod never brings the nodes its rollout made unavailable
   above `max-unavailable`; pre-pull Jobs never exceed their cap, nor one per node.
5. ``events-once``: each agent Event (node, request id, reason) exists once, with count 1.
6. ``convergence``: after the last fault the fleet reached each DaemonSet's current revision within the
   stated bound, and each `rollout status` exit code agrees with the pods.
7. ``processes``: no process exited except those the schedule killed or stopped, and no log has a traceback.
8. ``credentials``: every client the API server refused with 401 (an agent whose token was rotated and the
   old one revoked) was accepted again afterwards: none is left stuck on a dead credential.
9. ``wave``: no DELETE (or in-place image PATCH, where the audit records the pod's state at it as for a DELETE)
   of an old pod on a node whose wave the DaemonSet's rollout had not reached (part of ``eligible`` before; its
   own name so that a report says which rule broke).
10. ``stable``: the stable revision of a rollout state (its rollback target), and a rollback's restored revision,
    is never one seen aborted, rolled back or unfinished in history without ever having completed.
11. ``forged``: a failure a rollout state counts from an agent's report (`agent: ...`) is about a node whose own
    agent created an Event before the state was seen: a report by another credential (another node's agent, an
    operator, anyone allowed to create Events) never counts.

12. ``inplace``: through an in-place upgrade a node is without a running container of the DaemonSet only for the
    container's own restart (its pull and start, with an allowance for load), never for a link outage: judged
    on samples of what every node really runs (tests/soak/daemon_gaps.py).

Rule 4 judges the controller's in-place PATCHes (the audit records the pod's state at them as for a DELETE)
as it judges its DELETEs: moving an available pod costs availability either way.

Rules 10 and 11 read the rollout states the audit recorded with each DELETE (the DaemonSet's annotations at
that instant): a state never seen there is not judged.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from edgeagent.rollout.api import parse_spec
from edgeagent.rollout.plan import Plan, canary_of, parse_plan, rank
from edgeagent.rollout.state import state_from_status
from tests.soak.daemon_gaps import judge

JSON = dict[str, Any]

INVARIANTS = ("eligible", "delete-once", "requests", "budget", "events-once", "convergence", "processes",
              "credentials", "wave", "stable", "forged", "inplace")
PATCHED = frozenset({"patched"})  # an in-place PATCH of a pod's images that took effect
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "obsolete"})
EFFECTIVE = frozenset({"deleted", "graceful"})  # a DELETE that took effect (whatever answer the client got)
CONTROLLER_AGENT = "edgeagent-controller/"
AGENT_AGENT = "edgeagent-agent/"
_AGENT_NODE = re.compile(r"^edgeagent-agent/\S+ \((?P<node>[^)]+)\)")
_REQUEST_ID = re.compile(r"upgrade request (?P<id>[^\s:]+):")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
STOPPED_PHASES = frozenset({"paused", "aborted"})
MOVING_PHASES = frozenset({"progressing", "baking"})


@dataclass
class History:
    """Everything a soak run recorded; JSON-serialisable so that a failing run can be kept and re-checked."""

    seed: int
    started_at: float = 0.0  # epoch seconds; schedule "t" values are relative to it
    schedule: list[JSON] = field(default_factory=list)  # {"t", "kind", "target", ...} from the seed, "at" when run
    audit: list[JSON] = field(default_factory=list)  # the sim's audit log entries (JSON lines)
    events: list[JSON] = field(default_factory=list)  # core/v1 Events at the end
    requests: dict[str, list[JSON]] = field(default_factory=dict)  # node -> GET /openyurt.io/v1/upgrades items
    accepted: list[JSON] = field(default_factory=list)  # {"t", "node", "pod", "code", "id"} operators were given
    prepull_samples: list[JSON] = field(default_factory=list)  # {"t", "jobs": [{"name", "node", "active"}]}
    prepull_cap: int = 20
    faults_stopped_at: float | None = None
    converged_at: float | None = None
    convergence_bound: float = 300.0
    rollouts: list[JSON] = field(default_factory=list)  # {"name", "exit", "phase", "updated", "total", "output"}
    processes: list[JSON] = field(default_factory=list)  # {"name", "code", "expected", "t"} one per exit seen
    logs: dict[str, str] = field(default_factory=dict)  # process name -> log text (or its tail)
    # User-Agent -> episodes of 401s {"start", "end" (first accepted request after, or None), "rejected"}
    credentials: dict[str, list[JSON]] = field(default_factory=dict)
    # What the in-place DaemonSets' nodes ran (daemon_gaps.ContainerLog.to_json()), and how to judge it:
    # {"daemonsets", "restartSeconds", "slack", "maxHole", "badImages", "simGrace"}.
    containers: JSON = field(default_factory=dict)
    inplace: JSON = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> History:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    t: float | None = None
    node: str | None = None
    pod: str | None = None
    evidence: tuple[str, ...] = ()


@dataclass
class Result:
    violations: list[Violation]
    checked: dict[str, int]  # invariant -> how many facts were checked against it

    @property
    def ok(self) -> bool:
        return not self.violations


# ----------------------------------------------------------------------------------------------- helpers


def deleter_of(entry: JSON) -> tuple[str, str | None]:
    """("controller", None), ("agent", node) or ("other", None), from the User-Agent the audit recorded."""
    agent = str(entry.get("userAgent") or "")
    if agent.startswith(CONTROLLER_AGENT):
        return "controller", None
    match = _AGENT_NODE.match(agent)
    if match:
        return "agent", match.group("node")
    if agent.startswith(AGENT_AGENT):
        return "agent", None
    return "other", None


def pod_deletes(audit: Iterable[JSON]) -> list[JSON]:
    """Audit entries of DELETEs of single pods that reached the store (a fault may have refused others first)."""
    return [e for e in audit if e.get("verb") == "DELETE" and "/pods/" in str(e.get("path"))
            and isinstance(e.get("delete"), dict) and e["delete"].get("resource") == "pods"]


def pod_patches(audit: Iterable[JSON]) -> list[JSON]:
    """Audit entries of in-place PATCHes of pods whose state at that instant was recorded (`patch`, shaped as a
    DELETE's `delete` record): judged as a DELETE by the wave rule. Entries without it are not judged."""
    return [e for e in audit if e.get("verb") == "PATCH" and "/pods/" in str(e.get("path"))
            and isinstance(e.get("patch"), dict) and e["patch"].get("resource") == "pods"]


def _record(entry: JSON) -> JSON:
    found = entry.get("delete") if isinstance(entry.get("delete"), dict) else entry.get("patch")
    return found if isinstance(found, dict) else {}


def _pod_name(entry: JSON) -> str:
    record = _record(entry)
    return f"{record.get('namespace')}/{record.get('name')}"


def _condition(state: JSON, kind: str) -> str | None:
    cond = (state.get("conditions") or {}).get(kind)
    return str(cond.get("status")) if isinstance(cond, dict) else None


def parse_budget(raw: str | None, total: int) -> int:
    """`apps.openyurt.io/max-unavailable`: an int or a percent (rounded up) of the DaemonSet's nodes; 10%."""
    text = (raw or "10%").strip()
    if text.endswith("%") and text[:-1].isdigit():
        return math.ceil(int(text[:-1]) * total / 100)
    if text.isdigit():
        return int(text)
    return math.ceil(10 * total / 100)


def plan_and_state(ds: JSON) -> tuple[Plan | None, JSON | None]:
    """The plan and the rollout state (the state machine's JSON shape) a DaemonSet snapshot of the audit carries:
    its RolloutPlan's spec and status (`rolloutPlan`, recorded by the sim), or, in records of older controllers,
    the round-3 annotations."""
    annotations = ds.get("annotations") or {}
    recorded = ds.get("rolloutPlan")
    if isinstance(recorded, dict):
        spec, _ = parse_spec(recorded.get("spec"))
        status = recorded.get("status")
        state = None
        if isinstance(status, dict) and status.get("phase"):
            parsed, _ = state_from_status(status)
            state = json.loads(parsed.to_json()) if parsed is not None else None
        return (spec.plan(canary_of({"metadata": {"annotations": annotations}})) if spec is not None else None,
                state)
    plan, problems = parse_plan({"metadata": {"annotations": annotations}})
    raw_state = annotations.get("edgeagent.io/rollout-state")
    if plan is None or problems or not raw_state:
        return None, None
    try:
        found = json.loads(raw_state)
    except ValueError:
        return plan, None
    return plan, found if isinstance(found, dict) else None


def _plan_position(ds: JSON, node_labels: Mapping[str, Mapping[str, str]], node: str
                   ) -> tuple[str | None, int | None, int | None, str | None]:
    """(phase, wave reached, the node's wave, state revision) of a DaemonSet with a valid plan and state."""
    plan, state = plan_and_state(ds)
    if plan is None or state is None:
        return None, None, None, None
    nodes = {s["node"] for s in ds.get("siblings") or [] if s.get("node")}
    ranking = rank(plan, {n: node_labels.get(n, {}) for n in nodes})
    wave = state.get("wave")
    return (str(state.get("phase")), wave if isinstance(wave, int) else None, ranking.wave_of(node),
            str(state.get("revision")))


def _unavailable_nodes(ds: JSON, exclude: str) -> set[str]:
    """Ready nodes the rollout has made unavailable: the DaemonSet's pod there is terminating, or it is on the
    current revision and not Ready. Errs to silence: old pods that are not Ready (a node back from a partition
    whose kubelet has not re-reported yet) are not the rollout's doing, and a node whose pod is already gone
    and not yet recreated is not seen (the record lists pods, not the nodes the DaemonSet should run on)."""
    ready = {n for n, ok in (ds.get("nodes") or {}).items() if ok}
    by_node: dict[str, list[JSON]] = defaultdict(list)
    for sibling in ds.get("siblings") or []:
        by_node[str(sibling.get("node"))].append(sibling)
    current = ds.get("currentHash")
    running = set(by_node)
    out: set[str] = set()
    for node in ready & running:
        if node == exclude:
            continue
        pods = by_node[node]
        live = [p for p in pods if not p.get("terminating")]
        terminating = not live or len(live) < len(pods)
        new_unready = any(p.get("hash") == current for p in live) and not any(p.get("ready") for p in live)
        if terminating or new_unready:
            out.add(node)
    return out


# ------------------------------------------------------------------------------------------------ checks


_DAEMONSET_PATH = re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/daemonsets/(?P<name>[^/]+)$")


def daemonset_writes(audit: Iterable[JSON]) -> dict[str, list[tuple[float, float]]]:
    """`namespace/name` -> (arrival, answer) of each successful write of a DaemonSet (template changes, the
    rollout state, pause and rollback annotations), sorted by arrival: the write took effect in between."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in audit:
        if e.get("verb") not in ("PATCH", "PUT") or not 200 <= int(e.get("code") or 0) < 300:
            continue
        match = _DAEMONSET_PATH.match(str(e.get("path")))
        if match and e.get("time") is not None:
            t = float(e["time"])
            out[f"{match['ns']}/{match['name']}"].append((t, float(e.get("completed") or t)))
    for windows in out.values():
        windows.sort()
    return out


def changed_in_flight(windows: list[tuple[float, float]], arrived: float, committed: float) -> bool:
    """A DaemonSet write may have taken effect after a DELETE reached the server and before the server carried
    it out (a slow answer holds the request for seconds before the store sees it): the deleter decided on the
    state before that write, which the state recorded at the commit does not show."""
    return any(start <= committed and end >= arrived for start, end in windows)


def check_eligible(history: History, checked: dict[str, int]) -> list[Violation]:
    out: list[Violation] = []
    ds_writes = daemonset_writes(history.audit)
    for entry in [*pod_deletes(history.audit), *pod_patches(history.audit)]:
        record = _record(entry)
        verb = "deleted" if entry.get("verb") == "DELETE" else "patched in place"
        if record.get("outcome") not in (EFFECTIVE if verb == "deleted" else PATCHED):
            continue
        who, agent_node = deleter_of(entry)
        if who == "other":
            continue
        state = record.get("state")
        if not isinstance(state, dict):
            continue
        strategy = str(((state.get("daemonset") or {}).get("annotations") or {})
                       .get("apps.openyurt.io/update-strategy", "")).lower()
        if verb != "deleted" and (who != "controller" or strategy != "advancedrollingupdate"):
            continue  # an in-place move is the controller's AdvancedRollingUpdate, judged as its DELETE
        checked["eligible"] += 1
        t, node, pod = entry.get("time"), state.get("node"), _pod_name(entry)
        ds = state.get("daemonset") or {}
        arrived = float(entry.get("time") or 0.0)
        committed = float(record.get("time") or arrived)
        if ds and changed_in_flight(ds_writes.get(f"{record.get('namespace')}/{ds.get('name')}", []),
                                    arrived, committed):
            # Its DaemonSet changed while the DELETE was on its way: its annotations at the commit are not
            # what the deleter saw, so the rules read from them are not judged (errs towards silence).
            ds = {}
        annotations = ds.get("annotations") or {}
        why: list[str] = []
        if who == "controller":
            if _condition(state, "UpgradeHeld") == "True":
                why.append("its node was held (UpgradeHeld True)")
            if str(annotations.get("edgeagent.io/paused", "")).lower() == "true":
                why.append("its DaemonSet was paused (edgeagent.io/paused)")
        else:
            if _condition(state, "PodNeedUpgrade") != "True":
                why.append(f"PodNeedUpgrade was {_condition(state, 'PodNeedUpgrade')}, not True")
            if agent_node is not None and node != agent_node:
                why.append(f"it is bound to {node}, not to the agent's node {agent_node}")
        if ds and not ds.get("gone") and node:
            phase, _reached, _wave, revision = _plan_position(ds, state.get("nodeLabels") or {}, str(node))
            if revision is not None and revision == ds.get("currentHash") and phase is not None:
                pod_hash = (state.get("labels") or {}).get("controller-revision-hash")
                # An old pod, on its way to the revision being rolled (the wave it may move in: rule 9).
                if pod_hash != revision and who == "controller" and phase in STOPPED_PHASES:
                    why.append(f"its rollout was {phase}")
        if why:
            out.append(Violation("eligible", f"{who} {verb} {pod} (uid {record.get('uid')}) on {node}: "
                                 + "; ".join(why), t, node, pod))
    return out


def check_wave(history: History, checked: dict[str, int]) -> list[Violation]:
    """Rule 9: an old pod moved (deleted, or its images patched in place) only on a node of a wave reached."""
    out: list[Violation] = []
    ds_writes = daemonset_writes(history.audit)
    for entry in [*pod_deletes(history.audit), *pod_patches(history.audit)]:
        record = _record(entry)
        verb = "deleted" if entry.get("verb") == "DELETE" else "patched in place"
        if record.get("outcome") not in (EFFECTIVE if verb == "deleted" else PATCHED):
            continue
        who, _ = deleter_of(entry)
        state = record.get("state")
        if who == "other" or not isinstance(state, dict):
            continue
        ds = state.get("daemonset") or {}
        node = state.get("node")
        if not ds or ds.get("gone") or not node:
            continue
        arrived = float(entry.get("time") or 0.0)
        if changed_in_flight(ds_writes.get(f"{record.get('namespace')}/{ds.get('name')}", []), arrived,
                             float(record.get("time") or arrived)):
            continue  # judged on a DaemonSet the mover could not have seen (as rule 1)
        phase, reached, wave, revision = _plan_position(ds, state.get("nodeLabels") or {}, str(node))
        if revision is None or revision != ds.get("currentHash") or phase is None:
            continue
        if (state.get("labels") or {}).get("controller-revision-hash") == revision:
            continue  # a pod of the revision being rolled: not an upgrade
        checked["wave"] += 1
        if phase in MOVING_PHASES | STOPPED_PHASES and reached is not None and wave is not None and wave > reached:
            pod = _pod_name(entry)
            out.append(Violation("wave", f"{who} {verb} {pod} (uid {record.get('uid')}) on {node}: its node is in "
                                 f"wave {wave}, the rollout had reached wave {reached}", entry.get("time"), node,
                                 pod))
    return out


def rollout_states(audit: Iterable[JSON]) -> list[tuple[float, str, JSON]]:
    """(time, DaemonSet, state) of every rollout state the audit recorded with a pod's DELETE or PATCH."""
    out: list[tuple[float, str, JSON]] = []
    for entry in [*pod_deletes(audit), *pod_patches(audit)]:
        record = _record(entry)
        ds = ((record.get("state") or {}).get("daemonset") or {})
        _, state = plan_and_state(ds)
        if isinstance(state, dict):
            out.append((float(record.get("time") or entry.get("time") or 0.0),
                        f"{record.get('namespace')}/{ds.get('name')}", state))
    out.sort(key=lambda item: item[0])
    return out


_EVENT_REVISION = re.compile(r"\brevision (?P<revision>[0-9a-z]+)\b")


def check_stable(history: History, checked: dict[str, int]) -> list[Violation]:
    """Rule 10: the rollback target is only ever a revision whose rollout completed. Evidence of completion: a
    state seen `complete`, a history entry `complete`, a RolloutComplete Event naming it. Judged only for a revision
    seen stopped or unfinished (errs towards silence for a revision nothing was seen of, such as the first one)."""
    completed: dict[str, set[str]] = defaultdict(set)
    unfinished: dict[str, set[str]] = defaultdict(set)
    states = rollout_states(history.audit)
    for _, ds, state in states:
        revision = str(state.get("revision"))
        (completed if state.get("phase") == "complete" else unfinished)[ds].add(revision)
        for entry in state.get("history") or []:
            if isinstance(entry, dict) and entry.get("revision"):
                phase = str(entry.get("phase"))
                (completed if phase in ("complete", "Complete") else unfinished)[ds].add(str(entry["revision"]))
    for event in history.events:
        involved = event.get("involvedObject") or {}
        ds = f"{involved.get('namespace')}/{involved.get('name')}"
        match = _EVENT_REVISION.search(str(event.get("message") or ""))
        if event.get("reason") == "RolloutComplete" and match:
            completed[ds].add(match["revision"])
    out: list[Violation] = []
    for t, ds, state in states:
        stable = state.get("stableRevision")
        if not stable:
            continue
        checked["stable"] += 1
        if stable in unfinished[ds] and stable not in completed[ds]:
            out.append(Violation("stable", f"{ds}: the rollout state of revision {state.get('revision')} names "
                                 f"{stable} as its stable revision (its rollback target), a revision seen aborted, "
                                 "rolled back or unfinished and never complete", t))
    for event in history.events:
        if event.get("reason") != "RolloutRolledBack":
            continue
        involved = event.get("involvedObject") or {}
        ds = f"{involved.get('namespace')}/{involved.get('name')}"
        match = re.search(r"template restored to revision (?P<revision>[0-9a-z]+)", str(event.get("message") or ""))
        if match is None:
            continue
        checked["stable"] += 1
        restored = match["revision"]
        if restored in unfinished[ds] and restored not in completed[ds]:
            out.append(Violation("stable", f"{ds}: a rollback restored revision {restored}, seen aborted, rolled "
                                 "back or unfinished and never complete", None))
    return out


_EVENTS_PATH = re.compile(r"^(/api/v1|/apis/events\.k8s\.io/v1)/namespaces/[^/]+/events$")


def check_forged(history: History, checked: dict[str, int]) -> list[Violation]:
    """Rule 11: a failure counted from an agent's report names a node whose own agent created an Event by then
    (the audit's User-Agent names the agent's node). Anyone allowed to create Events can write any source.host:
    only the node's own agent speaks for the node."""
    reported: dict[str, list[float]] = defaultdict(list)  # node -> times its agent created an Event
    for entry in history.audit:
        if entry.get("verb") != "POST" or not 200 <= int(entry.get("code") or 0) < 300:
            continue
        if not _EVENTS_PATH.match(str(entry.get("path"))):
            continue
        who, node = deleter_of(entry)
        if who == "agent" and node:
            reported[node].append(float(entry.get("time") or 0.0))
    out: list[Violation] = []
    seen: set[tuple[str, str, str]] = set()
    for t, ds, state in rollout_states(history.audit):
        for failure in state.get("failures") or []:
            if not isinstance(failure, dict) or not str(failure.get("reason") or "").startswith("agent:"):
                continue
            node = str(failure.get("node") or "")
            key = (ds, str(state.get("revision")), node)
            if key in seen:
                continue
            seen.add(key)
            checked["forged"] += 1
            if not any(at <= t for at in reported.get(node, [])):
                out.append(Violation("forged", f"{ds}: the rollout of revision {state.get('revision')} counts a "
                                     f"failure of {node} from a report that {node}'s own agent never made "
                                     f"({failure.get('pod')}: {failure.get('reason')})", t, node,
                                     str(failure.get("pod") or "") or None))
    return out


def check_delete_once(history: History, checked: dict[str, int]) -> list[Violation]:
    out: list[Violation] = []
    seen: dict[str, JSON] = {}
    for entry in pod_deletes(history.audit):
        who, _ = deleter_of(entry)
        if who == "other":
            continue
        record = entry["delete"]
        checked["delete-once"] += 1
        pod, t = _pod_name(entry), entry.get("time")
        node = (record.get("state") or {}).get("node")
        want = record.get("precondition_uid")
        if want is None:
            out.append(Violation("delete-once", f"{who} deleted {pod} without a UID precondition", t, node, pod))
        elif record.get("outcome") in EFFECTIVE and want != record.get("uid"):
            out.append(Violation("delete-once", f"{who}'s DELETE of {pod} took effect on uid {record.get('uid')} "
                                 f"although its precondition named {want}", t, node, pod))
        if record.get("outcome") not in EFFECTIVE:
            continue
        uid = str(record.get("uid"))
        first = seen.get(uid)
        if first is not None:
            out.append(Violation("delete-once", f"pod {pod} uid {uid} deleted twice: by {deleter_of(first)[0]} at "
                                 f"{first.get('time')} and by {who}", t, node, pod))
        else:
            seen[uid] = entry
    return out


def check_requests(history: History, checked: dict[str, int]) -> list[Violation]:
    out: list[Violation] = []
    for accepted in history.accepted:
        if accepted.get("code") not in (200, 202) or not accepted.get("id"):
            continue
        checked["requests"] += 1
        node, rid = str(accepted.get("node")), str(accepted["id"])
        listed = {str(r.get("id")): r for r in history.requests.get(node, [])}
        found = listed.get(rid)
        if node not in history.requests:
            out.append(Violation("requests", f"no request list was read from {node}'s agent; request {rid} "
                                 "cannot be shown terminal", accepted.get("t"), node, accepted.get("pod")))
        elif found is None:
            out.append(Violation("requests", f"request {rid} ({accepted.get('pod')}, answered "
                                 f"{accepted.get('code')}) is lost: {node}'s agent no longer lists it",
                                 accepted.get("t"), node, accepted.get("pod")))
        elif found.get("state") not in TERMINAL:
            out.append(Violation("requests", f"request {rid} ({accepted.get('pod')}) is still "
                                 f"{found.get('state')} after the faults stopped", accepted.get("t"), node,
                                 accepted.get("pod")))
    return out


def check_budget(history: History, checked: dict[str, int]) -> list[Violation]:
    out: list[Violation] = []
    for entry in [*pod_deletes(history.audit), *pod_patches(history.audit)]:
        record = _record(entry)
        who, _ = deleter_of(entry)
        state = record.get("state")
        verb = "deleted" if entry.get("verb") == "DELETE" else "patched in place"
        took_effect = record.get("outcome") in (EFFECTIVE if verb == "deleted" else PATCHED)
        if who != "controller" or not took_effect or not isinstance(state, dict):
            continue
        ds = state.get("daemonset") or {}
        if str(ds.get("annotations", {}).get("apps.openyurt.io/update-strategy", "")).lower() \
                != "advancedrollingupdate":
            continue
        checked["budget"] += 1
        if not state.get("ready") or state.get("terminating") or not state.get("nodeReady"):
            continue  # replacing a pod that is not available costs no availability
        total = len({s.get("node") for s in ds.get("siblings") or []})
        budget = parse_budget(ds["annotations"].get("apps.openyurt.io/max-unavailable"), total)
        node = str(state.get("node"))
        down = _unavailable_nodes(ds, exclude=node)
        if len(down) + 1 > budget:
            out.append(Violation(
                "budget", f"controller {verb} available pod {_pod_name(entry)} of {ds.get('name')} while "
                f"{len(down)} node(s) were already unavailable by the rollout (max-unavailable {budget} of "
                f"{total}): {', '.join(sorted(down)[:10])}", entry.get("time"), node, _pod_name(entry)))
    for sample in history.prepull_samples:
        checked["budget"] += 1
        active = [j for j in sample.get("jobs") or [] if j.get("active")]
        if len(active) > history.prepull_cap:
            out.append(Violation("budget", f"{len(active)} pre-pull Jobs active at once, cap "
                                 f"{history.prepull_cap}", sample.get("t")))
        per_node: dict[str, int] = defaultdict(int)
        for job in active:
            per_node[str(job.get("node"))] += 1
        for node, n in sorted(per_node.items()):
            if n > 1:
                out.append(Violation("budget", f"{n} pre-pull Jobs active at once on {node}", sample.get("t"), node))
    return out


def check_events_once(history: History, checked: dict[str, int]) -> list[Violation]:
    out: list[Violation] = []
    seen: dict[tuple[str, str, str], list[JSON]] = defaultdict(list)
    for event in history.events:
        if (event.get("source") or {}).get("component") != "edgeagent":
            continue
        match = _REQUEST_ID.search(str(event.get("message") or ""))
        if not match:
            continue
        key = (str((event.get("source") or {}).get("host")), match.group("id"), str(event.get("reason")))
        seen[key].append(event)
    for (node, rid, reason), found in sorted(seen.items()):
        checked["events-once"] += 1
        pod = str((found[0].get("involvedObject") or {}).get("name"))
        count = sum(int(e.get("count") or 1) for e in found)
        if len(found) > 1 or count > 1:
            names = ", ".join(str((e.get("metadata") or {}).get("name")) for e in found)
            out.append(Violation("events-once", f"{reason} for request {rid} on {node} recorded {count} times "
                                 f"({len(found)} Event object(s): {names})", None, node, pod))
    return out


def check_convergence(history: History, checked: dict[str, int]) -> list[Violation]:
    out: list[Violation] = []
    checked["convergence"] += 1
    stopped = history.faults_stopped_at
    if stopped is None:
        out.append(Violation("convergence", "the run did not record when the faults stopped"))
    elif history.converged_at is None:
        out.append(Violation("convergence", f"the fleet did not converge within {history.convergence_bound:.0f} s "
                             "after the last fault", stopped))
    elif history.converged_at - stopped > history.convergence_bound:
        out.append(Violation("convergence", f"the fleet converged {history.converged_at - stopped:.1f} s after the "
                             f"last fault, more than the bound of {history.convergence_bound:.0f} s", stopped))
    for rollout in history.rollouts:
        checked["convergence"] += 1
        code, phase = rollout.get("exit"), rollout.get("phase")
        done = rollout.get("updated") == rollout.get("total")
        expected = {1} if phase in ("aborted", "rolledBack") else {0} if done else {3}
        if code not in expected:
            out.append(Violation("convergence", f"rollout status {rollout.get('name')} exited {code} (expected "
                                 f"{'/'.join(map(str, sorted(expected)))}: {rollout.get('updated')}/"
                                 f"{rollout.get('total')} pods up to date, phase {phase})",
                                 evidence=tuple(str(rollout.get("output") or "").splitlines()[:20])))
    return out


def tracebacks(text: str, context: int = 12) -> list[str]:
    """Each traceback in a log, with the lines that follow it (the exception is at its end)."""
    lines = text.splitlines()
    return ["\n".join(lines[i:i + context]) for i, line in enumerate(lines) if _TRACEBACK.search(line)]


def check_processes(history: History, checked: dict[str, int]) -> list[Violation]:
    out: list[Violation] = []
    for exit_ in history.processes:
        checked["processes"] += 1
        if not exit_.get("expected"):
            out.append(Violation("processes", f"{exit_.get('name')} exited with {exit_.get('code')} although the "
                                 "schedule did not kill or stop it", exit_.get("t"),
                                 evidence=tuple(str(history.logs.get(str(exit_.get("name")), ""))
                                                .splitlines()[-15:])))
    for name, text in sorted(history.logs.items()):
        checked["processes"] += 1
        for excerpt in tracebacks(text):
            out.append(Violation("processes", f"traceback in {name}'s log", evidence=tuple(excerpt.splitlines())))
    return out


def credential_episodes(audit: Iterable[JSON]) -> dict[str, list[JSON]]:
    """Per client (User-Agent), each run of 401 answers and when it ended: the first request of that client
    the API server accepted (2xx) afterwards, None if none came. Fed the whole audit log, reads included (an
    idle agent's link probe is what meets a revoked token first); the history keeps only the result."""
    calls: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for entry in audit:
        t, code = entry.get("time"), entry.get("code")
        if isinstance(t, (int, float)) and isinstance(code, int) and (code == 401 or 200 <= code <= 299):
            calls[str(entry.get("userAgent") or "")].append((float(t), code))
    episodes: dict[str, list[JSON]] = {}
    for client, seen in calls.items():
        mine: list[JSON] = []
        for t, code in sorted(seen):
            if code == 401:
                if not mine or mine[-1]["end"] is not None:
                    mine.append({"start": t, "end": None, "rejected": 0})
                mine[-1]["rejected"] += 1
            elif mine and mine[-1]["end"] is None:
                mine[-1]["end"] = t
        if mine:
            episodes[client] = mine
    return episodes


def check_credentials(history: History, checked: dict[str, int]) -> list[Violation]:
    """A credential rotation must not leave a client on a dead token: after its 401s, an accepted request."""
    out: list[Violation] = []
    for client, episodes in sorted(history.credentials.items()):
        match = _AGENT_NODE.match(client)
        node = match.group("node") if match else None
        for episode in episodes:
            checked["credentials"] += 1
            if episode.get("end") is None:
                start = float(episode.get("start") or 0.0)
                out.append(Violation("credentials", f"{client} was refused with 401 {episode.get('rejected')} "
                                     f"time(s) from t={start - history.started_at:.1f} s on and never accepted "
                                     "again (stuck on a revoked credential)", start, node))
    return out


def credential_summary(history: History) -> str:
    """How many 401s the clients met after rotations, and how long the longest took to recover."""
    revoked = [a for a in history.schedule if a.get("kind") == "cred_rotate" and a.get("revoked")]
    rotations = len(revoked)
    episodes = [e for eps in history.credentials.values() for e in eps]
    rejected = sum(int(e.get("rejected") or 0) for e in episodes)
    ended = [float(e["end"]) - float(e["start"]) for e in episodes if e.get("end") is not None]
    stuck = len(episodes) - len(ended)
    text = (f"credentials: {rotations} rotation(s) revoked a token in use; {rejected} request(s) refused with 401 "
            f"in {len(episodes)} episode(s) of {len(history.credentials)} client(s), "
            + (f"{stuck} never recovered" if stuck else "all recovered"))
    if ended:
        ended.sort()
        text += (f"; from the first 401 to the next accepted request: median {ended[len(ended) // 2]:.1f} s, "
                 f"longest {ended[-1]:.1f} s")
    return text + "; " + rotation_outcomes(revoked)


def rotation_outcomes(rotations: list[JSON]) -> str:
    """How the rotations ended: the harness writes the new token once the agent met a 401 with the revoked one
    (poked with requests if it stayed quiet), at a cap otherwise, or when the faults stopped first."""
    outcomes = Counter(str(a.get("outcome") or "unknown") for a in rotations)
    poked = sum(1 for a in rotations if a.get("outcome") == "refused" and int(a.get("pokes") or 0) > 0)
    text = (f"rotations that met a 401 before the new token was written: {outcomes.pop('refused', 0)} of "
            f"{len(rotations)} ({poked} after a poke), cap reached without a 401: {outcomes.pop('cap', 0)}")
    stopped = outcomes.pop("stopped", 0)
    if stopped:
        text += f", ended by the end of the faults: {stopped}"
    if outcomes:
        text += ", other: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items()))
    return text


def check_inplace(history: History, checked: dict[str, int]) -> list[Violation]:
    """Rule 12 (daemon_gaps.py): a node without its daemon only for the container's own restart."""
    found, facts, _ = judge(history.containers, history.inplace, history.schedule)
    checked["inplace"] += facts
    return [Violation("inplace", v["message"], v["t"], v["node"], evidence=tuple(v["evidence"])) for v in found]


def inplace_summary(history: History) -> str:
    """What rule 12 saw: restarts, how many right after a link cut of their node, the longest gap judged."""
    if not history.inplace.get("daemonsets"):
        return "in place: no in-place DaemonSet"
    _, _, summary = judge(history.containers, history.inplace, history.schedule)
    samples = len(history.containers.get("times") or [])
    return (f"in place ({', '.join(history.inplace['daemonsets'])}): {summary['restarts']} container restart(s) "
            f"seen in {samples} samples, {summary['afterCut']} within 10 s of a link cut of their node; "
            f"{summary['gaps']} gap(s) judged, longest at least {summary['longest']:.1f} s "
            f"(bound {float(summary.get('bound') or 0.0):.1f} s)")


CHECKS = (check_eligible, check_delete_once, check_requests, check_budget, check_events_once, check_convergence,
          check_processes, check_credentials, check_wave, check_stable, check_forged, check_inplace)


def check(history: History) -> Result:
    checked = {name: 0 for name in INVARIANTS}
    violations: list[Violation] = []
    for fn in CHECKS:
        violations.extend(fn(history, checked))
    return Result(violations, checked)


# ------------------------------------------------------------------------------------------------ report


def _around(history: History, v: Violation, window: float) -> list[str]:
    """The schedule's acts and the audit's writes near the violation that touch its node or pod."""
    lines: list[str] = []
    if v.t is None:
        return lines
    start = history.started_at
    for act in history.schedule:
        at = act.get("at")
        if at is None or abs(float(at) - v.t) > window:
            continue
        if v.node is None or act.get("target") in (v.node, None, "") or v.node in json.dumps(act):
            lines.append(f"  fault   t={float(at) - start:9.2f}  {json.dumps(act, sort_keys=True)}")
    pod_name = v.pod.split("/", 1)[-1] if v.pod else None
    for entry in history.audit:
        t = entry.get("time")
        if t is None or abs(float(t) - v.t) > window or entry.get("verb") == "GET":
            continue
        path = str(entry.get("path"))
        if (pod_name and pod_name in path) or (v.node and v.node in str(entry.get("userAgent"))):
            record = entry.get("delete") or {}
            extra = f" outcome={record.get('outcome')} precondition={record.get('precondition_uid')}" if record else ""
            lines.append(f"  request t={float(t) - start:9.2f}  {entry.get('verb')} {path} -> {entry.get('code')}"
                         f" by {entry.get('userAgent')}{extra}")
    return lines[:60]


def report(history: History, result: Result, *, window: float = 10.0) -> str:
    out = [f"soak check: seed {history.seed}: {len(result.violations)} violation(s)",
           "invariants checked: " + ", ".join(f"{k} {v}" for k, v in result.checked.items())]
    if not result.violations:
        return "\n".join(out)
    out.append(f"replay with the same seed: make soak SEED={history.seed}")
    by_kind: dict[str, int] = defaultdict(int)
    for act in history.schedule:
        by_kind[str(act.get("kind"))] += 1
    out.append("fault schedule: " + ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())))
    for v in result.violations:
        out.append(f"VIOLATION [{v.invariant}] {v.message}")
        out.extend(f"  | {line}" for line in v.evidence)
        out.extend(_around(history, v, window))
    return "\n".join(out)
