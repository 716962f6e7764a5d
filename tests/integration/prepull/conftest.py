"""Pre-pull tests: the sim, the controller and agents together, over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from edgeagent.kube.client import KubeClient
from edgeagent.kube.informer import DELETED, Informer
from edgeagent.kube.objects import controller_owner, name_of
from tests.integration.agent_api.conftest import agent_factory, http
from tests.integration.controller.conftest import controllers

JSON = dict[str, Any]
JOBS_PATH = "/apis/batch/v1/jobs"

__all__ = ["agent_factory", "controllers", "http"]


@dataclass
class JobRecorder:
    """Watches pre-pull Jobs (and all pods) over HTTP and records, at every Job event, how many exist and where.

    `max_live` / `max_per_node` are the caps as a watcher saw them; `wrong_node` lists Jobs whose pinned node is
    not the node of the pod that owns them.
    """

    client: KubeClient
    created: list[JSON] = field(default_factory=list)
    live: dict[str, str] = field(default_factory=dict)  # job name -> node
    max_live: int = 0
    max_per_node: int = 0
    wrong_node: list[str] = field(default_factory=list)
    pods: dict[str, str] = field(default_factory=dict)  # pod uid -> node

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[JobRecorder]:
        jobs = Informer(self.client, JOBS_PATH, label_selector="edgeagent.io/image-pre-pull=true", name="rec-jobs",
                        backoff_initial=0.05)
        pods = Informer(self.client, "/api/v1/pods", name="rec-pods", backoff_initial=0.05)
        pods.add_handler(self._on_pod)
        jobs.add_handler(self._on_job)
        tasks = [asyncio.create_task(pods.run()), asyncio.create_task(jobs.run())]
        try:
            await asyncio.wait_for(pods.synced.wait(), 10)
            await asyncio.wait_for(jobs.synced.wait(), 10)
            yield self
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _on_pod(self, etype: str, pod: JSON, old: JSON | None) -> None:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if etype != DELETED and node:
            self.pods[str(pod["metadata"]["uid"])] = node

    def _on_job(self, etype: str, job: JSON, old: JSON | None) -> None:
        name = name_of(job)
        if etype == DELETED:
            self.live.pop(name, None)
            return
        node = str(job["spec"]["template"]["spec"].get("nodeName") or "")
        if old is None:
            self.created.append(job)
            owner = controller_owner(job) or {}
            if self.pods.get(str(owner.get("uid"))) != node:
                self.wrong_node.append(name)
        self.live[name] = node
        self.max_live = max(self.max_live, len(self.live))
        per_node: dict[str, int] = {}
        for n in self.live.values():
            per_node[n] = per_node.get(n, 0) + 1
        self.max_per_node = max(self.max_per_node, max(per_node.values(), default=0))
