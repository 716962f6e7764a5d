"""`edgeagent pods | upgrade | upgrades` as processes, against an agent that runs offline from its snapshot."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from edgeagent.agent.app import Agent
from edgeagent.config import AgentConfig
from tests.integration.agent_api import conftest as agent_api
from tests.integration.agent_api.conftest import (
    FAST_AGENT,
    NODE,
    World,
    closed_port,
    ds_pod,
    seed_snapshot,
    write_kubeconfig,
)
from tests.support.inprocess_agent import start_in_process
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster


@pytest.fixture
async def world(sim: SimCluster) -> AsyncIterator[World]:
    """A DaemonSet whose pods need an upgrade, on the `sim` cluster (as in the agent_api tests)."""
    async with agent_api.make_world(sim) as w:
        yield w

TOKEN = "cli-token-123"


@dataclass
class Cli:
    url: str
    token_file: Path

    async def __call__(self, *args: str, token: bool = True, env: dict[str, str] | None = None,
                       agent: str | None = None) -> tuple[int, str, str]:
        flags = ["--agent", agent or self.url] + (["--token-file", str(self.token_file)] if token else [])
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "edgeagent.cli", *args, *flags,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def cli(tmp_path: Path) -> AsyncIterator[Cli]:
    state_dir = tmp_path / "state"
    pod = ds_pod("agent-x1")
    pod["metadata"]["labels"] = {"controller-revision-hash": "oldhash"}
    await seed_snapshot(state_dir, [pod, ds_pod("current", need_upgrade="False")])
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed_port()}")
    cfg = AgentConfig(node_name="edge-1", kubeconfig=kubeconfig, port=0, state_dir=state_dir,
                      token_file=token_file, **FAST_AGENT)
    handle = await start_in_process(Agent(cfg))
    try:
        yield Cli(handle.url, token_file)
    finally:
        await handle.stop()


async def test_pods_table_and_json(cli: Cli) -> None:
    code, out, err = await cli("pods")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "READY", "PHASE", "REVISION", "NEEDS-UPGRADE"]
    assert lines[1].split() == ["default", "agent-x1", "true", "Running", "oldhash", "True"]
    assert lines[2].split() == ["default", "current", "true", "Running", "-", "False"]
    code, out, _ = await cli("pods", "--json")
    assert code == 0
    assert [p["metadata"]["name"] for p in json.loads(out)["items"]] == ["agent-x1", "current"]


async def test_upgrade_queued_then_listed_then_cancelled(cli: Cli) -> None:
    code, out, err = await cli("upgrade", "default/agent-x1")
    assert code == 0, err
    assert "queued as request" in out
    code, out, _ = await cli("upgrade", "default/agent-x1", "--json")
    assert code == 0
    request_id = json.loads(out)["id"]

    code, out, _ = await cli("upgrades")
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:4] == ["ID", "POD", "STATE", "ATTEMPTS"]
    assert row.split()[:3] == [request_id, "default/agent-x1", "queued"]

    code, out, err = await cli("upgrades", "--cancel", request_id)
    assert code == 0, err
    assert "cancelled" in out
    code, out, err = await cli("upgrades", "--cancel", request_id)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "409" in err and "only a queued request can be cancelled" in err
    code, out, _ = await cli("upgrades", "--json")
    assert code == 0 and json.loads(out)["items"][0]["state"] == "cancelled"


async def test_refused_upgrade_exits_1_with_one_line(cli: Cli) -> None:
    code, out, err = await cli("upgrade", "default/current")
    assert (code, out) == (1, "")
    assert err.startswith("edgeagent: error: upgrade default/current: 403:") and err.count("\n") == 1
    code, out, err = await cli("upgrade", "default/current", "--json")
    assert code == 1 and json.loads(out)["status"] == "Forbidden" and err.count("\n") == 1
    code, _, err = await cli("upgrade", "default/agent-x1", token=False)
    assert code == 1 and "401" in err


async def test_agent_not_running_is_one_clear_line(tmp_path: Path) -> None:
    cli = Cli(f"http://127.0.0.1:{closed_port()}", tmp_path / "unused")
    for args in (["pods"], ["upgrade", "default/x"], ["upgrades"], ["upgrades", "--cancel", "abc"]):
        code, out, err = await cli(*args, token=False)
        assert (code, out) == (1, "")
        assert err.startswith("edgeagent: error: cannot reach the agent at") and "connection refused" in err
        assert err.count("\n") == 1


async def test_unreadable_token_file_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    missing = Cli(cli.url, tmp_path / "no-such-token")
    code, _, err = await missing("upgrade", "default/agent-x1")
    assert code == 2 and "--token-file" in err


class AgentProcess:
    """`edgeagent run` as a real process; the port it bound (port 0) is read from its JSON log."""

    def __init__(self, kubeconfig: Path, state_dir: Path) -> None:
        self.args = [sys.executable, "-m", "edgeagent.cli", "run", "--node-name", NODE, "--kubeconfig",
                     str(kubeconfig), "--port", "0", "--state-dir", str(state_dir), "--log-format", "json",
                     "--upgrade-timeout", "0.5", "--request-timeout", "1", "--probe-interval", "0.1",
                     "--probe-timeout", "0.3", "--failures-to-disconnect", "1"]
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: list[dict[str, object]] = []
        self._reader: asyncio.Task[None] | None = None
        self._port: asyncio.Future[int] | None = None

    @property
    def url(self) -> str:
        assert self._port is not None and self._port.done()
        return f"http://127.0.0.1:{self._port.result()}"

    async def start(self) -> None:
        self._port = asyncio.get_running_loop().create_future()
        self.proc = await asyncio.create_subprocess_exec(*self.args, stdout=asyncio.subprocess.DEVNULL,
                                                         stderr=asyncio.subprocess.PIPE)
        self._reader = asyncio.create_task(self._read())
        await asyncio.wait_for(asyncio.shield(self._port), 15)

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None and self._port is not None
        async for raw in self.proc.stderr:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            self.lines.append(line)
            if line.get("event") == "agent_listening" and not self._port.done():
                self._port.set_result(int(str(line["port"])))
        if not self._port.done():
            self._port.set_exception(AssertionError(f"agent exited before listening: {self.lines[-3:]}"))

    async def kill(self, sig: int) -> int:
        assert self.proc is not None and self._reader is not None
        self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), 15)
        await self._reader
        return code


@pytest.mark.slow
async def test_queued_upgrade_survives_sigkill_and_is_applied_when_the_link_returns(
        tmp_path: Path, world: World) -> None:
    old = await world.pod()
    name = f"default/{old['metadata']['name']}"
    state_dir = tmp_path / "agent-state"
    agent = AgentProcess(world.sim.node_kubeconfig(NODE), state_dir)
    await agent.start()
    cli = Cli(agent.url, tmp_path / "unused")

    async def cached() -> bool:
        code, out, _ = await cli("pods", "--json", token=False)
        return code == 0 and old["metadata"]["uid"] in out

    await eventually(cached, what="the pod in the agent's cache")
    await world.sim.disconnect(NODE, "blackhole")
    code, out, err = await cli("upgrade", name, "--json", token=False)
    assert code == 0, err
    answer = json.loads(out)
    assert answer["status"] == "Queued", answer  # 202: stored, not applied (the cloud cannot be reached)
    request_id = answer["id"]

    assert await agent.kill(signal.SIGKILL) == -signal.SIGKILL
    agent = AgentProcess(world.sim.node_kubeconfig(NODE), state_dir)
    await agent.start()
    cli = Cli(agent.url, tmp_path / "unused")
    try:
        # Still cut off: the snapshot answers, and the request survived the kill.
        code, out, _ = await cli("pods", "--json", token=False)
        assert code == 0 and old["metadata"]["uid"] in out
        code, out, _ = await cli("upgrades", "--json", token=False)
        [entry] = json.loads(out)["items"]
        assert (entry["id"], entry["state"]) == (request_id, "queued")

        await world.sim.connect(NODE)

        async def succeeded() -> bool:
            code, out, _ = await cli("upgrades", "--json", token=False)
            return code == 0 and json.loads(out)["items"][0]["state"] == "succeeded"

        await eventually(succeeded, timeout=20, what="the queued upgrade applied")
        await eventually(lambda: world.replaced(old), what="the pod replaced by the DaemonSet controller")
    finally:
        assert await agent.kill(signal.SIGTERM) == 0


# ---------------------------------------------------------------------- issue 13


async def test_agent_address_without_a_scheme_is_accepted(cli: Cli) -> None:
    code, out, err = await cli("pods", agent=cli.url.removeprefix("http://"))
    assert code == 0, err
    assert "agent-x1" in out
    code, out, err = await cli("pods", agent="127.0.0.1:not-a-port")
    assert code == 2 and out == "" and "Traceback" not in err
    assert "argument --agent: '127.0.0.1:not-a-port' is not a valid URL" in err


async def test_an_exported_EDGEAGENT_CANCEL_does_not_cancel(cli: Cli) -> None:
    code, out, err = await cli("upgrade", "default/agent-x1", "--json")
    assert code == 0, err
    request_id = json.loads(out)["id"]
    code, out, err = await cli("upgrades", env={"EDGEAGENT_CANCEL": request_id})
    assert code == 0, err
    _header, row = out.splitlines()
    assert row.split()[:3] == [request_id, "default/agent-x1", "queued"]


async def test_variables_of_flags_a_command_does_not_have_are_ignored(cli: Cli) -> None:
    code, out, err = await cli("pods", env={"EDGEAGENT_PORT": "abc", "EDGEAGENT_LOG_LEVEL": "verbose",
                                            "EDGEAGENT_NODES": "x", "EDGEAGENT_TIMEOUT": "y"})
    assert code == 0, err
    assert "agent-x1" in out
