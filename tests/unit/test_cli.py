"""The command line's contract: env fallbacks, usage errors exit 2 with one line on stderr."""

from __future__ import annotations

import argparse
from typing import Any

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
    args = cli.parse_args(["run", "--node-name", "n1"])
    assert args.port == 12345
    assert args.insecure_allow_remote is True


def test_node_name_falls_back_to_NODE_NAME(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGEAGENT_NODE_NAME", raising=False)
    monkeypatch.setenv("NODE_NAME", "edge-7")
    assert cli.parse_args(["run"]).node_name == "edge-7"


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
    args = cli.parse_args(["run", "--node-name", "n1"])
    assert cli._windows(args) == (("Sat 02:00-04:00", "Sun 22:00-02:00"), "")
    args = cli.parse_args(["run", "--node-name", "n1", "--maintenance-window", "Mon 01:00-02:00",
                                          "--maintenance-window", "Tue 01:00-02:00", "--timezone", "Europe/Berlin"])
    assert cli._windows(args) == (("Mon 01:00-02:00", "Tue 01:00-02:00"), "Europe/Berlin")


# ---------------------------------------------------------------------- issue 13


def _all_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.append((prefix + name, sub))
                    walk(sub, prefix + name + " ")

    walk(cli.build_parser(), "")
    return found


def test_action_flags_never_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ("upgrades", "--cancel") in cli.ACTION_FLAGS
    parsers = dict(_all_commands())
    for command, flag in cli.ACTION_FLAGS:
        monkeypatch.setenv(cli.env_name(flag), "from-the-environment")
        positional = ["default/x"] if command == "upgrade" else ["web"] if command.startswith("rollout") else []
        args = cli.parse_args([*command.split(), *positional])
        action = next(a for a in parsers[command]._actions if flag in a.option_strings)
        assert getattr(args, action.dest) is None, f"{command} {flag} read {cli.env_name(flag)}"
        assert cli.env_name(flag) not in (action.help or "")


@pytest.mark.parametrize("command", [["pods"], ["upgrades"], ["upgrade", "default/x"], ["demo"],
                                     ["rollout", "status", "ds"]])
def test_only_the_chosen_command_reads_its_variables(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    for var in ("EDGEAGENT_PORT", "EDGEAGENT_NODES", "EDGEAGENT_LOG_LEVEL", "EDGEAGENT_LEASE_DURATION",
                "EDGEAGENT_REQUEST_TIMEOUT", "EDGEAGENT_METRICS_PORT"):
        monkeypatch.setenv(var, "not-valid")
    cli.parse_args(command)  # no UsageError: none of these commands has those flags


def test_a_bad_variable_of_the_chosen_command_is_still_an_error(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("EDGEAGENT_AGENT", "ftp://elsewhere")
    assert cli.main(["pods"]) == 2
    assert capsys.readouterr().err.startswith("edgeagent: error: EDGEAGENT_AGENT='ftp://elsewhere': ")


@pytest.mark.parametrize(("given", "url"), [("127.0.0.1:10267", "http://127.0.0.1:10267"),
                                            ("localhost:1234/", "http://localhost:1234"),
                                            ("[::1]:10267", "http://[::1]:10267"),
                                            ("https://edge.example:443", "https://edge.example:443")])
def test_agent_address_scheme_is_optional(given: str, url: str) -> None:
    assert cli.parse_args(["pods", "--agent", given]).agent == url


def test_unknown_log_level_is_rejected(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--node-name", "n1", "--log-level", "verbose"])
    assert exited.value.code == 2
    assert "argument --log-level: 'verbose' is not one of debug, info, warning, error" in capsys.readouterr().err
    monkeypatch.setenv("EDGEAGENT_LOG_LEVEL", "verbose")
    assert cli.main(["controller"]) == 2
    assert "EDGEAGENT_LOG_LEVEL='verbose'" in capsys.readouterr().err
    monkeypatch.setenv("EDGEAGENT_LOG_LEVEL", "WARNING")
    assert cli.parse_args(["sim"]).log_level == "warning"


def test_argparse_messages_name_no_internal_converter(capsys: pytest.CaptureFixture[str]) -> None:
    for command, parser in _all_commands():
        for action in parser._actions:
            name = getattr(action.type, "__name__", "")
            assert not name.startswith(("_", "<")), f"{command} {action.option_strings}: {name}"
    with pytest.raises(SystemExit):
        cli.main(["run", "--port", "abc"])
    err = capsys.readouterr().err
    assert "_port" not in err and "argument --port: expected a port number 0..65535, got 'abc'" in err


def test_every_subcommand_help_page_has_a_description(capsys: pytest.CaptureFixture[str]) -> None:
    for command, parser in _all_commands():
        assert parser.description, f"edgeagent {command} --help has no description"
        with pytest.raises(SystemExit):
            cli.main([*command.split(), "--help"])
        page = capsys.readouterr().out
        assert parser.description.split(".")[0] in " ".join(page.split()), command


def test_sim_history_reaches_the_sim_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15: a 10,000-node sim needs a longer watch history than the default (bench/controller_scale.py)."""
    seen: list[Any] = []

    def call(cfg: Any) -> int:
        seen.append(cfg)
        return 0

    from edgeagent.sim import app as sim_app

    monkeypatch.setattr(sim_app, "main", call)
    assert cli.main(["sim", "--history", "250000"]) == 0
    assert seen[0].history == 250000
    monkeypatch.setenv("EDGEAGENT_HISTORY", "12345")
    assert cli.main(["sim"]) == 0
    assert seen[1].history == 12345


def test_sim_event_ttl_reaches_the_sim_config_and_defaults_to_the_api_servers(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[Any] = []

    def call(cfg: Any) -> int:
        seen.append(cfg)
        return 0

    from edgeagent.sim import app as sim_app

    monkeypatch.setattr(sim_app, "main", call)
    assert cli.main(["sim"]) == 0 and seen[0].event_ttl == 3600.0  # kube-apiserver's --event-ttl default
    assert cli.main(["sim", "--event-ttl", "90"]) == 0 and seen[1].event_ttl == 90.0
    with pytest.raises(SystemExit) as exited:
        cli.main(["sim", "--event-ttl", "0"])
    assert exited.value.code == 2
    assert "argument --event-ttl: must be > 0, got '0'" in capsys.readouterr().err


def test_sim_no_node_links_reaches_the_sim_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19's 100,000-node benchmark: nodes without a link each (bench/rollout_scale.py)."""
    seen: list[Any] = []

    def call(cfg: Any) -> int:
        seen.append(cfg)
        return 0

    from edgeagent.sim import app as sim_app

    monkeypatch.setattr(sim_app, "main", call)
    assert cli.main(["sim"]) == 0 and seen[0].node_links
    assert cli.main(["sim", "--no-node-links"]) == 0 and not seen[1].node_links


def test_sim_control_plane_events_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scale benchmarks turn off the scheduler's and node controller's Events (issue 22 item 14)."""
    seen: list[Any] = []

    def call(cfg: Any) -> int:
        seen.append(cfg)
        return 0

    from edgeagent.sim import app as sim_app

    monkeypatch.setattr(sim_app, "main", call)
    assert cli.main(["sim"]) == 0
    assert cli.main(["sim", "--no-control-plane-events"]) == 0
    assert [cfg.control_plane_events for cfg in seen] == [True, False]
