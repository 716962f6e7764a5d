"""CRDs and their objects in the sim's `--dir` state: kept across a restart, and a state whose custom objects lost
their CRD refused with a message rather than half-loaded (sim/persist.py, Store.restore)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.persist import STATE_FILE, StateError
from edgeagent.sim.resources import CUSTOM_RESOURCE_DEFINITIONS
from tests.conftest import fast_sim_config
from tests.support.crd_widget import widget, widget_crd


async def _with_a_widget(directory: Path) -> str:
    sim = SimCluster(fast_sim_config(directory, nodes=1))
    await sim.start()
    try:
        sim.store.create(CUSTOM_RESOURCE_DEFINITIONS, widget_crd())
        widgets = sim.store.registry.resource_for("example.com", "v1", "widgets")
        assert widgets is not None
        created = sim.store.create(widgets, widget("w1", size="large"), namespace="default")
        return str(created["metadata"]["uid"])
    finally:
        await sim.stop()


async def test_crds_and_their_objects_come_back_served(tmp_path: Path) -> None:
    uid = await _with_a_widget(tmp_path / "sim")
    sim = SimCluster(fast_sim_config(tmp_path / "sim", nodes=1))
    await sim.start()
    try:
        widgets = sim.store.registry.resource_for("example.com", "v1", "widgets")
        assert widgets is not None and widgets.custom is not None
        assert sim.store.get(widgets, "default", "w1")["metadata"]["uid"] == uid
        assert "example.com" in sim.store.registry.groups
    finally:
        await sim.stop()


async def test_objects_whose_crd_is_missing_are_refused(tmp_path: Path) -> None:
    await _with_a_widget(tmp_path / "sim")
    with sqlite3.connect(tmp_path / "sim" / STATE_FILE) as db:
        db.execute("DELETE FROM objects WHERE plural = 'customresourcedefinitions'")
    sim = SimCluster(fast_sim_config(tmp_path / "sim", nodes=1))
    with pytest.raises(StateError, match=r"objects of 'widgets.example.com', which no CustomResourceDefinition "
                                         r"defines; nothing was loaded"):
        await sim.start()
