"""The rollout state machine: from the persisted state, the plan, what the pods say and the steering, the next
state, the Events, and which pods may move (`Gate`).

Pure (no I/O, the clock passed in), so that the controller, a restarted controller and a new leader all decide
the same from the same inputs, and so that the safety rules hold as invariants of a model-based test. What the
pods say comes in as an `Observed` (the controller's `Observation`, built from its caches).

- `decide`: progressing -> baking -> next wave ... -> complete; aborted -> rolledBack. One transition per
  call: each write brings the DaemonSet back through the controller's informer, so a restarted controller or
  a new leader continues from exactly what was written. The decision is applied only once its state is
  written ("decide -> write -> act"): a refused write moves nothing.
- `Gate`: what OTA and AdvancedRollingUpdate ask: may the pod on this node move to the current revision?

Writes are bounded: the state changes on a transition (wave started/finished, bake over, phase change), when a
new failure is counted (at most `maxFailed` times) and when steering is consumed; never per node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from edgeagent.contract import (
    EVENT_NORMAL,
    EVENT_ROLLOUT_ABORTED,
    EVENT_ROLLOUT_COMPLETE,
    EVENT_ROLLOUT_HELD,
    EVENT_WARNING,
    EVENT_WAVE_FINISHED,
    EVENT_WAVE_STARTED,
)
from edgeagent.kube.timeutil import format_time
from edgeagent.rollout.plan import Plan, Ranking, format_duration
from edgeagent.rollout.state import (
    ACTIVE_PHASES,
    CONDITION_HELD,
    MAX_FAILURES_LISTED,
    MAX_HISTORY,
    PHASE_ABORTED,
    PHASE_BAKING,
    PHASE_COMPLETE,
    PHASE_PAUSED,
    PHASE_PROGRESSING,
    PHASE_ROLLED_BACK,
    REASON_ROLLED_BACK_REVISION,
    HistoryEntry,
    RolloutState,
    newest_completed,
    rolled_back,
)

JSON = dict[str, Any]

# The steering a decision consumed (`Decision.remove`): the controller records those requests handled.
STEER_PROMOTE = "promote"
STEER_ABORT = "abort"

# Names listed in one Event message.
_NAMES_IN_EVENT = 10
# How many of a running wave's first nodes `wave_finished` reads one by one before it compares sets.
_PEEK = 64


class Observed(Protocol):
    """What the state machine asks of the pods and nodes of one revision's rollout (the controller's
    `Observation` answers from its caches; a model-based test answers from a model)."""

    # node -> (namespace/pod, reason): failures seen now, by node.
    failures: dict[str, tuple[str, str]]
    # When the next not-yet-available new pod reaches its progress deadline (a wake-up), if any.
    next_deadline: float | None
    # No pod of an older revision is left.
    all_updated: bool

    def clean(self) -> set[str]:
        """Nodes that are never pending (their new pod alone, available)."""
        ...

    def ready(self, node: str) -> bool:
        """Whether the node is Ready (a node gone from the cache is not)."""
        ...

    def any_pending(self, nodes: Iterable[str]) -> bool:
        """Whether any of `nodes` is neither upgraded, nor deferred, nor failed."""
        ...

    def upgraded_among(self, ranking: Ranking) -> int:
        """How many nodes of `ranking` are upgraded."""
        ...

    def deferred_in_waves(self, ranking: Ranking, k: int) -> list[str]:
        """The deferred nodes of waves 1..k, in their order."""
        ...


# ------------------------------------------------------------------------------------------------ gate


@dataclass(frozen=True)
class Gate:
    """Which outdated pods may move: those on nodes of the reached waves; none when `frozen` (aborted,
    rolled back, or the current revision is one the controller rolled back from)."""

    ranking: Ranking | None
    wave: int
    frozen: bool = False

    def allows(self, node: str) -> bool:
        if self.frozen:
            return False
        if self.ranking is None:
            return True
        found = self.ranking.waves_by_node.get(node)
        # A node the ranking does not know joined after the ranking was made: its pod was created from the
        # current template anyway; let it through rather than strand it.
        return found is None or found <= self.wave

    def moved_since(self, before: Gate) -> Sequence[str] | None:
        """The nodes whose `allows` answer differs from `before`'s, or None when they cannot be listed without
        asking about every node.

        A wave change within one ranking moves a slice of the ranking's order (the nodes of the waves between
        the two), so the OTA conditions are re-derived for those nodes' pods only: at 100,000 nodes, 9,000
        pods from wave 1 to 2 instead of all of them. A gate that opens every node (the plan complete, or no
        ranking) differs from a wave of a ranking by that ranking's later waves. What is left to None:
        - a freeze or a thaw (abort, rollback, a revision rolled back from, and their reversal): a gate that
          is not frozen lets through nodes its ranking does not know (they joined after it was made), and those
          cannot be listed from the ranking; a freeze happens once per rollout at most;
        - two different rankings: a new ranking (nodes joined) may place any node in another wave."""
        if before is self or (self.frozen and before.frozen):
            return ()
        if self.frozen or before.frozen:
            return None
        was, was_open = before._opened()
        now, now_open = self._opened()
        if was is None:
            return () if now is None else now.order[now_open:]
        if now is None:
            return was.order[was_open:]
        if was is not now:
            return None
        return now.order[min(was_open, now_open):max(was_open, now_open)]

    def _opened(self) -> tuple[Ranking | None, int]:
        """(ranking, how many of its first nodes may move); (None, 0) when every node may."""
        ranking = self.ranking
        if ranking is None or self.wave >= ranking.waves:
            return None, 0
        return ranking, ranking.targets[self.wave - 1] if self.wave > 0 else 0


OPEN_GATE = Gate(None, 0)
FROZEN_GATE = Gate(None, 0, frozen=True)


def settled_gate(state: RolloutState | None, revision: str, steering: Steering) -> Gate | None:
    """The gate when nothing is left to decide (no observation needed): the rollout of `revision` is over, or
    `revision` is a rolled-back one already held. None: the state machine must look at the pods."""
    if steering.promote is not None or steering.abort is not None or steering.retry is not None:
        return None
    if state is None:
        return FROZEN_GATE if steering.rolled_back_from == revision else None
    if _held(state, revision, steering):
        # Frozen once the hold is written (its condition and Event); until then `decide` writes it.
        held = state.condition(CONDITION_HELD)
        return FROZEN_GATE if held is not None and revision in held.get("message", "").split() else None
    if steering.rolled_back_from == revision:
        return FROZEN_GATE
    if state.phase == PHASE_ROLLED_BACK and revision == state.stable_revision:
        return OPEN_GATE
    if state.revision != revision:
        return None
    if state.phase == PHASE_COMPLETE:
        return OPEN_GATE
    if state.phase in (PHASE_ABORTED, PHASE_ROLLED_BACK):
        return FROZEN_GATE
    return None


# ------------------------------------------------------------------------------------------------ decide


@dataclass(frozen=True)
class Steering:
    paused: bool = False
    promote: str | None = None
    abort: str | None = None
    rolled_back_from: str | None = None
    # `rollout retry`: the revision the operator asks to roll again (after Aborted, or a rolled-back revision
    # re-applied and held).
    retry: str | None = None


@dataclass
class Decision:
    """What one reconcile does about the plan. `state` None: nothing to write. `remove`: the steering consumed
    (`STEER_PROMOTE`, `STEER_ABORT`; recorded handled in the same write as the state). `rollback`: restore the
    template of `state.stable_revision` (the state written then says rolledBack).
    Applied only once written: `outcome`."""

    gate: Gate
    state: RolloutState | None = None
    remove: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    rollback: bool = False
    requeue_after: float | None = None
    aborted: bool = False

    @property
    def writes(self) -> bool:
        return self.state is not None or bool(self.remove)


@dataclass(frozen=True)
class Outcome:
    """What a decision does once its write was tried: the gate pods move by and the Events to record."""

    gate: Gate
    events: tuple[tuple[str, str, str], ...]
    state: RolloutState | None


def outcome(decision: Decision, written: bool) -> Outcome:
    """decide -> write -> act: a decision whose write was refused (a conflict: the cache was behind) moves
    nothing and says nothing; the next reconcile decides again on fresh data. A decision with nothing to write
    acts at once."""
    if written or not decision.writes:
        return Outcome(decision.gate, tuple(decision.events), decision.state)
    return Outcome(FROZEN_GATE, (), None)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_IN_EVENT])
    return shown + (f" and {len(names) - _NAMES_IN_EVENT} more" if len(names) > _NAMES_IN_EVENT else "")


def _soonest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _no_images(revision: str) -> Sequence[str]:
    return ()


def _shown(revision: str | None, images: Callable[[str], Sequence[str]]) -> str:
    """`revision R (images a, b)`: Events and history name the images, which people recognise."""
    if not revision:
        return "no revision"
    found = list(images(revision))
    return f"revision {revision}" + (f" ({', '.join(found)})" if found else "")


def _held(state: RolloutState | None, revision: str, steering: Steering) -> bool:
    """A revision that was rolled back is never rolled again by itself: held until the template changes or the
    operator retries it."""
    if steering.retry == revision:
        return False
    history = state.history if state is not None else ()
    return steering.rolled_back_from == revision or rolled_back(history, revision)


def _begin(state: RolloutState | None, revision: str, images: Sequence[str], now: float
           ) -> tuple[HistoryEntry, ...]:
    """The history when `revision` starts: the revision before it ends as it stood, the new one first."""
    history = list(state.history) if state is not None else []
    if state is not None and state.revision != revision and not any(h.revision == state.revision for h in history):
        # A state from before history was kept: its revision is remembered as it stood.
        history.insert(0, HistoryEntry(state.revision, (), state.phase, now))
    history = [h if h.finished_at is not None or h.revision == revision else replace(h, finished_at=now)
               for h in history if h.revision != revision]
    return (HistoryEntry(revision, tuple(images), PHASE_PROGRESSING), *history)[:MAX_HISTORY]


def _end(history: tuple[HistoryEntry, ...], revision: str, phase: str, now: float) -> tuple[HistoryEntry, ...]:
    return tuple(replace(h, phase=phase, finished_at=now) if h.revision == revision else h for h in history)


def _counts(state: RolloutState, ranking: Ranking, obs: Observed, k: int) -> RolloutState:
    """The state's node counts for wave k. Only a node with a pod of the revision can be upgraded and only a
    reached one counts as deferred, so those are read, not every node of the ranking: when wave 2 of 100,000
    nodes starts that is ~10,000 nodes, not 100,000 twice (~550 ms in the pass that started it)."""
    upgraded = obs.upgraded_among(ranking)
    deferred = len(obs.deferred_in_waves(ranking, k))
    nodes = len(ranking.order)
    return replace(state, nodes=nodes, upgraded=upgraded, deferred=deferred,
                   waiting=max(0, nodes - upgraded - deferred - state.failed))


def wave_finished(ranking: Ranking, obs: Observed, k: int) -> bool:
    """Every node of waves 1..k is upgraded, deferred or counted failed (a failure below `maxFailed` is tolerated,
    and would otherwise block the rollout forever).

    Wave k is read first: while it runs, one of its first nodes is usually still pending and the answer comes
    at once; the earlier waves (at 100,000 nodes most of the fleet in the last wave) are read in full only
    once wave k is done, instead of on every pass."""
    last = min(k, len(ranking.targets))
    if last <= 0:
        return True
    wave = ranking.nodes_of_wave(last)
    if obs.any_pending(wave[:_PEEK]):
        return False
    # Past its first nodes the wave is usually done or nearly: when every reached node is clean (the pass that
    # finishes a wave, and every pass of a bake) one set comparison says so, instead of a loop over them all.
    if obs.clean().issuperset(ranking.order[:ranking.targets[last - 1]]):
        return True
    return not obs.any_pending(wave) and not obs.any_pending(ranking.nodes_in_waves(last - 1))


def wave_stops(plan: Plan, ranking: Ranking, obs: Observed, k: int, failed_nodes: AbstractSet[str]) -> str | None:
    """Why the failures of wave k stop the rollout, or None: `maxFailedPerWave` of the wave's nodes reached, or
    the wave failed entirely (every node of it failed or deferred, one at least failed: a canary that fails
    never leads to the next wave, whatever `maxFailed` allows)."""
    in_wave = [n for n in failed_nodes if ranking.wave_of(n) == k]
    if not in_wave:
        return None
    nodes = ranking.nodes_of_wave(k)
    limit = plan.max_failed_per_wave
    if limit is not None and len(in_wave) >= limit.of(len(nodes)):
        return f"{len(in_wave)} failure(s) in wave {k}, maxFailedPerWave is {limit} of {len(nodes)} node(s)"
    deferred = set(obs.deferred_in_waves(ranking, k))
    if all(n in failed_nodes or n in deferred for n in nodes):
        return f"every node of wave {k} failed ({len(in_wave)} of {len(nodes)}, the rest deferred)" if len(
            in_wave) < len(nodes) else f"every node of wave {k} failed ({len(nodes)})"
    return None


def decide(
    *,
    plan: Plan,
    state: RolloutState | None,
    revision: str,
    ranking: Ranking,
    obs: Observed,
    steering: Steering,
    max_failed: int,
    now: float,
    previous: Callable[[], str | None],
    images: Callable[[str], Sequence[str]] = _no_images,
) -> Decision:
    """The state machine: progressing -> baking -> next wave ... -> complete; aborted -> rolledBack.

    `previous`: the revision the DaemonSet's pods ran before this one when no state says so (every old pod on
    the same revision), or None. `images`: a revision's images, named in Events and the history."""
    # The state keeps whole seconds, and a successor computes with what it reads: a wave's start is rounded
    # down (it began no later), a bake's start up (the bake is never shorter than asked).
    started_at = float(math.floor(now))
    bake_from = float(math.ceil(now))
    n = ranking.waves
    remove: list[str] = []
    if _held(state, revision, steering):
        # The template is back on a revision that was rolled back: never roll it again by itself. Steering has
        # nothing to act on; the hold is written once (a condition naming the revision, a Warning Event).
        remove = [a for a, v in ((STEER_PROMOTE, steering.promote),
                                 (STEER_ABORT, steering.abort)) if v]
        gate = Gate(ranking, 0, frozen=True)
        shown = _shown(revision, images)
        message = (f"{shown} was rolled back and is the template again: no pod is moved to it until the template "
                   f"changes or `edgeagent rollout retry` is run")
        held = state.condition(CONDITION_HELD) if state is not None else None
        if state is None or (held is not None and revision in held.get("message", "").split()):
            return Decision(gate, state=state if remove and state is not None else None, remove=remove)
        condition = (("lastTransitionTime", format_time(started_at)), ("message", message),
                     ("reason", REASON_ROLLED_BACK_REVISION), ("status", "True"), ("type", CONDITION_HELD))
        others = tuple(c for c in state.conditions if dict(c).get("type") != CONDITION_HELD)
        return Decision(gate, state=replace(state, conditions=(*others, condition)), remove=remove,
                        events=[(EVENT_WARNING, EVENT_ROLLOUT_HELD, message)])
    if state is not None and state.phase == PHASE_ROLLED_BACK and revision == state.stable_revision:
        # Returning to the last good revision after a rollback: no waves; the model paces it (max-unavailable).
        return Decision(OPEN_GATE)

    retried = (state is not None and steering.retry == revision and state.revision == revision
               and state.phase == PHASE_ROLLED_BACK)
    if state is None or state.revision != revision or retried:
        if state is None:
            stable = previous()
        else:
            # Only ever a revision whose rollout completed (an older state without history: its own rule).
            stable = newest_completed(state.history, other_than=revision) or (
                state.revision if state.phase == PHASE_COMPLETE and state.revision != revision
                else state.stable_revision if state.stable_revision != revision else None)
        history = _begin(state, revision, images(revision), started_at)
        kept = tuple(c for c in (state.conditions if state is not None else ())
                     if dict(c).get("type") != CONDITION_HELD)
        if obs.all_updated:
            new = RolloutState(revision=revision, stable_revision=stable, waves=n, wave=n, phase=PHASE_COMPLETE,
                               wave_started_at=started_at, history=_end(history, revision, PHASE_COMPLETE, started_at),
                               conditions=kept)
            return Decision(OPEN_GATE, state=_counts(new, ranking, obs, n))
        new = RolloutState(revision=revision, stable_revision=stable, waves=n, wave=1, phase=PHASE_PROGRESSING,
                           wave_started_at=started_at, history=history, conditions=kept)
        first = ranking.nodes_of_wave(1)
        message = (f"wave 1/{n} of {_shown(revision, images)} started: {len(first)} node(s) ({_names(first)})")
        return Decision(Gate(ranking, 1), state=_counts(new, ranking, obs, 1),
                        events=[(EVENT_NORMAL, EVENT_WAVE_STARTED, message)])

    k = min(state.wave, n)
    if state.waves != n:
        # The DaemonSet gained or lost enough nodes to change the number of waves: keep the wave reached.
        state = replace(state, waves=n, wave=k)

    retrying = steering.retry == revision and state.phase == PHASE_ABORTED
    if retrying:
        # Retry after an abort: the failures of this revision are cleared and the rollout goes on from the
        # wave it stopped in (never a wave further).
        state = replace(state, phase=PHASE_PROGRESSING, failures=[], failed=0, bake_started_at=None,
                        history=tuple(replace(h, phase=PHASE_PROGRESSING, finished_at=None)
                                      if h.revision == revision else h for h in state.history))
        # (no early return: the pass below writes it, and counts what it sees now)

    # Steering that names another revision or wave is stale: removed, no effect.
    if steering.abort is not None:
        remove.append(STEER_ABORT)
    promote_now = False
    if steering.promote is not None:
        if steering.promote == f"{revision}/{k}" and state.phase in (PHASE_PROGRESSING, PHASE_BAKING):
            promote_now = True  # consumed below once it takes effect
        else:
            remove.append(STEER_PROMOTE)

    if state.phase not in ACTIVE_PHASES:
        gate = Gate(ranking, n) if state.phase == PHASE_COMPLETE else Gate(ranking, k, frozen=True)
        return Decision(gate, state=state if remove else None, remove=remove)

    # Failures: those listed in the state (a restart must not forget them) plus those seen now, by node. A node
    # that is NotReady is deferred, never failed, whatever its pod shows (a network cut must not abort a good
    # version). The count never goes down within a revision, past the listed ones too.
    known = {item.get("node", ""): item for item in state.failures}
    new_failures = {node: f for node, f in obs.failures.items() if node not in known and obs.ready(node)}
    failed = max(state.failed, len(known) + len(new_failures))
    failures = list(state.failures)
    for node in sorted(new_failures):
        pod, reason = new_failures[node]
        if len(failures) < MAX_FAILURES_LISTED:
            failures.append({"node": node, "pod": pod, "reason": reason})
    counted = replace(state, failed=failed, failures=failures)

    per_wave = wave_stops(plan, ranking, obs, k, known.keys() | new_failures.keys()) if (known or new_failures) \
        else None
    if steering.abort == revision or failed >= max_failed or per_wave is not None:
        if steering.abort == revision:
            why = "rollout abort requested"
        elif failed >= max_failed:
            why = f"{failed} failure(s), maxFailed is {max_failed}"
        else:
            why = str(per_wave)
        listed = "; ".join(f"{f.get('pod')} on {f.get('node')}: {f.get('reason')}" for f in failures)
        rollback = plan.rollback
        then = (f"; rolling back to {_shown(state.stable_revision, images)}, the last completed one"
                if rollback else "")
        message = (f"rollout of {_shown(revision, images)} stopped at wave {k}/{n}: {why}"
                   + (f" ({listed})" if listed else "") + then)
        events = [(EVENT_WARNING, EVENT_ROLLOUT_ABORTED, message)]
        phase = PHASE_ROLLED_BACK if rollback else PHASE_ABORTED
        final = _counts(replace(counted, phase=phase, bake_started_at=None,
                                history=_end(counted.history, revision, phase, started_at)), ranking, obs, k)
        return Decision(Gate(ranking, k, frozen=True), state=final, remove=remove, events=events,
                        rollback=rollback, aborted=True)

    if steering.paused:
        if state.phase != PHASE_PAUSED or remove or counted != state or retrying:
            return Decision(Gate(ranking, k), state=replace(counted, phase=PHASE_PAUSED), remove=remove)
        return Decision(Gate(ranking, k))
    phase = state.phase
    if phase == PHASE_PAUSED:
        phase = PHASE_BAKING if state.bake_started_at is not None else PHASE_PROGRESSING
    current = replace(counted, phase=phase)
    wake = obs.next_deadline - now if obs.next_deadline is not None else None
    finished = wave_finished(ranking, obs, k)

    if phase == PHASE_PROGRESSING and finished and not promote_now:
        bake = plan.bake_seconds
        deferred = obs.deferred_in_waves(ranking, k)
        summary = _counts(current, ranking, obs, k)
        message = (f"wave {k}/{n} of revision {revision} finished: {summary.upgraded} node(s) upgraded, "
                   f"{len(deferred)} deferred" + (f" ({_names(deferred)})" if deferred else "")
                   + f", {failed} failed; " + (f"baking {format_duration(bake)}" if bake > 0 else "no bake"))
        events = [(EVENT_NORMAL, EVENT_WAVE_FINISHED, message)]
        if bake > 0:
            return Decision(Gate(ranking, k), state=replace(summary, phase=PHASE_BAKING, bake_started_at=bake_from),
                            remove=remove, events=events, requeue_after=_soonest(bake_from + bake - now, wake))
        # No bake: the next wave (or completion) at once, in the same write.
        return _next_wave(summary, ranking, obs, revision, k, n, started_at, remove, events, wake, images)

    if phase in (PHASE_PROGRESSING, PHASE_BAKING) and finished and promote_now:
        remove.append(STEER_PROMOTE)
        events = []
        if phase == PHASE_PROGRESSING:
            summary = _counts(current, ranking, obs, k)
            events.append((EVENT_NORMAL, EVENT_WAVE_FINISHED,
                           f"wave {k}/{n} of revision {revision} finished: {summary.upgraded} node(s) upgraded; "
                           "promoted, no bake"))
        return _next_wave(_counts(current, ranking, obs, k), ranking, obs, revision, k, n, started_at, remove,
                          events, wake, images)

    if phase == PHASE_BAKING:
        if not finished:
            # A node of the reached waves is no longer upgraded (nor deferred, nor failed): the bake starts over
            # once it is.
            back = replace(current, phase=PHASE_PROGRESSING, bake_started_at=None)
            return Decision(Gate(ranking, k), state=back, remove=remove, requeue_after=wake)
        ends = (state.bake_started_at if state.bake_started_at is not None else bake_from) + plan.bake_seconds
        if now >= ends:
            return _next_wave(_counts(current, ranking, obs, k), ranking, obs, revision, k, n, started_at, remove,
                              [], wake, images)
        write = current if (current != state or remove or retrying) else None
        return Decision(Gate(ranking, k), state=write, remove=remove, requeue_after=_soonest(ends - now, wake))

    write = current if (current != state or remove or retrying) else None
    return Decision(Gate(ranking, k), state=write, remove=remove, requeue_after=wake)


def _next_wave(state: RolloutState, ranking: Ranking, obs: Observed, revision: str, k: int, n: int,
               now: float, remove: list[str], events: list[tuple[str, str, str]], wake: float | None,
               images: Callable[[str], Sequence[str]]) -> Decision:
    if k >= n:
        done = replace(state, phase=PHASE_COMPLETE, bake_started_at=None,
                       history=_end(state.history, revision, PHASE_COMPLETE, now))
        message = (f"{_shown(revision, images)} reached all {n} wave(s): {done.upgraded}/{done.nodes} node(s) "
                   f"upgraded, {done.deferred} deferred (upgraded when they return or open), {done.failed} failed")
        return Decision(Gate(ranking, n), state=done, remove=remove,
                        events=[*events, (EVENT_NORMAL, EVENT_ROLLOUT_COMPLETE, message)])
    nodes = ranking.nodes_of_wave(k + 1)
    started = _counts(replace(state, wave=k + 1, phase=PHASE_PROGRESSING, wave_started_at=now, bake_started_at=None),
                      ranking, obs, k + 1)
    message = f"wave {k + 1}/{n} of revision {revision} started: {len(nodes)} node(s) ({_names(nodes)})"
    return Decision(Gate(ranking, k + 1), state=started, remove=remove,
                    events=[*events, (EVENT_NORMAL, EVENT_WAVE_STARTED, message)], requeue_after=wake)


def undo(state: RolloutState | None, revision: str, target: str | None, now: float) -> RolloutState | str:
    """`rollout undo [--to-revision R]`: the state once the template is back on `target` (the stable revision
    when None), or why the request moves nothing. Only a revision whose rollout completed is a target, never the
    one being rolled: the rolled-away revision is marked RolledBack in the history (held if set again)."""
    if state is None:
        return "no rollout recorded yet"
    target = target or state.stable_revision
    if not target:
        return "no completed revision to go back to"
    if target == revision:
        return f"revision {target} is the template already"
    if not any(h.revision == target and h.phase == PHASE_COMPLETE for h in state.history):
        return f"revision {target} is not a completed revision of the history"
    at = float(math.floor(now))
    history = state.history if any(h.revision == revision for h in state.history) else _begin(
        state, revision, (), at)
    return replace(state, revision=revision, phase=PHASE_ROLLED_BACK, stable_revision=target, bake_started_at=None,
                   history=_end(history, revision, PHASE_ROLLED_BACK, at))
