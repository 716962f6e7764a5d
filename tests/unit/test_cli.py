"""The command line's contract: env fallbacks, usage errors exit 2 with one line on stderr."""

from __future__ import annotations

import pytest

from edgeagent import cli


def test_run_without_node_name_is_a_usage_error(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("EDGEAGENT_NODE_NAME", raising=False)
    assert cli.main(["run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["edgeagent: error: --node-name (or NODE_NAME) is required"]


def test_bad_env_value_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("EDGEAGENT_PORT", "not-a-port")
    assert cli.main(["run", "--node-name", "n1"]) == 2
    assert "EDGEAGENT_PORT='not-a-port'" in capsys.readouterr().err


def test_flags_read_their_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEAGENT_PORT", "12345")
    monkeypatch.setenv("EDGEAGENT_INSECURE_ALLOW_REMOTE", "true")
    args = cli.build_parser().parse_args(["run", "--node-name", "n1"])
    assert args.port == 12345
    assert args.insecure_allow_remote is True


def test_node_name_falls_back_to_NODE_NAME(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGEAGENT_NODE_NAME", raising=False)
    monkeypatch.setenv("NODE_NAME", "edge-7")
    assert cli.build_parser().parse_args(["run"]).node_name == "edge-7"


def test_upgrade_needs_ns_slash_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["upgrade", "just-a-name"]) == 2
    assert "expected NS/NAME" in capsys.readouterr().err


def test_bad_maintenance_window_or_zone_exits_2_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("EDGEAGENT_MAINTENANCE_WINDOW", raising=False)
    assert cli.main(["run", "--node-name", "n1", "--maintenance-window", "Sta 02:00-03:00"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown day 'Sta'" in err[0]
    assert cli.main(["run", "--node-name", "n1", "--timezone", "Mars/Olympus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown time zone 'Mars/Olympus'" in err[0]
    monkeypatch.setenv("EDGEAGENT_MAINTENANCE_WINDOW", "Sat 02:00-04:00;Sun 25:00-26:00")
    assert cli.main(["run", "--node-name", "n1"]) == 2
    assert "out of range" in capsys.readouterr().err


def test_maintenance_windows_repeat_and_the_flag_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEAGENT_MAINTENANCE_WINDOW", "Sat 02:00-04:00; Sun 22:00-02:00")
    args = cli.build_parser().parse_args(["run", "--node-name", "n1"])
    assert cli._windows(args) == (("Sat 02:00-04:00", "Sun 22:00-02:00"), "")
    args = cli.build_parser().parse_args(["run", "--node-name", "n1", "--maintenance-window", "Mon 01:00-02:00",
                                          "--maintenance-window", "Tue 01:00-02:00", "--timezone", "Europe/Berlin"])
    assert cli._windows(args) == (("Mon 01:00-02:00", "Tue 01:00-02:00"), "Europe/Berlin")
