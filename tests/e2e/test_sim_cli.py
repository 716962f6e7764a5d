"""`edgeagent sim` as a process: writes kubeconfigs, serves them, cuts links on request, exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from functools import partial
from pathlib import Path
from typing import Any

from edgeagent.kube.client import KubeClient, KubeUnreachable, Timeouts
from tests.support.waiting import eventually


async def test_sim_command_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    directory = tmp_path / "sim"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgeagent.cli", "sim", "--nodes", "2", "--port", "0", "--dir", str(directory),
        "--heartbeat-interval", "0.2", "--node-grace", "2",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        admin_path = directory / "admin.kubeconfig"
        await eventually(admin_path.exists, timeout=20, what="admin.kubeconfig to be written")
        assert (directory / "edge-1.kubeconfig").exists()
        assert (directory / "edge-2.kubeconfig").exists()

        admin = await KubeClient.connect(admin_path, Timeouts(connect=2, request=5))
        node = await KubeClient.connect(directory / "edge-1.kubeconfig", Timeouts(connect=2, request=1))
        try:
            nodes = await admin.get("/api/v1/nodes")
            assert [n["metadata"]["name"] for n in nodes["items"]] == ["edge-1", "edge-2"]
            assert (await node.get("/api/v1/nodes/edge-1"))["metadata"]["name"] == "edge-1"
            await admin.request("POST", "/sim/v1/nodes/edge-1/disconnect", query={"mode": "refuse"})
            try:
                await node.get("/api/v1/nodes/edge-1")
                raise AssertionError("the cut link still answered")
            except KubeUnreachable:
                pass
            await admin.request("POST", "/sim/v1/nodes/edge-1/connect")
            assert (await node.get("/api/v1/nodes/edge-1"))["metadata"]["name"] == "edge-1"
            api_url = admin.host
        finally:
            await admin.close()
            await node.close()

        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert "edgeagent: warning:" not in err.decode()  # loopback: nothing to warn about
    text = out.decode()
    assert api_url in text
    assert str(admin_path) in text
    assert str(directory / "edge-2.kubeconfig") in text
    assert f"curl -X POST '{api_url}/sim/v1/nodes/edge-1/disconnect?mode=blackhole'" in text
    assert f"curl -X POST '{api_url}/sim/v1/nodes/edge-1/connect'" in text


async def test_sim_command_reports_a_taken_port(tmp_path: Path) -> None:
    blocker = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = blocker.sockets[0].getsockname()[1]
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "edgeagent.cli", "sim", "--nodes", "1", "--port", str(port),
            "--dir", str(tmp_path / "sim"), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        blocker.close()
        await blocker.wait_closed()
    assert proc.returncode == 1
    lines = [line for line in err.decode().splitlines() if line.startswith("edgeagent: error:")]
    assert len(lines) == 1
    assert str(port) in lines[0]


async def _get_when_serving(client: KubeClient, path: str) -> dict[str, Any] | None:
    """The kubeconfigs are written once the ports are bound, which can be seconds before a loaded machine lets the
    sim answer on them: not answering yet is not the failure under test."""
    try:
        found: dict[str, Any] = await client.get(path)
    except KubeUnreachable:
        return None
    return found


async def test_a_wildcard_bind_without_authorization_warns_and_kubeconfigs_name_loopback(tmp_path: Path) -> None:
    """`--bind 0.0.0.0` (issue 22 item 11): one warning line on stderr; every kubeconfig names 127.0.0.1, an
    address a client can dial, and works (only loopback is ever dialled here)."""
    directory = tmp_path / "sim"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgeagent.cli", "sim", "--nodes", "1", "--bind", "0.0.0.0", "--dir", str(directory),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        admin_path = directory / "admin.kubeconfig"
        await eventually(admin_path.exists, timeout=20, what="admin.kubeconfig to be written")
        for path in (admin_path, directory / "edge-1.kubeconfig"):
            text = path.read_text()
            assert "0.0.0.0" not in text and "server: http://127.0.0.1:" in text, text
            async with await KubeClient.connect(path, Timeouts(connect=2, request=5)) as client:
                node = await eventually(partial(_get_when_serving, client, "/api/v1/nodes/edge-1"), timeout=30,
                                        what=f"the sim to answer through {path.name}")
                assert node["metadata"]["name"] == "edge-1"
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    warnings = [line for line in err.decode().splitlines() if line.startswith("edgeagent: warning:")]
    assert warnings == ["edgeagent: warning: --bind 0.0.0.0 with --authorization none: anyone who can reach "
                        "this address may read and change everything in the simulated cluster; use "
                        "--authorization rbac, or keep the default --bind 127.0.0.1"], err.decode()
    assert "0.0.0.0" not in out.decode()
