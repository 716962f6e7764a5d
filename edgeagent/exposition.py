"""What every edgeagent `/metrics` exposes besides its own series, as Prometheus client conventions expect.

- `edgeagent_build_info{version, component, python}` 1: which build answers, joinable onto any series;
- the standard `process_*` series (CPU seconds, resident memory, open file descriptors, start time) and
  `python_info`, which every Prometheus client library exports for its process;
- no `_created` series: prometheus_client adds one per counter and histogram child, a creation timestamp
  that no dashboard or alert of ours reads and that doubles the series of every counter.

Each agent and controller keeps a private registry (several run in one test process); each gets these.
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Gauge, PlatformCollector, ProcessCollector, disable_created_metrics

from edgeagent import __version__

BUILD_INFO = "edgeagent_build_info"


def new_registry(component: str) -> CollectorRegistry:
    """A registry with the build info, process and platform collectors; `component`: agent, controller, …"""
    # Process-wide in prometheus_client (a module flag read at every scrape): set before the first scrape.
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    info = Gauge(BUILD_INFO, "Always 1: the version of edgeagent (and of Python) this process runs.",
                 ["version", "component", "python"], registry=registry)
    info.labels(__version__, component, platform.python_version()).set(1)
    return registry
