"""Decides whether the cloud API counts as reachable, from evidence rather than assumption.

A partition usually looks like a connection that hangs, not one that is refused, so the monitor
probes with a short timeout and decides with hysteresis: `failures_to_disconnect` consecutive failures
cut the link, `successes_to_connect` consecutive successes restore it, so one lost packet neither
queues every upgrade nor does one lucky probe start a drain into a dead link. Failures reported by
other components (an upgrade DELETE that timed out) count like failed probes, and the informer losing
its watch triggers an immediate probe instead of waiting for the next tick.

The probe reads this node's Lease: it needs only the permissions a node already has, and any answer
below 500 (even 403/404) proves the API server is reachable and serving.

Probes cost link bytes (a Lease read every 2 s is ~1.8 MB an hour on a metered edge link), and they only
matter when something waits for the cloud. So when the monitor has an informer and a queue to ask, it
probes only while the link counts as down, the watch is failing, a failure was reported, or the queue
holds entries; otherwise the healthy watch stream is the liveness signal and the monitor sleeps until
one of those changes. A cut that happens while nothing waits is therefore noticed by the watch (its idle
deadline) or by the first request that times out, not by a probe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from edgeagent import backoff, log
from edgeagent.agent.metrics import AgentMetrics
from edgeagent.aio import wait_event
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.errors import NotFound, ServerError
from edgeagent.kube.informer import Informer
from edgeagent.kube.kubeconfig import FileWatch
from edgeagent.kube.timeutil import format_micro_time

_log = log.get("edgeagent.link")

LEASE_NAMESPACE = "kube-node-lease"


def _iso(ts: float | None) -> str | None:
    return None if ts is None else format_micro_time(ts)


def rejected_backoff(probes: int, interval: float, cap: float) -> float:
    """Seconds before the next probe after `probes` rejected ones in a row: interval, doubling, at most cap."""
    return backoff.exponential(max(probes, 1), initial=interval, cap=cap)


class LinkMonitor:
    # While the link is down, probe at least this often: queued upgrades wait for the link's return to
    # be noticed, and a failed probe is cheap (refused at once, or bounded by the probe timeout).
    RECONNECT_PROBE_INTERVAL = 0.5
    # While the API server rejects our credentials a probe only repeats the rejection: probes back off from
    # `interval`, doubling, to this ceiling. A credential file that changes is tried at once (watch_credentials).
    REJECTED_PROBE_MAX = 60.0
    # How often credential files are looked at (a stat each) for a rotation made while nothing calls the cloud.
    CREDENTIAL_CHECK_INTERVAL = 1.0

    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        *,
        interval: float,
        timeout: float,
        failures_to_disconnect: int,
        successes_to_connect: int,
        informer: Informer | None = None,
        metrics: AgentMetrics | None = None,
        queued: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        if failures_to_disconnect < 1 or successes_to_connect < 1:
            raise ValueError("failures_to_disconnect and successes_to_connect must be >= 1")
        self._client = client
        self._node = node_name
        self._interval = interval
        self._timeout = timeout
        self._failures_needed = failures_to_disconnect
        self._successes_needed = successes_to_connect
        self._informer = informer
        self._metrics = metrics
        # How many requests wait for the link. With an informer too, an idle link is not probed at all.
        self._queued = queued
        self.probes = 0
        self.probing = True
        self._probe_path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{node_name}"
        # False once the API server said this node has no Lease (a --node-name the cluster does not know:
        # the agent would serve an empty node for ever); None until a probe was answered.
        self.node_known: bool | None = None
        # Start disconnected: until a probe proves otherwise, an upgrade is queued rather than left hanging.
        self.connected: bool = False
        self._connected_event = asyncio.Event()
        self._wake = asyncio.Event()
        self._listeners: list[Callable[[bool], None]] = []
        self.consecutive_failures = 0
        self.consecutive_successes = 0
        # Probes answered with a rejection of our credentials, in a row (for the backoff).
        self.rejected_probes = 0
        # Set when credential files changed: probe once even if nothing else asks for it.
        self._verify = False
        self.transitions = 0
        self.reported_failures = 0
        self._since = time.time()
        self._last_probe_at: float | None = None
        self._last_probe_ok: bool | None = None
        self._last_error = ""
        self._last_latency: float | None = None
        if informer is not None:
            informer.add_health_listener(self._on_informer_health)
        if metrics is not None:
            metrics.set_link(False, transition=False)
            metrics.track_credentials(client.credentials)

    # ----------------------------------------------------------------- public API

    async def wait_connected(self) -> None:
        await self._connected_event.wait()

    def add_listener(self, fn: Callable[[bool], None]) -> None:
        """`fn(connected)` is called synchronously on every transition."""
        self._listeners.append(fn)

    def report_failure(self, reason: str) -> None:
        """A cloud call elsewhere timed out or found the API unreachable: count it as a failed probe."""
        self.reported_failures += 1
        self._record(False, f"reported: {reason}")
        self._wake.set()

    def problems(self) -> list[str]:
        """Why the agent is degraded though it serves: what an operator must fix, one phrase each."""
        found: list[str] = []
        creds = self._client.credentials
        if creds.rejected:
            found.append(f"credentials rejected by the API server ({creds.last_error})")
        refused = self._informer.refused if self._informer is not None else None
        if refused is not None and refused.code == 403:
            found.append(f"the API server refuses this node's pod list/watch ({refused.code}: {refused.message}); "
                         "the cache is not updated")
        if self.node_known is False:
            found.append(f"node {self._node!r} is not known to the cluster (no Lease {LEASE_NAMESPACE}/{self._node}; "
                         "check --node-name)")
        return found

    def notify(self) -> None:
        """Something now waits for the link (an entry was queued): decide at once whether to probe."""
        self._wake.set()

    def credentials_changed(self) -> None:
        """New credential files on disk: try them now (also on an idle link), without any rejection backoff."""
        self._verify = True
        self.rejected_probes = 0
        if self._informer is not None and not self._informer.healthy:
            self._informer.kick()  # a refused watch retries with them too, rather than after its backoff
        self._wake.set()

    async def watch_credentials(self) -> None:
        """Look at the credential files every CREDENTIAL_CHECK_INTERVAL; a change gets a probe at once.

        An idle agent makes no call for minutes (its watch stays open), so a rotation to a credential the
        server refuses would otherwise show only when the watch reconnects; and while rejected, the probe's
        backoff would delay recovery from a renewed one by up to REJECTED_PROBE_MAX.
        """
        paths = self._client.credential_files()
        if not paths:
            return
        files = FileWatch(paths, interval=0.0)
        while True:
            await asyncio.sleep(self.CREDENTIAL_CHECK_INTERVAL)
            if files.changed():
                _log.info("credential_files_changed", node=self._node)
                self.credentials_changed()

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "connected": self.connected,
            "since": _iso(self._since),
            "probe": {
                "path": self._probe_path,
                "active": self.probing,
                "count": self.probes,
                "interval_seconds": self._interval,
                "timeout_seconds": self._timeout,
                "last_at": _iso(self._last_probe_at),
                "last_ok": self._last_probe_ok,
                "last_error": self._last_error or None,
                "last_latency_ms": None if self._last_latency is None else round(self._last_latency * 1000, 3),
            },
            "consecutive_failures": self.consecutive_failures,
            "consecutive_successes": self.consecutive_successes,
            "failures_to_disconnect": self._failures_needed,
            "successes_to_connect": self._successes_needed,
            "transitions": self.transitions,
            "reported_failures": self.reported_failures,
        }
        out["node"] = {"name": self._node, "known": self.node_known}
        creds = self._client.credentials
        out["credentials"] = {
            "rejected": creds.rejected,
            "last_error": creds.last_error or None,
            "since": _iso(creds.since),
            "rejections": creds.rejections,
        }
        if self._informer is not None:
            out["watch"] = {
                "healthy": self._informer.healthy,
                "synced": self._informer.synced.is_set(),
                "resource_version": self._informer.resource_version,
                "last_error": self._informer.last_error or None,
            }
        return out

    async def run(self) -> None:
        """Probe every `interval` while probing is needed (at once when woken; faster while down)."""
        while True:
            self._wake.clear()
            verify, self._verify = self._verify, False
            if not verify and not await self._needs_probe():
                if self.probing:
                    _log.info("link_probes_paused", node=self._node, why="the watch is healthy and nothing is queued")
                self.probing = False
                await self._wake.wait()
                continue
            if not self.probing:
                _log.info("link_probes_resumed", node=self._node, watch_healthy=self._watch_healthy())
            self.probing = True
            ok, error = await self._probe()
            self._record(ok, error)
            pause = self._interval if self.connected else min(self._interval, self.RECONNECT_PROBE_INTERVAL)
            if self._refused():
                self.rejected_probes += 1
                pause = rejected_backoff(self.rejected_probes, self._interval, self.REJECTED_PROBE_MAX)
            else:
                self.rejected_probes = 0
            await wait_event(self._wake, pause)

    # ----------------------------------------------------------------- internals

    def _refused(self) -> bool:
        """Our credentials are rejected (401), or the watch is refused (403): a probe or a kick every interval
        only repeats the refusal, so both back off (to REJECTED_PROBE_MAX, like the watch)."""
        return self._client.credentials.rejected or (self._informer is not None and self._informer.refused is not None)

    def _kick_helps(self, informer: Informer) -> bool:
        """Whether an answered probe is news to an unhealthy watch: not if it was refused and still would be."""
        refused = informer.refused
        return refused is None or (refused.code == 401 and not self._client.credentials.rejected)

    def _watch_healthy(self) -> bool:
        return self._informer is not None and self._informer.healthy

    async def _needs_probe(self) -> bool:
        """Whether anything but a probe can vouch for the link right now (see the module docstring)."""
        if self._informer is None or self._queued is None:
            return True  # no other liveness signal, or no way to know whether something waits
        if not self.connected or self.consecutive_failures > 0 or not self._informer.healthy:
            return True
        return await self._queued() > 0

    def _on_informer_health(self, healthy: bool) -> None:
        # Unhealthy: probe at once. Healthy: a sleeping monitor re-decides (and may stop probing).
        self._wake.set()

    async def _probe(self) -> tuple[bool, str]:
        started = time.monotonic()
        self.probes += 1
        try:
            await self._client.get(self._probe_path, timeout=self._timeout)
            ok, error = True, ""
            self._set_node_known(True)
        except ServerError as exc:  # answered, but the API server itself is not serving
            ok, error = False, str(exc)
        except NotFound:  # answered (the link works), but this node has no Lease: an unknown node
            ok, error = True, ""
            self._set_node_known(False)
        except KubeError:  # answered: the link works
            ok, error = True, ""
        except KubeUnreachable as exc:
            ok, error = False, str(exc)
        self._last_latency = time.monotonic() - started
        self._last_probe_at = time.time()
        self._last_probe_ok = ok
        if self._metrics is not None:
            self._metrics.probe(ok)
        return ok, error

    def _set_node_known(self, known: bool) -> None:
        if known == self.node_known:
            return
        if not known:
            _log.warning("node_unknown", node=self._node, missing=f"{LEASE_NAMESPACE}/{self._node} Lease",
                         check="--node-name")
        elif self.node_known is False:
            _log.info("node_known", node=self._node)
        self.node_known = known

    def _record(self, ok: bool, error: str) -> None:
        if ok:
            self.consecutive_successes += 1
            self.consecutive_failures = 0
            self._last_error = ""
            if not self.connected and self.consecutive_successes >= self._successes_needed:
                self._set(True, "")
            elif self._informer is not None and not self._informer.healthy and self._kick_helps(self._informer):
                # The API answers while the watch sits in its backoff (a restart too short for the link to count
                # as cut): resume it now rather than after up to `backoff_max`. Not a watch refused with a 403
                # (nor with a 401 while the probe is rejected too): a kick per probe would undo its backoff.
                self._informer.kick()
        else:
            self.consecutive_failures += 1
            self.consecutive_successes = 0
            self._last_error = error
            if self.connected and self.consecutive_failures >= self._failures_needed:
                self._set(False, error)
            elif not self.connected and self.transitions == 0 and self.consecutive_failures == self._failures_needed:
                # Never connected since start: say so once, so an offline start is visible in the logs.
                _log.warning("cloud_link_not_reachable", node=self._node, error=error)

    def _set(self, connected: bool, reason: str) -> None:
        self.connected = connected
        self.transitions += 1
        self._since = time.time()
        if connected:
            self._connected_event.set()
            _log.info("cloud_link_connected", node=self._node, successes=self.consecutive_successes)
        else:
            self._connected_event.clear()
            _log.warning("cloud_link_disconnected", node=self._node, failures=self.consecutive_failures,
                         reason=reason)
        if self._metrics is not None:
            self._metrics.set_link(connected, transition=True)
        for fn in self._listeners:
            try:
                fn(connected)
            except Exception:
                _log.exception("link_listener_failed")
