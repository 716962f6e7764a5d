"""What every edgeagent /metrics carries, and what it does not (issue 38 item 12).

A `total` state beside its parts in `edgeagent_controller_rollout_nodes` made `sum by (state)` count each node
twice; prometheus_client's `_created` series doubled every counter with a timestamp nothing reads; there was
no `edgeagent_build_info` and no `process_*` series, which every Prometheus client exports by convention.
"""

from __future__ import annotations

import re

import pytest

from edgeagent import __version__
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.controller.metrics import ControllerMetrics


def _agent() -> str:
    metrics = AgentMetrics()
    metrics.upgrade_outcome("Started")
    metrics.observe_request("/pods", "GET", 200, 0.001)
    metrics.probe(ok=True)
    return metrics.render()[0].decode()


def _controller() -> str:
    metrics = ControllerMetrics()
    metrics.write("pod_delete")
    metrics.reconcile_seconds.observe(0.01)
    metrics.set_rollout("default", "web", {"total": 3, "updated": 1, "outdated": 2, "unavailable": 1})
    metrics.set_plan("default", "web", 1, 2, "baking")
    return metrics.render()[0].decode()


@pytest.mark.parametrize(("component", "render"), [("agent", _agent), ("controller", _controller)])
def test_build_info_and_process_metrics_and_no_created_series(component: str, render: object) -> None:
    assert callable(render)
    text: str = render()
    info = re.search(r'^edgeagent_build_info\{(.*)\} 1\.0$', text, re.M)
    assert info is not None, text
    assert f'component="{component}"' in info.group(1) and f'version="{__version__}"' in info.group(1)
    for standard in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds",
                     "process_open_fds", "python_info"):
        assert re.search(rf"^{standard}[{{ ]", text, re.M), standard
    assert re.findall(r"^(\w+_created)[{ ]", text, re.M) == []  # `…_jobs_created_total` is a counter, not one


def test_the_rollout_total_is_a_gauge_of_its_own() -> None:
    text = _controller()
    states = re.findall(r'^edgeagent_controller_rollout_nodes\{.*state="(\w+)"\} (\S+)$', text, re.M)
    assert sorted(states) == [("outdated", "2.0"), ("unavailable", "1.0"), ("updated", "1.0")]
    assert 'edgeagent_controller_rollout_desired_nodes{daemonset="web",namespace="default"} 3.0' in text


def test_forgetting_a_daemonset_drops_its_total_too() -> None:
    metrics = ControllerMetrics()
    metrics.set_rollout("default", "web", {"total": 3, "updated": 3, "outdated": 0, "unavailable": 0})
    metrics.forget_rollout("default", "web")
    text = metrics.render()[0].decode()
    assert 'daemonset="web"' not in text


def test_the_rollout_phase_label_is_spelt_as_the_api_spells_it() -> None:
    """`phase` reads as a RolloutPlan's status.phase, `fleet` and `rollout status` write it (one spelling)."""
    text = _controller()
    assert re.search(r'^edgeagent_controller_rollout_phase\{[^}]*phase="Baking"[^}]*\} 1\.0$', text, re.M), text
    labels = set(re.findall(r'^edgeagent_controller_rollout_phase\{[^}]*phase="(\w+)"', text, re.M))
    assert labels == {"Progressing", "Baking", "Paused", "Aborted", "RolledBack", "Complete"}, labels
