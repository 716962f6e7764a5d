"""Commands run in-process leave the caller's logging as it was."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import structlog

from edgeagent.config import RolloutConfig
from edgeagent.fleet.command import FleetConfig, main
from edgeagent.rollout import command as rollout_command


@pytest.mark.parametrize("command", ["fleet", "rollout"])
def test_a_command_run_in_process_gives_the_caller_its_logging_back(tmp_path: Path, command: str) -> None:
    """`fleet` and `rollout` log only critical lines while they run; one that left the log at `critical` silenced
    every later test of the same worker that reads the log (seen in a full parallel run)."""
    before = structlog.get_config()
    missing = tmp_path / "absent.kubeconfig"
    if command == "fleet":
        code = main(FleetConfig(kubeconfig=missing), out=io.StringIO(), err=io.StringIO())
    else:
        code = rollout_command.main(RolloutConfig(action="status", daemonset="web", kubeconfig=missing),
                                out=io.StringIO(), err=io.StringIO())
    assert code != 0
    assert structlog.get_config() == before
