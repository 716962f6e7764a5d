"""Audit additions for AdvancedRollingUpdate planning (issue 4): node order that does not depend on the order
the cache hands pods over, nor on pod names."""

from __future__ import annotations

import random
from typing import Any

from edgeagent.controller.rolling import plan_rolling_update
from edgeagent.controller.settings import roll_settings
from edgeagent.rollout.listing import Listed
from edgeagent.rollout.status import build_status
from tests.unit.test_controller_objects import T0, daemonset, node, pod, revision

JSON = dict[str, Any]
ARU = {"apps.openyurt.io/update-strategy": "AdvancedRollingUpdate"}


def _shuffled_cluster(seed: int) -> tuple[dict[str, JSON], list[JSON]]:
    """Ten nodes whose pods' names sort the other way round, handed over in a random order."""
    nodes = {f"n{i:02d}": node(f"n{i:02d}") for i in range(10)}
    pods = [pod(f"{chr(ord('z') - i)}-pod", f"n{i:02d}", "old") for i in range(10)]
    random.Random(seed).shuffle(pods)
    return nodes, pods


def test_deletions_follow_node_names_whatever_order_the_cache_gives() -> None:
    ds = daemonset(annotations={**ARU, "apps.openyurt.io/max-unavailable": "3"})
    settings, problems = roll_settings(ds)
    assert problems == []
    for seed in range(5):
        nodes, pods = _shuffled_cluster(seed)
        plan = plan_rolling_update(ds, pods, nodes, "new", settings, T0)
        assert [p["spec"]["nodeName"] for p in plan.delete] == ["n00", "n01", "n02"], seed


def test_rollout_status_rows_are_in_node_name_order() -> None:
    ds = daemonset(annotations=ARU)
    nodes, pods = _shuffled_cluster(7)
    listed = Listed(daemonsets=[ds], pods=pods, nodes=list(nodes.values())[::-1], events=[],
                    revisions=[revision(ds, "new", 2)])
    status = build_status(listed, "default", "web", T0)
    assert [row.node for row in status.rows] == sorted(nodes)
