"""Prometheus metrics of the controller, in a private registry (tests run several controllers per process).

`api_writes` counts every write by kind so that "API writes per rollout" can be read off directly and
compared with pods replaced + conditions changed.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
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
                                   "Nodes of an AdvancedRollingUpdate DaemonSet by state",
                                   ["namespace", "daemonset", "state"], registry=r)

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
        for state, value in counts.items():
            self.rollout_nodes.labels(namespace, daemonset, state).set(value)

    def forget_rollout(self, namespace: str, daemonset: str) -> None:
        for state in ("total", "updated", "outdated", "unavailable"):
            with contextlib.suppress(KeyError):
                self.rollout_nodes.remove(namespace, daemonset, state)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
