"""The request metrics read exactly as prometheus_client's Counter and Histogram did before (issue 15).

`RequestMetrics` replaced them to take the lock and bucket scan out of `GET /pods`; scrapers and
dashboards must not see a difference, so every observation sequence renders the same samples as the
library's own classes fed the same values, less the `_created` series that no edgeagent exposition carries
(issue 38 item 12: prometheus_client's `disable_created_metrics()`).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from edgeagent.agent.request_metrics import DURATION, DURATION_HELP, REQUESTS, REQUESTS_HELP, RequestMetrics

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ROUTES = ("/pods", "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/upgrade", "unmatched")
Observation = tuple[str, str, int, float]

observations = st.lists(st.tuples(
    st.sampled_from(ROUTES), st.sampled_from(("GET", "POST", "HEAD")), st.sampled_from((200, 202, 404, 500)),
    # the bounds themselves (le is inclusive), values between them, and past the last one
    st.one_of(st.sampled_from((0.0, *BUCKETS)), st.floats(min_value=0, max_value=20, allow_nan=False))),
    max_size=40)


def _created_free(text: str) -> list[str]:
    """The exposition without `_created` samples (and their type lines), as the library renders it with
    `disable_created_metrics()` in force."""
    return [line for line in text.splitlines() if not re.match(r"^(# \w+ )?\S+_created\b", line)]


def _render(seen: list[Observation]) -> tuple[str, str]:
    ours = RequestMetrics(BUCKETS)
    mine = CollectorRegistry()
    mine.register(ours)
    theirs = CollectorRegistry()
    counter = Counter(REQUESTS, REQUESTS_HELP, ["path", "method", "code"], registry=theirs)
    histogram = Histogram(DURATION, DURATION_HELP, ["path", "method"], buckets=BUCKETS, registry=theirs)
    for path, method, code, seconds in seen:
        ours.observe(path, method, code, seconds)
        counter.labels(path=path, method=method, code=str(code)).inc()
        histogram.labels(path=path, method=method).observe(seconds)
    return generate_latest(mine).decode(), generate_latest(theirs).decode()


@given(observations)
def test_exposition_is_prometheus_clients(seen: list[Observation]) -> None:
    ours, theirs = _render(seen)
    assert ours.splitlines() == _created_free(theirs)


def test_a_value_on_a_bound_counts_in_that_bucket() -> None:
    ours, _ = _render([("/pods", "GET", 200, 0.001), ("/pods", "GET", 200, 10.0), ("/pods", "GET", 200, 10.5)])
    assert f'{DURATION}_bucket{{le="0.0005",method="GET",path="/pods"}} 0.0' in ours
    assert f'{DURATION}_bucket{{le="0.001",method="GET",path="/pods"}} 1.0' in ours
    assert f'{DURATION}_bucket{{le="10.0",method="GET",path="/pods"}} 2.0' in ours
    assert f'{DURATION}_bucket{{le="+Inf",method="GET",path="/pods"}} 3.0' in ours
    assert f'{REQUESTS}_total{{code="200",method="GET",path="/pods"}} 3.0' in ours


def test_a_recorder_is_resolved_once_and_shares_the_series() -> None:
    metrics = RequestMetrics(BUCKETS)
    hot = metrics.recorder("/pods", "GET", 200)
    assert metrics.recorder("/pods", "GET", 200) is hot
    hot.observe(0.0001)
    metrics.observe("/pods", "GET", 200, 0.0002)
    metrics.observe("/pods", "GET", 500, 0.0003)  # another counter series, the same histogram series
    registry = CollectorRegistry()
    registry.register(metrics)
    text = generate_latest(registry).decode()
    assert f'{REQUESTS}_total{{code="200",method="GET",path="/pods"}} 2.0' in text
    assert f'{REQUESTS}_total{{code="500",method="GET",path="/pods"}} 1.0' in text
    assert f'{DURATION}_count{{method="GET",path="/pods"}} 3.0' in text


def test_buckets_must_increase() -> None:
    with pytest.raises(ValueError, match="increasing and distinct"):
        RequestMetrics((0.1, 0.01))
