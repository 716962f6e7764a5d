"""`--auto-upgrade`: the node catches up by itself whenever it is open, one pod at a time.

The site decides *when* (the site policy: maintenance windows, holds); this decides *what*: this node's pods
whose `PodNeedUpgrade` is `True`, in name order, each through the same path as an operator's request (fresh
read, UID-guarded DELETE, recorded with origin `auto`, verified). The next pod is touched only once the
previous one's replacement is Ready on the new revision, so a bad version costs one daemon, not all of them:
a replacement that does not become Ready within `--ready-timeout` holds the node with kind
`AutoUpgradeFailed` until an operator releases it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from edgeagent import log
from edgeagent.agent.requests.guarded import upgrade_check
from edgeagent.agent.requests.upgrade import Answer, Outcome
from edgeagent.agent.state.store import FAILED, UpgradeRequest
from edgeagent.aio import wait_event
from edgeagent.contract import AUTO_UPGRADE_FAILED, CONDITION_POD_NEED_UPGRADE, HELD_BY_OPERATOR
from edgeagent.kube.objects import get_condition, meta, uid_of

JSON = dict[str, Any]
_log = log.get("edgeagent.autoupgrade")

MAX_REASON = 1000  # the hold's reason is bounded (it becomes a condition message)
ORIGIN = "auto"


class SitePolicy(Protocol):
    """The part of the site policy (edgeagent/agent/policy/site.py) the auto-upgrader relies on."""

    def is_open(self, now: datetime | None = None) -> bool: ...

    async def hold(self, reason: str = "", until: datetime | None = None, *,
                   kind: str = HELD_BY_OPERATOR) -> object: ...

    async def wait_open(self) -> None: ...

    def add_listener(self, fn: Callable[..., None]) -> None: ...


class Upgrader(Protocol):
    async def upgrade(self, namespace: str, name: str, *, origin: str = "online") -> Outcome: ...


class Outcomes(Protocol):
    async def wait(self, request_id: str) -> UpgradeRequest: ...


class PodSource(Protocol):
    def pods(self) -> list[JSON]: ...


class ConnectedLink(Protocol):
    async def wait_connected(self) -> None: ...


def next_candidate(pods: list[JSON], node: str, skip: set[tuple[str, str]]) -> JSON | None:
    """The first pod (by namespace/name) this node may upgrade now and has not given up on."""
    for pod in sorted(pods, key=lambda p: (str(meta(p).get("namespace")), str(meta(p).get("name")))):
        if upgrade_check(pod, node) is None and _skip_key(pod) not in skip:
            return pod
    return None


def _skip_key(pod: JSON) -> tuple[str, str]:
    """A pod given up on is retried once it is replaced or asked to move to another revision."""
    return uid_of(pod), str((get_condition(pod, CONDITION_POD_NEED_UPGRADE) or {}).get("message") or "")


class AutoUpgrader:
    def __init__(self, *, upgrades: Upgrader, outcomes: Outcomes, policy: SitePolicy, pods: PodSource,
                 link: ConnectedLink, node_name: str, poll_interval: float = 5.0) -> None:
        self._upgrades = upgrades
        self._outcomes = outcomes
        self._policy = policy
        self._pods = pods
        self._link = link
        self._node = node_name
        self._poll = poll_interval
        self._wake = asyncio.Event()
        self._skip: set[tuple[str, str]] = set()
        self.upgraded: list[str] = []  # request ids, in order (for tests and logs)
        policy.add_listener(lambda *_args: self._wake.set())

    def on_pod_change(self, _type: str, _obj: JSON, _old: JSON | None) -> None:
        self._wake.set()

    async def run(self) -> None:
        _log.info("auto_upgrade_enabled", node=self._node)
        while True:
            await self._policy.wait_open()
            await self._link.wait_connected()
            self._wake.clear()
            pod = next_candidate(self._pods.pods(), self._node, self._skip)
            if pod is None or not self._policy.is_open():
                await wait_event(self._wake, self._poll)
                continue
            await self._upgrade_one(pod)

    async def _upgrade_one(self, pod: JSON) -> None:
        namespace, name = str(meta(pod).get("namespace")), str(meta(pod).get("name"))
        key = f"{namespace}/{name}"
        outcome = await self._upgrades.upgrade(namespace, name, origin=ORIGIN)
        if outcome.retry_later or outcome.answer is Answer.UNAVAILABLE:
            # Not yet (the rollout plan's controller has not caught up with a change of the DaemonSet; our token was
            # revoked and its successor is on its way; nothing could be stored, the state disk being full): this
            # pod again after the next change or poll, not skipped for the whole revision.
            _log.info("auto_upgrade_waits", pod=key, message=outcome.message)
            await wait_event(self._wake, self._poll)
            return
        if outcome.request_id is None or outcome.answer not in (Answer.STARTED, Answer.QUEUED):
            # Refused (the cloud's view differs from the cache, RBAC, ...): not this pod again for this version.
            _log.warning("auto_upgrade_skipped", pod=key, status=outcome.status_word, message=outcome.message)
            self._skip.add(_skip_key(pod))
            return
        self.upgraded.append(outcome.request_id)
        _log.info("auto_upgrade_started", pod=key, id=outcome.request_id)
        final = await self._outcomes.wait(outcome.request_id)
        _log.info("auto_upgrade_finished", pod=key, id=final.id, state=final.state, reason=final.reason or None)
        if final.state != FAILED:
            return
        if final.deadline is None:
            # Failed before the pod was deleted (the cloud refused): nothing runs a bad version; skip it.
            self._skip.add(_skip_key(pod))
            return
        reason = (f"automatic upgrade of pod {key} failed (request {final.id}): {final.reason or final.message}"
                  )[:MAX_REASON]
        _log.error("auto_upgrade_failed_holding", pod=key, id=final.id, reason=final.reason)
        while True:  # never go on to the next pod without the hold in place
            try:
                await self._policy.hold(reason, kind=AUTO_UPGRADE_FAILED)
                return
            except Exception as exc:
                _log.error("auto_upgrade_hold_not_stored", error=str(exc), retry_seconds=self._poll)
                await asyncio.sleep(self._poll)
