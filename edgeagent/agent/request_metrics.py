"""The HTTP request metrics, counted in plain Python numbers and turned into Prometheus families at scrape time.

`GET /pods` is the agent's hot path: local workloads poll it. prometheus_client's `Counter.inc()` and
`Histogram.observe()` take a lock per value and scan the buckets; with the app middleware they cost a
`GET /pods` about 13 % of its throughput under wrk (issue 15). Everything here runs on the event loop's
one thread, so a request adds 1 to an int and bisects a float into a list, and the collector does the
rest when `/metrics` is read. The exposed families are exactly what `Counter`/`Histogram` exposed
(names, labels, buckets), so dashboards do not notice; like every edgeagent series, without `_created`
(edgeagent.exposition).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import cast

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

REQUESTS = "edgeagent_http_requests"
REQUESTS_HELP = "HTTP requests answered, by route, method and code."
DURATION = "edgeagent_http_request_duration_seconds"
DURATION_HELP = "Time to answer an HTTP request, by route and method."

# prometheus_client's own `le` spelling (0.0005, 1.0, +Inf), so the buckets read as Histogram's did.
_go_float = cast(Callable[[float], str], floatToGoString)


class _Count:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class _Latency:
    """One histogram series: per-bucket (not cumulative) counts, the last one for +Inf."""

    __slots__ = ("counts", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * (buckets + 1)
        self.total = 0.0


class RouteRecorder:
    """The series of one (route, method, code), resolved once: what a hot handler keeps and calls."""

    __slots__ = ("_bounds", "_count", "_latency")

    def __init__(self, bounds: Sequence[float], count: _Count, latency: _Latency) -> None:
        self._bounds = bounds
        self._count = count
        self._latency = latency

    def observe(self, seconds: float) -> None:
        self._count.value += 1
        latency = self._latency
        # Prometheus buckets are inclusive (le): a value equal to a bound belongs to that bound's bucket.
        latency.counts[bisect_left(self._bounds, seconds)] += 1
        latency.total += seconds


class RequestMetrics(Collector):
    """`edgeagent_http_requests_total{path,method,code}` and `edgeagent_http_request_duration_seconds{path,method}`.

    Only ever touched from the event loop thread (handlers record, `/metrics` collects), so no lock.
    """

    def __init__(self, buckets: Sequence[float]) -> None:
        if list(buckets) != sorted(set(buckets)):
            raise ValueError(f"histogram buckets must be increasing and distinct: {list(buckets)}")
        self._bounds = tuple(float(b) for b in buckets)
        self._counts: dict[tuple[str, str, int], _Count] = {}
        self._latencies: dict[tuple[str, str], _Latency] = {}
        self._recorders: dict[tuple[str, str, int], RouteRecorder] = {}

    def recorder(self, path: str, method: str, code: int) -> RouteRecorder:
        """`path` must be the route pattern (e.g. `/openyurt.io/v1/namespaces/{namespace}/pods/{name}/upgrade`),
        never the raw URL: one series per pod name would grow without bound."""
        key = (path, method, code)
        found = self._recorders.get(key)
        if found is None:
            count = self._counts.get(key)
            if count is None:
                count = self._counts[key] = _Count()
            latency = self._latencies.get((path, method))
            if latency is None:
                latency = self._latencies[(path, method)] = _Latency(len(self._bounds))
            found = self._recorders[key] = RouteRecorder(self._bounds, count, latency)
        return found

    def observe(self, path: str, method: str, code: int, seconds: float) -> None:
        self.recorder(path, method, code).observe(seconds)

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(REQUESTS, REQUESTS_HELP, labels=("path", "method", "code"))
        for (path, method, code), count in list(self._counts.items()):
            requests.add_metric((path, method, str(code)), count.value)
        yield requests
        duration = HistogramMetricFamily(DURATION, DURATION_HELP, labels=("path", "method"))
        les = [_go_float(b) for b in self._bounds] + ["+Inf"]
        for (path, method), latency in list(self._latencies.items()):
            cumulative, running = [], 0
            for le, n in zip(les, latency.counts, strict=True):
                running += n
                cumulative.append((le, float(running)))
            duration.add_metric((path, method), cumulative, latency.total)
        yield duration
