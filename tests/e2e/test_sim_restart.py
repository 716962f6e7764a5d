"""`edgeagent sim` restarted as a process (SIGTERM, then SIGKILL) under a running agent and controller.

Neither client is restarted: the sim keeps its store, a resourceVersion that never goes back, and every
port its kubeconfigs name, so the agent's `GET /pods` comes back to the sim's truth and the controller
keeps reconciling. Marked slow: three sim starts, an agent and a controller as real processes (~20 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable, Timeouts
from tests.integration.controller.conftest import daemonset_manifest, need_upgrade
from tests.support.waiting import eventually

JSON = dict[str, Any]
NODE = "edge-1"
PODS = "/api/v1/namespaces/default/pods"
DAEMONSETS = "/apis/apps/v1/namespaces/default/daemonsets"
SIM_FLAGS = ["--nodes", "2", "--port", "0", "--heartbeat-interval", "0.2", "--node-grace", "5",
             "--pod-resync-delay", "0.2", "--log-format", "json"]
AGENT_FLAGS = ["--request-timeout", "1", "--probe-interval", "0.1", "--probe-timeout", "0.3",
               "--failures-to-disconnect", "2", "--successes-to-connect", "1", "--log-format", "json"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEAGENT_")}
    env.pop("KUBECONFIG", None)
    return env


async def _start_sim(directory: Path, log: Path) -> asyncio.subprocess.Process:
    """A sim process, returned once it answers on the admin kubeconfig's URL."""
    with log.open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "edgeagent.cli", "sim", "--dir", str(directory), *SIM_FLAGS,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err, env=_env())

    admin_path = directory / "admin.kubeconfig"

    def exited() -> str:
        return log.read_text()[-2000:]

    def written() -> bool:
        return admin_path.exists()

    async def answering() -> bool:
        assert proc.returncode is None, exited()
        if not written():
            return False
        try:
            async with await KubeClient.connect(admin_path, Timeouts(0.5, 1)) as admin:
                await admin.get("/version")
        except (KubeUnreachable, KubeError, OSError):
            return False
        return True

    await eventually(answering, timeout=30, what="the sim to answer")
    return proc


@contextlib.asynccontextmanager
async def _process(*args: str, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "edgeagent.cli", *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=out, stderr=asyncio.subprocess.STDOUT, env=_env())
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def _agent_port(log: Path) -> int | None:
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and entry.get("event") == "agent_listening":
                return int(entry["port"])
    return None


async def _agent_pods(port: int) -> dict[str, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http, \
            http.get(f"http://127.0.0.1:{port}/pods") as response:
        body = await response.json()
    return {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in body["items"]}


async def _truth(directory: Path) -> dict[str, str]:
    async with await KubeClient.connect(directory / "admin.kubeconfig", Timeouts(1, 3)) as admin:
        pods = await admin.get(PODS, query={"fieldSelector": f"spec.nodeName={NODE}"})
    return {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pods["items"]}


async def _in_sync(directory: Path, port: int) -> bool:
    try:
        truth = await _truth(directory)
        return bool(truth) and await _agent_pods(port) == truth
    except (KubeUnreachable, KubeError, aiohttp.ClientError, TimeoutError):
        return False


async def _flagged(directory: Path, image: str) -> bool:
    """Every pod of the DaemonSet carries PodNeedUpgrade for the revision of `image` (the controller acted)."""
    try:
        async with await KubeClient.connect(directory / "admin.kubeconfig", Timeouts(1, 3)) as admin:
            pods = (await admin.get(PODS, query={"labelSelector": "app=nginx"}))["items"]
            revisions = (await admin.get("/apis/apps/v1/namespaces/default/controllerrevisions"))["items"]
    except (KubeUnreachable, KubeError):
        return False
    current = [r for r in revisions if image in json.dumps(r.get("data"))]
    if len(pods) != 2 or not current:
        return False
    want_hash = current[0]["metadata"]["labels"]["controller-revision-hash"]
    wanted = "False" if all(p["spec"]["containers"][0]["image"] == image for p in pods) else "True"
    return all(need_upgrade(p) == (wanted, f"controllerrevision: {want_hash}") for p in pods)


async def _set_image(directory: Path, image: str) -> None:
    async with await KubeClient.connect(directory / "admin.kubeconfig", Timeouts(1, 3)) as admin:
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}}}
        await admin.request("PATCH", f"{DAEMONSETS}/nginx", body=patch,
                            content_type="application/strategic-merge-patch+json")


@pytest.mark.slow
async def test_sim_restart_under_a_running_agent_and_controller(tmp_path: Path) -> None:
    directory = tmp_path / "sim"
    sim_log = tmp_path / "sim.log"
    sim = await _start_sim(directory, sim_log)
    try:
        async with await KubeClient.connect(directory / "admin.kubeconfig", Timeouts(1, 3)) as admin:
            await admin.create(DAEMONSETS, daemonset_manifest("nginx", strategy="OTA"))
        agent_log, controller_log = tmp_path / "agent.log", tmp_path / "controller.log"
        async with _process("run", "--node-name", NODE, "--kubeconfig", str(directory / f"{NODE}.kubeconfig"),
                            "--port", "0", "--state-dir", str(tmp_path / "agent"), *AGENT_FLAGS,
                            log=agent_log) as agent, \
                _process("controller", "--kubeconfig", str(directory / "admin.kubeconfig"), "--metrics-port",
                         "0", "--log-format", "json", log=controller_log) as controller:
            port = await eventually(lambda: _agent_port(agent_log), timeout=20, what="the agent to listen")
            await eventually(lambda: _flagged(directory, "nginx:1.19.4"), timeout=30, what="the controller's flags")
            await eventually(lambda: _in_sync(directory, port), timeout=20, what="the agent's first sync")

            for how, image in ((signal.SIGTERM, "nginx:1.19.5"), (signal.SIGKILL, "nginx:1.19.6")):
                rv_before = await _list_rv(directory)
                stopped = time.monotonic()
                sim.send_signal(how)
                code = await asyncio.wait_for(sim.wait(), 20)
                assert code == (0 if how == signal.SIGTERM else -signal.SIGKILL), sim_log.read_text()[-2000:]
                sim = await _start_sim(directory, sim_log)
                resumed = time.monotonic()
                assert await _list_rv(directory) >= rv_before, "the resourceVersion went back"
                # A change right after the restart reaches the agent only through its re-established watch.
                await _label_pods(directory, how.name.lower())
                await eventually(lambda: _in_sync(directory, port), timeout=10, what=f"agent resync after {how!r}")
                done = time.monotonic()
                print(f"{how.name}: sim back after {resumed - stopped:.2f} s; agent resynced "
                      f"{done - resumed:.2f} s later ({done - stopped:.2f} s in all)")
                await _set_image(directory, image)
                await eventually(lambda: _flagged(directory, image), timeout=30,  # noqa: B023
                                 what=f"the controller reconciling after {how.name}")
                await eventually(lambda: _in_sync(directory, port), timeout=10, what="agent follows the flags")
            assert agent.returncode is None and controller.returncode is None  # neither was restarted
    finally:
        if sim.returncode is None:
            sim.send_signal(signal.SIGTERM)
            await asyncio.wait_for(sim.wait(), 20)


async def _list_rv(directory: Path) -> int:
    async with await KubeClient.connect(directory / "admin.kubeconfig", Timeouts(1, 3)) as admin:
        return int((await admin.get(PODS))["metadata"]["resourceVersion"])


async def _label_pods(directory: Path, value: str) -> None:
    async with await KubeClient.connect(directory / "admin.kubeconfig", Timeouts(1, 3)) as admin:
        for name in await _truth(directory):
            await admin.request("PATCH", f"{PODS}/{name}", body={"metadata": {"labels": {"restarted": value}}},
                                content_type="application/merge-patch+json")


async def test_sim_refuses_an_unreadable_state_file_with_one_clear_line(tmp_path: Path) -> None:
    directory = tmp_path / "sim"
    directory.mkdir()
    (directory / "sim-state.db").write_bytes(b"not a database" * 300)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgeagent.cli", "sim", "--dir", str(directory), "--nodes", "1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env())
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    lines = [line for line in err.decode().splitlines() if line.startswith("edgeagent: error:")]
    assert len(lines) == 1 and "sim-state.db is not a readable sim state database" in lines[0], err.decode()
    assert not (directory / "admin.kubeconfig").exists()
