"""Applies queued upgrade requests once the cloud is reachable again.

Each entry is re-checked against a fresh read of the pod, because hours may have passed: the pod may
be gone, replaced by the DaemonSet controller (new UID), or no longer need an upgrade — all of which
end `obsolete`, and the replacement is never touched. The delete carries the queued UID as a
precondition, which also makes a retry after a crash mid-entry (left `running`) safe.

The read, the checks and the delete are guarded.py's, the same as an online request's. A successful delete
makes the entry `verifying`: the verifier decides whether it succeeded.
Errors the cloud means (4xx) end `failed` with its message; errors of the moment (5xx, 429, timeouts)
put the entry back to `queued` with exponential backoff, and wait for the link again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from edgeagent import backoff, log
from edgeagent.agent.requests.guarded import GuardedDelete, PodLookup, Refusal, Result
from edgeagent.agent.requests.upgrade import Link, UpgradeMetrics, publish_queue_counts
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
from edgeagent.kube.client import KubeClient

JSON = dict[str, Any]
_log = log.get("edgeagent.drainer")


class WaitableLink(Link, Protocol):
    async def wait_connected(self) -> None: ...


class OpenGate(Protocol):
    """The site policy as the drainer sees it (SitePolicy satisfies it)."""

    def is_open(self) -> bool: ...


# `_decide_and_delete`'s word for a request recorded in place (it then verifies like a delete, on the same pod).
REQUESTED_IN_PLACE = "requested-in-place"


class _Retry(Exception):
    """A transient failure: back to `queued`, try again after a backoff."""


# How a queued request ends when its pod was not deleted. Gone, replaced, no longer in need of an upgrade or
# already being deleted: `obsolete`, the request has nothing left to do. Refused for a reason that stays true
# (the image is not ready, the cloud said no): `failed`, with the reason.
_ENDS: dict[tuple[Result, Refusal | None], str] = {
    (Result.GONE, None): OBSOLETE,
    (Result.REPLACED, None): OBSOLETE,
    (Result.REFUSED, Refusal.NOT_NEEDED): OBSOLETE,
    (Result.REFUSED, Refusal.TERMINATING): OBSOLETE,
    (Result.REFUSED, Refusal.IMAGE_NOT_READY): FAILED,
    (Result.REFUSED, Refusal.OTHER_NODE): FAILED,
    (Result.REFUSED, Refusal.NOT_A_DAEMONSET_POD): FAILED,
    (Result.REFUSED, Refusal.CLOUD): FAILED,
    # Not in this node's cache and not readable by it (Kubernetes >= 1.36): gone from this node, as a 404 says.
    (Result.REFUSED, Refusal.NOT_VISIBLE): OBSOLETE,
}


class Drainer:
    """Drains the queue whenever the link is up; bounded concurrency, oldest entries first."""

    def __init__(self, *, client: KubeClient, link: WaitableLink, state: StateStore, node_name: str,
                 request_timeout: float, metrics: UpgradeMetrics | None = None, concurrency: int = 4,
                 poll_interval: float = 1.0, backoff_initial: float = 0.5, backoff_max: float = 60.0,
                 policy: OpenGate | None = None, ready_timeout: float = 300.0, cache: PodLookup | None = None) -> None:
        self._client = client
        self._cache = cache
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
            await record_deleted(self._state, entry.id, deleted, self._ready_timeout, message,
                                 in_place=state == REQUESTED_IN_PLACE)
        else:
            await self._state.set_state(entry.id, state, message)
        if self._metrics is not None:
            self._metrics.upgrade_outcome(f"queued_{VERIFYING if state == REQUESTED_IN_PLACE else state}")

    async def _decide_and_delete(self, entry: UpgradeRequest) -> tuple[str, str, JSON | None]:
        """(state, message, the deleted pod or None); after a delete the verifier decides the outcome."""
        guard = GuardedDelete(self._client, self._link, entry.namespace, entry.name, node_name=self._node,
                              timeout=lambda: self._timeout, expected_uid=entry.uid, queued=True, cache=self._cache)
        deletion = await guard.run()
        if deletion.result is Result.TRANSIENT or deletion.refusal is Refusal.PLAN_NOT_CAUGHT_UP:
            # Not yet (the controller has not caught up with its DaemonSet's change): wait, like a cloud that
            # cannot take it now.
            raise _Retry(deletion.message)
        if deletion.result is Result.DELETED:
            return VERIFYING, deletion.message, deletion.pod
        if deletion.result is Result.REQUESTED:
            return REQUESTED_IN_PLACE, deletion.message, deletion.pod
        return _ENDS[deletion.result, deletion.refusal], deletion.message, None

    def _backoff(self, attempts: int) -> float:
        delay = backoff.exponential(max(1, attempts), initial=self._backoff_initial, cap=self._backoff_max)
        return backoff.jittered(delay, low=0.8, high=1.2)
