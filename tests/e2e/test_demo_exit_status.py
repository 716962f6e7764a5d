"""Audit addition (issue 5: the demo "exits 0 only if every step happened"): the failure code reaches the
exit status of `edgeagent demo` (cli → demo.main), not only run_demo's return value."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest

from edgeagent.cli import main as cli_main
from edgeagent.demo import scenario


@pytest.mark.slow
def test_edgeagent_demo_command_exits_1_when_a_step_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # An agent flag the CLI rejects: the agent exits 2 at start-up, so the step that waits for it fails.
    monkeypatch.setattr(scenario, "AGENT_FLAGS", ["--probe-interval", "-1"])
    out, err = io.StringIO(), io.StringIO()
    # run_demo's streams default to sys.stdout/err as they were at import; hand it ours to read them back.
    real = scenario.run_demo
    monkeypatch.setattr(scenario, "run_demo", lambda keep=False: real(out, err, keep=keep))
    code = cli_main(["demo"])
    assert code == 1
    assert "DEMO FAILED at step" in err.getvalue()
    assert "Demo complete" not in out.getvalue()
    kept = re.search(r"logs kept in (\S+)", err.getvalue())
    assert kept, err.getvalue()
    shutil.rmtree(Path(kept.group(1)).parent)
