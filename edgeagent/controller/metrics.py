"""Prometheus metrics of the controller, in a private registry (tests run several controllers per process).

`api_writes` counts every write by kind so that "API writes per rollout" can be read off directly and
compared with pods replaced + conditions changed.
"""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from edgeagent.exposition import new_registry
from edgeagent.rollout.state import STATUS_PHASES, api_phase

# The `phase` label of edgeagent_controller_rollout_phase: a RolloutPlan's phases as the API spells them
# (`Progressing`, ..., `RolledBack`, `Complete`: the words of its status.phase, `fleet` and `rollout status`).
PLAN_PHASES = tuple(STATUS_PHASES.values())
# The `state` label of edgeagent_controller_rollout_nodes; the total has a gauge of its own.
ROLLOUT_STATES = ("updated", "outdated", "unavailable")
ROLLOUT_TOTAL = "total"


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = new_registry("controller")
        r = self.registry
        self.reconciles = Counter("edgeagent_controller_reconciles", "DaemonSet reconciles by result",
                                  ["result"], registry=r)
        self.reconcile_seconds = Histogram(
            "edgeagent_controller_reconcile_seconds", "Time spent in one DaemonSet reconcile", registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )
        self.planning_cpu = Counter(
            "edgeagent_controller_planning_cpu_seconds",
            "CPU time spent deciding (OTA condition diff, ARU plan), excluding API calls", registry=r)
        self.api_writes = Counter("edgeagent_controller_api_writes", "Writes sent to the API server by kind",
                                  ["kind"], registry=r)
        self.pod_deletions = Counter("edgeagent_controller_pod_deletions", "Pod deletions by outcome",
                                     ["outcome"], registry=r)
        self.condition_patches = Counter("edgeagent_controller_condition_patches",
                                         "PodNeedUpgrade condition patches by outcome", ["outcome"], registry=r)
        self.auto_pauses = Counter("edgeagent_controller_auto_pauses", "Rolls paused by max-failed", registry=r)
        self.leader = Gauge("edgeagent_controller_leader", "1 while this replica holds the lease", registry=r)
        self.queue_depth = Gauge("edgeagent_controller_workqueue_depth", "DaemonSets waiting to be reconciled",
                                 registry=r)
        self.rollout_nodes = Gauge("edgeagent_controller_rollout_nodes",
                                   "Nodes of a managed DaemonSet by state (updated, outdated, unavailable)",
                                   ["namespace", "daemonset", "state"], registry=r)
        # The total is a metric of its own: beside its parts in one label, sum() by state would count it twice.
        self.rollout_desired = Gauge("edgeagent_controller_rollout_desired_nodes",
                                     "Nodes a managed DaemonSet should run on (updated + outdated)",
                                     ["namespace", "daemonset"], registry=r)
        # Rollout plans: dashboards draw the wave and phase, alerts fire on aborts and rollbacks. Counters, not
        # only the phase gauge, so that an abort followed at once by a rollback still shows in `increase()`.
        self.rollout_wave = Gauge("edgeagent_controller_rollout_wave",
                                  "Wave reached by a DaemonSet's rollout plan (1-based)",
                                  ["namespace", "daemonset"], registry=r)
        self.rollout_waves = Gauge("edgeagent_controller_rollout_waves", "Waves in a DaemonSet's rollout plan",
                                   ["namespace", "daemonset"], registry=r)
        self.rollout_phase = Gauge("edgeagent_controller_rollout_phase",
                                   "1 for the phase a DaemonSet's rollout plan is in, 0 for the others",
                                   ["namespace", "daemonset", "phase"], registry=r)
        self.rollout_aborts = Counter("edgeagent_controller_rollout_aborts",
                                      "Rollouts stopped at their RolloutPlan's maxFailed or maxFailedPerWave, or by "
                                      "`rollout abort`",
                                      ["namespace", "daemonset"], registry=r)
        self.rollout_rollbacks = Counter("edgeagent_controller_rollout_rollbacks",
                                         "Rollouts whose template the controller restored to the last good revision",
                                         ["namespace", "daemonset"], registry=r)

    def write(self, kind: str) -> None:
        self.api_writes.labels(kind).inc()

    def writes(self, kind: str | None = None) -> float:
        """Total writes (of one kind); read back by tests and the benchmark."""
        total = 0.0
        for metric in self.api_writes.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total") and (kind is None or sample.labels.get("kind") == kind):
                    total += sample.value
        return total

    def set_rollout(self, namespace: str, daemonset: str, counts: dict[str, int]) -> None:
        """`counts`: the ROLLOUT_STATES, and `total`, which goes to edgeagent_controller_rollout_desired_nodes."""
        for state, value in counts.items():
            if state == ROLLOUT_TOTAL:
                self.rollout_desired.labels(namespace, daemonset).set(value)
            else:
                self.rollout_nodes.labels(namespace, daemonset, state).set(value)

    def forget_rollout(self, namespace: str, daemonset: str) -> None:
        for state in ROLLOUT_STATES:
            with contextlib.suppress(KeyError):
                self.rollout_nodes.remove(namespace, daemonset, state)
        with contextlib.suppress(KeyError):
            self.rollout_desired.remove(namespace, daemonset)

    def set_plan(self, namespace: str, daemonset: str, wave: int, waves: int, phase: str) -> None:
        """Called on every rollout-state write; phases not current read 0 so a dashboard can stack them. `phase`
        as the state machine has it; the label is the API's spelling."""
        self.rollout_wave.labels(namespace, daemonset).set(wave)
        self.rollout_waves.labels(namespace, daemonset).set(waves)
        phase = api_phase(phase)
        for known in PLAN_PHASES:
            self.rollout_phase.labels(namespace, daemonset, known).set(1 if known == phase else 0)
        # Touching the children exports them at 0 from the first state write on: Prometheus' increase() sees
        # nothing in a series whose first sample is already 1, and the first abort would never alert.
        self.rollout_aborts.labels(namespace, daemonset)
        self.rollout_rollbacks.labels(namespace, daemonset)

    def forget_plan(self, namespace: str, daemonset: str) -> None:
        for gauge in (self.rollout_wave, self.rollout_waves):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, daemonset)
        for known in PLAN_PHASES:
            with contextlib.suppress(KeyError):
                self.rollout_phase.remove(namespace, daemonset, known)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
