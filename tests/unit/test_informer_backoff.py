"""Retry delays grow exponentially up to a cap, with jitter so a fleet of nodes does not retry in lock step."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edgeagent.agent.link.monitor import LinkMonitor, rejected_backoff
from edgeagent.kube.client import KubeClient
from edgeagent.kube.informer import Informer


def test_backoff_doubles_up_to_the_cap_with_jitter_below_each_ceiling() -> None:
    inf = Informer(KubeClient(api_client=None), "/api/v1/pods", backoff_initial=0.2, backoff_max=10.0)
    for attempt, ceiling in [(1, 0.2), (2, 0.4), (3, 0.8), (6, 6.4), (7, 10.0), (50, 10.0)]:
        delays = [inf._backoff(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (attempt, min(delays), max(delays))
        assert len(set(delays)) > 1, "no jitter"


def test_while_credentials_are_rejected_the_backoff_grows_to_a_minute() -> None:
    """Issue 22 item 1: a rejected list/watch is retried up to every 60 s, not every 10 s (docs/operations.md)."""
    inf = Informer(KubeClient(api_client=None), "/api/v1/pods", backoff_initial=0.2, backoff_max=10.0)
    for attempt, ceiling in [(1, 0.2), (7, 12.8), (9, 51.2), (10, 60.0), (50, 60.0)]:
        delays = [inf._backoff(attempt, rejected=True) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (attempt, min(delays), max(delays))


@given(st.integers(min_value=0, max_value=10_000), st.floats(min_value=0.01, max_value=30.0))
def test_rejected_probes_back_off_from_the_interval_doubling_to_the_ceiling(probes: int, interval: float) -> None:
    delay = rejected_backoff(probes, interval, LinkMonitor.REJECTED_PROBE_MAX)
    assert min(interval, LinkMonitor.REJECTED_PROBE_MAX) <= delay <= LinkMonitor.REJECTED_PROBE_MAX
    assert rejected_backoff(probes + 1, interval, LinkMonitor.REJECTED_PROBE_MAX) >= delay
    if probes >= 64:
        assert delay == LinkMonitor.REJECTED_PROBE_MAX
