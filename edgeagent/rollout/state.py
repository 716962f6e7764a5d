"""The state of a rollout: which revision, which wave, which phase, the counts and the failures; what the
controller persists so that a restarted controller or a new leader continues the same wave and bake clock.

Read tolerantly (`RolloutState.from_json`): a hand-edited or truncated state is a problem reported, never a
crash. Shared by the controller (which writes it), the agent's plan check, `rollout status` and the fleet.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from edgeagent.contract import ANNOTATION_ROLLOUT_STATE, STATE_GENERATION
from edgeagent.kube.timeutil import format_time, parse_time
from edgeagent.rollout.plan import Plan

JSON = dict[str, Any]

PHASE_PROGRESSING = "progressing"
PHASE_BAKING = "baking"
PHASE_PAUSED = "paused"
PHASE_ABORTED = "aborted"
PHASE_ROLLED_BACK = "rolledBack"
PHASE_COMPLETE = "complete"
PHASES = (PHASE_PROGRESSING, PHASE_BAKING, PHASE_PAUSED, PHASE_ABORTED, PHASE_ROLLED_BACK, PHASE_COMPLETE)
# Phases in which the rollout still moves by itself (or will, once resumed).
ACTIVE_PHASES = (PHASE_PROGRESSING, PHASE_BAKING, PHASE_PAUSED)

# The phases as the API spells them (CamelCase, as Kubernetes spells a phase): a RolloutPlan's `status.phase`, and
# every place a person or a program reads a phase: `fleet` (and `-o json`), `rollout status`, `rollout history`,
# the dashboard and the `phase` label of `edgeagent_controller_rollout_phase`. The constants above are the state
# machine's own identifiers (and the round-3 annotation's spelling), never shown; this mapping is the one place
# they become the API's words (`api_phase`).
STATUS_PHASES = {PHASE_PROGRESSING: "Progressing", PHASE_BAKING: "Baking", PHASE_PAUSED: "Paused",
                 PHASE_ABORTED: "Aborted", PHASE_ROLLED_BACK: "RolledBack", PHASE_COMPLETE: "Complete"}
# The phases in which the rollout still moves by itself (or will, once resumed), in the API's spelling.
STATUS_ACTIVE_PHASES = frozenset(STATUS_PHASES[p] for p in ACTIVE_PHASES)


def api_phase(phase: str) -> str:
    """A phase as the API spells it (a phase already so spelt is returned as it is)."""
    return STATUS_PHASES.get(phase, phase)


# The state lists at most this many failing pods; the count covers all of them.
MAX_FAILURES_LISTED = 20
# The state keeps the newest this many revisions rolled (`history`).
MAX_HISTORY = 10

# The condition a held plan carries (a rolled-back revision is the template again).
CONDITION_HELD = "Held"
REASON_ROLLED_BACK_REVISION = "RolledBackRevision"


def condition_json(condition: tuple[tuple[str, str], ...]) -> JSON:
    """A condition as the API has it: the state keeps every field as text, the API's `observedGeneration` is an
    integer (the CRD's schema refuses it as a string)."""
    body: JSON = dict(condition)
    generation = body.get("observedGeneration")
    if isinstance(generation, str) and generation.isdigit():
        body["observedGeneration"] = int(generation)
    return body


@dataclass(frozen=True)
class HistoryEntry:
    """One revision rolled: its images and how its rollout ended (or stands)."""

    revision: str
    images: tuple[str, ...] = ()
    phase: str = PHASE_PROGRESSING
    finished_at: float | None = None

    def to_json(self) -> JSON:
        body: JSON = {"revision": self.revision, "images": list(self.images), "phase": self.phase}
        if self.finished_at is not None:
            body["finishedAt"] = format_time(self.finished_at)
        return body

    @classmethod
    def from_json(cls, body: Any) -> HistoryEntry | None:
        if not isinstance(body, dict) or not isinstance(body.get("revision"), str) or not body["revision"]:
            return None
        images = body.get("images")
        phase = body.get("phase")
        return cls(revision=body["revision"],
                   images=tuple(str(i) for i in images) if isinstance(images, list) else (),
                   phase=phase if phase in PHASES else PHASE_PROGRESSING,
                   finished_at=parse_time(body.get("finishedAt")))


@dataclass
class RolloutState:
    """The `edgeagent.io/rollout-state` annotation: enough to continue the same wave and bake clock after a
    restart or a change of leader. Times are epoch seconds here, RFC 3339 (seconds, `Z`) in the JSON."""

    revision: str
    stable_revision: str | None
    waves: int
    wave: int
    phase: str
    wave_started_at: float | None = None
    bake_started_at: float | None = None
    nodes: int = 0
    upgraded: int = 0
    deferred: int = 0
    failed: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    # The DaemonSet `metadata.generation` this state was decided for. An agent compares it with the
    # DaemonSet's generation before it deletes a pod: a template changed since (a new revision the controller
    # has not planned yet) makes the pod's PodNeedUpgrade stale. None in states of older controllers.
    generation: int | None = None
    # Nodes not upgraded yet (their wave not reached, or being replaced).
    waiting: int = 0
    # The revisions rolled, newest first (at most MAX_HISTORY): the rollback target is read from it.
    history: tuple[HistoryEntry, ...] = ()
    # Kubernetes-style conditions (type, status, reason, message, lastTransitionTime).
    conditions: tuple[tuple[tuple[str, str], ...], ...] = ()

    def condition(self, kind: str) -> dict[str, str] | None:
        for cond in self.conditions:
            found = dict(cond)
            if found.get("type") == kind:
                return found
        return None

    def bake_ends_at(self, plan: Plan) -> float | None:
        if self.bake_started_at is None:
            return None
        return self.bake_started_at + plan.bake_seconds

    def to_json(self) -> str:
        body: JSON = {
            "revision": self.revision,
            "stableRevision": self.stable_revision,
            "waves": self.waves,
            "wave": self.wave,
            "phase": self.phase,
            "waveStartedAt": format_time(self.wave_started_at) if self.wave_started_at is not None else None,
            "bakeStartedAt": format_time(self.bake_started_at) if self.bake_started_at is not None else None,
            "counts": {"nodes": self.nodes, "upgraded": self.upgraded, "waiting": self.waiting,
                       "deferred": self.deferred, "failed": self.failed},
            "failures": self.failures[:MAX_FAILURES_LISTED],
        }
        if self.history:
            body["history"] = [h.to_json() for h in self.history[:MAX_HISTORY]]
        if self.conditions:
            body["conditions"] = [condition_json(c) for c in self.conditions]
        if self.generation is not None:
            body[STATE_GENERATION] = self.generation
        return json.dumps(body, separators=(",", ":"))

    def to_status(self) -> JSON:
        """The state as a RolloutPlan's `status` (edgeagent.io/v1alpha1): the same fields, phases in the API's
        spelling, absent times left out."""
        body: JSON = {
            "revision": self.revision,
            "phase": STATUS_PHASES[self.phase],
            "wave": self.wave,
            "waves": self.waves,
            "counts": {"nodes": self.nodes, "upgraded": self.upgraded, "waiting": self.waiting,
                       "deferred": self.deferred, "failed": self.failed},
            "failures": [dict(f) for f in self.failures[:MAX_FAILURES_LISTED]],
            "history": [{**h.to_json(), "phase": STATUS_PHASES[self._shown_phase(h)]}
                        for h in self.history[:MAX_HISTORY]],
            "conditions": [condition_json(c) for c in self.conditions],
        }
        if self.generation is not None:
            body["observedGeneration"] = self.generation
        if self.stable_revision:
            body["stableRevision"] = self.stable_revision
        if self.wave_started_at is not None:
            body["waveStartedAt"] = format_time(self.wave_started_at)
        if self.bake_started_at is not None:
            body["bakeStartedAt"] = format_time(self.bake_started_at)
        return body

    def _shown_phase(self, entry: HistoryEntry) -> str:
        """The phase `status.history` shows for `entry`: the rollout's own (Baking, Paused) for the current
        revision's entry while it has not ended, which the state machine keeps as Progressing until then, so that
        `rollout history`, `kubectl get -o yaml` and `rollout status` say the same (`state_from_status` reads it
        back as Progressing)."""
        if (entry.revision == self.revision and entry.finished_at is None and entry.phase == PHASE_PROGRESSING
                and self.phase in ACTIVE_PHASES):
            return self.phase
        return entry.phase

    @classmethod
    def from_json(cls, text: str | None) -> tuple[RolloutState | None, str | None]:
        """(state, None), (None, None) when absent, or (None, problem) for anything unreadable: a hand-edited or
        truncated annotation is reported and replaced, never a crash of the reconcile."""
        if text is None or not str(text).strip():
            return None, None
        try:
            body = json.loads(text)
        except ValueError as exc:
            return None, f"annotation {ANNOTATION_ROLLOUT_STATE} is not JSON: {exc}"
        if not isinstance(body, dict):
            return None, f"annotation {ANNOTATION_ROLLOUT_STATE} is not a JSON object"
        revision = body.get("revision")
        phase = body.get("phase")
        waves = body.get("waves")
        wave = body.get("wave")
        if not isinstance(revision, str) or not revision:
            return None, f"annotation {ANNOTATION_ROLLOUT_STATE} has no revision"
        if phase not in PHASES:
            return None, f"annotation {ANNOTATION_ROLLOUT_STATE} has an unknown phase {phase!r}"
        if not isinstance(waves, int) or not isinstance(wave, int) or waves < 1 or not 1 <= wave <= waves:
            return None, f"annotation {ANNOTATION_ROLLOUT_STATE} has an impossible wave {wave!r}/{waves!r}"
        stable = body.get("stableRevision")
        counts = body.get("counts") if isinstance(body.get("counts"), dict) else {}
        assert isinstance(counts, dict)

        def count(name: str) -> int:
            value = counts.get(name)
            return value if isinstance(value, int) and value >= 0 else 0

        failures = body.get("failures")
        listed = [
            {str(k): str(v) for k, v in item.items()}
            for item in (failures if isinstance(failures, list) else []) if isinstance(item, dict)
        ][:MAX_FAILURES_LISTED]
        generation = body.get(STATE_GENERATION)
        history = body.get("history")
        entries = [HistoryEntry.from_json(h) for h in (history if isinstance(history, list) else [])]
        conditions = body.get("conditions")
        return cls(
            revision=revision,
            stable_revision=stable if isinstance(stable, str) and stable else None,
            waves=waves,
            wave=wave,
            phase=phase,
            wave_started_at=parse_time(body.get("waveStartedAt")),
            bake_started_at=parse_time(body.get("bakeStartedAt")),
            nodes=count("nodes"),
            upgraded=count("upgraded"),
            deferred=count("deferred"),
            failed=count("failed"),
            failures=listed,
            generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else None,
            waiting=count("waiting"),
            history=tuple(e for e in entries if e is not None)[:MAX_HISTORY],
            conditions=tuple(tuple(sorted((str(k), str(v)) for k, v in c.items()))
                             for c in (conditions if isinstance(conditions, list) else []) if isinstance(c, dict)),
        ), None


def _stored_phase(entry: JSON, revision: Any, phases: Mapping[str, str]) -> str:
    """The state machine's phase of a `status.history` entry: the current revision's unfinished entry, shown in
    the rollout's phase, is Progressing."""
    if entry.get("revision") == revision and not entry.get("finishedAt") and entry.get("phase") in STATUS_ACTIVE_PHASES:
        return PHASE_PROGRESSING
    return phases.get(str(entry.get("phase")), PHASE_PROGRESSING)


def state_from_status(status: Any) -> tuple[RolloutState | None, str | None]:
    """A RolloutPlan's `status` (what `to_status` writes) as a state, read as tolerantly as the annotation: (None,
    None) when the controller has written none yet, (None, problem) for anything unreadable."""
    if status is None or status == {}:
        return None, None
    if not isinstance(status, dict):
        return None, "status is not an object"
    phases = {spelt: phase for phase, spelt in STATUS_PHASES.items()}
    phase = status.get("phase")
    if phase not in phases:
        return None, f"status has an unknown phase {phase!r}"
    body = dict(status)
    body["phase"] = phases[phase]
    # The current revision's unfinished entry shows the rollout's phase (`RolloutState._shown_phase`); the state
    # machine keeps it Progressing until the revision's rollout ends.
    body["history"] = [{**h, "phase": _stored_phase(h, status.get("revision"), phases)}
                       for h in status.get("history") or [] if isinstance(h, dict)]
    if "observedGeneration" in status:
        body[STATE_GENERATION] = status["observedGeneration"]
    state, problem = RolloutState.from_json(json.dumps(body))
    return state, problem.replace(f"annotation {ANNOTATION_ROLLOUT_STATE}", "status") if problem else None


def revision_now(state: RolloutState) -> str:
    """The revision the DaemonSet's template holds according to the state: after a rollback the restored one."""
    if state.phase == PHASE_ROLLED_BACK and state.stable_revision:
        return state.stable_revision
    return state.revision


def iter_failures(state: RolloutState) -> Iterable[tuple[str, str, str]]:
    """(node, pod, reason) of the listed failures."""
    for item in state.failures:
        yield item.get("node", ""), item.get("pod", ""), item.get("reason", "")


def newest_completed(history: Iterable[HistoryEntry], other_than: str | None = None) -> str | None:
    """The newest revision whose rollout completed, other than `other_than` (the one being rolled: going back to a
    revision that completed once, its rollback target is the one before it): the only kind of revision a rollback
    may restore (never one that was aborted, rolled back or did not finish)."""
    for entry in history:
        if entry.phase == PHASE_COMPLETE and entry.revision != other_than:
            return entry.revision
    return None


def rolled_back(history: Iterable[HistoryEntry], revision: str) -> bool:
    """Whether the revision was rolled back (and so is never rolled again by itself)."""
    return any(entry.revision == revision and entry.phase == PHASE_ROLLED_BACK for entry in history)
