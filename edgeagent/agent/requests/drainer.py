"""Applies queued upgrade requests once the cloud is reachable again.

Each entry is re-checked against a fresh read of the pod, because hours may have passed: the pod may
be gone, replaced by the DaemonSet controller (new UID), or no longer need an upgrade — all of which
end `obsolete`, and the replacement is never touched. The delete carries the queued UID as a
precondition, which also makes a retry after a crash mid-entry (left `running`) safe.

A successful delete makes the entry `verifying`: the verifier decides whether it succeeded.
Errors the cloud means (4xx) end `failed` with its message; errors of the moment (5xx, 429, timeouts)
put the entry back to `queued` with exponential backoff, and wait for the link again.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable
from typing import Any, Protocol

from edgeagent import log
from edgeagent.agent.requests.upgrade import Link, UpgradeMetrics, describe_failure, is_retryable, publish_queue_counts
from edgeagent.agent.requests.verifier import record_deleted
from edgeagent.agent.state.store import (
    FAILED,
    OBSOLETE,
    QUEUED,
    RUNNING,
    VERIFYING,
    InvalidTransition,
    StateStore,
    StateUnavailable,
    UnknownRequest,
    UpgradeRequest,
)
from edgeagent.aio import wait_event
from edgeagent.contract import CONDITION_POD_IMAGE_READY, CONDITION_POD_NEED_UPGRADE, image_not_ready
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.objects import condition_is_true, pod_path, uid_of

JSON = dict[str, Any]
_log = log.get("edgeagent.drainer")


class WaitableLink(Link, Protocol):
    async def wait_connected(self) -> None: ...


class OpenGate(Protocol):
    """The site policy as the drainer sees it (SitePolicy satisfies it)."""

    def is_open(self) -> bool: ...


class _Retry(Exception):
    """A transient failure: back to `queued`, try again after a backoff."""


class Drainer:
    """Drains the queue whenever the link is up; bounded concurrency, oldest entries first."""

    def __init__(self, *, client: KubeClient, link: WaitableLink, state: StateStore, node_name: str,
                 request_timeout: float, metrics: UpgradeMetrics | None = None, concurrency: int = 4,
                 poll_interval: float = 1.0, backoff_initial: float = 0.5, backoff_max: float = 60.0,
                 policy: OpenGate | None = None, ready_timeout: float = 300.0) -> None:
        self._client = client
        self._link = link
        self._state = state
        self._node = node_name
        self._timeout = request_timeout
        self._metrics = metrics
        self._concurrency = max(1, concurrency)
        self._poll = poll_interval
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._not_before: dict[str, float] = {}
        # `?when=open` entries wait for the site policy; the policy's listener wakes us when it opens.
        self._policy = policy
        self._ready_timeout = ready_timeout
        self._wake = asyncio.Event()

    def notify(self) -> None:
        """Something changed (new entry, link back): look at the queue now rather than at the next poll."""
        self._wake.set()

    def on_link(self, connected: bool) -> None:
        """A LinkMonitor listener."""
        if connected:
            self._wake.set()

    async def run(self) -> None:
        while True:
            await self._link.wait_connected()
            try:
                await self.drain_once()
            except StateUnavailable as exc:
                _log.error("drain_state_unavailable", error=str(exc))
            self._wake.clear()
            await wait_event(self._wake, self._next_wait())

    def _next_wait(self) -> float:
        if not self._not_before:
            return self._poll
        soonest = min(self._not_before.values()) - time.monotonic()
        return max(0.01, min(self._poll, soonest))

    async def drain_once(self) -> int:
        """Apply every due pending entry once; returns how many were looked at."""
        now = time.monotonic()
        pending = await self._state.pending()
        ids = {e.id for e in pending}
        for stale in [i for i in self._not_before if i not in ids]:
            del self._not_before[stale]  # cancelled or finished elsewhere
        due = [e for e in pending if self._not_before.get(e.id, 0.0) <= now]
        if self._policy is not None and any(e.when_open for e in due) and not self._policy.is_open():
            due = [e for e in due if not e.when_open]
        if not due:
            return 0
        semaphore = asyncio.Semaphore(self._concurrency)

        async def one(entry: UpgradeRequest) -> None:
            async with semaphore:
                if self._link.connected:
                    await self._apply_safely(entry)

        async with asyncio.TaskGroup() as tg:
            for entry in due:  # oldest first: tasks take the semaphore in creation order
                tg.create_task(one(entry))
        await publish_queue_counts(self._state, self._metrics)
        return len(due)

    async def _apply_safely(self, entry: UpgradeRequest) -> None:
        try:
            await self._apply(entry)
        except (InvalidTransition, UnknownRequest) as exc:
            _log.info("drain_entry_skipped", id=entry.id, reason=str(exc))  # cancelled meanwhile
        except StateUnavailable as exc:
            _log.error("drain_entry_unrecorded", id=entry.id, error=str(exc))
            self._not_before[entry.id] = time.monotonic() + self._backoff_initial
        except Exception as exc:  # one bad entry must not stop the others; it is retried later
            _log.exception("drain_entry_error", id=entry.id, error=str(exc))
            self._not_before[entry.id] = time.monotonic() + self._backoff_max

    async def _apply(self, entry: UpgradeRequest) -> None:
        attempts = entry.attempts + 1
        entry = await self._state.set_state(entry.id, RUNNING, "re-checking against the cloud", attempts=attempts)
        try:
            state, message, deleted = await self._decide_and_delete(entry)
        except _Retry as retry:
            delay = self._backoff(attempts)
            self._not_before[entry.id] = time.monotonic() + delay
            await self._state.set_state(entry.id, QUEUED, f"retrying in {delay:.1f}s: {retry}")
            return
        self._not_before.pop(entry.id, None)
        if deleted is not None:
            await record_deleted(self._state, entry.id, deleted, self._ready_timeout, message)
        else:
            await self._state.set_state(entry.id, state, message)
        if self._metrics is not None:
            self._metrics.upgrade_outcome(f"queued_{state}")

    async def _decide_and_delete(self, entry: UpgradeRequest) -> tuple[str, str, JSON | None]:
        """(state, message, the deleted pod or None); after a delete the verifier decides the outcome."""
        path = pod_path(entry.namespace, entry.name)
        try:
            pod = await self._call(self._client.get(path, timeout=self._timeout), f"GET {entry.key}")
        except KubeError as exc:
            if exc.code == 404:
                return OBSOLETE, f"pod {entry.key} no longer exists", None
            return (*self._answered(exc, "reading"), None)
        uid = uid_of(pod)
        if uid != entry.uid:
            return OBSOLETE, (f"pod {entry.key} was replaced (uid {entry.uid} is now {uid}); "
                              "the new pod is not touched"), None
        if not condition_is_true(pod, CONDITION_POD_NEED_UPGRADE):
            return OBSOLETE, (f"pod {entry.key} no longer needs an upgrade "
                              f"({CONDITION_POD_NEED_UPGRADE} is not True)"), None
        image = image_not_ready(pod)
        if image is not None:
            return FAILED, (f"pod {entry.key}: the image of the current version is not ready "
                            f"({CONDITION_POD_IMAGE_READY} {image.get('status')!r} for {image.get('message')!r})"), None
        try:
            await self._call(self._client.delete(path, {"preconditions": {"uid": entry.uid}}, timeout=self._timeout),
                             f"DELETE {entry.key}")
        except KubeError as exc:
            if exc.code == 404:
                return OBSOLETE, f"pod {entry.key} no longer exists", None
            if exc.code == 409:
                return OBSOLETE, f"pod {entry.key} was replaced; the new pod is not touched: {exc.message}", None
            return (*self._answered(exc, "deleting"), None)
        return VERIFYING, (f"Start updating pod {entry.key}: deleted (uid {entry.uid}); waiting for its "
                           "replacement to be Ready on the new revision"), pod

    async def _call(self, call: Awaitable[JSON], what: str) -> JSON:
        """Await a cloud call; unreachability or a transient answer becomes _Retry (after telling the link)."""
        try:
            async with asyncio.timeout(self._timeout + 1.0):  # not wait_for: see edgeagent/aio.py
                result = await call
        except (KubeUnreachable, TimeoutError) as exc:
            reason = f"{what}: {describe_failure(exc)}"
            self._link.report_failure(reason)
            raise _Retry(reason) from exc
        except KubeError as exc:
            if is_retryable(exc):
                raise _Retry(f"{what}: the cloud answered {exc.code}: {exc.message}") from exc
            raise
        return result

    @staticmethod
    def _answered(exc: KubeError, doing: str) -> tuple[str, str]:
        return FAILED, f"the cloud API refused {doing} the pod ({exc.code}): {exc.message}"

    def _backoff(self, attempts: int) -> float:
        base: float = min(self._backoff_max, self._backoff_initial * 2.0 ** max(0, attempts - 1))
        return base * random.uniform(0.8, 1.2)
