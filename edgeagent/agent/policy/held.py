"""Publishes the site policy as the `UpgradeHeld` condition on every DaemonSet pod bound to this node.

This module writes the condition (its name and reasons are in `edgeagent.contract`). The controller
reads it (AdvancedRollingUpdate never deletes a pod whose `UpgradeHeld` is `True`), and an operator
sees it in `kubectl describe pod`.

Why it costs nothing while nothing changes: the desired condition is compared with the pod as the
agent's watch cache already has it, and a strategic-merge patch of that one condition on `pods/status`
is sent only when they differ. The patch comes back through the watch, after which they agree again.
It is woken, never polling, by: a policy change (hold set or released, a window opening or closing, on
the policy's own timer), a pod added or changed in the cache (new pods get it at once), and the link
returning (what changed while it was down is published then).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from edgeagent import log
from edgeagent.agent import pod_status
from edgeagent.agent.link.cache import PodCache
from edgeagent.agent.link.monitor import LinkMonitor
from edgeagent.agent.passes import run_passes
from edgeagent.agent.pod_status import PodGone, Want, WriteFailed, condition_patch, patch_status
from edgeagent.agent.policy.site import PolicyStatus, SitePolicy
from edgeagent.contract import CONDITION_UPGRADE_HELD
from edgeagent.kube.client import KubeClient
from edgeagent.kube.informer import Informer
from edgeagent.kube.objects import (
    daemonset_owner,
    includes_write,
    is_terminating,
    key_of,
    meta,
    uid_of,
)

JSON = dict[str, Any]
_log = log.get("edgeagent.held")

# After a failed patch (cloud overloaded, link flapping) try again after this long, doubling to the cap.
RETRY_INITIAL = 0.5
RETRY_MAX = 30.0


def desired(status: PolicyStatus) -> Want:
    """(status, reason, message) of the condition for the policy's answer."""
    return ("True" if status.held else "False"), status.reason, status.message


def current(pod: JSON) -> Want | None:
    """(status, reason, message) of the pod's UpgradeHeld condition as it is, or None without one."""
    return pod_status.current(pod, CONDITION_UPGRADE_HELD)


def needs_condition(pod: JSON) -> bool:
    return daemonset_owner(pod) is not None and not is_terminating(pod)


class HeldPublisher:
    def __init__(self, *, client: KubeClient, cache: PodCache, informer: Informer, link: LinkMonitor,
                 policy: SitePolicy, request_timeout: float) -> None:
        self._client = client
        self._cache = cache
        self._link = link
        self._policy = policy
        self._timeout = request_timeout
        self._wake = asyncio.Event()
        # uid -> (condition sent, resourceVersion of the pod it was computed from, resourceVersion the patch was
        # answered with): until the watch delivers a version that includes the patch, do not send it again.
        self._sent: dict[str, tuple[tuple[str, str, str], str, str]] = {}
        # uid -> the status last written to that pod (see condition_patch).
        self._published: dict[str, str] = {}
        self.patches = 0
        self.passes = 0
        informer.add_handler(self._on_pod)
        link.add_listener(self._on_link)
        policy.add_listener(self._on_policy)

    def _on_pod(self, _type: str, _obj: JSON, _old: JSON | None) -> None:
        self._wake.set()

    def _on_link(self, connected: bool) -> None:
        if connected:
            self._sent.clear()  # what we sent before the cut may not have landed: compare afresh
            self._wake.set()

    def _on_policy(self, _status: PolicyStatus) -> None:
        self._wake.set()

    async def run(self) -> None:
        def failed(exc: Exception) -> bool:
            # One bad pass must not end publishing; the next wake-up tries again.
            _log.exception("upgrade_held_publish_failed")  # called inside the except block
            return True

        await run_passes(self.publish_once, link=self._link, wake=self._wake, initial=RETRY_INITIAL,
                         cap=RETRY_MAX, failed=failed)

    async def publish_once(self) -> bool:
        """Patch every pod whose condition differs; True when nothing is left to retry."""
        want = desired(self._policy.status())
        self.passes += 1
        complete = True
        live: set[str] = set()
        for pod in self._cache.pods():
            if not needs_condition(pod):
                continue
            uid = uid_of(pod)
            live.add(uid)
            if current(pod) == want:
                self._sent.pop(uid, None)
                continue
            rv = str(meta(pod).get("resourceVersion") or "")
            sent = self._sent.get(uid)
            if sent is not None and sent[0] == want and (rv == sent[1] or not includes_write(rv, sent[2])):
                # Patched already; the watch has not brought the patched version yet (only the pod as it was, or a
                # change of another writer that landed just before ours: the controller's PodNeedUpgrade).
                continue
            if not self._link.connected:
                return False
            written = await self._patch(pod, want)
            if written is not None:
                self._sent[uid] = (want, rv, written)
            complete = complete and written is not None
        for uid in set(self._sent) - live:
            del self._sent[uid]
        for uid in set(self._published) - live:
            del self._published[uid]
        return complete

    async def _patch(self, pod: JSON, want: Want) -> str | None:
        """The resourceVersion the patch was answered with ("" when there is nothing to wait for: the pod is gone);
        None when it failed and is to be tried again."""
        uid = uid_of(pod)
        body = condition_patch(pod, CONDITION_UPGRADE_HELD, want, self._policy.now(),
                               published=self._published.get(uid))
        started = time.monotonic()
        try:
            written = await patch_status(self._client, self._link, pod, body, self._timeout,
                                         what=CONDITION_UPGRADE_HELD)
        except PodGone as exc:
            # Gone or replaced: the watch brings the successor, which gets its own patch.
            _log.info("upgrade_held_pod_gone", pod=key_of(pod), error=str(exc))
            return ""
        except WriteFailed as exc:
            _log.warning("upgrade_held_patch_refused", pod=key_of(pod), error=str(exc))
            return None
        self.patches += 1
        self._published[uid] = want[0]
        _log.info("upgrade_held_published", pod=key_of(pod), status=want[0], reason=want[1], message=want[2],
                  ms=round((time.monotonic() - started) * 1000, 1))
        return written


__all__ = ["HeldPublisher", "current", "desired"]
