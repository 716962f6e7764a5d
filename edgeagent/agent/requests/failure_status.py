"""Reports each failed upgrade on the status of the pod that failed: the `edgeagent.io/UpgradeFailed` condition.

Why on the pod's status and not only in an Event: any credential may create an Event, naming any node as
its source, so a failure that counts (the controller's, the fleet view's) must come through a channel the
API server authenticates to the node, and only the pod's node may write its status. The Event
(`events.py`) stays, for people.

What is written, and where: when the verifier ends a request `failed` having judged a replacement pod on the
new revision (the pod now running on the node), that pod gets the condition `True`, with the kubelet's reason
when it is one (CrashLoopBackOff, ImagePullBackOff, ...) else `NotReadyInTime`, and the message
`revision <the pod's controller-revision-hash>: upgrade request <id>: <verdict>` (`contract.failure_message`).
A failure with no such pod (no replacement appeared, or it runs the old revision) has nothing to write on;
the controller's progress deadline covers those.

Durable without a buffer of its own: the failed outcome is already in SQLite (the requests table), so the
publisher reloads it after a restart and compares it with the pod in the watch cache, like `UpgradeHeld`
(`policy/held.py`, the same PATCH from `pod_status.py`): a patch only when the pod does not carry it yet, none
while the link is down, and whatever was decided offline once it returns (the link's return wakes it).
It stops when the pod is gone or replaced (404, or 409 on the UID precondition).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, Protocol

from edgeagent import log
from edgeagent.agent.passes import run_passes
from edgeagent.agent.pod_status import (
    PodGone,
    Want,
    WriteFailed,
    condition_patch,
    current,
    on_this_node,
    patch_status,
)
from edgeagent.agent.requests.verifier import before_restart, on_new_revision, replacements
from edgeagent.agent.state.store import FAILED, KEEP_FINISHED, StateStore, StateUnavailable, UpgradeRequest
from edgeagent.contract import CONDITION_UPGRADE_FAILED, LABEL_REVISION_HASH, failure_message, failure_reason
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import includes_write, is_terminating, key_of, labels_of, meta, uid_of

JSON = dict[str, Any]
_log = log.get("edgeagent.failure_status")

RETRY_INITIAL = 0.5
RETRY_MAX = 30.0


class _Pods(Protocol):
    def get(self, namespace: str, name: str) -> JSON | None: ...


class _Link(Protocol):
    @property
    def connected(self) -> bool: ...

    async def wait_connected(self) -> None: ...

    def report_failure(self, reason: str) -> None: ...


def desired(request: UpgradeRequest, pod: JSON, node: str) -> Want | None:
    """The condition the failed `request` puts on `pod`, or None when this pod is not the one that failed.

    The pod must be bound to this node (the agent writes no other pod's status), be the replacement the verdict
    named, not terminating, of the same DaemonSet, and on the new revision: the condition names the pod's own
    revision, so a replacement on the old revision must not carry it (it would report the old revision failed).
    """
    if request.state != FAILED or not on_this_node(pod, node) or key_of(pod) != request.replacement:
        return None
    kept = before_restart(request) is not None and uid_of(pod) == request.uid  # asked in place: the pod itself
    if is_terminating(pod) or not (kept or replacements(request, [pod])) or not on_new_revision(pod, request):
        return None
    revision = str(labels_of(pod).get(LABEL_REVISION_HASH) or "")
    if not revision:
        return None
    return ("True", failure_reason(request.reason),
            failure_message(revision, f"upgrade request {request.id}: {request.message}"))


class FailurePublisher:
    """Keeps the UpgradeFailed condition on the pod of every failed upgrade, once per pod."""

    def __init__(self, *, client: KubeClient, state: StateStore, pods: _Pods, link: _Link, node_name: str,
                 request_timeout: float) -> None:
        self._client = client
        self._state = state
        self._pods = pods
        self._link = link
        self._node = node_name
        self._timeout = request_timeout
        self._wake = asyncio.Event()
        # replacement (namespace/name) -> the failed request that judged it; the newest KEEP_FINISHED, as the store.
        self._failed: OrderedDict[str, UpgradeRequest] = OrderedDict()
        # pod uid -> (condition sent, resourceVersion the patch was answered with): not sent again until the watch
        # has delivered a version that includes it.
        self._sent: dict[str, tuple[Want, str]] = {}
        self.patches = 0
        state.listeners.append(self._on_request)

    # ----------------------------------------------------------------- wiring

    def on_pod_change(self, _type: str, _obj: JSON, _old: JSON | None) -> None:
        """An Informer handler: a failed replacement may have appeared in, or changed in, the cache."""
        if self._failed:
            self._wake.set()

    def on_link(self, connected: bool) -> None:
        """A LinkMonitor listener: what was decided while the link was down is written now."""
        if connected:
            self._sent.clear()  # a patch sent just before the cut may not have landed: compare afresh
            self._wake.set()

    def _on_request(self, _before: UpgradeRequest | None, after: UpgradeRequest) -> None:
        if after.state == FAILED and after.replacement:
            self._remember(after)
            self._wake.set()

    def _remember(self, request: UpgradeRequest) -> None:
        self._failed[request.replacement] = request
        self._failed.move_to_end(request.replacement)
        while len(self._failed) > KEEP_FINISHED:
            self._failed.popitem(last=False)

    # ----------------------------------------------------------------- loop

    async def run(self) -> None:
        try:
            for request in await self._state.failed_replacements():
                if request.replacement not in self._failed:
                    self._remember(request)
        except StateUnavailable as exc:
            _log.error("failures_unreadable", error=str(exc), hint="failures recorded before this start are not "
                                                                   "reported on their pods' status")

        def failed(exc: Exception) -> bool:
            _log.exception("upgrade_failed_publish_failed")  # called inside the except block
            return True

        await run_passes(self.publish_once, link=self._link, wake=self._wake, initial=RETRY_INITIAL,
                         cap=RETRY_MAX, failed=failed)

    async def publish_once(self) -> bool:
        """Write the condition on every failed pod that does not carry it; True when nothing is left to retry."""
        complete = True
        for key, request in list(self._failed.items()):
            namespace, _, name = key.partition("/")
            pod = self._pods.get(namespace, name)
            want = desired(request, pod, self._node) if pod is not None else None
            if pod is None or want is None:
                continue
            uid = uid_of(pod)
            if current(pod, CONDITION_UPGRADE_FAILED) == want:
                self._sent.pop(uid, None)
                continue
            sent = self._sent.get(uid)
            if sent is not None and sent[0] == want and not includes_write(str(meta(pod).get("resourceVersion") or ""),
                                                                            sent[1]):
                continue  # written; the watch has not brought it back yet
            if not self._link.connected:
                return False
            try:
                self._sent[uid] = (want, await self._patch(request, pod, want))
            except PodGone as exc:
                _log.info("upgrade_failed_pod_gone", pod=key_of(pod), id=request.id, error=str(exc))
                self._failed.pop(key, None)  # gone or replaced: nothing left to write on
            except WriteFailed as exc:
                _log.warning("upgrade_failed_patch_refused", pod=key_of(pod), id=request.id, error=str(exc))
                complete = False
        return complete

    async def _patch(self, request: UpgradeRequest, pod: JSON, want: Want) -> str:
        """The resourceVersion the patch was answered with (`pod_status.patch_status` raises what went wrong)."""
        body = condition_patch(pod, CONDITION_UPGRADE_FAILED, want, datetime.now(UTC))
        started = time.monotonic()
        written = await patch_status(self._client, self._link, pod, body, self._timeout, what=CONDITION_UPGRADE_FAILED)
        self.patches += 1
        _log.info("upgrade_failed_reported", pod=key_of(pod), id=request.id, reason=want[1], message=want[2],
                  ms=round((time.monotonic() - started) * 1000, 1))
        return written
