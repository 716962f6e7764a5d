"""The state of a rollout: which revision, which wave, which phase, the counts and the failures; what the
controller persists so that a restarted controller or a new leader continues the same wave and bake clock.

Read tolerantly (`RolloutState.from_json`): a hand-edited or truncated state is a problem reported, never a
crash. Shared by the controller (which writes it), the agent's plan check, `rollout status` and the fleet.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from edgeagent.contract import ANNOTATION_ROLLOUT_STATE, STATE_GENERATION
from edgeagent.kube.objects import annotations_of
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

# The state annotation lists at most this many failing pods; the count covers all of them.
MAX_FAILURES_LISTED = 20


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
            "counts": {"nodes": self.nodes, "upgraded": self.upgraded, "deferred": self.deferred,
                       "failed": self.failed},
            "failures": self.failures[:MAX_FAILURES_LISTED],
        }
        if self.generation is not None:
            body[STATE_GENERATION] = self.generation
        return json.dumps(body, separators=(",", ":"))

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
        ), None


def state_of(ds: JSON) -> tuple[RolloutState | None, str | None]:
    """The DaemonSet's rollout state, read as `RolloutState.from_json` does."""
    raw = annotations_of(ds).get(ANNOTATION_ROLLOUT_STATE)
    return RolloutState.from_json(str(raw) if raw is not None else None)


def revision_now(state: RolloutState) -> str:
    """The revision the DaemonSet's template holds according to the state: after a rollback the restored one."""
    if state.phase == PHASE_ROLLED_BACK and state.stable_revision:
        return state.stable_revision
    return state.revision


def iter_failures(state: RolloutState) -> Iterable[tuple[str, str, str]]:
    """(node, pod, reason) of the listed failures."""
    for item in state.failures:
        yield item.get("node", ""), item.get("pod", ""), item.get("reason", "")
