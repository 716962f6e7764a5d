"""Wires the verified-outcomes half of the agent: verifier, Events reporter, the failure report on the failed
pod's status and (optionally) the auto-upgrader.

One place, so that app.py only asks for the parts and runs their tasks.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from edgeagent.agent.link.cache import PodCache
from edgeagent.agent.link.monitor import LinkMonitor
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.agent.policy.autoupgrade import AutoUpgrader, SitePolicy
from edgeagent.agent.requests.events import EventMetrics, EventReporter
from edgeagent.agent.requests.failure_status import FailurePublisher
from edgeagent.agent.requests.upgrade import UpgradeService
from edgeagent.agent.requests.verifier import Verifier
from edgeagent.agent.state.store import VERIFYING, StateStore
from edgeagent.config import AgentConfig
from edgeagent.kube.client import KubeClient
from edgeagent.kube.informer import Informer


class Outcomes:
    def __init__(self, *, cfg: AgentConfig, client: KubeClient, state: StateStore, informer: Informer,
                 cache: PodCache, link: LinkMonitor, upgrades: UpgradeService, metrics: AgentMetrics,
                 policy: SitePolicy) -> None:
        self.verifier = Verifier(state=state, pods=cache, link=link, ready_timeout=cfg.ready_timeout)
        informer.add_handler(self.verifier.on_pod_change)
        link.add_listener(self.verifier.on_link)
        # A verification needs a live cache: the link monitor probes while requests are verifying (it counts
        # them as waiting), so wake it when one starts.
        state.listeners.append(lambda _before, after: link.notify() if after.state == VERIFYING else None)
        self.events = EventReporter(client=client, state=state, link=link, node_name=cfg.node_name,
                                    request_timeout=cfg.request_timeout, metrics=EventMetrics(metrics.registry))
        link.add_listener(self.events.on_link)
        # The failure that counts (controller, fleet view): on the failed pod's status, which only this node may write.
        self.failures = FailurePublisher(client=client, state=state, pods=cache, link=link, node_name=cfg.node_name,
                                         request_timeout=cfg.request_timeout)
        informer.add_handler(self.failures.on_pod_change)
        link.add_listener(self.failures.on_link)
        self.auto: AutoUpgrader | None = None
        if cfg.auto_upgrade:
            self.auto = AutoUpgrader(upgrades=upgrades, outcomes=self.verifier, policy=policy, pods=cache, link=link,
                                     node_name=cfg.node_name)
            informer.add_handler(self.auto.on_pod_change)

    def tasks(self) -> dict[str, Coroutine[Any, Any, None]]:
        out: dict[str, Coroutine[Any, Any, None]] = {"verifier": self.verifier.run(), "events": self.events.run(),
                                                     "failure-status": self.failures.run()}
        if self.auto is not None:
            out["auto-upgrade"] = self.auto.run()
        return out
