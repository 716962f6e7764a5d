"""Tells the cloud what happened to each upgrade request: one core/v1 Event on the pod per transition.

Why an outbox in SQLite: a transition decided while the link is down (queued offline, a verdict reached after
the pod was deleted) must still reach the cloud, with the time it happened, after any number of restarts.
So the Event is written in the same transaction as the transition (a `StateStore` transaction hook), and a
sender drains the outbox whenever the link is up. The outbox is bounded: past `capacity` the oldest Events
are dropped and counted (`edgeagent_events_dropped_total`); an upgrade never waits for, or fails because
of, its Events.

Repeats are aggregated the way client-go's event recorder does: an Event with the same involved object,
type, reason and message as one already sent (or still waiting) gets its `count` raised and its
`lastTimestamp` moved (a merge patch) instead of a new object; where the agent may not patch (deploy/
grants only create, since its messages name their request and so never repeat after sending) a new Event
carries the repeat. Event names are `<pod>.<first time in ns, hex>`, like the
recorder's, so a resend after a crash mid-send meets `409 AlreadyExists` and counts as sent.

What reached the cloud and what left the outbox are two steps: the outbox row is taken off after the create,
and that write can fail (a full state disk). The sender then remembers how much of the row is already in the
cloud (`_delivered`), so the next pass sends only what was aggregated since, instead of taking the whole row
for a repeat and raising the Event's count (the soak saw `UpgradeSucceeded` with count 3 that way). After a
restart that memory is gone, and the create's `409` covers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from edgeagent import log
from edgeagent.agent.state.store import (
    CANCELLED,
    FAILED,
    OBSOLETE,
    QUEUED,
    SUCCEEDED,
    VERIFYING,
    StateStore,
    StateUnavailable,
    UpgradeRequest,
)
from edgeagent.aio import wait_event
from edgeagent.contract import (
    COMPONENT_AGENT,
    EVENT_NORMAL,
    EVENT_UPGRADE_CANCELLED,
    EVENT_UPGRADE_FAILED,
    EVENT_UPGRADE_OBSOLETE,
    EVENT_UPGRADE_QUEUED,
    EVENT_UPGRADE_STARTED,
    EVENT_UPGRADE_SUCCEEDED,
    EVENT_WARNING,
)
from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.errors import Conflict, Forbidden, NotFound

JSON = dict[str, Any]
_log = log.get("edgeagent.events")


# Entering a state -> (Event type, reason). `running` is the drainer's re-check, not news for the cloud.
_REASONS = {
    QUEUED: (EVENT_NORMAL, EVENT_UPGRADE_QUEUED),
    VERIFYING: (EVENT_NORMAL, EVENT_UPGRADE_STARTED),
    SUCCEEDED: (EVENT_NORMAL, EVENT_UPGRADE_SUCCEEDED),
    FAILED: (EVENT_WARNING, EVENT_UPGRADE_FAILED),
    OBSOLETE: (EVENT_NORMAL, EVENT_UPGRADE_OBSOLETE),
    CANCELLED: (EVENT_NORMAL, EVENT_UPGRADE_CANCELLED),
}

DEFAULT_CAPACITY = 1000
# Aggregation memory for Events already sent, as the recorder's LRU cache.
_SENT_CACHE = 4096


def event_for(before: UpgradeRequest | None, after: UpgradeRequest) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event a transition deserves, or None.

    `queued` is news only the first time (a drainer retry puts a request back in the queue with attempts
    > 0); every other Event state is entered at most once per request.
    """
    if before is not None and before.state == after.state:
        return None
    found = _REASONS.get(after.state)
    if found is None or (after.state == QUEUED and after.attempts > 0):
        return None
    type_, reason = found
    return type_, reason, f"upgrade request {after.id}: {after.message}"


def _time(ts: float) -> str:
    """metav1.Time: RFC 3339, whole seconds."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class PendingEvent:
    seq: int
    namespace: str
    pod: str
    pod_uid: str
    type: str
    reason: str
    message: str
    first: float
    last: float
    count: int

    @property
    def key(self) -> tuple[str, str, str, str, str, str]:
        return (self.namespace, self.pod, self.pod_uid, self.type, self.reason, self.message)

    def name(self, at: float | None = None) -> str:
        return f"{self.pod}.{int((self.first if at is None else at) * 1e9):x}"


def event_object(ev: PendingEvent, node: str, *, name: str, count: int) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ev.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ev.namespace, "name": ev.pod,
                           "uid": ev.pod_uid},
        "reason": ev.reason,
        "message": ev.message,
        "type": ev.type,
        "source": {"component": COMPONENT_AGENT, "host": node},
        "reportingComponent": COMPONENT_AGENT,
        "reportingInstance": node,
        "firstTimestamp": _time(ev.first),
        "lastTimestamp": _time(ev.last),
        "count": count,
    }


class ReporterLink(Protocol):
    @property
    def connected(self) -> bool: ...

    async def wait_connected(self) -> None: ...

    def report_failure(self, reason: str) -> None: ...


class EventMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.sent = Counter("edgeagent_events_sent", "Upgrade Events written to the cloud (created or count raised).",
                            registry=registry)
        self.dropped = Counter("edgeagent_events_dropped",
                               "Upgrade Events never sent: outbox overflow or refused by the cloud.", ["why"],
                               registry=registry)
        for why in ("overflow", "refused"):
            self.dropped.labels(why=why)
        self.pending = Gauge("edgeagent_events_pending", "Upgrade Events waiting in the outbox for the link.",
                             registry=registry)


class EventReporter:
    """The outbox hook (inside each transition's transaction) and the sender that drains it."""

    def __init__(self, *, client: KubeClient, state: StateStore, link: ReporterLink, node_name: str,
                 request_timeout: float, metrics: EventMetrics | None = None, capacity: int = DEFAULT_CAPACITY,
                 retry_interval: float = 2.0) -> None:
        self._client = client
        self._state = state
        self._link = link
        self._node = node_name
        self._timeout = request_timeout
        self._metrics = metrics
        self._capacity = max(1, capacity)
        self._retry = retry_interval
        self._wake = asyncio.Event()
        # key -> (event name, count in the cloud): the recorder's aggregation memory.
        self._sent: OrderedDict[tuple[str, ...], tuple[str, int]] = OrderedDict()
        # outbox seq -> how much of that row's count is already in the cloud (its removal failed).
        self._delivered: dict[int, int] = {}
        self.sent = 0
        self.dropped = 0
        state.tx_hooks.append(self.store_event)
        state.listeners.append(lambda _before, _after: self._wake.set())

    def on_link(self, connected: bool) -> None:
        if connected:
            self._wake.set()

    # ----------------------------------------------------------------- outbox (state thread)

    def store_event(self, conn: sqlite3.Connection, before: UpgradeRequest | None, after: UpgradeRequest) -> None:
        found = event_for(before, after)
        if found is None:
            return
        type_, reason, message = found
        key = (after.namespace, after.name, after.uid, type_, reason, message)
        row = conn.execute(
            "SELECT seq FROM event_outbox WHERE namespace = ? AND pod = ? AND pod_uid = ? AND type = ? AND reason = ? "
            "AND message = ? ORDER BY seq DESC LIMIT 1", key).fetchone()
        if row is not None:
            conn.execute("UPDATE event_outbox SET count = count + 1, last = ? WHERE seq = ?", (after.updated, row[0]))
            return
        conn.execute(
            "INSERT INTO event_outbox (namespace, pod, pod_uid, type, reason, message, first, last, count) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)", (*key, after.updated, after.updated))
        total = int(conn.execute("SELECT count(*) FROM event_outbox").fetchone()[0])
        if total > self._capacity:
            excess = total - self._capacity
            conn.execute("DELETE FROM event_outbox WHERE seq IN (SELECT seq FROM event_outbox ORDER BY seq LIMIT ?)",
                         (excess,))
            self.dropped += excess
            if self._metrics is not None:
                self._metrics.dropped.labels(why="overflow").inc(excess)
            _log.warning("events_dropped", count=excess, capacity=self._capacity,
                         hint="the outbox is full (link down for long); the oldest Events were dropped")

    async def pending(self) -> list[PendingEvent]:
        return await self._state.read(lambda c: [PendingEvent(*r) for r in c.execute(
            "SELECT seq, namespace, pod, pod_uid, type, reason, message, first, last, count FROM event_outbox "
            "ORDER BY seq")], [])

    async def _remove(self, ev: PendingEvent) -> None:
        """Take what was sent off the outbox; a repeat aggregated into the row meanwhile stays for the next pass."""
        def _tx(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE event_outbox SET count = count - ? WHERE seq = ?", (ev.count, ev.seq))
            conn.execute("DELETE FROM event_outbox WHERE seq = ? AND count <= 0", (ev.seq,))

        await self._state.write(_tx)

    # ----------------------------------------------------------------- sender

    async def run(self) -> None:
        while True:
            await self._link.wait_connected()
            self._wake.clear()
            try:
                done = await self.send_pending()
            except StateUnavailable as exc:
                _log.error("events_outbox_unavailable", error=str(exc))
                done = False
            await wait_event(self._wake, 60.0 if done else self._retry)

    async def send_pending(self) -> bool:
        """Send the outbox oldest first; False when something is left for later (link, cloud overload)."""
        pending = await self.pending()
        if self._metrics is not None:
            self._metrics.pending.set(len(pending))
        rows = {ev.seq for ev in pending}
        for seq in [seq for seq in self._delivered if seq not in rows]:
            del self._delivered[seq]  # removed after all, or dropped by the bound
        for index, ev in enumerate(pending):
            if not self._link.connected:
                return False
            delivered = self._delivered.get(ev.seq, 0)
            try:
                if ev.count > delivered:
                    await self._send(dataclasses.replace(ev, count=ev.count - delivered))
            except (KubeUnreachable, TimeoutError) as exc:
                error = str(exc) or type(exc).__name__
                _log.info("events_send_deferred", error=error, left=len(pending) - index)
                self._link.report_failure(f"creating an Event: {error}")
                return False
            except KubeError as exc:
                if exc.retryable:
                    return False
                # The cloud means it (403 without RBAC for events, 422 invalid): retrying cannot help.
                _log.warning("event_refused", reason=ev.reason, pod=f"{ev.namespace}/{ev.pod}", code=exc.code,
                             error=exc.message)
                self.dropped += 1
                if self._metrics is not None:
                    self._metrics.dropped.labels(why="refused").inc()
            self._delivered[ev.seq] = ev.count
            await self._remove(ev)
            del self._delivered[ev.seq]
            if self._metrics is not None:
                self._metrics.pending.set(len(pending) - index - 1)
        return True

    async def _send(self, ev: PendingEvent) -> None:
        base = f"/api/v1/namespaces/{ev.namespace}/events"
        known = self._sent.get(ev.key)
        async with asyncio.timeout(self._timeout + 1.0):
            if known is None:
                name = ev.name()
            else:
                name, count = known
                try:
                    await self._client.patch(f"{base}/{name}", {"count": count + ev.count,
                                                                "lastTimestamp": _time(ev.last)},
                                             CONTENT_MERGE_PATCH, timeout=self._timeout)
                    self._remember(ev.key, name, count + ev.count)
                    return
                except (Forbidden, NotFound):
                    # Gone (events expire): start a new one, as the recorder does. Not allowed to patch
                    # (deploy/ grants only create: the agent's messages carry the request id, so a repeat
                    # after sending does not happen in its own flow): a new Event keeps the count honest.
                    name = ev.name(at=ev.last)
            # Conflict: already there, sent before a crash took the outbox row's deletion with it.
            with contextlib.suppress(Conflict):
                await self._client.create(base, event_object(ev, self._node, name=name, count=ev.count),
                                          timeout=self._timeout)
        self._remember(ev.key, name, ev.count)

    def _remember(self, key: tuple[str, ...], name: str, count: int) -> None:
        self._sent[key] = (name, count)
        self._sent.move_to_end(key)
        while len(self._sent) > _SENT_CACHE:
            self._sent.popitem(last=False)
        self.sent += 1
        if self._metrics is not None:
            self._metrics.sent.inc()
