"""A commit's JSON is encoded once, for the sim's state file and every watcher alike: at 10,000 nodes encoding
it for each cost a tenth of the sim's CPU (py-spy of `bench/rollout_waves.py`'s sim)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.sim import persist, server, store
from edgeagent.sim.persist import STATE_FILE
from tests.conftest import SimFactory

CONFIG_MAPS = "/api/v1/namespaces/default/configmaps"


async def test_a_watched_and_persisted_commit_is_encoded_once(
        sim_factory: SimFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim = await sim_factory(dir=tmp_path / "sim")
    encoded: list[Any] = []
    real_dumps = store.dumps

    def counting(obj: Any) -> bytes:
        if isinstance(obj, dict) and (obj.get("metadata") or {}).get("name") == "once":
            encoded.append(obj)
        return real_dumps(obj)

    for module in (store, persist, server):
        monkeypatch.setattr(module, "dumps", counting)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        rv = (await admin.get(CONFIG_MAPS))["metadata"]["resourceVersion"]
        seen: list[Any] = []

        async def watch() -> None:
            async for event in admin.watch(CONFIG_MAPS, query={"resourceVersion": rv}):
                if event["object"]["metadata"]["name"] == "once":
                    seen.append(event)
                    return

        watcher = asyncio.create_task(watch())
        await admin.create(CONFIG_MAPS, {"metadata": {"name": "once"}, "data": {"a": "1"}})
        async with asyncio.timeout(10):
            await watcher
    # One encoding answers the POST; one more serves the state file and the watch (three before).
    assert len(encoded) == 2, f"encoded {len(encoded)} times"
    [event] = seen
    with sqlite3.connect(tmp_path / "sim" / STATE_FILE) as db:
        [(body,)] = db.execute("SELECT body FROM objects WHERE plural = 'configmaps' AND name = 'once'").fetchall()
    assert json.loads(body) == event["object"]
