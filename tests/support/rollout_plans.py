"""Helpers for the rollout-plan tests: the documented node order computed independently, and a recorder that
sees the sim store's own order of DaemonSet and pod changes (one subscription, so "the state said wave 2"
and "this pod started terminating" are ordered as they really happened)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import annotations_of, is_pod_ready, is_terminating, labels_of, name_of, uid_of
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.resources import DAEMONSETS, PODS
from tests.integration.controller.conftest import NS, events_for, get_daemonset, patch_daemonset

JSON = dict[str, Any]
STATE = "edgeagent.io/rollout-state"


def documented_order(names: list[str]) -> list[str]:
    """docs: without a canary selector or group label, nodes are ranked by sha256 of their name."""
    return sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())


@dataclass
class Snapshot:
    time: float
    state: JSON
    # node -> (controller-revision-hash, Ready) of the live pods at that moment.
    pods: dict[str, tuple[str, bool]]


@dataclass
class PlanRecorder:
    """Every rollout-state value the DaemonSet took (with the pods at that moment), and every pod that started
    terminating (node, time, uid)."""

    sim: SimCluster
    ds: str
    states: list[Snapshot] = field(default_factory=list)
    terminations: list[tuple[str, float, str]] = field(default_factory=list)
    pods: dict[str, JSON] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PlanRecorder:
        # Listed and subscribed in one step of the event loop: nothing happens in between.
        subscription = self.sim.store.subscribe([PODS, DAEMONSETS])
        pods, _ = self.sim.store.list(PODS, NS, label_selector=f"app={self.ds}")
        self.pods = {uid_of(p): p for p in pods}
        self._task = asyncio.create_task(self._run(subscription))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self, subscription: Any) -> None:
        async for event in subscription:
            obj = event.object
            if event.resource.plural == DAEMONSETS.plural:
                if name_of(obj) != self.ds:
                    continue
                raw = annotations_of(obj).get(STATE)
                if raw is None:
                    continue
                state = json.loads(raw)
                if not self.states or self.states[-1].state != state:
                    self.states.append(Snapshot(time.time(), state, self._live()))
                continue
            if not name_of(obj).startswith(self.ds + "-"):
                continue
            uid = uid_of(obj)
            before = self.pods.get(uid, event.old)
            if event.type == "DELETED":
                self.pods.pop(uid, None)
            else:
                self.pods[uid] = obj
            if (before is not None and not is_terminating(before)
                    and (event.type == "DELETED" or is_terminating(obj))):
                self.terminations.append((str(obj["spec"].get("nodeName") or ""), time.time(), uid))

    def _live(self) -> dict[str, tuple[str, bool]]:
        return {str(p["spec"].get("nodeName") or ""): (labels_of(p).get("controller-revision-hash", ""),
                                                        is_pod_ready(p))
                for p in self.pods.values() if not is_terminating(p)}

    def phases(self, revision: str | None = None) -> list[tuple[int, str]]:
        """(wave, phase) in the order they were written (of one revision's rollout when given)."""
        out: list[tuple[int, str]] = []
        for snap in self.states:
            if revision is not None and snap.state.get("revision") != revision:
                continue
            step = (int(snap.state["wave"]), str(snap.state["phase"]))
            if not out or out[-1] != step:
                out.append(step)
        return out

    def find(self, wave: int, phase: str, revision: str | None = None) -> Snapshot | None:
        return next((s for s in self.states if s.state["wave"] == wave and s.state["phase"] == phase
                     and (revision is None or s.state.get("revision") == revision)), None)

    def first(self, wave: int, phase: str, revision: str | None = None) -> Snapshot:
        found = self.find(wave, phase, revision)
        assert found is not None, f"no state wave {wave} {phase} of {revision} in {self.phases()}"
        return found

    def terminated_nodes(self) -> list[str]:
        return [node for node, _, _ in self.terminations]

    def first_termination(self, node: str) -> float:
        return min(t for n, t, _ in self.terminations if n == node)


async def new_hash(kube: KubeClient, name: str, old: str | None) -> str:
    """Waits until the DaemonSet controller has made the revision of a changed template."""
    from tests.integration.controller.conftest import current_hash
    from tests.support.waiting import eventually

    async def changed() -> str | None:
        found = await current_hash(kube, name)
        return found if found is not None and found != old else None

    return str(await eventually(changed, what=f"a revision of {name} other than {old}"))


async def plan_state(kube: KubeClient, name: str) -> JSON | None:
    raw = annotations_of(await get_daemonset(kube, name)).get(STATE)
    return json.loads(raw) if raw else None


async def plan_events(kube: KubeClient, name: str) -> list[JSON]:
    """The controller's Events on the DaemonSet, oldest first (by the nanosecond name the recorder gives them)."""
    events = [e for e in await events_for(kube, name)
              if (e.get("source") or {}).get("component") == "edgeagent-controller"]
    return sorted(events, key=lambda e: (e.get("eventTime") or "", e["metadata"]["name"]))


async def plan_events_through(kube: KubeClient, name: str, reason: str, timeout: float = 10.0) -> list[JSON]:
    """`plan_events` once one of them has `reason`. The controller records a reconcile's plan Events after that
    reconcile's state write (and its deletions), so a test that saw the state move can read the Events before the
    last one has been written: wait for it, then check the whole list."""
    from tests.support.waiting import eventually

    async def through() -> list[JSON] | None:
        events = await plan_events(kube, name)
        return events if any(e.get("reason") == reason for e in events) else None

    return await eventually(through, timeout=timeout, what=f"a {reason} Event on {name}")


async def plan_reasons(kube: KubeClient, name: str) -> list[str]:
    return [str(e["reason"]) for e in await plan_events(kube, name)]


async def annotate(kube: KubeClient, name: str, annotations: dict[str, str | None]) -> JSON:
    return await patch_daemonset(kube, name, {"metadata": {"annotations": annotations}})


__all__ = [
    "NS",
    "PlanRecorder",
    "Snapshot",
    "annotate",
    "documented_order",
    "new_hash",
    "plan_events",
    "plan_reasons",
    "plan_state",
]
