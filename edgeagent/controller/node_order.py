"""Every cached node's name in the order of its sha256: the order of a rollout plan that ranks by name alone.

A ranking is made once per revision, but after a restart (or a change of leader) the first pass must make it
for every node: at 100,000 nodes, sorting the names on their hashes took 80-90 ms of that pass's ~300. The
node handler keeps this order as nodes come and go, and the controller settles it once its caches have synced,
before its first reconcile, so a ranking by name is a filter of this list (`rollout.plan.rank_in_order`), not a
sort. A node's hash never changes, so a node that stays keeps its place.

New names wait in `_pending` until the order is asked for: a few are put in their place one by one, many
(the informer's first list, a relist) are sorted in with one sort that merges them into the sorted run.
"""

from __future__ import annotations

import bisect

from edgeagent.rollout.plan import stable_hash

# Up to this many new names are put in their places one by one (a binary search and a list insert each);
# more are sorted in together.
_ONE_BY_ONE = 64


class NodeOrder:
    def __init__(self) -> None:
        self._sorted: list[str] = []
        self._pending: list[str] = []

    def __len__(self) -> int:
        return len(self._sorted) + len(self._pending)

    @property
    def pending(self) -> int:
        """New names not in their places yet."""
        return len(self._pending)

    def add(self, name: str) -> None:
        """A node the cache did not have."""
        self._pending.append(name)

    def remove(self, name: str) -> None:
        """A node gone from the cache (unknown names are ignored)."""
        if len(self._pending) > _ONE_BY_ONE:
            # Many new names (a standby, which runs no reconcile, settles only when it takes over): sorted in
            # first, so that a burst of deletions is a binary search each, not a scan of them.
            self.settle()
        if self._pending and name in self._pending:
            self._pending = [other for other in self._pending if other != name]
        index = self._index(name)
        if index is not None:
            del self._sorted[index]

    def names(self) -> list[str]:
        """Every name, each once, by sha256 (what `rank` sorts a plan without labels by). The caller must not
        change the list."""
        if self._pending:
            self.settle()
        return self._sorted

    def settle(self) -> None:
        """Put the new names in their places now (the controller calls this before its first reconcile)."""
        pending, self._pending = self._pending, []
        if len(pending) <= _ONE_BY_ONE:
            for name in pending:
                if self._index(name) is None:
                    bisect.insort(self._sorted, name, key=stable_hash)
            return
        self._sorted.extend(pending)
        # Timsort sorts the new names and merges them with the sorted run already there; a name the informer
        # told about twice would sit next to itself and is kept once.
        self._sorted.sort(key=stable_hash)
        self._sorted = list(dict.fromkeys(self._sorted))

    def _index(self, name: str) -> int | None:
        index = bisect.bisect_left(self._sorted, stable_hash(name), key=stable_hash)
        if index < len(self._sorted) and self._sorted[index] == name:
            return index
        return None
