"""The hold's row in the agent's state database: the site policy owns this table, the store only runs it.

One row at most (`id = 1`). It is written before the hold is answered, so a hold survives `kill -9` and needs
no cloud; its schema is a step of the store's migrations (state/store.py), which number the one file's versions.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from edgeagent.agent.state.store import StateStore


@dataclass(frozen=True)
class StoredHold:
    """The hold row: kind (HeldByOperator or AutoUpgradeFailed), reason, until/since as Unix times."""

    kind: str
    reason: str
    until: float | None
    since: float


class HoldTable:
    def __init__(self, state: StateStore) -> None:
        self._state = state

    async def load(self) -> StoredHold | None:
        """The persisted hold, if any (expired ones too: the policy decides what counts)."""
        def _get(conn: sqlite3.Connection) -> StoredHold | None:
            row = conn.execute("SELECT kind, reason, until, since FROM hold WHERE id = 1").fetchone()
            return StoredHold(str(row[0]), str(row[1]), row[2], float(row[3])) if row else None

        return await self._state.read(_get, None)

    async def save(self, hold: StoredHold) -> None:
        """Replace the hold; committed (fsynced) when this returns, so it survives `kill -9`."""
        def _tx(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO hold (id, kind, reason, until, since) VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO "
                "UPDATE SET kind = excluded.kind, reason = excluded.reason, until = excluded.until, "
                "since = excluded.since", (hold.kind, hold.reason, hold.until, hold.since))

        await self._state.write(_tx)

    async def clear(self) -> None:
        await self._state.write(lambda conn: conn.execute("DELETE FROM hold WHERE id = 1"))


__all__ = ["HoldTable", "StoredHold"]
