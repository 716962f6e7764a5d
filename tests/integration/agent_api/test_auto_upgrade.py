"""`--auto-upgrade` (issue 12): the agent upgrades its own pods whose PodNeedUpgrade is True, one at a time,
the next only after the previous replacement is Ready on the new revision; a replacement that never becomes
Ready stops it and holds the node (AutoUpgradeFailed) until an operator releases it.

Order is taken from a watch on the simulated cluster (what the cloud saw, in its order), not from the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from structlog.testing import capture_logs

from edgeagent.kube.client import KubeClient, Timeouts
from tests.integration.agent_api.conftest import (
    NODE,
    AgentFactory,
    World,
    set_condition,
    wait_cached,
    wait_connected,
)
from tests.support.agent_outcomes import set_image
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

JSON = dict[str, Any]
NAMES = ("ota-a", "ota-b")


def _daemonset(name: str, image: str) -> JSON:
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default", "annotations": {"apps.openyurt.io/update-strategy": "OTA"}},
        "spec": {"selector": {"matchLabels": {"app": name}}, "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": image}]}}},
    }


async def _live_pod(admin: KubeClient, name: str, node: str = NODE) -> JSON | None:
    listing = await admin.get("/api/v1/namespaces/default/pods",
                              query={"fieldSelector": f"spec.nodeName={node}", "labelSelector": f"app={name}"})
    live = [p for p in listing["items"] if not p["metadata"].get("deletionTimestamp")]
    return live[0] if live else None


@dataclass
class Recorder:
    """Every pod watch event the cloud sends, in order."""

    events: list[JSON] = field(default_factory=list)

    def first(self, pred: Any) -> int:
        return next((i for i, e in enumerate(self.events) if pred(e)), -1)


def _ready(pod: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


@contextlib.asynccontextmanager
async def recording(admin: KubeClient) -> AsyncIterator[Recorder]:
    recorder = Recorder()
    rv = (await admin.get("/api/v1/pods"))["metadata"]["resourceVersion"]

    async def run() -> None:
        async for event in admin.watch("/api/v1/pods", query={"resourceVersion": rv}):
            recorder.events.append(event)

    task = asyncio.create_task(run())
    try:
        yield recorder
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


@dataclass
class TwoDaemonSets:
    sim: SimCluster
    admin: KubeClient
    old: dict[str, JSON]  # name -> NODE's pod before the upgrade
    new_hash: dict[str, str]


@contextlib.asynccontextmanager
async def two_ota_daemonsets(sim: SimCluster) -> AsyncIterator[TwoDaemonSets]:
    """Two OTA DaemonSets moved to version 2; only NODE's pods are marked PodNeedUpgrade True."""
    admin = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=5))
    try:
        for name in NAMES:
            await admin.create("/apis/apps/v1/namespaces/default/daemonsets",
                               _daemonset(name, f"registry.local/{name}:1"))
        old: dict[str, JSON] = {}
        for name in NAMES:
            async def running(name: str = name) -> JSON | None:
                pod = await _live_pod(admin, name)
                return pod if pod is not None and _ready(pod) else None

            old[name] = await eventually(running, what=f"{name} running on {NODE}")
            await admin.patch(f"/apis/apps/v1/namespaces/default/daemonsets/{name}",
                              {"spec": {"template": {"spec": {"containers": [
                                  {"name": "app", "image": f"registry.local/{name}:2"}]}}}})
        new_hash: dict[str, str] = {}
        for name in NAMES:
            async def revision(name: str = name) -> str | None:
                items = (await admin.get("/apis/apps/v1/namespaces/default/controllerrevisions",
                                         query={"labelSelector": f"app={name}"}))["items"]
                newest = max(items, key=lambda r: int(r.get("revision", 0)), default=None)
                found = newest["metadata"]["labels"]["controller-revision-hash"] if newest else None
                return found if found != old[name]["metadata"]["labels"]["controller-revision-hash"] else None

            new_hash[name] = await eventually(revision, what=f"{name}'s new revision")
            await set_condition(admin, old[name], "PodNeedUpgrade", "True", f"controllerrevision: {new_hash[name]}")
        yield TwoDaemonSets(sim, admin, old, new_hash)
    finally:
        await admin.close()


async def _requests(http: aiohttp.ClientSession, url: str) -> list[JSON]:
    async with http.get(f"{url}/openyurt.io/v1/upgrades") as resp:
        items: list[JSON] = (await resp.json())["items"]
        return items


def _agent_deleted(sim: SimCluster) -> set[str]:
    return {d["name"] for d in sim.store.deletes if d["resource"] == "pods"}


async def test_auto_upgrade_upgrades_two_daemonsets_one_after_the_other(
        sim: SimCluster, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    async with two_ota_daemonsets(sim) as world, recording(world.admin) as seen:
        agent = await agent_factory(kubeconfig=sim.node_kubeconfig(NODE), auto_upgrade=True, ready_timeout=30)

        async def both_succeeded() -> list[JSON] | None:
            items = await _requests(http, agent.url)
            return items if len(items) == 2 and all(i["state"] == "succeeded" for i in items) else None

        items = await eventually(both_succeeded, timeout=30, what="both automatic upgrades succeeded")
        assert {i["origin"] for i in items} == {"auto"}
        a_old, b_old = world.old["ota-a"], world.old["ota-b"]

        def deleted(pod: JSON) -> Any:
            uid = pod["metadata"]["uid"]
            return lambda e: e["object"]["metadata"]["uid"] == uid and (
                e["type"] == "DELETED" or e["object"]["metadata"].get("deletionTimestamp"))

        def ready_replacement(name: str, old: JSON) -> Any:
            return lambda e: (e["type"] != "DELETED" and e["object"]["metadata"].get("labels", {}).get("app") == name
                              and e["object"]["spec"].get("nodeName") == NODE
                              and e["object"]["metadata"]["uid"] != old["metadata"]["uid"]
                              and e["object"]["metadata"]["labels"].get("controller-revision-hash")
                              == world.new_hash[name] and _ready(e["object"]))

        await eventually(lambda: seen.first(ready_replacement("ota-b", b_old)) >= 0, what="b's replacement seen")
        a_deleted, a_ready = seen.first(deleted(a_old)), seen.first(ready_replacement("ota-a", a_old))
        b_deleted = seen.first(deleted(b_old))
        assert 0 <= a_deleted < a_ready < b_deleted, (a_deleted, a_ready, b_deleted)
        # Only this node's two pods were touched (the pods of the other nodes need no upgrade here).
        assert _agent_deleted(sim) == {a_old["metadata"]["name"], b_old["metadata"]["name"]}


async def test_a_version_that_never_becomes_ready_stops_auto_upgrade_and_holds_the_node(
        sim: SimCluster, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    async with two_ota_daemonsets(sim) as world:
        await set_image(world.admin, "registry.local/ota-a:2", crash=True)
        agent = await agent_factory(kubeconfig=sim.node_kubeconfig(NODE), auto_upgrade=True, ready_timeout=2)
        await wait_connected(agent)

        async def hold() -> JSON | None:
            async with http.get(f"{agent.url}/v1/hold") as resp:
                body: JSON = await resp.json()
            return body if body["held"] and body["reason"] == "AutoUpgradeFailed" else None

        status = await eventually(hold, timeout=30, what="the node held with AutoUpgradeFailed")
        assert status["hold"]["kind"] == "AutoUpgradeFailed" and "CrashLoopBackOff" in status["hold"]["reason"]
        [only] = await _requests(http, agent.url)
        assert (only["name"], only["state"], only["reason"], only["origin"]) == \
            (world.old["ota-a"]["metadata"]["name"], "failed", "CrashLoopBackOff", "auto")
        # It stopped after the first: a while later, ota-b's pod is still the old one, and nothing else was deleted.
        held_at = time.monotonic()
        await eventually(lambda: time.monotonic() > held_at + 1.5, what="a moment with the node held")
        b_now = await _live_pod(world.admin, "ota-b")
        assert b_now is not None and b_now["metadata"]["uid"] == world.old["ota-b"]["metadata"]["uid"]
        assert _agent_deleted(sim) == {world.old["ota-a"]["metadata"]["name"]}
        assert len(await _requests(http, agent.url)) == 1

        # The operator releases the hold: automatic upgrades resume with the next pod.
        async with http.delete(f"{agent.url}/v1/hold") as resp:
            assert resp.status == 200, await resp.text()

        async def b_succeeded() -> bool:
            return any(i["name"] == world.old["ota-b"]["metadata"]["name"] and i["state"] == "succeeded"
                       for i in await _requests(http, agent.url))

        await eventually(b_succeeded, timeout=30, what="ota-b upgraded after the release")


async def test_an_auto_upgrade_that_could_not_be_stored_is_asked_again_not_skipped(
        world: World, agent_factory: AgentFactory, tmp_path: Path) -> None:
    """The soak (issue 23): the cloud's answer to the fresh read did not come (503 here, a timeout there) and the
    request could not be queued either (a full state disk; here another writer holds the database): answered
    ServiceUnavailable, nothing stored. That is for now only: the pod was skipped for its whole revision, so the
    node never caught up. It must be asked again once the state can be written."""
    old = await world.pod()
    await set_condition(world.admin, old, "PodNeedUpgrade", "False", "")
    state = tmp_path / "auto-state"
    with capture_logs() as logs:
        agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), auto_upgrade=True, ready_timeout=30,
                                    state_dir=state)
        await wait_connected(agent)
        await wait_cached(agent, old, need_upgrade="False")
        fault = {"rate": 1, "codes": [503], "durationSeconds": 60, "userAgent": f"({NODE})", "verbs": ["GET"],
                 "path": f"/api/v1/namespaces/default/pods/{old['metadata']['name']}"}
        async with aiohttp.ClientSession() as http, http.post(world.sim.url + "/sim/v1/faults", json=fault) as resp:
            assert resp.status in (200, 201), await resp.text()
        blocker = sqlite3.connect(state / "edgeagent.db", isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            await set_condition(world.admin, old, "PodNeedUpgrade", "True", f"controllerrevision: {world.new_hash}")
            tried = await eventually(
                lambda: [e for e in logs if e.get("event") in ("auto_upgrade_waits", "auto_upgrade_skipped")],
                timeout=30, what="the automatic upgrade answered ServiceUnavailable")
            assert tried[0]["message"].endswith("nothing was queued"), tried
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        async with aiohttp.ClientSession() as http, http.delete(world.sim.url + "/sim/v1/faults") as resp:
            assert resp.status == 200, await resp.text()
        await eventually(lambda: world.replaced(old), timeout=30, what="the pod upgraded once the state is writable")
