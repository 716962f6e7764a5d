"""What a DaemonSet asks of the controller, read from its annotations.

Parsing is separate from planning so that every malformed value becomes one clear message (reported as a
Warning Event on the DaemonSet) instead of an exception in the reconcile loop: a typo in an annotation
must stop that DaemonSet's roll, never the controller.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from edgeagent.contract import (
    ANNOTATION_MAX_FAILED,
    ANNOTATION_MAX_UNAVAILABLE,
    ANNOTATION_NODE_SELECTOR,
    ANNOTATION_PARTITION,
    ANNOTATION_PAUSED,
    ANNOTATION_PROGRESS_DEADLINE,
    ANNOTATION_UPDATE_STRATEGY,
    ANNOTATION_UPDATE_TYPE,
    STRATEGY_ADVANCED_ROLLING_UPDATE,
    STRATEGY_OTA,
)
from edgeagent.inplace import update_type
from edgeagent.kube.objects import annotations_of
from edgeagent.kube.selectors import LabelSelector, parse_label_selector

JSON = dict[str, Any]

DEFAULT_MAX_UNAVAILABLE = "10%"
DEFAULT_PROGRESS_DEADLINE = 600.0
# OpenYurt's own controller accepts "Auto" as an older name of AdvancedRollingUpdate.
_STRATEGY_AUTO = "auto"

_INT_OR_PERCENT = re.compile(r"^\s*(\d+)\s*(%?)\s*$")


class Strategy(Enum):
    OTA = "OTA"
    ADVANCED_ROLLING_UPDATE = "AdvancedRollingUpdate"


@dataclass(frozen=True)
class Selection:
    """How the controller treats a DaemonSet: `strategy` None means leave it alone; `problem` says why."""

    strategy: Strategy | None
    problem: str = ""
    # The annotation value the problem is about, so a Warning is emitted once per distinct value.
    value: str = ""


def select(ds: JSON) -> Selection:
    """Only DaemonSets annotated OTA/AdvancedRollingUpdate (any case) with `updateStrategy.type: OnDelete`."""
    raw = annotations_of(ds).get(ANNOTATION_UPDATE_STRATEGY)
    if raw is None:
        return Selection(None)
    value = str(raw)
    lowered = value.strip().lower()
    if lowered == STRATEGY_OTA:
        strategy = Strategy.OTA
    elif lowered in (STRATEGY_ADVANCED_ROLLING_UPDATE, _STRATEGY_AUTO):
        strategy = Strategy.ADVANCED_ROLLING_UPDATE
    else:
        return Selection(
            None,
            f"annotation {ANNOTATION_UPDATE_STRATEGY}={value!r} is neither OTA nor AdvancedRollingUpdate; "
            "the DaemonSet is not managed",
            value,
        )
    update_type = str(((ds.get("spec") or {}).get("updateStrategy") or {}).get("type") or "RollingUpdate")
    if update_type != "OnDelete":
        return Selection(
            None,
            f"annotation {ANNOTATION_UPDATE_STRATEGY}={value!r} is ignored because spec.updateStrategy.type is "
            f"{update_type!r}, not 'OnDelete'",
            f"{value}/{update_type}",
        )
    return Selection(strategy)


@dataclass(frozen=True)
class IntOrPercent:
    value: int
    percent: bool

    def scaled(self, total: int, *, round_up: bool) -> int:
        if not self.percent:
            return self.value
        exact = self.value * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


def parse_int_or_percent(raw: str) -> IntOrPercent:
    """`3` or `30%` (Kubernetes IntOrString); raises ValueError with the reason."""
    match = _INT_OR_PERCENT.match(raw)
    if not match:
        raise ValueError(f"{raw!r} is not a non-negative integer or a percentage like '10%'")
    value = int(match.group(1))
    percent = bool(match.group(2))
    if percent and value > 100:
        raise ValueError(f"{raw!r} is more than 100%")
    return IntOrPercent(value, percent)


@dataclass(frozen=True)
class RollSettings:
    """AdvancedRollingUpdate knobs: OpenYurt's max-unavailable plus our `edgeagent.io/` extensions."""

    max_unavailable: IntOrPercent = field(default_factory=lambda: IntOrPercent(10, True))
    partition: IntOrPercent | None = None
    # The same grammar and matching as the API server's labelSelector (kube.selectors), `>`/`<` included.
    node_selector: LabelSelector | None = None
    paused: bool = False
    max_failed: IntOrPercent | None = None
    progress_deadline: float = DEFAULT_PROGRESS_DEADLINE
    min_ready_seconds: int = 0


@dataclass(frozen=True)
class Problem:
    annotation: str
    value: str
    message: str


def roll_settings(ds: JSON) -> tuple[RollSettings, list[Problem]]:
    """Parse every knob; a malformed one is reported and the roll does not proceed on a guess."""
    annotations = annotations_of(ds)
    problems: list[Problem] = []

    def bad(annotation: str, value: str, why: str) -> None:
        problems.append(Problem(annotation, value, f"annotation {annotation}={value!r}: {why}"))

    def optional_int_or_percent(annotation: str) -> IntOrPercent | None:
        """Absent or blank means not set; anything else must parse."""
        raw = annotations.get(annotation)
        if raw is None or not str(raw).strip():
            return None
        try:
            return parse_int_or_percent(str(raw))
        except ValueError as exc:
            bad(annotation, str(raw), str(exc))
            return None

    max_unavailable = IntOrPercent(10, True)
    raw = annotations.get(ANNOTATION_MAX_UNAVAILABLE)
    if raw is not None:
        try:
            parsed = parse_int_or_percent(str(raw))
        except ValueError as exc:
            bad(ANNOTATION_MAX_UNAVAILABLE, str(raw), str(exc))
        else:
            # OpenYurt treats 0 as "use the default": a roll that may never make anything unavailable is stuck.
            if parsed.value > 0:
                max_unavailable = parsed

    partition = optional_int_or_percent(ANNOTATION_PARTITION)

    node_selector: LabelSelector | None = None
    raw = annotations.get(ANNOTATION_NODE_SELECTOR)
    if raw is not None and str(raw).strip():
        try:
            node_selector = parse_label_selector(str(raw))
        except ValueError as exc:
            bad(ANNOTATION_NODE_SELECTOR, str(raw), f"not a label selector: {exc}")

    paused = False
    raw = annotations.get(ANNOTATION_PAUSED)
    if raw is not None:
        lowered = str(raw).strip().lower()
        if lowered == "true":
            paused = True
        elif lowered not in ("false", ""):
            bad(ANNOTATION_PAUSED, str(raw), "expected 'true' or 'false'")

    max_failed = optional_int_or_percent(ANNOTATION_MAX_FAILED)

    progress_deadline = DEFAULT_PROGRESS_DEADLINE
    raw = annotations.get(ANNOTATION_PROGRESS_DEADLINE)
    if raw is not None and str(raw).strip():
        try:
            progress_deadline = float(str(raw))
            if not math.isfinite(progress_deadline) or progress_deadline <= 0:
                raise ValueError
        except ValueError:
            bad(ANNOTATION_PROGRESS_DEADLINE, str(raw), "expected a positive number of seconds")
            progress_deadline = DEFAULT_PROGRESS_DEADLINE

    try:
        update_type(ds)  # read again where it is used; a bad one stops the roll like any other knob
    except ValueError as exc:
        bad(ANNOTATION_UPDATE_TYPE, str(annotations.get(ANNOTATION_UPDATE_TYPE)), str(exc).split(": ", 1)[1])

    min_ready = (ds.get("spec") or {}).get("minReadySeconds") or 0
    min_ready_seconds = min_ready if isinstance(min_ready, int) and min_ready > 0 else 0

    settings = RollSettings(
        max_unavailable=max_unavailable,
        partition=partition,
        node_selector=node_selector,
        paused=paused,
        max_failed=max_failed,
        progress_deadline=progress_deadline,
        min_ready_seconds=min_ready_seconds,
    )
    return settings, problems
