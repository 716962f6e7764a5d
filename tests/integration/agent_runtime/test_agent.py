"""The whole agent in-process: `GET /pods` follows this node's pods, survives restarts offline, shuts down cleanly."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import pytest

from edgeagent.agent.app import Agent, AgentError, check_bind
from edgeagent.agent.sdnotify import SdNotifier
from edgeagent.config import AgentConfig
from tests.integration.agent_runtime.conftest import (
    NODE,
    OTHER,
    Admin,
    AgentFactory,
    get_pods,
    names,
)
from tests.support.notify import NotifyReceiver
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster


async def test_get_pods_lists_exactly_this_nodes_pods_and_follows_changes(
        admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession) -> None:
    await admin.create("mine-1")
    await admin.create("theirs-1", OTHER)
    agent = await start_agent()

    async def listed() -> set[str]:
        return names(await get_pods(http, agent))

    async def matches_cloud() -> bool:
        return await listed() == await admin.names_on(NODE)

    await eventually(matches_cloud, what="GET /pods equal to the node's pods in the cloud")
    body = await get_pods(http, agent)
    assert body["kind"] == "PodList" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"]

    await admin.create("mine-2")
    await admin.create("theirs-2", OTHER)
    await eventually(matches_cloud, what="the created pod")
    assert "default/mine-2" in await listed()

    await admin.label("mine-1", version="2")

    async def relabelled() -> bool:
        pods = {p["metadata"]["name"]: p for p in (await get_pods(http, agent))["items"]}
        version: str | None = pods["mine-1"]["metadata"]["labels"].get("version")
        return version == "2"

    await eventually(relabelled, what="the label change in GET /pods")

    await admin.delete_now("mine-2")
    await eventually(matches_cloud, what="the deletion")
    assert all(p["spec"]["nodeName"] == NODE for p in (await get_pods(http, agent))["items"])


async def test_get_pods_with_an_empty_cache_is_an_empty_podlist(
        sim: SimCluster, start_agent: AgentFactory, http: aiohttp.ClientSession) -> None:
    await sim.disconnect(NODE, "refuse")
    agent = await start_agent()
    body = await get_pods(http, agent)
    assert body["kind"] == "PodList" and body["items"] == []


async def test_restart_with_the_link_cut_serves_the_snapshot(
        sim: SimCluster, admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession,
        tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    for name in ("a", "b"):
        await admin.create(name)
    first = await start_agent(state_dir=state_dir)
    await eventually(lambda: first.agent.cache is not None and len(first.agent.cache.pods()) == 2,
                     what="both pods cached")
    await first.stop()
    assert not (state_dir / "edgeagent.db-wal").exists(), "the database was not closed cleanly"

    await sim.disconnect(NODE, "blackhole")
    second = await start_agent(state_dir=state_dir)
    # Answered at once from the snapshot: nothing from the cloud can have arrived through a blackhole.
    assert names(await get_pods(http, second)) == {"default/a", "default/b"}
    assert second.agent.link is not None and not second.agent.link.connected


async def test_snapshot_written_on_shutdown_holds_the_latest_changes(
        admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession, tmp_path: Path,
        sim: SimCluster) -> None:
    state_dir = tmp_path / "state"
    first = await start_agent(state_dir=state_dir)
    await admin.create("late")
    await eventually(lambda: first.agent.cache is not None and first.agent.cache.get("default", "late"),
                     what="the pod in the cache")
    await first.stop()  # the persister's final flush, whatever the debounce was waiting for
    await sim.disconnect(NODE, "refuse")
    second = await start_agent(state_dir=state_dir)
    assert "default/late" in names(await get_pods(http, second))


async def test_metrics_and_readyz_show_the_runtime(
        admin: Admin, start_agent: AgentFactory, http: aiohttp.ClientSession) -> None:
    await admin.create("m")
    agent = await start_agent()
    await eventually(lambda: agent.agent.link is not None and agent.agent.link.connected, what="link up")
    await eventually(lambda: agent.agent.cache is not None and agent.agent.cache.get("default", "m"),
                     what="the pod cached")
    async with http.get(agent.url + "/metrics") as response:
        text = await response.text()
    assert "edgeagent_cloud_link_connected 1.0" in text
    assert "edgeagent_cache_pods 1.0" in text
    assert "edgeagent_watch_relists_total 1.0" in text
    async with http.get(agent.url + "/v1/readyz", headers={"Accept": "application/json"}) as response:
        assert response.status == 200


async def test_sd_notify_ready_watchdog_and_stopping(
        start_agent: AgentFactory, tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with NotifyReceiver(path) as receiver:
        notifier = SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000"})
        agent = await start_agent(notifier=notifier)
        assert any(m.startswith("READY=1") for m in receiver.messages()), \
            "READY=1 must be sent once the server listens"
        await eventually(lambda: receiver.messages().count("WATCHDOG=1") >= 2, what="watchdog pings")
        await agent.stop()
        assert any(m.startswith("STOPPING=1") for m in receiver.messages())


def test_non_loopback_bind_is_refused_without_token(tmp_path: Path) -> None:
    cfg = AgentConfig(node_name=NODE, bind="0.0.0.0", state_dir=tmp_path / "s")
    with pytest.raises(AgentError) as caught:
        check_bind(cfg)
    assert caught.value.exit_code == 2
    assert "--token-file" in str(caught.value) and "--insecure-allow-remote" in str(caught.value)


def test_non_loopback_bind_is_allowed_with_a_token_or_the_explicit_opt_out(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    assert check_bind(AgentConfig(node_name=NODE, bind="10.1.2.3", token_file=token)) == "s3cret"
    assert check_bind(AgentConfig(node_name=NODE, bind="0.0.0.0", insecure_allow_remote=True)) is None
    assert check_bind(AgentConfig(node_name=NODE, bind="::1")) is None


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_unreadable_or_empty_token_file_is_a_clear_error(tmp_path: Path, content: str | None) -> None:
    token = tmp_path / "token"
    if content is not None:
        token.write_text(content)
    with pytest.raises(AgentError) as caught:
        check_bind(AgentConfig(node_name=NODE, token_file=token))
    assert caught.value.exit_code == 2
    assert str(token) in str(caught.value)
    assert ("empty" if content is not None else "cannot read") in str(caught.value)


async def test_missing_kubeconfig_is_a_usage_error_before_anything_is_created(tmp_path: Path) -> None:
    """Exit 2, as for a missing --token-file: a file the operator named is not there (issue 22 item 7)."""
    missing = tmp_path / "nope.kubeconfig"
    cfg = AgentConfig(node_name=NODE, kubeconfig=missing, port=0, state_dir=tmp_path / "s")
    with pytest.raises(AgentError) as caught:
        await Agent(cfg, notifier=SdNotifier({})).run()
    assert caught.value.exit_code == 2
    assert str(caught.value) == f"kubeconfig not found: {missing}"
    assert not (tmp_path / "s").exists(), "nothing is created before the configuration is known to be usable"


async def test_port_in_use_is_a_clear_runtime_error(sim: SimCluster, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = AgentConfig(node_name=NODE, kubeconfig=sim.node_kubeconfig(NODE), port=port, state_dir=tmp_path / "s")
        with pytest.raises(AgentError) as caught:
            await Agent(cfg, notifier=SdNotifier({})).run()
    assert caught.value.exit_code == 1
    assert str(caught.value).startswith(f"cannot listen on 127.0.0.1:{port}:")
