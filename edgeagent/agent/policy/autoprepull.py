"""`edgeagent run --auto-prepull`: download any time, install when the site decides.

When a pod on this node gets `PodNeedUpgrade` `True` for a revision the agent has not asked about yet, the
agent asks for that revision's images itself, exactly as `POST …/imagepull` would (the controller's pre-pull
does the rest). It asks once per pod and revision: what it asked is kept in the state database, so a restart
does not ask again — also when the condition no longer shows the request (OpenYurt's controller drops the
version from the message on a failed pull). While the cloud is unreachable nothing can be asked; the next
pass after the link returns does it. Passes are woken by pod changes and by the link, never by polling.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any, Protocol

from edgeagent import log
from edgeagent.agent.link.cache import PodCache
from edgeagent.agent.link.monitor import LinkMonitor
from edgeagent.agent.passes import run_passes
from edgeagent.agent.requests.upgrade import Answer
from edgeagent.agent.state.store import StateStore, StateUnavailable
from edgeagent.contract import CONDITION_POD_IMAGE_READY, CONDITION_POD_NEED_UPGRADE, version_from_message
from edgeagent.kube.informer import Informer
from edgeagent.kube.objects import (
    daemonset_owner,
    get_condition,
    is_terminating,
    key_of,
    name_of,
    namespace_of,
    uid_of,
)

JSON = dict[str, Any]
_log = log.get("edgeagent.autoprepull")

RETRY_INITIAL = 1.0
RETRY_MAX = 60.0


class _Outcome(Protocol):
    @property
    def answer(self) -> Answer: ...

    @property
    def status_word(self) -> str: ...

    @property
    def message(self) -> str: ...


class _Asker(Protocol):
    async def imagepull(self, namespace: str, name: str) -> Any: ...


def wanted_revision(pod: JSON) -> str | None:
    """The revision to pre-pull for: `PodNeedUpgrade` `True`'s hash, for a live DaemonSet pod."""
    if daemonset_owner(pod) is None or is_terminating(pod):
        return None
    need = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
    if need is None or need.get("status") != "True":
        return None
    found = version_from_message(str(need.get("message") or ""))
    return found.split()[0] if found else None


def already_requested(pod: JSON, revision: str) -> bool:
    """Someone (an operator, the controller) already asked for this revision: its PodImageReady names it."""
    image = get_condition(pod, CONDITION_POD_IMAGE_READY)
    found = version_from_message(str((image or {}).get("message") or ""))
    return found is not None and bool(found) and found.split()[0].rstrip(",:;") == revision


# The (pod, revision) pairs already asked for, in the state database's `prepull_asked` table, which this
# module owns (its schema is a step of the store's migrations): a restarted agent does not ask again.

async def load_asked(state: StateStore) -> set[tuple[str, str]]:
    def _get(conn: sqlite3.Connection) -> set[tuple[str, str]]:
        return {(str(r[0]), str(r[1])) for r in conn.execute("SELECT pod_uid, revision FROM prepull_asked")}

    return await state.read(_get, set())


async def record_asked(state: StateStore, pod_uid: str, revision: str, *, keep: set[str]) -> None:
    """Remember one ask (committed when this returns); rows of pods no longer on the node go."""
    def _tx(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT OR IGNORE INTO prepull_asked (pod_uid, revision, asked) VALUES (?, ?, ?)",
                     (pod_uid, revision, time.time()))
        stale = [r[0] for r in conn.execute("SELECT DISTINCT pod_uid FROM prepull_asked")
                 if r[0] not in keep and r[0] != pod_uid]
        conn.executemany("DELETE FROM prepull_asked WHERE pod_uid = ?", [(uid,) for uid in stale])

    await state.write(_tx)


class AutoPrepuller:
    def __init__(self, *, cache: PodCache, informer: Informer, link: LinkMonitor, state: StateStore,
                 upgrades: _Asker) -> None:
        self._cache = cache
        self._link = link
        self._state = state
        self._upgrades = upgrades
        self._wake = asyncio.Event()
        self._asked: set[tuple[str, str]] | None = None  # (pod uid, revision), loaded from the state once
        self.asks = 0
        self.passes = 0
        informer.add_handler(lambda *_: self._wake.set())
        link.add_listener(lambda connected: self._wake.set() if connected else None)

    async def run(self) -> None:
        def failed(exc: Exception) -> bool:
            if not isinstance(exc, StateUnavailable):
                return False
            _log.warning("auto_prepull_state_unavailable", error=str(exc))
            return True

        await run_passes(self.ask_once, link=self._link, wake=self._wake, initial=RETRY_INITIAL, cap=RETRY_MAX,
                         failed=failed)

    async def ask_once(self) -> bool:
        """One pass over the cached pods; True when nothing is left to retry."""
        if self._asked is None:
            self._asked = await load_asked(self._state)
        asked = self._asked
        self.passes += 1
        complete = True
        for pod in self._cache.pods():
            revision = wanted_revision(pod)
            if revision is None or (uid_of(pod), revision) in asked:
                continue
            if already_requested(pod, revision):
                await self._remember(pod, revision)
                continue
            if not self._link.connected:
                return False
            outcome: _Outcome = await self._upgrades.imagepull(namespace_of(pod), name_of(pod))
            if outcome.answer is Answer.IMAGE_PULL_REQUESTED:
                self.asks += 1
                await self._remember(pod, revision)
                _log.info("auto_prepull_asked", pod=key_of(pod), revision=revision)
            elif outcome.answer in (Answer.FORBIDDEN, Answer.NOT_FOUND, Answer.CONFLICT):
                # No pending version after all, gone or replaced: the watch brings what changed.
                _log.info("auto_prepull_skipped", pod=key_of(pod), status=outcome.status_word, reason=outcome.message)
            else:
                complete = False
        return complete

    async def _remember(self, pod: JSON, revision: str) -> None:
        await record_asked(self._state, uid_of(pod), revision, keep={uid_of(p) for p in self._cache.pods()})
        if self._asked is not None:
            self._asked.add((uid_of(pod), revision))


__all__ = ["AutoPrepuller", "already_requested", "wanted_revision"]
