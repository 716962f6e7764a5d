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
     "edgeagent run: error: argument --port: expected a port number 0..65535, got 'abc' (see edgeagent run --help)"),
    (["run", "--log-level", "verbose"],
     "edgeagent run: error: argument --log-level: 'verbose' is not one of debug, info, warning, error "
     "(see edgeagent run --help)"),
    (["sim", "--nodes", "0"], "edgeagent sim: error: argument --nodes: must be >= 1, got 0 (see edgeagent sim --help)"),
    (["sim", "--port-range", "19999-12000"],
     "edgeagent sim: error: argument --port-range: expected FIRST-LAST with 1024 <= FIRST <= LAST <= 65535, "
     "got '19999-12000' (see edgeagent sim --help)"),
    (["sim", "--authorization", "ldap"],
     "edgeagent sim: error: argument --authorization: 'ldap' is not one of none, rbac (see edgeagent sim --help)"),
    (["run", "--node-name", "n1", "--bogus-flag"],
     "edgeagent run: error: unrecognized argument: --bogus-flag (see edgeagent run --help)"),
    (["rollout", "status", "web", "--bogus", "x"],
     "edgeagent rollout status: error: unrecognized arguments: --bogus x (see edgeagent rollout status --help)"),
    (["bogus-command"], "edgeagent: error: argument COMMAND: invalid choice: 'bogus-command' (choose from"),
    (["upgrades", "--cancel", ""],
     "edgeagent upgrades: error: argument --cancel: expected a request id as `edgeagent upgrades` lists it, "
     "got '' (see edgeagent upgrades --help)"),
    (["upgrade", "a/b/c"], "edgeagent: error: NS/NAME 'a/b/c': name 'b/c' is not a DNS-1123 subdomain"),
    (["imagepull", "Kube-System/x"],
     "edgeagent: error: NS/NAME 'Kube-System/x': namespace 'Kube-System' is not a DNS-1123 label"),
    (["rollout", "status", "web", "--timeout", "5"],
     "edgeagent: error: --timeout 5 applies only with --watch (status without --watch prints once and exits); "
     "add --watch"),
    (["rollout", "status", "web", "--watch", "--timeout", "-1"],
     "edgeagent rollout status: error: argument --timeout: must be >= 0, got '-1'"),
    (["hold", "--for", "100000d"],
     "edgeagent: error: --for 100000d: a timed hold may last at most 366 days; for a hold until released, "
     "give neither --until nor --for"),
    (["hold", "--for", "99999999999d"], "edgeagent: error: --for 99999999999d: "),
    (["hold", "--until", "2300-01-01T00:00:00Z"], "edgeagent: error: --until 2300-01-01T00:00:00Z: a timed hold may "
                                                  "last at most 366 days"),
    (["completion", "fish"], "edgeagent completion: error: argument SHELL: invalid choice: 'fish'"),
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

    from edgeagent import rollout_cli

    monkeypatch.setattr(rollout_cli, "main", call)
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
    from edgeagent import rollout_cli

    def never(cfg: RolloutConfig) -> int:
        raise AssertionError("no request may be made for an invalid name")

    monkeypatch.setattr(rollout_cli, "main", never)
    line = usage_error(capsys, "rollout", verb, name)
    assert line.startswith(f"edgeagent rollout {verb}: error: argument DS: ") and why in line


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
    from edgeagent import rollout_cli

    seen: list[RolloutConfig] = []

    def call(cfg: RolloutConfig) -> int:
        seen.append(cfg)
        return 0

    monkeypatch.setattr(rollout_cli, "main", call)
    assert cli.main(["rollout", "status", given]) == 0
    assert cli.main(["rollout", "pause", given, "-n", "edge-sites"]) == 0
    expected = given.split("/")[-1]
    # Without -n the namespace is left to the kubeconfig context (else default), resolved once connected.
    assert [(c.daemonset, c.namespace) for c in seen] == [(expected, ""), (expected, "edge-sites")]
