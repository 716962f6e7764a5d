"""Events expire: the API server keeps an Event for `--event-ttl` (default 1 h) after its last write.

kube-apiserver stores each Event under an etcd lease of `--event-ttl`, renewed by every create and update, so an
Event disappears an hour after it last changed and watchers see it DELETED. A sim that kept every Event would
grow without bound when left running (a demo cluster for a day, a soak, many benchmark rolls) and would answer
`kubectl get events` with history a real cluster no longer has.

Expiry is not an API request: nothing is admitted, audited or recorded among the store's DELETEs, as etcd
dropping a key is not. Every live write's deadline is its time plus the same TTL, so deadlines arrive in order
and a queue does what a heap would; an Event written again meanwhile leaves a stale entry behind, which is
skipped because its resourceVersion no longer matches.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from edgeagent import log
from edgeagent.kube.objects import meta
from edgeagent.kube.timeutil import parse_time
from edgeagent.sim.resources import EVENTS
from edgeagent.sim.store import Store

JSON = dict[str, Any]

_log = log.get("edgeagent.sim.events")

# After the state file refused an expiry (a full disk): the wait before trying again, the Event kept meanwhile.
RETRY_SECONDS = 5.0

_Due = tuple[float, tuple[str, str], str]  # (deadline on the monotonic clock, (namespace, name), resourceVersion)


def last_written(event: JSON) -> float | None:
    """The latest time an Event says it was written (epoch seconds), or None when it names none.

    Only for Events loaded from an earlier run's state: their lease is not saved (etcd's would be), so the newest
    of the times the writer put in stands in for it.
    """
    series = event.get("series")
    series = series if isinstance(series, dict) else {}
    times = [parse_time(value) for value in (
        meta(event).get("creationTimestamp"), event.get("firstTimestamp"), event.get("lastTimestamp"),
        event.get("eventTime"), series.get("lastObservedTime"),
    )]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def remaining(ttl: float, written: float | None, now: float) -> float:
    """Seconds left of a TTL that started at `written` (epoch seconds); the whole TTL when unknown, never < 0."""
    if written is None:
        return ttl
    return max(0.0, ttl - max(0.0, now - written))


class EventExpiry:
    def __init__(self, store: Store, ttl: float) -> None:
        if ttl <= 0:
            raise ValueError(f"the event TTL must be > 0 seconds, got {ttl}")
        self.store = store
        self.ttl = ttl
        self._due: deque[_Due] = deque()
        self._retry_at = 0.0

    async def run(self) -> None:
        subscription = self.store.open_subscription([EVENTS], copy=False)
        try:
            self._schedule_existing()
            while not subscription.closed:
                for event in subscription.drain():
                    if event.type != "DELETED":
                        self._schedule(time.monotonic() + self.ttl, event.object)
                self.expire_due()
                wake = max(self._due[0][0], self._retry_at) if self._due else None
                timeout = max(0.0, wake - time.monotonic()) if wake is not None else None
                await subscription.wait(timeout)
        finally:
            subscription.close()

    def _schedule_existing(self) -> None:
        """Events already stored (a resumed sim): their TTL runs from their last written time, oldest first."""
        now, wall = time.monotonic(), time.time()
        due = [(now + remaining(self.ttl, last_written(stored.obj), wall), stored.obj)
               for stored in self.store.list_page(EVENTS).items]
        for deadline, obj in sorted(due, key=lambda pair: pair[0]):
            self._schedule(deadline, obj)

    def _schedule(self, deadline: float, obj: JSON) -> None:
        metadata = meta(obj)
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        self._due.append((deadline, key, str(metadata.get("resourceVersion") or "")))

    def expire_due(self) -> int:
        """Drop every Event whose deadline has passed and that was not written since; returns how many."""
        now = time.monotonic()
        dropped = 0
        while now >= self._retry_at and self._due and self._due[0][0] <= now:
            _, (namespace, name), resource_version = self._due[0]
            try:
                gone = self.store.expire(EVENTS, namespace, name, resource_version)
            except Exception as exc:  # the state file refused the write: the Event stays, as etcd's key would
                self._retry_at = now + RETRY_SECONDS
                _log.warning("events_expiry_retrying", error=str(exc), retry_seconds=RETRY_SECONDS)
                break
            self._due.popleft()
            dropped += gone
        if dropped:
            _log.debug("events_expired", count=dropped, ttl=self.ttl)
        return dropped
