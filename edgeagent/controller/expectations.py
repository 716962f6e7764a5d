"""What a DaemonSet's roll is waiting for after its own deletions, so that bursts never exceed the budget.

Two things lag behind a delete that the API server has already answered:

1. The pod cache still shows the pod live and available until the watch event arrives. Planning on that
   cache would count the node as fine and delete a second batch on top of the first. So after deleting,
   a DaemonSet plans nothing more until every deleted UID shows up terminating or gone (`satisfied`).
2. Once the old pod is gone, the node has no pod at all until the DaemonSet controller creates the
   replacement, and a node with no pod is invisible to a planner that groups pods by node (OpenYurt's
   gap). A node whose pod we deleted therefore stays `in_flight`, counted as unavailable whatever its
   readiness, until the cache shows an available pod on it again (the planner reports it `settled`).

Keyed by pod UID rather than a counter (client-go's ControllerExpectations): observation is checked
against the cache itself, so a lost or duplicated event cannot leave the count wrong. Phase 1 has a
timeout in case the cache never catches up; phase 2 lasts until the node is settled or disappears.
The memory is per process: after a restart the planner's stateless rules still count terminating pods
and nodes that went down after receiving the new version.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass

DEFAULT_TTL = 300.0
# A delete whose answer was lost (timeout, 5xx) may or may not have happened: wait this long for the cache
# to show it before assuming it did not.
UNKNOWN_OUTCOME_TTL = 30.0


@dataclass
class _Deletion:
    node: str
    deadline: float
    observed: bool = False


class Expectations:
    def __init__(self, *, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._by_key: dict[str, dict[str, _Deletion]] = {}
        # Pods of the new version seen available within their progress deadline, per DaemonSet: max-failed
        # counts the version's failures, and such a pod has not failed whatever its node does later.
        self._proven: dict[str, set[str]] = {}

    def expect_deletions(self, key: str, deletions: Iterable[tuple[str, str]]) -> None:
        """(uid, node) pairs, recorded before deleting so that no concurrent plan can miss them."""
        deadline = self._clock() + self._ttl
        entries = self._by_key.setdefault(key, {})
        for uid, node in deletions:
            entries[uid] = _Deletion(node, deadline)

    def deletion_failed(self, key: str, uid: str) -> None:
        """The delete did not happen (error, or the UID precondition found a different pod): forget it."""
        entries = self._by_key.get(key)
        if entries is not None:
            entries.pop(uid, None)
            if not entries:
                del self._by_key[key]

    def deletion_outcome_unknown(self, key: str, uid: str, ttl: float = UNKNOWN_OUTCOME_TTL) -> None:
        """The answer was lost: keep waiting for the cache (a repeat could delete twice), but not for long."""
        entry = self._by_key.get(key, {}).get(uid)
        if entry is not None and not entry.observed:
            entry.deadline = min(entry.deadline, self._clock() + ttl)

    def deletion_observed(self, key: str, uid: str) -> None:
        """The pod is known gone (404 on delete) although the cache may not show it yet."""
        entry = self._by_key.get(key, {}).get(uid)
        if entry is not None:
            entry.observed = True

    def satisfied(self, key: str, live_uids: Container[str]) -> bool:
        """Every recorded deletion is visible: the UID is no longer live (non-terminating) in the cache."""
        entries = self._by_key.get(key)
        if not entries:
            return True
        now = self._clock()
        waiting = False
        for entry_uid, entry in entries.items():
            if entry.observed:
                continue
            if entry_uid not in live_uids or now > entry.deadline:
                entry.observed = True
            else:
                waiting = True
        return not waiting

    def in_flight(self, key: str) -> set[str]:
        """Nodes where a deletion of ours is still waiting for an available replacement pod."""
        return {entry.node for entry in self._by_key.get(key, {}).values()}

    def settle(self, key: str, nodes: Iterable[str]) -> None:
        """These nodes have an available pod again (or are gone): their replacements are done."""
        entries = self._by_key.get(key)
        if not entries:
            return
        done = set(nodes)
        for entry_uid in [u for u, e in entries.items() if e.observed and e.node in done]:
            del entries[entry_uid]
        if not entries:
            del self._by_key[key]

    def pending(self, key: str) -> int:
        return len(self._by_key.get(key, {}))

    def wait_left(self, key: str) -> float | None:
        """Seconds until the soonest unobserved deletion of `key` stops being waited for, if any: the plan must
        be looked at again then, because a deletion that never happened (its answer lost) brings no event."""
        deadlines = [e.deadline for e in self._by_key.get(key, {}).values() if not e.observed]
        return max(0.0, min(deadlines) - self._clock()) if deadlines else None

    def proven(self, key: str) -> set[str]:
        return self._proven.get(key, set())

    def remember_proven(self, key: str, uids: Iterable[str], live_uids: Container[str]) -> None:
        """Add `uids`; forget pods no longer live, so the memory stays as small as the DaemonSet."""
        kept = {uid for uid in self._proven.get(key, set()) if uid in live_uids} | set(uids)
        if kept:
            self._proven[key] = kept
        else:
            self._proven.pop(key, None)

    def forget(self, key: str) -> None:
        self._by_key.pop(key, None)
        self._proven.pop(key, None)

    def clear(self) -> None:
        self._by_key.clear()
        self._proven.clear()


class UnobservedWrites:
    """Writes the cache has not shown yet, keyed by object UID, holding the object's resourceVersion in
    the cache when we wrote.

    A patch's own watch event arrives after the next reconcile may already have run (every patched pod
    enqueues its DaemonSet again); deciding on the unchanged cached object would repeat the write. While
    the cache still holds that exact version the write is skipped; once it shows any other version, the
    cache is trusted again. Only equality of resourceVersions is used (they are opaque). A write that
    changed nothing produces no new version, and skipping it again is then right too.
    """

    def __init__(self) -> None:
        self._versions: dict[str, str] = {}

    def record(self, uid: str, resource_version: str) -> None:
        self._versions[uid] = resource_version

    def pending(self, uid: str, resource_version: str) -> bool:
        recorded = self._versions.get(uid)
        if recorded is None:
            return False
        if recorded == resource_version:
            return True
        del self._versions[uid]
        return False

    def forget(self, uid: str) -> None:
        self._versions.pop(uid, None)

    def __len__(self) -> int:
        return len(self._versions)
