"""`edgeagent rollout promote|pause|resume|abort DS [-n NS]`: steer a DaemonSet's rollout plan.

The CLI never moves pods itself: it writes one annotation on the DaemonSet and the controller acts on it,
so steering works the same whichever controller replica leads, and a command given while the controller
is down takes effect when it is back.

- `promote` writes `edgeagent.io/rollout-promote: "<revision>/<wave>"` naming the wave the operator saw:
  the controller ends that wave's bake now and starts the next, then removes the annotation. Naming the
  wave makes a late or repeated promote harmless: once the rollout has moved on, it no longer matches and
  the controller drops it without effect (a promote never skips a wave nobody looked at).
- `pause` / `resume` set and clear `edgeagent.io/paused` (the same annotation AdvancedRollingUpdate honours
  without a plan).
- `abort` writes `edgeagent.io/rollout-abort: "<revision>"`: the controller stops the rollout and, with
  `edgeagent.io/on-failure: rollback`, restores the last completed revision.

Every write carries the DaemonSet's UID as a precondition, so a DaemonSet deleted and re-created meanwhile
is never steered by a command meant for the old one. Errors are one line (exit 1): the DaemonSet does not
exist, has no (or an invalid) plan, or its rollout has nothing to promote or abort.
"""

from __future__ import annotations

from typing import TextIO

from edgeagent.config import RolloutConfig
from edgeagent.contract import (
    ANNOTATION_PAUSED,
    ANNOTATION_ROLLOUT_ABORT,
    ANNOTATION_ROLLOUT_PROMOTE,
    ANNOTATION_ROLLOUT_STEPS,
)
from edgeagent.controller.settings import Strategy, select
from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient
from edgeagent.kube.objects import annotations_of, name_of, uid_of
from edgeagent.rollout.plan import ON_FAILURE_ROLLBACK, Plan, parse_plan
from edgeagent.rollout.state import ACTIVE_PHASES, PHASE_PAUSED, RolloutState, state_of
from edgeagent.rollout_cli import EXIT_COMPLETE, JSON, RolloutError, connect, fetch_daemonset, run_reporting_errors

ACTIONS = ("promote", "pause", "resume", "abort")


def _plan(ds: JSON, namespace: str) -> Plan:
    plan, problems = parse_plan(ds)
    if plan is not None:
        return plan
    where = f'daemonset "{name_of(ds)}" in namespace "{namespace}"'
    if problems:
        raise RolloutError(f"{where} has no usable rollout plan: {problems[0].message}")
    raise RolloutError(f"{where} has no rollout plan (annotation {ANNOTATION_ROLLOUT_STEPS} is not set)")


def _active_state(ds: JSON, namespace: str, verb: str) -> RolloutState:
    state, problem = state_of(ds)
    where = f'daemonset "{name_of(ds)}" in namespace "{namespace}"'
    if state is None:
        why = problem or "the controller has not started a rollout of it yet"
        raise RolloutError(f"nothing to {verb}: {where} has no rollout in progress ({why})")
    if state.phase not in ACTIVE_PHASES:
        raise RolloutError(f"nothing to {verb}: the rollout of revision {state.revision} of {where} has ended "
                           f"(phase {state.phase})")
    return state


async def _annotate(client: KubeClient, ds: JSON, namespace: str, annotations: dict[str, str | None]) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name_of(ds)}"
    await client.patch(path, {"metadata": {"uid": uid_of(ds), "annotations": annotations}}, CONTENT_MERGE_PATCH)


async def steer(client: KubeClient, action: str, namespace: str, name: str) -> str:
    """Write the annotation of `action`; returns the line to print."""
    ds = await fetch_daemonset(client, namespace, name)
    shown = f"daemonset.apps/{name}"
    if action in ("pause", "resume"):
        return await _pause(client, ds, namespace, shown, pause=action == "pause")
    plan = _plan(ds, namespace)
    state = _active_state(ds, namespace, action)
    if action == "promote":
        if state.phase == PHASE_PAUSED:
            raise RolloutError(f'the rollout of daemonset "{name}" in namespace "{namespace}" is paused: '
                               f"`edgeagent rollout resume {name}` first (a promote would be dropped unused)")
        value = f"{state.revision}/{state.wave}"
        await _annotate(client, ds, namespace, {ANNOTATION_ROLLOUT_PROMOTE: value})
        after = (f"starts wave {state.wave + 1}/{state.waves}" if state.wave < state.waves
                 else "completes the rollout (it is the last wave)")
        return (f"{shown} promote requested ({ANNOTATION_ROLLOUT_PROMOTE}={value}): once wave "
                f"{state.wave}/{state.waves} is finished the controller ends its bake and {after}")
    if action == "abort":
        await _annotate(client, ds, namespace, {ANNOTATION_ROLLOUT_ABORT: state.revision})
        then = (f"rolls back to revision {state.stable_revision or 'the last completed one'}"
                if plan.on_failure == ON_FAILURE_ROLLBACK else "leaves every pod as it is (on-failure: pause)")
        return (f"{shown} abort requested ({ANNOTATION_ROLLOUT_ABORT}={state.revision}): the controller stops "
                f"the rollout and {then}")
    raise RolloutError(f"unknown rollout command {action!r}: expected one of {', '.join(ACTIONS)}")


async def _pause(client: KubeClient, ds: JSON, namespace: str, shown: str, *, pause: bool) -> str:
    """`paused` predates plans: AdvancedRollingUpdate honours it with or without one, OTA only with a plan."""
    plan, _ = parse_plan(ds)
    strategy = select(ds).strategy
    if plan is None and strategy is not Strategy.ADVANCED_ROLLING_UPDATE:
        _plan(ds, namespace)  # raises the one-line error naming the missing or invalid plan annotation
    paused = str(annotations_of(ds).get(ANNOTATION_PAUSED, "")).strip().lower() == "true"
    if pause:
        if paused:
            return f"{shown} already paused ({ANNOTATION_PAUSED}=true)"
        await _annotate(client, ds, namespace, {ANNOTATION_PAUSED: "true"})
        return f"{shown} paused ({ANNOTATION_PAUSED}=true): no further pod moves until resumed"
    if ANNOTATION_PAUSED not in annotations_of(ds):
        return f"{shown} was not paused"
    await _annotate(client, ds, namespace, {ANNOTATION_PAUSED: None})
    return f"{shown} resumed ({ANNOTATION_PAUSED} removed)"


async def run(cfg: RolloutConfig, out: TextIO) -> int:
    client = await connect(cfg)
    try:
        print(await steer(client, cfg.action, cfg.namespace, cfg.daemonset), file=out, flush=True)
    finally:
        await client.close()
    return EXIT_COMPLETE


def main(cfg: RolloutConfig, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_reporting_errors(run, cfg, out=out, err=err)
