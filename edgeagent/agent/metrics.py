"""The agent's Prometheus metrics, on a private registry.

A private `CollectorRegistry` (not the process-global default) so that several agents in one test
process, or a restarted agent, never collide on metric names. Informer counters are read at scrape
time through a collector instead of being pushed, so the informer stays free of metrics code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client import Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from edgeagent.agent.request_metrics import RequestMetrics
from edgeagent.agent.state.store import STATES
from edgeagent.exposition import new_registry
from edgeagent.kube.client import CredentialHealth
from edgeagent.kube.informer import Informer

# Latency buckets for a loopback API answering from memory: most answers are well under a millisecond,
# upgrades wait on the cloud for up to the upgrade timeout.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _InformerCollector(Collector):
    def __init__(self, informer: Informer) -> None:
        self._informer = informer

    def collect(self) -> Iterable[Metric]:
        inf = self._informer
        restarts = CounterMetricFamily("edgeagent_watch_restarts", "Watch streams re-established after they ended.")
        restarts.add_metric([], inf.watch_restarts)
        yield restarts
        relists = CounterMetricFamily("edgeagent_watch_relists", "Full lists of the pods (start-up, 410 Gone).")
        relists.add_metric([], inf.relists)
        yield relists
        healthy = GaugeMetricFamily("edgeagent_watch_healthy", "1 while the last list/watch call succeeded.")
        healthy.add_metric([], 1.0 if inf.healthy else 0.0)
        yield healthy


class _Status(Protocol):
    @property
    def held(self) -> bool: ...
    @property
    def reason(self) -> str: ...


class _HeldCollector(Collector):
    """`edgeagent_node_held{reason}` read from the site policy at scrape time: a hold that ends by itself (a
    window opening, an `until` passing) shows without anyone having to push it."""

    def __init__(self, status: Callable[[], _Status]) -> None:
        self._status = status

    def collect(self) -> Iterable[Metric]:
        status = self._status()
        held = GaugeMetricFamily("edgeagent_node_held",
                                 "1 while the node is held (operator hold, outside every maintenance window, or "
                                 "AutoUpgradeFailed); the reason label is the UpgradeHeld reason.",
                                 labels=["reason"])
        held.add_metric([status.reason], 1.0 if status.held else 0.0)
        yield held


class _CallbackGauge(Collector):
    def __init__(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        self._name = name
        self._doc = documentation
        self._read = read

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(self._name, self._doc)
        gauge.add_metric([], float(self._read()))
        yield gauge


class _CallbackCounter(Collector):
    def __init__(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        self._name = name
        self._doc = documentation
        self._read = read

    def collect(self) -> Iterable[Metric]:
        counter = CounterMetricFamily(self._name, self._doc)
        counter.add_metric([], float(self._read()))
        yield counter


def outcome_label(word: str) -> str:
    """One label style for every value: `ServiceUnavailable` -> `service_unavailable`, `queued_failed` as it is."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", word).lower()


class AgentMetrics:
    """Every metric the agent exposes at `/metrics`; components record through the methods below."""

    def __init__(self) -> None:
        self.registry = new_registry("agent")
        r = self.registry
        self.requests = RequestMetrics(_LATENCY_BUCKETS)
        r.register(self.requests)
        self.cache_pods = Gauge("edgeagent_cache_pods", "Pods bound to this node held in the local cache.",
                                registry=r)
        self.cache_rebuilds = Counter("edgeagent_cache_podlist_encodes",
                                      "Times the PodList served by GET /pods was re-encoded after a change.",
                                      registry=r)
        self.snapshot_writes = Counter("edgeagent_snapshot_writes", "Pod snapshots written to the state store.",
                                       ["result"], registry=r)
        self.link_connected = Gauge("edgeagent_cloud_link_connected", "1 while the cloud API counts as reachable.",
                                    registry=r)
        self.link_transitions = Counter("edgeagent_cloud_link_transitions",
                                        "Changes of the cloud link state, by the state entered.", ["to"], registry=r)
        self.link_probes = Counter("edgeagent_cloud_link_probes", "Cloud link probes, by result.", ["result"],
                                   registry=r)
        self.queue_entries = Gauge("edgeagent_upgrade_queue_entries", "Upgrade requests in the queue, by state.",
                                   ["state"], registry=r)
        self.upgrades = Counter("edgeagent_upgrades", "Upgrade requests by outcome: the answer (started, queued, "
                                "not_found, ...) or, for a queued request once applied, queued_<state>.",
                                ["outcome"], registry=r)
        self.image_pulls = Counter("edgeagent_image_pulls", "Image pre-pull requests (POST .../imagepull) by outcome "
                                   "(requested, forbidden, not_found, ...).", ["outcome"], registry=r)
        for state in STATES:
            self.queue_entries.labels(state=state).set(0)
        self.link_connected.set(0)

    # ----------------------------------------------------------------- wiring

    def track_informer(self, informer: Informer) -> None:
        """Expose the informer's watch restarts, relists and health, read at scrape time."""
        self.registry.register(_InformerCollector(informer))

    def track_gauge(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        self.registry.register(_CallbackGauge(name, documentation, read))

    def track_counter(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A counter kept elsewhere (`name` without `_total`), read at scrape time."""
        self.registry.register(_CallbackCounter(name, documentation, read))

    def track_policy(self, status: Callable[[], _Status]) -> None:
        self.registry.register(_HeldCollector(status))

    def track_credentials(self, credentials: CredentialHealth) -> None:
        self.track_gauge("edgeagent_kube_credentials_rejected",
                         "1 while the API server rejects the agent's credentials (401; a 403 refuses one action).",
                         lambda: 1.0 if credentials.rejected else 0.0)
        self.track_counter("edgeagent_kube_credential_rejections",
                           "API responses that rejected the agent's credentials.",
                           lambda: float(credentials.rejections))

    # ----------------------------------------------------------------- recording

    def observe_request(self, path: str, method: str, code: int, seconds: float) -> None:
        """`path` must be the route pattern, never the raw URL (see `RequestMetrics.recorder`)."""
        self.requests.observe(path, method, code, seconds)

    def upgrade_outcome(self, outcome: str) -> None:
        """`outcome`: an answer's status word (`NotFound`) or `queued_<state>`; counted in snake_case."""
        self.upgrades.labels(outcome=outcome_label(outcome)).inc()

    def image_pull_outcome(self, outcome: str) -> None:
        """An image pre-pull answer's status word; a request is `requested`, not an upgrade."""
        label = outcome_label(outcome)
        self.image_pulls.labels(outcome="requested" if label == "image_pull_requested" else label).inc()

    def set_queue_counts(self, counts: Mapping[str, int]) -> None:
        """Replace the per-state queue gauge; states not mentioned are 0."""
        for state in set(STATES) | set(counts):
            self.queue_entries.labels(state=state).set(counts.get(state, 0))

    def set_link(self, connected: bool, *, transition: bool) -> None:
        self.link_connected.set(1 if connected else 0)
        if transition:
            self.link_transitions.labels(to="connected" if connected else "disconnected").inc()

    def probe(self, ok: bool) -> None:
        self.link_probes.labels(result="ok" if ok else "failed").inc()

    def render(self) -> tuple[bytes, str]:
        """(body, content type) in the classic 0.0.4 text format, which every Prometheus version scrapes."""
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4
