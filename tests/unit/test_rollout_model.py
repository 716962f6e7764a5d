"""Model-based test of the rollout state machine (edgeagent/rollout/machine.py): hypothesis drives a modelled
fleet through random waves, node failures, NotReady nodes, holds, promotes, pauses, aborts, retries, template
changes (re-applying a rolled-back revision too), controller restarts and refused state writes, and checks the
safety rules after every step:

- a refused write moves nothing and records nothing; only a written state is ever acted on;
- the wave never goes back or skips one within a revision; a first wave is never empty;
- no node is let move ahead of the wave reached, and none at all once the rollout stopped or is held;
- the failure count never goes down within a revision, and a NotReady node is never counted failed;
- a wave whose nodes all failed never leads to the next;
- the stable revision (the rollback target) is only ever a revision whose rollout completed;
- a rolled-back revision set again is not rolled until the template changes or a retry.

`make test` runs a bounded number of examples; `make soak` runs it deeper (EDGEAGENT_MODEL_EXAMPLES).
"""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from edgeagent.contract import ANNOTATION_ROLLOUT_ABORT, ANNOTATION_ROLLOUT_PROMOTE
from edgeagent.rollout.machine import Gate, Steering, decide, outcome
from edgeagent.rollout.plan import ON_FAILURE_PAUSE, ON_FAILURE_ROLLBACK, Amount, Plan, Ranking, Step, rank
from edgeagent.rollout.state import (
    ACTIVE_PHASES,
    PHASE_ABORTED,
    PHASE_COMPLETE,
    PHASE_ROLLED_BACK,
    RolloutState,
    rolled_back,
)
from tests.support.rollout_model import FAILED, HELD, PENDING, UPGRADED, ModelObservation

EXAMPLES = int(os.environ.get("EDGEAGENT_MODEL_EXAMPLES", "40"))
STEPS = int(os.environ.get("EDGEAGENT_MODEL_STEPS", "60"))

_steps = st.lists(st.tuples(st.integers(1, 100), st.booleans()), min_size=1, max_size=4)


class RolloutModel(RuleBasedStateMachine):
    """The fleet: each node's pod runs some revision (and may have failed on it), NotReady nodes, held nodes; the
    DaemonSet's template revision; the persisted state (what the controller wrote); the steering."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1_800_000_000.0
        self.revision = "r0"
        self.revisions = 0
        self.pod_revision: dict[str, str] = {}
        self.broken: set[str] = set()  # nodes whose pod of its revision failed
        self.not_ready: set[str] = set()
        self.held: set[str] = set()
        self.state: RolloutState | None = None
        self.steering = Steering()
        self.completed: set[str] = {"r0"}  # revisions whose rollout completed (r0 ran everywhere before)
        self.gate: Gate | None = None
        self.plan = Plan(steps=(Step(100, True),))
        self.max_failed = 1
        self.names: list[str] = []
        self.ranking: Ranking = rank(self.plan, {})
        self.last_wave: tuple[str, int] | None = None
        self.last_failed: tuple[str, int] | None = None

    @initialize(n=st.integers(1, 12), raw=_steps, bake=st.sampled_from([0.0, 30.0]),
                per_wave=st.one_of(st.none(), st.integers(1, 3).map(lambda v: Amount(v, False)),
                                   st.integers(1, 100).map(lambda v: Amount(v, True))),
                rollback=st.booleans(), max_failed=st.integers(1, 4))
    def setup(self, n: int, raw: list[tuple[int, bool]], bake: float, per_wave: Amount | None, rollback: bool,
              max_failed: int) -> None:
        self.names = [f"edge-{i}" for i in range(n)]
        self.pod_revision = dict.fromkeys(self.names, "r0")
        self.plan = Plan(steps=tuple(Step(v, p) for v, p in raw), bake_seconds=bake, max_failed_per_wave=per_wave,
                         on_failure=ON_FAILURE_ROLLBACK if rollback else ON_FAILURE_PAUSE)
        self.ranking = rank(self.plan, {name: {} for name in self.names})
        self.max_failed = max_failed
        assert self.ranking.nodes_of_wave(1), "a first wave is never empty"

    # ------------------------------------------------------------------------------------------ the world

    def observation(self) -> ModelObservation:
        pods: dict[str, str] = {}
        for name in self.names:
            if self.pod_revision[name] == self.revision:
                pods[name] = FAILED if name in self.broken else UPGRADED
            else:
                pods[name] = HELD if name in self.held else PENDING
        return ModelObservation(pods, not_ready=set(self.not_ready))

    def previous(self) -> str | None:
        """What the controller reads without a state: the revision every pod not on the template runs, if one."""
        found = {revision for revision in self.pod_revision.values() if revision != self.revision}
        return found.pop() if len(found) == 1 else None

    @rule(write_ok=st.booleans())
    def reconcile(self, write_ok: bool) -> None:
        before = self.state
        obs = self.observation()
        decision = decide(plan=self.plan, state=self.state, revision=self.revision, ranking=self.ranking, obs=obs,
                          steering=self.steering, max_failed=self.max_failed, now=self.now,
                          previous=self.previous,
                          images=lambda revision: [f"app:{revision}"])
        written = write_ok and decision.writes
        result = outcome(decision, written)
        if decision.writes and not written:
            assert result.events == () and result.state is None
            assert not any(result.gate.allows(name) for name in self.names), "a refused write moved a pod"
            self.gate = result.gate
            return
        self.gate = result.gate
        if decision.state is not None:
            new = decision.state
            self.check_transition(before, new, obs)
            if decision.rollback:
                if new.stable_revision:
                    self.revision = new.stable_revision  # the template restored
                else:
                    new = replace(new, phase=PHASE_ABORTED)  # nothing to restore: stopped (as the controller)
            self.state = new
            if new.phase == PHASE_COMPLETE:
                self.completed.add(new.revision)
        removed = set(decision.remove)
        self.steering = replace(
            self.steering,
            promote=None if ANNOTATION_ROLLOUT_PROMOTE in removed else self.steering.promote,
            abort=None if ANNOTATION_ROLLOUT_ABORT in removed else self.steering.abort,
            retry=None if written and self.steering.retry is not None else self.steering.retry)

    def check_transition(self, before: RolloutState | None, new: RolloutState, obs: ModelObservation) -> None:
        assert new.stable_revision is None or new.stable_revision in self.completed, (
            f"stable revision {new.stable_revision} never completed ({sorted(self.completed)})")
        retried = self.steering.retry == new.revision
        if before is not None and before.revision == new.revision and not retried:
            assert new.wave >= min(before.wave, new.waves), "the wave went back"
            assert new.wave <= before.wave + 1, "a wave was skipped"
            assert new.failed >= before.failed, "the failure count went down"
            listed = {f["node"] for f in before.failures}
            for failure in new.failures:
                if failure["node"] not in listed:
                    assert obs.ready(failure["node"]), "a NotReady node was counted failed"
            if new.wave > before.wave or (new.phase == PHASE_COMPLETE and before.phase != PHASE_COMPLETE):
                wave = self.ranking.nodes_of_wave(before.wave)
                failed = {f["node"] for f in new.failures}
                assert not (wave and all(n in failed for n in wave)), "a wave that failed entirely led on"
        if new.wave == 1 and new.phase in ACTIVE_PHASES:
            assert self.ranking.nodes_of_wave(1), "an empty first wave"

    @invariant()
    def nothing_moves_ahead_of_the_wave_or_after_a_stop(self) -> None:
        gate, state = self.gate, self.state
        if gate is None or state is None:
            return
        allowed = [n for n in self.names if gate.allows(n)]
        if state.revision == self.revision and state.phase in ACTIVE_PHASES:
            for name in allowed:
                wave = self.ranking.wave_of(name)
                assert wave is None or wave <= state.wave, f"{name} (wave {wave}) may move at wave {state.wave}"
        if state.revision == self.revision and state.phase in (PHASE_ABORTED, PHASE_ROLLED_BACK):
            assert allowed == [], "a stopped rollout lets pods move"
        if rolled_back(state.history, self.revision) and self.steering.retry != self.revision:
            assert allowed == [], "a rolled-back revision set again is rolled without a retry"

    # ------------------------------------------------------------------------------------------ nodes

    @rule(data=st.data(), fails=st.booleans())
    def a_node_upgrades(self, data: st.DataObject, fails: bool) -> None:
        gate = self.gate
        movable = [n for n in self.names if self.pod_revision[n] != self.revision and n not in self.held
                   and n not in self.not_ready and gate is not None and gate.allows(n)]
        if not movable:
            return
        name = data.draw(st.sampled_from(movable))
        self.pod_revision[name] = self.revision
        if fails:
            self.broken.add(name)
        else:
            self.broken.discard(name)

    @rule(data=st.data())
    def a_new_pod_crashes(self, data: st.DataObject) -> None:
        upgraded = [n for n in self.names if self.pod_revision[n] == self.revision]
        if upgraded:
            self.broken.add(data.draw(st.sampled_from(upgraded)))

    @rule(data=st.data())
    def a_link_is_cut_or_restored(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(self.names))
        self.not_ready ^= {name}

    @rule(data=st.data())
    def a_site_holds_or_releases(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(self.names))
        self.held ^= {name}

    @rule(seconds=st.sampled_from([1.0, 15.0, 31.0, 700.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    # ------------------------------------------------------------------------------------------ operators

    @precondition(lambda self: self.state is not None)
    @rule()
    def promote(self) -> None:
        assert self.state is not None
        self.steering = replace(self.steering, promote=f"{self.state.revision}/{self.state.wave}")

    @rule()
    def pause_or_resume(self) -> None:
        self.steering = replace(self.steering, paused=not self.steering.paused)

    @rule()
    def abort(self) -> None:
        self.steering = replace(self.steering, abort=self.revision)

    @rule()
    def retry(self) -> None:
        self.steering = replace(self.steering, retry=self.revision)

    @rule(reapply=st.booleans(), data=st.data())
    def the_template_changes(self, reapply: bool, data: st.DataObject) -> None:
        """A new version, or (a GitOps tool) one set before, a rolled-back one included."""
        if reapply and self.revisions:
            self.revision = data.draw(st.sampled_from([f"r{i}" for i in range(self.revisions + 1)]))
        else:
            self.revisions += 1
            self.revision = f"r{self.revisions}"
        self.broken = {n for n in self.broken if self.pod_revision[n] == self.revision}
        # The change brings the DaemonSet through the controller's informer: it decides again for the new template
        # before any pod moves (a gate decided for the revision before is never applied to this one).
        self.gate = None

    @rule()
    def the_controller_restarts(self) -> None:
        """A new leader: nothing but the persisted state, and a ranking made again (the same order)."""
        again = rank(self.plan, {name: {} for name in self.names})
        assert again.order == self.ranking.order and again.targets == self.ranking.targets
        self.ranking = again
        self.gate = None


RolloutModel.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None)
TestRolloutModel = RolloutModel.TestCase
