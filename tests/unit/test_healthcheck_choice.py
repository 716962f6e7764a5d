"""Which process `edgeagent healthcheck` probes (issue 22 item 11).

It probed whichever edgeagent process had the lowest pid: on a host running an agent and a controller (or a
demo's several agents) that is an arbitrary one. Now: PID 1 when it is edgeagent (a container's entrypoint),
else the only one, else it says which exist and asks for --pid.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgeagent import cli, healthcheck


def fake_proc(root: Path, processes: dict[int, list[str]]) -> Path:
    """A /proc with `cmdline` and `environ` files for each pid, as the kernel lays them out."""
    for pid, argv in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (root / str(pid) / "environ").write_bytes(b"EDGEAGENT_PORT=13267\0")
    return root


AGENT = ["/usr/bin/python3", "/usr/local/bin/edgeagent", "run", "--node-name", "n1"]
CONTROLLER = ["/usr/bin/python3", "-m", "edgeagent.cli", "controller"]
SHELL = ["/bin/sh"]


def test_the_only_edgeagent_process_is_chosen(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {1: ["/sbin/tini", "--", "edgeagent"], 7: AGENT, 9: SHELL})
    chosen = healthcheck.choose(healthcheck.edgeagent_processes(proc))
    assert isinstance(chosen, healthcheck.Process) and chosen.pid == 7
    assert chosen.environ == {"EDGEAGENT_PORT": "13267"}


def test_pid_1_wins_in_a_container(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {1: CONTROLLER, 2: AGENT})
    chosen = healthcheck.choose(healthcheck.edgeagent_processes(proc))
    assert isinstance(chosen, healthcheck.Process) and chosen.pid == 1


def test_several_on_a_host_are_named_not_guessed(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {300: CONTROLLER, 200: AGENT, 100: SHELL})
    chosen = healthcheck.choose(healthcheck.edgeagent_processes(proc))
    assert chosen == "2 edgeagent processes run here: 200 (run), 300 (controller); name one with --pid"
    assert healthcheck.find_process(proc) is None
    picked = healthcheck.read_process(300, proc)
    assert picked is not None and picked.argv == ["controller"]


def test_pid_flag_names_the_process(capsys: pytest.CaptureFixture[str]) -> None:
    """This test's own process is no edgeagent server: --pid probes exactly what it is told, and says so."""
    assert cli.main(["healthcheck", "--pid", str(os.getpid())]) == healthcheck.EXIT_UNHEALTHY
    assert capsys.readouterr().err == (f"edgeagent healthcheck: unhealthy: pid {os.getpid()} is not an edgeagent "
                                       "run/controller process\n")
