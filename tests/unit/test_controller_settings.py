from __future__ import annotations

import pytest

from edgeagent.controller.settings import (
    IntOrPercent,
    Strategy,
    parse_int_or_percent,
    roll_settings,
    select,
)
from tests.unit.test_controller_objects import daemonset

STRATEGY = "apps.openyurt.io/update-strategy"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("OTA", Strategy.OTA), ("ota", Strategy.OTA), ("AdvancedRollingUpdate", Strategy.ADVANCED_ROLLING_UPDATE),
     ("advancedrollingupdate", Strategy.ADVANCED_ROLLING_UPDATE), ("Auto", Strategy.ADVANCED_ROLLING_UPDATE)],
)
def test_strategy_is_case_insensitive(value: str, expected: Strategy) -> None:
    assert select(daemonset(annotations={STRATEGY: value})).strategy is expected


def test_unannotated_daemonset_is_not_ours_and_not_a_problem() -> None:
    selection = select(daemonset())
    assert selection.strategy is None and selection.problem == ""


def test_invalid_strategy_is_a_problem_naming_the_value() -> None:
    selection = select(daemonset(annotations={STRATEGY: "Rolling"}))
    assert selection.strategy is None
    assert "'Rolling'" in selection.problem and selection.value == "Rolling"


def test_strategy_needs_on_delete() -> None:
    selection = select(daemonset(annotations={STRATEGY: "OTA"}, update_type="RollingUpdate"))
    assert selection.strategy is None
    assert "OnDelete" in selection.problem


@pytest.mark.parametrize(
    ("raw", "total", "expected"),
    [("3", 10, 3), ("10%", 4, 1), ("10%", 20, 2), ("30%", 4, 2), ("100%", 7, 7), ("0", 5, 0)],
)
def test_int_or_percent_rounds_up(raw: str, total: int, expected: int) -> None:
    assert parse_int_or_percent(raw).scaled(total, round_up=True) == expected


@pytest.mark.parametrize("raw", ["abc", "-1", "1.5", "101%", "%", ""])
def test_int_or_percent_rejects(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_int_or_percent(raw)


def test_defaults() -> None:
    settings, problems = roll_settings(daemonset())
    assert problems == []
    assert settings.max_unavailable == IntOrPercent(10, True)
    assert settings.partition is None and settings.node_selector is None
    assert not settings.paused and settings.max_failed is None
    assert settings.progress_deadline == 600.0


def test_zero_max_unavailable_means_the_default_as_in_openyurt() -> None:
    settings, _ = roll_settings(daemonset(annotations={"apps.openyurt.io/max-unavailable": "0"}))
    assert settings.max_unavailable == IntOrPercent(10, True)


def test_all_knobs_parse() -> None:
    settings, problems = roll_settings(daemonset(min_ready=5, annotations={
        "apps.openyurt.io/max-unavailable": "2",
        "edgeagent.io/partition": "25%",
        "edgeagent.io/node-selector": "canary=true,zone in (a,b)",
        "edgeagent.io/paused": "True",
        "edgeagent.io/max-failed": "1",
        "edgeagent.io/progress-deadline-seconds": "30",
    }))
    assert problems == []
    assert settings.max_unavailable == IntOrPercent(2, False)
    assert settings.partition == IntOrPercent(25, True)
    assert settings.node_selector is not None
    assert settings.node_selector.matches({"canary": "true", "zone": "a"})
    assert not settings.node_selector.matches({"canary": "true", "zone": "c"})
    assert settings.paused and settings.max_failed == IntOrPercent(1, False)
    assert settings.progress_deadline == 30.0 and settings.min_ready_seconds == 5


def test_each_bad_annotation_is_reported() -> None:
    _, problems = roll_settings(daemonset(annotations={
        "apps.openyurt.io/max-unavailable": "lots",
        "edgeagent.io/partition": "x",
        "edgeagent.io/node-selector": "a in b",
        "edgeagent.io/paused": "maybe",
        "edgeagent.io/max-failed": "-2",
        "edgeagent.io/progress-deadline-seconds": "-5",
    }))
    assert [p.annotation for p in problems] == [
        "apps.openyurt.io/max-unavailable", "edgeagent.io/partition", "edgeagent.io/node-selector",
        "edgeagent.io/paused", "edgeagent.io/max-failed", "edgeagent.io/progress-deadline-seconds",
    ]
    assert all(p.value in p.message for p in problems)


def test_invalid_node_selector_is_reported_with_the_parser_reason() -> None:
    _, problems = roll_settings(daemonset(annotations={"edgeagent.io/node-selector": "a in b"}))
    assert [p.message for p in problems] == [
        "annotation edgeagent.io/node-selector='a in b': not a label selector: "
        "unable to parse requirement: found 'b' expected: '('"
    ]


def test_node_selector_has_the_api_server_grammar_including_greater_than() -> None:
    """The node selector is parsed and matched by kube.selectors, so it means what the same labelSelector
    would mean to the API server."""
    settings, problems = roll_settings(daemonset(annotations={"edgeagent.io/node-selector": "tier>1,!legacy"}))
    assert problems == []
    assert settings.node_selector is not None
    assert settings.node_selector.matches({"tier": "2"})
    assert not settings.node_selector.matches({"tier": "1"})
    assert not settings.node_selector.matches({"tier": "2", "legacy": ""})


def test_blank_partition_and_max_failed_mean_not_set() -> None:
    settings, problems = roll_settings(daemonset(annotations={"edgeagent.io/partition": " ",
                                                              "edgeagent.io/max-failed": ""}))
    assert problems == []
    assert settings.partition is None and settings.max_failed is None


def test_an_unknown_update_type_stops_the_roll_naming_the_choices() -> None:
    _, problems = roll_settings(daemonset(annotations={"edgeagent.io/update-type": "InPlace"}))
    assert [(p.annotation, p.value) for p in problems] == [("edgeagent.io/update-type", "InPlace")]
    assert problems[0].message == ("annotation edgeagent.io/update-type='InPlace': 'InPlace' is not one of "
                                   "InPlaceIfPossible, Recreate")
    for value in ("InPlaceIfPossible", "Recreate", ""):
        assert roll_settings(daemonset(annotations={"edgeagent.io/update-type": value}))[1] == []
