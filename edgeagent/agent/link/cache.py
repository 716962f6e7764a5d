"""The node's pod cache: what `GET /pods` serves and what the upgrade service checks while offline.

The informer holds the objects; this adds the two things the agent needs on top. The encoded `PodList`
is built at most once per change (lazily, on the first read after it), so the hot path is a bytes
lookup however often it is polled. The snapshot is written to the state store debounced (one write per
`persist_interval` at most, plus a final one on shutdown): a burst of watch events costs one fsync, and
the write runs on the store's own thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from edgeagent import log
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.agent.state.episodes import Episode, retry_delay
from edgeagent.agent.state.store import StateStore, StateUnavailable
from edgeagent.kube.informer import Informer

JSON = dict[str, Any]

_log = log.get("edgeagent.cache")


class PodCache:
    def __init__(
        self,
        informer: Informer,
        state: StateStore,
        node_name: str,
        *,
        persist_interval: float = 0.5,
        metrics: AgentMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._informer = informer
        self._state = state
        self.node_name = node_name
        self._persist_interval = persist_interval
        self._metrics = metrics
        self._encoded: bytes | None = None
        self._dirty = asyncio.Event()
        self._last_write = -math.inf  # monotonic() may be small after boot: the first write is never delayed
        self._clock = clock
        self._sleep = sleep
        # A failing disk is retried with backoff and logged once per episode (plus reminders), not per try.
        self._failures = Episode()
        self._retry_at = -math.inf
        self.snapshot_writes = 0
        self.snapshot_attempts = 0
        informer.add_handler(self._on_change)

    # ----------------------------------------------------------------- reads

    def get(self, namespace: str, name: str) -> JSON | None:
        return self._informer.items.get(f"{namespace}/{name}")

    def pods(self) -> list[JSON]:
        """This node's pods, ordered by namespace/name."""
        items = self._informer.items
        return [items[k] for k in sorted(items)]

    def podlist_bytes(self) -> bytes:
        """The encoded v1 PodList; re-encoded only when something changed since the last call."""
        encoded = self._encoded
        if encoded is None:
            body = {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": self._informer.resource_version},
                "items": self.pods(),
            }
            encoded = json.dumps(body, separators=(",", ":")).encode()
            self._encoded = encoded
            if self._metrics is not None:
                self._metrics.cache_rebuilds.inc()
        return encoded

    # ----------------------------------------------------------------- persistence

    async def run(self) -> None:
        """Persist the snapshot after changes, at most once per `persist_interval`; flush when cancelled."""
        try:
            while True:
                await self._dirty.wait()
                wait = self.next_write_at() - self._clock()
                if wait > 0:
                    await self._sleep(wait)
                await self.flush()
        finally:
            if self._dirty.is_set():
                # Shutdown: the last changes must reach the disk so a restart offline serves them.
                try:
                    await self.flush()
                except Exception:
                    _log.exception("final_pod_snapshot_not_saved")

    def next_write_at(self) -> float:
        """When `run` writes next (clock time): after the debounce interval, and after a failure's backoff."""
        return max(self._last_write + self._persist_interval, self._retry_at)

    async def flush(self) -> None:
        """Write the snapshot now if anything changed since the last write."""
        if not self._dirty.is_set():
            return
        self._dirty.clear()
        pods = self.pods()
        rv = self._informer.resource_version
        now = self._last_write = self._clock()
        self.snapshot_attempts += 1
        try:
            await self._state.save_snapshot(pods, rv)
        except StateUnavailable as exc:
            # Keep serving from memory; retry with backoff, and say so once per episode (plus reminders).
            self._dirty.set()
            delay = retry_delay(self._failures.failures + 1)
            self._retry_at = now + delay
            if self._failures.failed(now):
                _log.warning("pod_snapshot_not_saved", error=str(exc), pods=len(pods),
                             failures=self._failures.failures, retry_in=delay,
                             hint="retrying with backoff; repeated every 10 min while it lasts")
            if self._metrics is not None:
                self._metrics.snapshot_writes.labels(result="failed").inc()
            return
        self._retry_at = -math.inf
        failures = self._failures.succeeded()
        if failures:
            _log.info("pod_snapshot_saved_again", failed_attempts=failures)
        self.snapshot_writes += 1
        if self._metrics is not None:
            self._metrics.snapshot_writes.labels(result="ok").inc()

    def _on_change(self, _type: str, _obj: JSON, _old: JSON | None) -> None:
        self._encoded = None
        self._dirty.set()
        if self._metrics is not None:
            self._metrics.cache_pods.set(len(self._informer.items))
