"""What the client commands print, run as processes: quiet ends of pipes, clear TLS mistakes, one clock.

Issue 22 items 2, 7 and 11: `edgeagent pods | true` printed a BrokenPipeError traceback, `--agent https://…`
against the plain-HTTP agent said "operation not permitted", and `hold` printed `until` in the node's time
but the next opening in UTC.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from edgeagent.agent.app import Agent
from edgeagent.cli import EXIT_READER_GONE
from edgeagent.config import AgentConfig
from tests.integration.agent_api.conftest import FAST_AGENT, closed_port, ds_pod, seed_snapshot, write_kubeconfig
from tests.integration.controller.conftest import all_running, create_daemonset, daemonset_manifest
from tests.support.inprocess_agent import RunningAgent, start_in_process
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.kube.client import KubeClient
    from edgeagent.sim.cluster import SimCluster


async def edgeagent(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgeagent.cli", *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def into_a_closed_pipe(*args: str) -> tuple[int, str]:
    """Run `edgeagent ARGS | true` where `true` has already gone: the first write finds no reader (EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "edgeagent.cli", *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=write_end, stderr=asyncio.subprocess.PIPE)
    finally:
        os.close(write_end)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[RunningAgent]:
    """An agent that boots offline from a snapshot of a few pods, with a window so the node is held at times."""
    state_dir = tmp_path / "state"
    await seed_snapshot(state_dir, [ds_pod(f"app-{i}") for i in range(3)])
    cfg = AgentConfig(node_name="edge-1", port=0, state_dir=state_dir, timezone="Asia/Kolkata",
                      maintenance_windows=("Sat 02:00-03:00",),
                      kubeconfig=write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed_port()}"),
                      **FAST_AGENT)
    handle = await start_in_process(Agent(cfg))
    try:
        yield handle
    finally:
        await handle.stop()


@pytest.mark.parametrize("command", [["pods"], ["pods", "--json"], ["upgrades"], ["hold"]])
async def test_output_into_a_closed_pipe_ends_quietly(agent: RunningAgent, command: list[str]) -> None:
    code, err = await into_a_closed_pipe(*command, "--agent", agent.url)
    assert (code, err) == (EXIT_READER_GONE, "")


async def test_rollout_status_into_a_closed_pipe_ends_quietly(sim: SimCluster, admin: KubeClient) -> None:
    await create_daemonset(admin, daemonset_manifest("web", strategy="OTA"))
    await eventually(lambda: all_running(admin, "web", 3), what="3 pods running")
    code, err = await into_a_closed_pipe("rollout", "status", "web", "--kubeconfig", str(sim.admin_kubeconfig))
    assert (code, err) == (EXIT_READER_GONE, "")


async def test_a_reader_that_stops_after_one_line_ends_it_quietly(agent: RunningAgent) -> None:
    """`edgeagent pods | head -1` through a real shell pipeline."""
    shell = f"{sys.executable} -m edgeagent.cli pods --agent {agent.url} | head -1"
    proc = await asyncio.create_subprocess_exec(
        "bash", "-o", "pipefail", "-c", shell, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert out.decode().split() == ["NAMESPACE", "NAME", "READY", "PHASE", "REVISION", "NEEDS-UPGRADE"]
    assert err == b""
    # The table fits the pipe's buffer, so the agent's answer was written before head left: 0 here; 141
    # (the shell's code for a reader gone) only when the writer outlived its reader.
    assert proc.returncode in (0, EXIT_READER_GONE)


async def test_https_to_the_plain_http_agent_says_so(agent: RunningAgent) -> None:
    https = agent.url.replace("http://", "https://")
    code, out, err = await edgeagent("pods", "--agent", https)
    assert (code, out) == (1, "")
    assert err.splitlines() == [f"edgeagent: error: TLS handshake with the agent at {https} failed: it answers in "
                                f"plain HTTP (the agent serves http); use --agent {agent.url}"]


async def test_hold_shows_until_and_the_next_opening_in_the_same_zone(agent: RunningAgent) -> None:
    code, out, err = await edgeagent("hold", "--for", "2h", "--agent", agent.url)
    assert code == 0, err
    first, _, last = out.strip().splitlines()
    assert first.startswith("held: HeldByOperator: held by an operator (until ") and first.endswith("+05:30)")
    assert last.startswith("next opening: ") and last.endswith("+05:30"), last


# ---------------------------------------------------------------------- completion


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_completes_commands_flags_and_choices() -> None:
    script = subprocess.run([sys.executable, "-m", "edgeagent.cli", "completion", "bash"], check=True,
                            capture_output=True, text=True).stdout
    probe = script + """
complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMP_LINE="$*"
  COMP_POINT=${#COMP_LINE}; COMPREPLY=(); _shtab_edgeagent; echo "${COMPREPLY[*]}"; }
complete_words edgeagent ro
complete_words edgeagent rollout st
complete_words edgeagent run --state-d
complete_words edgeagent sim --authorization ''
"""
    lines = subprocess.run(["bash", "-c", probe], check=True, capture_output=True, text=True).stdout.splitlines()
    assert lines == ["rollout", "status", "--state-dir", "none rbac"]


def test_zsh_completion_is_a_compdef_for_edgeagent() -> None:
    out = subprocess.run([sys.executable, "-m", "edgeagent.cli", "completion", "zsh"], check=True,
                         capture_output=True, text=True).stdout
    assert out.startswith("#compdef edgeagent")
    assert "--maintenance-window" in out and "--auto-upgrade" in out
