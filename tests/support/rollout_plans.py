"""Helpers for the rollout-plan tests: the RolloutPlan CRD installed on the sim and plans created as objects, the
documented node order computed independently, and a recorder that sees the sim store's own order of RolloutPlan
and pod changes (one subscription, so "the status said wave 2" and "this pod started terminating" are ordered as
they really happened).

`plan_state` and the recorder give a plan's status in the state machine's own shape (`RolloutState.to_json`:
phases `progressing`, `baking`, ...), so a test reads the same fields whatever the API spells them."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient
from edgeagent.kube.errors import Conflict, NotFound
from edgeagent.kube.objects import is_pod_ready, is_terminating, labels_of, name_of, uid_of
from edgeagent.rollout.state import state_from_status
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.resources import PODS
from tests.integration.controller.conftest import NS, events_for

JSON = dict[str, Any]
CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "crd-rolloutplan.yaml"
CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PLANS_PATH = f"/apis/edgeagent.io/v1alpha1/namespaces/{NS}/rolloutplans"
STEER = "edgeagent.io/steer"

# The round-3 plan annotations, read here only to turn the old tests' plans into RolloutPlan specs.
_SPEC_OF_ANNOTATION = {
    "edgeagent.io/rollout-steps": "steps", "edgeagent.io/rollout-bake": "bake",
    "edgeagent.io/rollout-group-label": "groupLabel", "edgeagent.io/on-failure": "onFailure",
    "edgeagent.io/max-failed": "maxFailed", "edgeagent.io/progress-deadline-seconds": "progressDeadlineSeconds",
}


async def install_plan_crd(kube: KubeClient) -> None:
    """deploy/crd-rolloutplan.yaml applied to the sim (once), and served (Established) before the test goes on."""
    from tests.support.waiting import eventually

    with contextlib.suppress(Conflict):  # AlreadyExists: installed by an earlier step of the test
        await kube.create(CRDS_PATH, yaml.safe_load(CRD_FILE.read_text()))

    async def served() -> bool:
        try:
            await kube.get(PLANS_PATH)
        except NotFound:
            return False
        return True

    await eventually(served, what="RolloutPlans served")


def spec_of(daemonset: str, plan: dict[str, str]) -> JSON:
    """A RolloutPlan spec from a round-3 plan written as annotations (`{"edgeagent.io/rollout-steps": "1,25%"}`),
    so the scenarios keep their plans as they read; other annotations are left to the DaemonSet (`ds_annotations`)."""
    spec: JSON = {"daemonSet": daemonset}
    for annotation, value in plan.items():
        field_name = _SPEC_OF_ANNOTATION.get(annotation)
        if field_name is None:
            continue
        if field_name == "steps":
            spec["steps"] = [s.strip() if s.strip().endswith("%") else int(s) for s in value.split(",")]
        elif field_name == "onFailure":
            spec["onFailure"] = value.capitalize() if value.lower() in ("pause", "rollback") else value
        elif field_name == "progressDeadlineSeconds":
            spec[field_name] = int(value)
        elif field_name == "maxFailed":
            spec[field_name] = value if value.endswith("%") else int(value)
        else:
            spec[field_name] = value
    return spec


def ds_annotations(plan: dict[str, str]) -> dict[str, str]:
    """The annotations of a round-3 plan dict that stay on the DaemonSet (max-unavailable, node-selector ...)."""
    return {k: v for k, v in plan.items() if k not in _SPEC_OF_ANNOTATION}


async def create_plan(kube: KubeClient, daemonset: str, spec: JSON, *, name: str | None = None) -> JSON:
    body = {"apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan",
            "metadata": {"name": name or daemonset, "namespace": NS}, "spec": {"daemonSet": daemonset, **spec}}
    return await kube.create(PLANS_PATH, body)


async def with_plan(kube: KubeClient, daemonset: str, plan: dict[str, str]) -> JSON:
    """The CRD installed and a RolloutPlan named after the DaemonSet from a round-3 plan dict (`spec_of`)."""
    await install_plan_crd(kube)
    return await create_plan(kube, daemonset, spec_of(daemonset, plan))


async def get_plan(kube: KubeClient, name: str) -> JSON:
    return await kube.get(f"{PLANS_PATH}/{name}")


async def patch_plan(kube: KubeClient, name: str, patch: JSON) -> JSON:
    return await kube.patch(f"{PLANS_PATH}/{name}", patch, CONTENT_MERGE_PATCH)


async def steer(kube: KubeClient, name: str, verb: str, **fields: Any) -> str:
    """One steering request as the CLI writes it (the plan's status.revision as seen, UID and resourceVersion
    preconditions; a 409 means the controller wrote the status meanwhile: read again and retry), returns its id."""
    import secrets

    ident = secrets.token_hex(6)
    for _ in range(10):
        plan = await get_plan(kube, name)
        body = {"id": ident, "verb": verb, "revision": (plan.get("status") or {}).get("revision", ""), **fields}
        try:
            await patch_plan(kube, name, {"metadata": {
                "uid": plan["metadata"]["uid"], "resourceVersion": plan["metadata"]["resourceVersion"],
                "annotations": {STEER: json.dumps(body, separators=(",", ":"))}}})
        except Conflict:
            continue
        return ident
    raise AssertionError(f"the {verb} request on {name} kept meeting 409s")


def state_json(status: Any) -> JSON | None:
    """A plan's status in the state machine's shape (None before the controller wrote one)."""
    if not isinstance(status, dict) or "phase" not in status:
        return None
    state, problem = state_from_status(status)
    assert state is not None, problem
    return dict(json.loads(state.to_json()))


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
        plans = self.sim.store.registry.resource_for("edgeagent.io", "v1alpha1", "rolloutplans")
        assert plans is not None, "install_plan_crd first"
        subscription = self.sim.store.subscribe([PODS, plans])
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
            if event.resource.plural == "rolloutplans":
                if name_of(obj) != self.ds:
                    continue
                state = state_json(obj.get("status"))
                if state is None:
                    continue
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
    """The status of the plan named `name` (the tests name a plan after its DaemonSet), as `state_json`."""
    return state_json((await get_plan(kube, name)).get("status"))


async def plan_events(kube: KubeClient, name: str) -> list[JSON]:
    """The controller's Events on the DaemonSet (each also on its RolloutPlan), oldest first
    (by the nanosecond name the recorder gives them)."""
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


__all__ = [
    "NS",
    "PlanRecorder",
    "Snapshot",
    "create_plan",
    "documented_order",
    "ds_annotations",
    "get_plan",
    "install_plan_crd",
    "new_hash",
    "patch_plan",
    "plan_events",
    "plan_reasons",
    "plan_state",
    "spec_of",
    "state_json",
    "steer",
    "with_plan",
]
