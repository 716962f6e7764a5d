"""Retry delays grow exponentially up to a cap, with jitter so a fleet of nodes does not retry in lock step."""

from __future__ import annotations

from edgeagent.kube.client import KubeClient
from edgeagent.kube.informer import Informer


def test_backoff_doubles_up_to_the_cap_with_jitter_below_each_ceiling() -> None:
    inf = Informer(KubeClient(api_client=None), "/api/v1/pods", backoff_initial=0.2, backoff_max=10.0)
    for attempt, ceiling in [(1, 0.2), (2, 0.4), (3, 0.8), (6, 6.4), (7, 10.0), (50, 10.0)]:
        delays = [inf._backoff(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (attempt, min(delays), max(delays))
        assert len(set(delays)) > 1, "no jitter"
