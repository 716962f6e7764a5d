"""Usage errors are one line naming the command, the flag and what it accepts; exit 2 (issue 22 items 7, 8).

argparse printed its ~15-line usage block before each of these, blamed the top-level command for a flag
given to `run`, and some bad values were accepted silently (`upgrades --cancel ''` listed instead).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from edgeagent import cli
from edgeagent.config import RolloutConfig


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line of `edgeagent ARGV`, which must exit 2 and print nothing on stdout."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "usage:" not in lines[0]
    return lines[0]


@pytest.mark.parametrize(("argv", "line"), [
    (["run", "--port", "abc"],
     "edgeagent: error: argument --port: expected a port number 0..65535, got 'abc' (see edgeagent run --help)"),
    (["run", "--log-level", "verbose"],
     "edgeagent: error: argument --log-level: 'verbose' is not one of debug, info, warning, error "
     "(see edgeagent run --help)"),
    (["sim", "--nodes", "0"], "edgeagent: error: argument --nodes: must be >= 1, got 0 (see edgeagent sim --help)"),
    (["sim", "--port-range", "19999-12000"],
     "edgeagent: error: argument --port-range: expected FIRST-LAST with 1024 <= FIRST <= LAST <= 65535, "
     "got '19999-12000' (see edgeagent sim --help)"),
    (["sim", "--authorization", "ldap"],
     "edgeagent: error: argument --authorization: 'ldap' is not one of none, rbac (see edgeagent sim --help)"),
    (["run", "--node-name", "n1", "--bogus-flag"],
     "edgeagent: error: unrecognized argument: --bogus-flag (see edgeagent run --help)"),
    (["rollout", "status", "web", "--bogus", "x"],
     "edgeagent: error: unrecognized arguments: --bogus x (see edgeagent rollout status --help)"),
    (["bogus-command"], "edgeagent: error: argument COMMAND: invalid choice: 'bogus-command' (choose from"),
    (["upgrades", "--cancel", ""],
     "edgeagent: error: argument --cancel: expected a request id as `edgeagent upgrades` lists it, "
     "got '' (see edgeagent upgrades --help)"),
    (["upgrade", "a/b/c"], "edgeagent: error: NS/NAME 'a/b/c': name 'b/c' is not a DNS-1123 subdomain"),
    (["imagepull", "Kube-System/x"],
     "edgeagent: error: NS/NAME 'Kube-System/x': namespace 'Kube-System' is not a DNS-1123 label"),
    (["rollout", "status", "web", "--timeout", "5"],
     "edgeagent: error: --timeout 5 applies only with --watch (status without --watch prints once and exits); "
     "add --watch"),
    (["rollout", "status", "web", "--watch", "--timeout", "-1"],
     "edgeagent: error: argument --timeout: must be >= 0, got '-1'"),
    (["hold", "--for", "100000d"],
     "edgeagent: error: --for 100000d: a timed hold may last at most 366 days; for a hold until released, "
     "give neither --until nor --for"),
    (["hold", "--for", "99999999999d"], "edgeagent: error: --for 99999999999d: "),
    (["hold", "--until", "2300-01-01T00:00:00Z"], "edgeagent: error: --until 2300-01-01T00:00:00Z: a timed hold may "
                                                  "last at most 366 days"),
    (["completion", "fish"], "edgeagent: error: argument SHELL: invalid choice: 'fish'"),
])
def test_usage_errors_are_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                   line: str) -> None:
    assert usage_error(capsys, *argv).startswith(line)


def test_sim_dir_that_is_a_file_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert usage_error(capsys, "sim", "--dir", str(a_file)) == (
        f"edgeagent: error: --dir {a_file}: exists and is not a directory (give a directory, new or existing)")
    under = a_file / "state"
    assert usage_error(capsys, "sim", "--dir", str(under)) == (
        f"edgeagent: error: --dir {under}: is under {a_file}, which exists and is not a directory (give a "
        "directory, new or existing)")


def test_a_timed_hold_within_the_cap_is_accepted() -> None:
    args = cli.parse_args(["hold", "--for", "366d"])
    until = cli._hold_until(args)
    assert until is not None and until - datetime.now(UTC) <= timedelta(days=366)


def test_timeout_from_the_environment_only_applies_with_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exported EDGEAGENT_TIMEOUT for watching scripts must not break a plain `rollout status`."""
    seen: list[RolloutConfig] = []

    def call(cfg: RolloutConfig) -> int:
        seen.append(cfg)
        return 0

    from edgeagent.rollout import command as rollout_command

    monkeypatch.setattr(rollout_command, "main", call)
    monkeypatch.setenv("EDGEAGENT_TIMEOUT", "30")
    assert cli.main(["rollout", "status", "web"]) == 0
    assert cli.main(["rollout", "status", "web", "--watch", "--timeout", "5"]) == 0
    assert [(c.watch, c.timeout) for c in seen] == [(False, 30.0), (True, 5.0)]


def test_missing_kubeconfig_exits_2_like_a_missing_token_file(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    missing = tmp_path / "absent.kubeconfig"
    # `controller` and `run` say the same (tests/integration/controller/test_app.py, agent_runtime/test_agent.py);
    # run in this process they would point the logging at this test's captured stderr.
    for argv in (["rollout", "status", "web", "--kubeconfig", str(missing)],
                 ["pods", "--token-file", str(missing)]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and str(missing) in err[0], err


def test_malformed_kubeconfig_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text("apiVersion: v1\nclusters: [\n  - foo: : bar\n")
    assert cli.main(["rollout", "status", "web", "--kubeconfig", str(bad)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"edgeagent: error: kubeconfig {bad}: not valid YAML at line 3, column 3: expected the node content, "
        "but found '-'"]



VERBS = ("status", "promote", "pause", "resume", "abort", "retry", "undo", "history")


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(("name", "why"), [
    ("", "the DaemonSet name is empty"),
    ("ds/", "the DaemonSet name is empty"),
    ("Web_1", "'Web_1' is not a DaemonSet name"),
    ("web!", "'web!' is not a DaemonSet name"),
    ("x" * 254, "is not a DaemonSet name"),
    ("deployment/web", "'deployment/web' is not a DaemonSet: give NAME or ds/NAME"),
    ("a/b/c", "is not a DaemonSet"),
])
def test_an_empty_or_malformed_daemonset_name_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, verb: str, name: str, why: str) -> None:
    """Issue 38 item 7: `rollout status ''` printed `DaemonSet /: not managed` and exited 3 ("in progress"), so a
    script waiting on an empty variable looped forever. Every rollout verb refuses it before any request."""
    from edgeagent.rollout import command as rollout_command

    def never(cfg: RolloutConfig) -> int:
        raise AssertionError("no request may be made for an invalid name")

    monkeypatch.setattr(rollout_command, "main", never)
    line = usage_error(capsys, "rollout", verb, name)
    assert line.startswith("edgeagent: error: argument DS: ") and why in line


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("namespace", ["", "Bad_NS", "a.b"])
def test_an_empty_or_malformed_namespace_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], verb: str, namespace: str) -> None:
    line = usage_error(capsys, "rollout", verb, "web", "-n", namespace)
    assert f"argument -n/--namespace: {namespace!r} is not a namespace" in line


@pytest.mark.parametrize("given", ["web", "ds/web", "daemonset/web", "daemonsets/web", "daemonset.apps/web",
                                   "daemonsets.apps/web", "DS/web", "a.b-c"])
def test_a_daemonset_name_and_kubectls_type_slash_name_forms_are_accepted(
        monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    from edgeagent.rollout import command as rollout_command

    seen: list[RolloutConfig] = []

    def call(cfg: RolloutConfig) -> int:
        seen.append(cfg)
        return 0

    monkeypatch.setattr(rollout_command, "main", call)
    assert cli.main(["rollout", "status", given]) == 0
    assert cli.main(["rollout", "pause", given, "-n", "edge-sites"]) == 0
    expected = given.split("/")[-1]
    # Without -n the namespace is left to the kubeconfig context (else default), resolved once connected.
    assert [(c.daemonset, c.namespace) for c in seen] == [(expected, ""), (expected, "edge-sites")]


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_fleet_nodes_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38 item 10: `fleet nodes -h` printed `fleet`'s page."""
    page = help_of(capsys, "fleet", "nodes")
    assert page.startswith("usage: edgeagent fleet nodes ") and "One line per node of the fleet." in page
    assert "only the nodes of this DaemonSet" in page


def test_fleet_flags_before_or_after_the_view_alike() -> None:
    for argv in (["fleet", "-o", "wide", "-n", "edge", "nodes", "web"], ["fleet", "nodes", "web", "-o", "wide",
                                                                         "-n", "edge"]):
        cfg = cli._fleet_config(cli.parse_args(argv, environ={}))
        assert (cfg.nodes, cfg.daemonset, cfg.output, cfg.namespace) == (True, "web", "wide", "edge"), argv
    cfg = cli._fleet_config(cli.parse_args(["fleet"], environ={"EDGEAGENT_OUTPUT": "json"}))
    assert (cfg.nodes, cfg.output) == (False, "json")


@pytest.mark.parametrize("argv", [["fleet"], ["fleet", "nodes"]])
def test_output_lists_its_choices_in_help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert "-o {wide,json,name}, --output {wide,json,name}" in help_of(capsys, *argv)


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_pause_and_resume_help_speaks_of_their_own_errors(capsys: pytest.CaptureFixture[str], verb: str) -> None:
    page = help_of(capsys, "rollout", verb)
    assert "promote" not in page and "abort" not in page, page


@pytest.mark.parametrize("argv", [["fleet"], ["dashboard"], ["rollout", "status", "web"], ["controller"],
                                  ["run", "--node-name", "n1"]])
def test_an_empty_kubeconfig_variable_says_so(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                              argv: list[str]) -> None:
    """It read as `.` and ended in "kubeconfig not found: .", exit 1 for fleet and dashboard."""
    monkeypatch.setenv("KUBECONFIG", "")
    monkeypatch.delenv("EDGEAGENT_KUBECONFIG", raising=False)
    assert usage_error(capsys, *argv) == ("edgeagent: error: KUBECONFIG='': set but empty: name a kubeconfig file, "
                                          "or unset it to use the in-cluster config")


@pytest.mark.parametrize("argv", [["run", "--port", "abc"], ["bogus"], ["fleet", "nodes", "a", "b"],
                                  ["upgrade", "a/b/c"], ["dashboard", "--bind", "0.0.0.0"]])
def test_every_usage_error_has_the_one_prefix(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """argparse's errors said `edgeagent run: error:`, the commands' `edgeagent: error:`, the sim's
    `edgeagent sim: error:`: one style now (issue 38 item 10)."""
    assert usage_error(capsys, *argv).startswith(cli.ERROR_PREFIX)
