"""Property: whatever the order of readiness flips, kubelet progress, cache deliveries and reconciles, the
AdvancedRollingUpdate step never deletes a pod twice and never has more replacements of available pods
in progress than its budget.

The model keeps the true state and a pod cache that receives every pod change later, in order (a watch
stream). Node readiness is seen at once (a separate informer; staleness there is outside the budget by
design). A replacement is "in progress" from the moment the controller deletes a pod that its cache
showed as available until the true state has an available pod on that node again.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from edgeagent.controller.expectations import Expectations
from edgeagent.controller.pods import is_available, node_of
from edgeagent.controller.rolling import plan_step
from edgeagent.controller.settings import roll_settings
from edgeagent.kube.objects import is_terminating, name_of, uid_of
from tests.unit.test_controller_objects import T0, daemonset, node, pod, ts

JSON = dict[str, Any]
OLD, NEW = "old", "new"


@dataclass
class Model:
    nodes: dict[str, JSON]
    truth: dict[str, JSON]
    cache: dict[str, JSON]
    min_ready: int
    pending: list[tuple[str, JSON | None]] = field(default_factory=list)
    now: float = T0
    counter: int = 0
    deleted: set[str] = field(default_factory=set)
    in_progress: set[str] = field(default_factory=set)
    deletions: int = 0

    def emit(self, uid: str, obj: JSON | None) -> None:
        if obj is None:
            self.truth.pop(uid, None)
        else:
            self.truth[uid] = obj
        self.pending.append((uid, copy.deepcopy(obj)))

    def deliver(self, count: int) -> None:
        for _ in range(min(count, len(self.pending))):
            uid, obj = self.pending.pop(0)
            if obj is None:
                self.cache.pop(uid, None)
            else:
                self.cache[uid] = obj

    def pods_on(self, node_name: str) -> list[JSON]:
        return [p for p in self.truth.values() if node_of(p) == node_name]

    def refresh_progress(self) -> None:
        for node_name in list(self.in_progress):
            if any(not is_terminating(p) and is_available(p, self.min_ready, self.now)
                   for p in self.pods_on(node_name)):
                self.in_progress.discard(node_name)

    def kubelet(self, node_name: str) -> None:
        """One step of the node: finish a deletion, else get a pod created, else make it Ready."""
        if self.nodes[node_name]["status"]["conditions"][0]["status"] != "True":
            return
        pods = self.pods_on(node_name)
        dying = [p for p in pods if is_terminating(p)]
        live = [p for p in pods if not is_terminating(p)]
        if dying:
            self.emit(uid_of(dying[0]), None)
        elif not live:
            self.counter += 1
            created = pod(f"new-{self.counter}", node_name, NEW, ready=False, created=self.now)
            self.emit(uid_of(created), created)
        elif live[0]["status"]["conditions"][0]["status"] != "True":
            self.flip_pod(node_name)

    def flip_pod(self, node_name: str) -> None:
        live = [p for p in self.pods_on(node_name) if not is_terminating(p)]
        if not live:
            return
        updated = copy.deepcopy(live[0])
        cond = updated["status"]["conditions"][0]
        cond["status"] = "False" if cond["status"] == "True" else "True"
        cond["lastTransitionTime"] = ts(self.now)
        self.emit(uid_of(updated), updated)

    def flip_node(self, node_name: str) -> None:
        cond = self.nodes[node_name]["status"]["conditions"][0]
        cond["status"] = "False" if cond["status"] == "True" else "True"
        cond["lastTransitionTime"] = ts(self.now)


actions = st.lists(
    st.one_of(
        st.tuples(st.just("reconcile"), st.just(0)),
        st.tuples(st.just("deliver"), st.integers(1, 6)),
        st.tuples(st.just("kubelet"), st.integers(0, 7)),
        st.tuples(st.just("flip_pod"), st.integers(0, 7)),
        st.tuples(st.just("flip_node"), st.integers(0, 7)),
        st.tuples(st.just("tick"), st.integers(1, 3)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(
    n_nodes=st.integers(2, 8),
    max_unavailable=st.sampled_from(["1", "2", "3", "10%", "34%", "50%"]),
    partition=st.sampled_from([None, "0", "1", "3", "50%"]),
    selector=st.sampled_from([None, "canary=true"]),
    min_ready=st.sampled_from([0, 2]),
    steps=actions,
)
def test_budget_and_single_deletion_hold_under_any_interleaving(
    n_nodes: int, max_unavailable: str, partition: str | None, selector: str | None, min_ready: int,
    steps: list[tuple[str, int]],
) -> None:
    annotations = {"apps.openyurt.io/max-unavailable": max_unavailable}
    if partition is not None:
        annotations["edgeagent.io/partition"] = partition
    if selector is not None:
        annotations["edgeagent.io/node-selector"] = selector
    ds = daemonset(min_ready=min_ready, annotations=annotations)
    roll, problems = roll_settings(ds)
    assert problems == []

    names = [f"n{i}" for i in range(n_nodes)]
    nodes = {name: node(name, labels={"canary": "true"} if i % 2 == 0 else {}) for i, name in enumerate(names)}
    initial = {f"uid-old-{name}": pod(f"old-{name}", name, OLD) for name in names}
    model = Model(nodes=nodes, truth=copy.deepcopy(initial), cache=copy.deepcopy(initial), min_ready=min_ready)
    expectations = Expectations(clock=lambda: 0.0)
    budget = roll.max_unavailable.scaled(n_nodes, round_up=True)
    keep = min(n_nodes, roll.partition.scaled(n_nodes, round_up=True)) if roll.partition else 0

    for action, arg in [*steps, ("deliver", 10_000), ("reconcile", 0)]:
        if action == "reconcile":
            cached = list(model.cache.values())
            plan = plan_step("default/web", ds, cached, model.nodes, NEW, roll, model.now, expectations)
            if plan is None:
                continue
            for victim in plan.delete:
                uid = uid_of(victim)
                assert uid not in model.deleted, f"{name_of(victim)} deleted twice"
                current = model.truth.get(uid)
                assert current is not None and not is_terminating(current), "deleted a pod that was already going"
                assert victim["metadata"]["labels"]["controller-revision-hash"] == OLD
                target = node_of(victim)
                assert model.nodes[target]["status"]["conditions"][0]["status"] == "True"
                if selector is not None:
                    assert model.nodes[target]["metadata"]["labels"].get("canary") == "true"
                model.deleted.add(uid)
                model.deletions += 1
                if is_available(victim, min_ready, model.now):
                    model.in_progress.add(target)
                gone = copy.deepcopy(current)
                gone["metadata"]["deletionTimestamp"] = ts(model.now)
                model.emit(uid, gone)
                assert len(model.in_progress) <= budget, (
                    f"{len(model.in_progress)} replacements in progress, budget {budget}"
                )
            assert model.deletions <= n_nodes - keep, "partition exceeded"
        elif action == "deliver":
            model.deliver(arg)
        elif action == "kubelet":
            model.kubelet(names[arg % n_nodes])
        elif action == "flip_pod":
            model.flip_pod(names[arg % n_nodes])
        elif action == "flip_node":
            model.flip_node(names[arg % n_nodes])
        else:
            model.now += arg
        model.refresh_progress()
