"""A model of what the pods and nodes say about a rollout, answering the state machine's questions
(`edgeagent.rollout.machine.Observed`) from a plain table: node -> what its pod is. For the state machine's own
tests (tests/unit/test_rollout_safety.py, tests/unit/test_rollout_model.py); the controller's `Observation`, which
answers the same questions from its caches, has its own tests against per-node definitions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from edgeagent.rollout.plan import Ranking

UPGRADED = "upgraded"  # an available pod of the revision
PENDING = "pending"  # an old pod, or a new one not available yet
HELD = "held"  # an old pod whose site holds it (UpgradeHeld)
FAILED = "failed"  # a new pod that failed (not available in time, or its node reported the failure)


@dataclass
class ModelObservation:
    """`pods`: node -> UPGRADED / PENDING / HELD / FAILED; `not_ready`: NotReady nodes (whatever their pod shows);
    a node absent from `pods` has no pod (between two pods when Ready)."""

    pods: Mapping[str, str]
    not_ready: set[str] = field(default_factory=set)
    next_deadline: float | None = None
    failures: dict[str, tuple[str, str]] = field(init=False)
    all_updated: bool = field(init=False)

    def __post_init__(self) -> None:
        # What a node's pod says, failures included for NotReady nodes too: the machine must not count those.
        self.failures = {node: (f"default/app-{node}", "not available within 600s: CrashLoopBackOff")
                         for node, what in self.pods.items() if what == FAILED}
        self.all_updated = all(what == UPGRADED for what in self.pods.values())

    def ready(self, node: str) -> bool:
        return node in self.pods and node not in self.not_ready

    def status(self, node: str) -> str:
        if not self.ready(node):
            return "deferred"
        what = self.pods[node]
        if what == HELD:
            return "deferred"
        return what

    def clean(self) -> set[str]:
        return {node for node in self.pods if self.status(node) == UPGRADED}

    def any_pending(self, nodes: Iterable[str]) -> bool:
        return any(self.status(node) == PENDING for node in nodes)

    def upgraded_among(self, ranking: Ranking) -> int:
        return sum(1 for node in ranking.order if node in self.pods and self.status(node) == UPGRADED)

    def deferred_in_waves(self, ranking: Ranking, k: int) -> list[str]:
        return [node for node in ranking.nodes_in_waves(k) if self.status(node) == "deferred"]
