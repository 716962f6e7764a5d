"""One duration parser and one formatter for every flag, annotation and view (issue 38 item 10).

`hold --for 1d` was accepted while a bake of `1d` was not; `hold --for -5m` said "expected one argument";
a bake left read `9m` in `fleet -o wide`, `9m5s` in `rollout status` and `9m` in the dashboard.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeagent import cli
from edgeagent.durations import DURATION_FORM, DurationError, format_duration, parse_duration
from edgeagent.fleet import command
from edgeagent.rollout import model
from tests.unit.test_fleet_model import ds, node, pod


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1d2h3m4s", 93784), ("0", 0),
    ("0s", 0), (" 10m ", 600), ("100000d", 8_640_000_000),
])
def test_parses_whole_units_largest_first(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "5x", "1m1h", "1.5h", "-5m", "1 h", "h", "1hh", "1H", "+5m"])
def test_anything_else_is_refused_saying_what_a_duration_is(text: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(text)
    assert repr(text) in str(caught.value) and DURATION_FORM in str(caught.value)


def test_a_negative_duration_is_named_as_such() -> None:
    with pytest.raises(DurationError, match="never negative"):
        parse_duration("-5m")


@given(st.integers(min_value=0, max_value=10**9))
def test_the_formatter_writes_what_the_parser_reads_back(seconds: int) -> None:
    text = format_duration(seconds)
    assert parse_duration(text) == seconds
    if seconds == 0:
        assert text == "0s"
        return
    # Shortest: each unit once, no zero part, each below the next unit up (never `90m` for `1h30m`).
    match = re.fullmatch(r"(?:([1-9]\d*)d)?(?:([1-9]\d*)h)?(?:([1-9]\d*)m)?(?:([1-9]\d*)s)?", text)
    assert match is not None, text
    _, hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
    assert hours < 24 and minutes < 60 and secs < 60, text


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (-30, "0s"), (0.4, "0s"), (0.5, "1s"), (2.5, "3s"), (59, "59s"), (60, "1m"), (545, "9m5s"),
    (5400, "1h30m"), (86400, "1d"), (90061, "1d1h1m1s"), (float("nan"), "-"), (float("inf"), "-"),
])
def test_formats_rounded_half_up_in_the_shortest_exact_form(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_hold_for_a_negative_duration_says_what_a_duration_is(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse took `-5m` for a flag: "argument --for: expected one argument"."""
    for argv in (["hold", "--for", "-5m"], ["hold", "--for=-5m"], ["hold", "--reason", "x", "--for", "-5m"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.splitlines()
        assert err == [f"edgeagent: error: --for: '-5m' is not a duration: a duration is never negative: expected "
                       f"{DURATION_FORM}"], argv


def test_hold_for_zero_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["hold", "--for", "0s"]) == 2
    assert "a timed hold lasts more than zero" in capsys.readouterr().err


def test_fleet_wide_prints_the_bake_left_as_every_view_does() -> None:
    baking = {"metadata": {"name": "web", "namespace": "default"},
              "spec": {"daemonSet": "web", "steps": [1, "50%", "100%"], "bake": "2h"},
              "status": {"revision": "new", "wave": 1, "waves": 3, "phase": "Baking",
                         "bakeStartedAt": "2026-01-01T00:00:00Z"}}
    fleet = model.build([ds()], [pod(generation="2", revision="new")], [node()], [], now=1767225600.0 + 1800,
                        plans=[baking])
    table = command.daemonsets_table(fleet, command.FleetConfig(output="wide"))
    assert table.splitlines()[1].split()[-1] == "1h30m"  # kubectl's age format said `90m`


def test_a_bake_takes_every_duration_a_hold_takes() -> None:
    """Issue 38 item 10: `hold --for 1d` was accepted and a bake of `1d` refused; one form everywhere now, in the
    controller's reading of a plan and in the CRD's rule alike (test_rollout_api checks the two agree)."""
    from edgeagent.rollout import api

    for text, seconds in (("1d", 86400), ("1h30m", 5400), ("0", 0), ("0s", 0), ("1d2h3m4s", 93784)):
        spec, errors = api.parse_spec({"daemonSet": "web", "steps": [1, "100%"], "bake": text})
        assert not errors and spec is not None and spec.bake_seconds == seconds == parse_duration(text), text
    for text in ("30m1h", "1m1m", "-5m", "soon", "1w"):
        spec, errors = api.parse_spec({"daemonSet": "web", "steps": [1, "100%"], "bake": text})
        assert spec is None and [e.field for e in errors] == ["spec.bake"], text
