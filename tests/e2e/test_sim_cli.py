"""`edgeagent sim` as a process: writes kubeconfigs, serves them, cuts links on request, exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from edgeagent.kube.client import KubeClient, KubeUnreachable, Timeouts
from tests.waiting import eventually


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
    lines = [line for line in err.decode().splitlines() if line.startswith("edgeagent sim: error:")]
    assert len(lines) == 1
    assert str(port) in lines[0]
