"""`edgeagent run` refuses values that cannot mean anything (issue 38 item 4): exit 2, one line.

`--ready-timeout nan` or `inf` was accepted (a timeout that never fires) while `--probe-interval 0` was refused,
and `--node-name 'Edge_3!'` (no Node can have that name) started an agent that waited for it for ever.
"""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeagent import cli
from edgeagent.kube.objects import is_dns1123_subdomain
from tests.unit.test_cli_usage_errors import usage_error


def _run_parser() -> argparse.ArgumentParser:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices["run"]
    return parser


# Every float flag of `edgeagent run`, from its parser: a new one is covered without touching this list.
RUN_FLOAT_FLAGS = sorted(action.option_strings[-1] for action in _run_parser()._actions
                         if getattr(action.type, "__name__", "") == "number")


def test_the_run_float_flags_are_found() -> None:
    assert {"--ready-timeout", "--probe-interval", "--request-timeout"} <= set(RUN_FLOAT_FLAGS)


@pytest.mark.parametrize("flag", RUN_FLOAT_FLAGS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "Infinity", "1e999"])
def test_a_float_flag_that_is_not_finite_is_a_usage_error(capsys: pytest.CaptureFixture[str], flag: str,
                                                          value: str) -> None:
    line = usage_error(capsys, "run", "--node-name", "edge-1", f"{flag}={value}")
    assert line == f"edgeagent: error: argument {flag}: must be a finite number, got {value!r} " \
                   "(see edgeagent run --help)"


@pytest.mark.parametrize("name", ["Edge_3!", "EDGE-1", "edge 1", "-edge", "edge-", "a" * 254, "edge..1"])
def test_a_node_name_that_is_not_a_dns_subdomain_is_a_usage_error(capsys: pytest.CaptureFixture[str],
                                                                  name: str) -> None:
    line = usage_error(capsys, "run", f"--node-name={name}")
    assert line.startswith(f"edgeagent: error: argument --node-name: {name!r} is not a node name: a node "
                           "name is a DNS-1123 subdomain"), line


def test_a_bad_NODE_NAME_is_a_usage_error_too(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "Edge_3!")
    line = usage_error(capsys, "run")
    assert line.startswith("edgeagent: error: NODE_NAME='Edge_3!': 'Edge_3!' is not a node name"), line


@given(st.text(alphabet="abcXYZ019-._!", min_size=1, max_size=12))
def test_a_node_name_is_accepted_exactly_when_it_is_a_dns_subdomain(name: str) -> None:
    args = ["run", f"--node-name={name}"]
    try:
        accepted = cli.parse_args(args).node_name == name
    except SystemExit:
        accepted = False
    assert accepted == is_dns1123_subdomain(name), repr(name)
