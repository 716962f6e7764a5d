"""The image's HEALTHCHECK (`edgeagent healthcheck`) probes the port and address the process really uses.

Before, it read only EDGEAGENT_PORT: `docker run IMAGE --port 13267` was probed on 10267 and the
controller run from the same image was never healthy. The checks here read real processes' /proc entries,
as the HEALTHCHECK does inside the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from edgeagent import cli, healthcheck
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def _process(*args: str, env: dict[str, str]) -> AsyncIterator[asyncio.subprocess.Process]:
    # Started with the usual umask 022 whatever this test process has, as from a shell or a container.
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", 'umask 022 && exec "$0" -m edgeagent.cli "$@"', sys.executable, *args,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _as_seen_in_proc(pid: int) -> tuple[list[str], dict[str, str]] | None:
    """None until `pid` runs edgeagent: it starts as `/bin/sh -c 'umask … && exec python -m edgeagent.cli …'`."""
    return healthcheck.find_process(exclude=[p for p in _all_pids() if p != pid])


def _all_pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


async def _health(pid: int) -> tuple[int, str]:
    found = _as_seen_in_proc(pid)
    assert found is not None, f"pid {pid} not recognised as an edgeagent process"
    return await asyncio.to_thread(healthcheck.health_of, *found, 2.0, parse=cli.parse_args)


def test_dockerfile_healthcheck_runs_edgeagent_healthcheck() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    cmd = [line for line in lines if line.startswith("CMD ") and "healthcheck" in line]
    assert cmd == ['CMD ["edgeagent", "healthcheck"]'], cmd
    assert "EDGEAGENT_PORT', '10267')" not in (ROOT / "Dockerfile").read_text()


async def test_agent_started_with_a_port_flag_is_probed_on_that_port(sim: SimCluster, tmp_path: Path) -> None:
    port = _free_port()
    env = {"EDGEAGENT_PORT": str(_free_port()), "EDGEAGENT_BIND": "127.0.0.1", "EDGEAGENT_LOG_FORMAT": "json"}
    async with _process("run", "--node-name", "edge-1", "--kubeconfig", str(sim.node_kubeconfig("edge-1")),
                        "--state-dir", str(tmp_path / "state"), "--port", str(port), env=env) as proc:
        code, line = await eventually(lambda: _healthy(proc.pid), timeout=30, what="agent healthy")
        assert line == f"healthy: http://127.0.0.1:{port}/v1/healthz"
        # `edgeagent run` sets umask 077 itself (the image cannot): state files are 0600, as under systemd.
        db = tmp_path / "state" / "edgeagent.db"
        assert db.exists() and stat.S_IMODE(db.stat().st_mode) == 0o600, oct(db.stat().st_mode)
        proc.send_signal(signal.SIGSTOP)  # a wedged agent: the port is open, nothing answers
        try:
            code, line = await _health(proc.pid)
            assert code == healthcheck.EXIT_UNHEALTHY and line.startswith("unhealthy: "), line
        finally:
            proc.send_signal(signal.SIGCONT)


async def _healthy(pid: int) -> tuple[int, str] | None:
    found = _as_seen_in_proc(pid)
    if found is None:  # the shell has not exec'd edgeagent yet
        return None
    result = await asyncio.to_thread(healthcheck.health_of, *found, 2.0, parse=cli.parse_args)
    return result if result[0] == healthcheck.EXIT_HEALTHY else None


async def test_controller_from_the_same_image_is_probed_on_its_metrics_port(sim: SimCluster) -> None:
    port = _free_port()
    env = {"EDGEAGENT_KUBECONFIG": str(sim.admin_kubeconfig), "EDGEAGENT_METRICS_PORT": str(port)}
    async with _process("controller", env=env) as proc:
        _, line = await eventually(lambda: _healthy(proc.pid), timeout=30, what="controller healthy")
        assert line == f"healthy: http://127.0.0.1:{port}/healthz"
    async with _process("controller", "--metrics-port", "0", env=env) as proc:
        _, line = await eventually(lambda: _healthy(proc.pid), timeout=30, what="controller found")
        assert line == "healthy: controller is running (it serves no health endpoint)"


@pytest.mark.parametrize(("bind", "host"), [("0.0.0.0", "127.0.0.1"), ("::", "[::1]"), ("127.0.0.2", "127.0.0.2"),
                                            ("::1", "[::1]")])
def test_wildcard_binds_are_probed_on_loopback(bind: str, host: str) -> None:
    target = healthcheck.target_of(["run", "--node-name", "n", "--port", "5"], {"EDGEAGENT_BIND": bind},
                                   parse=cli.parse_args)
    assert target is not None and target.url == f"http://{host}:5/v1/healthz"


def test_pid_1_else_the_only_edgeagent_server_process_is_the_one_probed(tmp_path: Path) -> None:
    def fake(pid: int, *argv: str, env: str = "") -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (tmp_path / str(pid) / "environ").write_bytes(env.encode())

    fake(1, "/usr/bin/catatonit", "--", "/opt/edgeagent/bin/edgeagent", "run")
    fake(3, "/opt/edgeagent/bin/python", "/opt/edgeagent/bin/edgeagent", "healthcheck")
    fake(7, "/opt/edgeagent/bin/python", "/opt/edgeagent/bin/edgeagent", "run", "--port", "13267",
         env="EDGEAGENT_BIND=127.0.0.1\0PATH=/x")
    fake(9, "python", "-m", "edgeagent.cli", "controller")
    (tmp_path / "self").mkdir()
    # The init's command line carries the entrypoint's: PID 1 is probed with the arguments it was given.
    assert healthcheck.find_process(tmp_path) == (["run"], {})
    # Without PID 1, two servers: which one is meant cannot be guessed (issue 22 item 11: not the lowest pid).
    assert healthcheck.find_process(tmp_path, exclude=[1]) is None
    assert healthcheck.find_process(tmp_path, exclude=[1, 9]) == (
        ["run", "--port", "13267"], {"EDGEAGENT_BIND": "127.0.0.1", "PATH": "/x"})
    assert healthcheck.find_process(tmp_path, exclude=[1, 7]) == (["controller"], {})
    assert healthcheck.find_process(tmp_path, exclude=[1, 7, 9]) is None
