"""The RolloutPlan API (`edgeagent.io/v1alpha1`, namespaced, short name `rp`): its spec, read and validated.

The CRD in `deploy/crd-rolloutplan.yaml` refuses an invalid plan when it is applied (schema and CEL rules); the
controller still validates what it reads (`parse_spec`), because a plan can predate the CRD's rules, be written
to a server that does not evaluate them, or come from a hand-made object in a test. Both say the same thing in
the same words: each rule's message is a constant here, and tests/unit/test_rollout_api.py evaluates the CRD's
rules and these functions on the same table of plans, so the two cannot drift apart unnoticed.

The status a plan carries is the state machine's (`rollout.state.RolloutState.to_status`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edgeagent.kube.objects import is_dns1123_subdomain
from edgeagent.rollout.plan import (
    MAX_STEPS,
    ON_FAILURE_PAUSE,
    ON_FAILURE_ROLLBACK,
    Amount,
    Plan,
    Step,
    parse_duration,
)

JSON = dict[str, Any]

GROUP = "edgeagent.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "RolloutPlan"
PLURAL = "rolloutplans"
SINGULAR = "rolloutplan"
SHORT_NAME = "rp"

# `spec.onFailure` values as the API spells them, and the plan's own words for them.
ON_FAILURE_VALUES = {"Pause": ON_FAILURE_PAUSE, "Rollback": ON_FAILURE_ROLLBACK}

DEFAULT_BAKE = "0s"
DEFAULT_MAX_FAILED: int | str = 1
DEFAULT_PROGRESS_DEADLINE_SECONDS = 600
DEFAULT_ON_FAILURE = "Pause"

# The messages of the CRD's rules (deploy/crd-rolloutplan.yaml): each names the field and what it accepts.
MSG_DAEMONSET = ("spec.daemonSet must be the name of a DaemonSet in the plan's namespace "
                 "(a lowercase DNS subdomain of at most 253 characters)")
MSG_STEP = ('spec.steps: each step must be a count of at least 1 (e.g. 5) or a percentage from "1%" to "100%"')
MSG_STEPS_COUNT = f"spec.steps must have between 1 and {MAX_STEPS} steps"
MSG_STEPS_INCREASING = "spec.steps must be increasing: each count larger than the counts before it, each percentage too"
MSG_STEPS_LAST = 'spec.steps must end with "100%" (the last wave takes every node)'
MSG_BAKE = "spec.bake must be a duration like 30s, 10m, 2h, 1d or 1h30m, units from largest to smallest (0s for none)"
MSG_GROUP_LABEL = "spec.groupLabel must be a node label key, e.g. topology.kubernetes.io/zone"
MSG_MAX_FAILED = 'spec.maxFailed must be a count of 0 or more (e.g. 2) or a percentage from "0%" to "100%"'
MSG_MAX_FAILED_PER_WAVE = ('spec.maxFailedPerWave must be a count of 0 or more (e.g. 2) or a percentage '
                           'from "0%" to "100%" of the wave')
MSG_DEADLINE = "spec.progressDeadlineSeconds must be a whole number of seconds, at least 1"
MSG_ON_FAILURE = 'spec.onFailure must be "Pause" or "Rollback"'
MSG_PAUSED = "spec.paused must be true or false"

# The regular expressions the CRD's rules use too (RE2 and Python agree on these).
PERCENT_STEP = r"^([1-9][0-9]?|100)%$"
PERCENT_AMOUNT = r"^([0-9]|[1-9][0-9]|100)%$"
# The form of edgeagent.durations (the CRD's CEL rule is this text: RE2 has no look-ahead, hence the cases).
DURATION = r"^(0|[0-9]+d([0-9]+h)?([0-9]+m)?([0-9]+s)?|[0-9]+h([0-9]+m)?([0-9]+s)?|[0-9]+m([0-9]+s)?|[0-9]+s)$"
LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_KEY_MAX = 253 + 1 + 63
BAKE_MAX = 32
# A step or an amount written as a string ("100%") is at most this long (bounds the CEL rules' cost).
SHORT_STRING_MAX = 4


@dataclass(frozen=True)
class FieldError:
    """One invalid field: its path (`spec.steps[2]`) and the message of the rule it breaks."""

    field: str
    message: str


ONE_FAILURE = Amount(1, False)


@dataclass(frozen=True)
class RolloutPlanSpec:
    """`spec` of a RolloutPlan, with its defaults applied."""

    daemon_set: str
    steps: tuple[Step, ...]
    bake_seconds: float = 0.0
    group_label: str | None = None
    max_failed: Amount = ONE_FAILURE
    max_failed_per_wave: Amount | None = None
    progress_deadline_seconds: int = DEFAULT_PROGRESS_DEADLINE_SECONDS
    on_failure: str = ON_FAILURE_PAUSE
    paused: bool = False

    def plan(self, canary: Any = None) -> Plan:
        """The plan arithmetic's view of it (order and waves), with the DaemonSet's canary selector."""
        return Plan(steps=self.steps, bake_seconds=self.bake_seconds, group_label=self.group_label,
                    on_failure=self.on_failure, canary=canary, max_failed_per_wave=self.max_failed_per_wave)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def step_ok(value: Any) -> bool:
    """A count of at least 1, or a percentage from 1% to 100%."""
    if _is_int(value):
        return bool(value >= 1)
    return isinstance(value, str) and re.match(PERCENT_STEP, value) is not None


def steps_increasing(steps: list[Any]) -> bool:
    """Counts strictly increasing among themselves, percentages too (a count and a percentage cannot be compared
    before the node count is known; the wave arithmetic keeps the waves increasing)."""
    counts = [s for s in steps if _is_int(s)]
    percents = [int(s[:-1]) for s in steps if isinstance(s, str)]
    return all(a < b for seq in (counts, percents) for a, b in itertools.pairwise(seq))


def amount_ok(value: Any) -> bool:
    if _is_int(value):
        return bool(value >= 0)
    return isinstance(value, str) and re.match(PERCENT_AMOUNT, value) is not None


def _amount(value: Any) -> Amount:
    return Amount(int(value[:-1]), True) if isinstance(value, str) else Amount(int(value), False)


def validate_spec(spec: Any) -> list[FieldError]:
    """Every rule of the CRD, in the CRD's words (an empty list: valid). Fields absent take their defaults."""
    if not isinstance(spec, Mapping):
        return [FieldError("spec", "spec must be an object with at least daemonSet and steps")]
    errors: list[FieldError] = []
    name = spec.get("daemonSet")
    if not isinstance(name, str) or not is_dns1123_subdomain(name):  # (at most 253 characters included)
        errors.append(FieldError("spec.daemonSet", MSG_DAEMONSET))
    steps = spec.get("steps")
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:
        errors.append(FieldError("spec.steps", MSG_STEPS_COUNT))
    else:
        bad = [i for i, step in enumerate(steps) if not step_ok(step)]
        errors += [FieldError(f"spec.steps[{i}]", MSG_STEP) for i in bad]
        if not bad:
            if not steps_increasing(steps):
                errors.append(FieldError("spec.steps", MSG_STEPS_INCREASING))
            if steps[-1] != "100%":
                errors.append(FieldError("spec.steps", MSG_STEPS_LAST))
    bake = spec.get("bake", DEFAULT_BAKE)
    if not isinstance(bake, str) or len(bake) > BAKE_MAX or re.match(DURATION, bake) is None:
        errors.append(FieldError("spec.bake", MSG_BAKE))
    label = spec.get("groupLabel")
    if label is not None and (not isinstance(label, str) or len(label) > LABEL_KEY_MAX
                              or re.match(LABEL_KEY, label) is None):
        errors.append(FieldError("spec.groupLabel", MSG_GROUP_LABEL))
    if not amount_ok(spec.get("maxFailed", DEFAULT_MAX_FAILED)):
        errors.append(FieldError("spec.maxFailed", MSG_MAX_FAILED))
    per_wave = spec.get("maxFailedPerWave")
    if per_wave is not None and not amount_ok(per_wave):
        errors.append(FieldError("spec.maxFailedPerWave", MSG_MAX_FAILED_PER_WAVE))
    deadline = spec.get("progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE_SECONDS)
    if not _is_int(deadline) or deadline < 1:
        errors.append(FieldError("spec.progressDeadlineSeconds", MSG_DEADLINE))
    if spec.get("onFailure", DEFAULT_ON_FAILURE) not in ON_FAILURE_VALUES:
        errors.append(FieldError("spec.onFailure", MSG_ON_FAILURE))
    if not isinstance(spec.get("paused", False), bool):
        errors.append(FieldError("spec.paused", MSG_PAUSED))
    return errors


def parse_spec(spec: Any) -> tuple[RolloutPlanSpec | None, list[FieldError]]:
    """The plan's spec with defaults, or None and every rule it breaks (then the controller moves nothing for it
    and says why in a condition: half a plan is never applied)."""
    errors = validate_spec(spec)
    if errors:
        return None, errors
    assert isinstance(spec, Mapping)
    steps = tuple(Step(int(s[:-1]), True) if isinstance(s, str) else Step(int(s), False) for s in spec["steps"])
    per_wave = spec.get("maxFailedPerWave")
    return RolloutPlanSpec(
        daemon_set=str(spec["daemonSet"]),
        steps=steps,
        bake_seconds=parse_duration(str(spec.get("bake", DEFAULT_BAKE))),
        group_label=spec.get("groupLabel") or None,
        max_failed=_amount(spec.get("maxFailed", DEFAULT_MAX_FAILED)),
        max_failed_per_wave=_amount(per_wave) if per_wave is not None else None,
        progress_deadline_seconds=int(spec.get("progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE_SECONDS)),
        on_failure=ON_FAILURE_VALUES[str(spec.get("onFailure", DEFAULT_ON_FAILURE))],
        paused=bool(spec.get("paused", False)),
    ), []
