"""The agent's durable state: the pod snapshot, every upgrade request and the unsent Events, in one SQLite file.

Why SQLite in WAL mode with `synchronous=FULL`: a `202 Accepted` promises that the request survives a
power cut or `kill -9`, so the commit must reach the disk before we answer; WAL keeps snapshot writes
from blocking queue reads. Why one dedicated thread: sqlite3 connections are not shared across
threads, and every call blocks on fsync, which must never stall the event loop.

Failures to write (read-only directory, disk full, I/O errors) surface as `StateUnavailable`, which the
HTTP layer turns into `503`. Each write is one transaction, so a failure leaves nothing half-written.
A file that is not a database, or fails its integrity check, is moved aside (never deleted: it may
hold queued requests someone wants to inspect) and a fresh one is created.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from edgeagent import log
from edgeagent.agent.state.episodes import Episode

DB_NAME = "edgeagent.db"

QUEUED = "queued"
RUNNING = "running"
# The pod was deleted; the verifier waits for its replacement to be Ready on the new revision.
VERIFYING = "verifying"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
OBSOLETE = "obsolete"
STATES = (QUEUED, RUNNING, VERIFYING, SUCCEEDED, FAILED, CANCELLED, OBSOLETE)
# Waiting for the cloud (the drainer's work); at most one per pod.
ACTIVE_STATES = (QUEUED, RUNNING)
TERMINAL_STATES = (SUCCEEDED, FAILED, CANCELLED, OBSOLETE)

# Finished requests are history, not work: keep enough to answer "what happened", bounded.
KEEP_FINISHED = 1000

_CORRUPT_ERRORS = {"SQLITE_NOTADB", "SQLITE_CORRUPT"}

_SCHEMA_V1 = [
    """CREATE TABLE snapshot (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        resource_version TEXT NOT NULL,
        pods TEXT NOT NULL,
        saved REAL NOT NULL
    )""",
    """CREATE TABLE requests (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        uid TEXT NOT NULL,
        node TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('queued','running','succeeded','failed','cancelled','obsolete')),
        message TEXT NOT NULL DEFAULT '',
        attempts INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL,
        updated REAL NOT NULL
    )""",
    # At most one active request per pod, enforced by the database rather than by a check-then-insert.
    """CREATE UNIQUE INDEX requests_one_active_per_pod ON requests (namespace, name)
        WHERE state IN ('queued', 'running')""",
    "CREATE INDEX requests_state ON requests (state, seq)",
]

# Site policy (agent/policy/site.py): the operator hold, at most one row; and `?when=open` on queued requests.
_SITE_POLICY = [
    """CREATE TABLE hold (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        kind TEXT NOT NULL,
        reason TEXT NOT NULL,
        until REAL,
        since REAL NOT NULL
    )""",
    "ALTER TABLE requests ADD COLUMN when_open INTEGER NOT NULL DEFAULT 0",
]

# Verified outcomes (agent/requests/verifier.py, agent/requests/events.py): the `verifying` state, what the
# verifier needs to recognise the deleted pod's replacement (revision, template generation, DaemonSet uid,
# wanted revision, deadline), why a request failed, where it came from, and the outbox of Events not yet sent
# to the cloud.
# SQLite cannot change a CHECK constraint in place, so the requests table is rebuilt; every row is kept.
_VERIFIED_OUTCOMES = [
    """CREATE TABLE requests_v2 (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        uid TEXT NOT NULL,
        node TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN
            ('queued','running','verifying','succeeded','failed','cancelled','obsolete')),
        message TEXT NOT NULL DEFAULT '',
        attempts INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        when_open INTEGER NOT NULL DEFAULT 0,
        origin TEXT NOT NULL DEFAULT 'queued',
        reason TEXT NOT NULL DEFAULT '',
        revision TEXT NOT NULL DEFAULT '',
        generation TEXT NOT NULL DEFAULT '',
        owner_uid TEXT NOT NULL DEFAULT '',
        target TEXT NOT NULL DEFAULT '',
        deadline REAL,
        replacement TEXT NOT NULL DEFAULT ''
    )""",
    """INSERT INTO requests_v2 (seq, id, namespace, name, uid, node, state, message, attempts, created, updated,
                                when_open)
        SELECT seq, id, namespace, name, uid, node, state, message, attempts, created, updated, when_open
        FROM requests""",
    "DROP TABLE requests",
    "ALTER TABLE requests_v2 RENAME TO requests",
    """CREATE UNIQUE INDEX requests_one_active_per_pod ON requests (namespace, name)
        WHERE state IN ('queued', 'running')""",
    "CREATE INDEX requests_state ON requests (state, seq)",
    """CREATE TABLE event_outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace TEXT NOT NULL,
        pod TEXT NOT NULL,
        pod_uid TEXT NOT NULL,
        type TEXT NOT NULL,
        reason TEXT NOT NULL,
        message TEXT NOT NULL,
        first REAL NOT NULL,
        last REAL NOT NULL,
        count INTEGER NOT NULL DEFAULT 1
    )""",
]


# One step per schema version, applied in order from the file's `user_version`: an existing agent's
# file is upgraded in place, and a step is never edited once merged (add a new one instead).
# `--auto-prepull` (agent/policy/autoprepull.py): the (pod, revision) pairs it has asked a pre-pull for.
_AUTO_PREPULL = [
    """CREATE TABLE prepull_asked (
        pod_uid TEXT NOT NULL,
        revision TEXT NOT NULL,
        asked REAL NOT NULL,
        PRIMARY KEY (pod_uid, revision)
    )""",
]

# OTA in place (issue 37): a request carried out in place keeps its pod; the verifier needs what the pod's
# containers were at the request (JSON: name -> image, containerID, imageID, restartCount) to see them restarted.
_IN_PLACE = [
    "ALTER TABLE requests ADD COLUMN in_place TEXT NOT NULL DEFAULT ''",
]

_MIGRATIONS: list[list[str]] = [_SCHEMA_V1, _SITE_POLICY, _AUTO_PREPULL, _VERIFIED_OUTCOMES, _IN_PLACE]
SCHEMA_VERSION = len(_MIGRATIONS)

_log = log.get("edgeagent.state")
T = TypeVar("T")


class StateUnavailable(Exception):
    """The state could not be written (or read): read-only directory, disk full, I/O error."""


class UnknownRequest(LookupError):
    """No upgrade request has this id."""


class InvalidTransition(Exception):
    """The request is not in a state that allows the change (e.g. cancelling one that already ran)."""

    def __init__(self, request: UpgradeRequest, wanted: str) -> None:
        self.request = request
        self.wanted = wanted
        super().__init__(f"upgrade request {request.id} is {request.state}, cannot become {wanted}")


@dataclass(frozen=True)
class UpgradeRequest:
    id: str
    namespace: str
    name: str
    uid: str
    node: str
    state: str
    message: str
    attempts: int
    created: float
    updated: float
    # `?when=open`: the drainer applies it only while the site policy says the node is open.
    when_open: bool = False
    # "online" (answered 200), "queued" (answered 202), "auto" (--auto-upgrade), or another caller's word.
    origin: str = "queued"
    # Why it failed, in the replacement's words when there is one (e.g. "ImagePullBackOff").
    reason: str = ""
    # What the verifier needs: the deleted pod's controller-revision-hash and pod-template-generation,
    # its DaemonSet's uid, the revision PodNeedUpgrade asked for, and when to give up (epoch seconds).
    revision: str = ""
    generation: str = ""
    owner_uid: str = ""
    target: str = ""
    deadline: float | None = None
    # The replacement pod the verifier judged (namespace/name), once one was seen.
    replacement: str = ""
    # Asked in place (the pod is kept): its containers at the request, as JSON (verifier.py `before_restart`);
    # "" for a pod deleted and recreated.
    in_place: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["generation"], out["owner_uid"], out["in_place"]  # internal to the verifier
        out["created"] = _rfc3339(self.created)
        out["updated"] = _rfc3339(self.updated)
        out["whenOpen"] = out.pop("when_open")
        out["deadline"] = None if self.deadline is None else _rfc3339(self.deadline)
        return out


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _new_id() -> str:
    return uuid.uuid4().hex[:12]


_COLUMNS = ("id, namespace, name, uid, node, state, message, attempts, created, updated, when_open, origin, "
            "reason, revision, generation, owner_uid, target, deadline, replacement, in_place")

# A committed state change: (before, after); before is None for a new request.
Change = tuple["UpgradeRequest | None", "UpgradeRequest"]
# Runs inside the transaction that makes the change (the Events outbox: the Event is stored with it).
TxHook = Callable[[sqlite3.Connection, "UpgradeRequest | None", "UpgradeRequest"], None]
# Runs on the event loop after the commit (the verifier, the auto-upgrader).
Listener = Callable[["UpgradeRequest | None", "UpgradeRequest"], None]


def _row(row: tuple[Any, ...]) -> UpgradeRequest:
    (request_id, namespace, name, uid, node, state, message, attempts, created, updated, when_open,
     origin, reason, revision, generation, owner_uid, target, deadline, replacement, in_place) = row
    return UpgradeRequest(request_id, namespace, name, uid, node, state, message, attempts, created, updated,
                          when_open=bool(when_open), origin=origin, reason=reason, revision=revision,
                          generation=generation, owner_uid=owner_uid, target=target, deadline=deadline,
                          replacement=replacement, in_place=in_place)


def _is_corruption(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    if name in _CORRUPT_ERRORS:
        return True
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError) and (
        "not a database" in str(exc) or "malformed" in str(exc)
    )


class _CorruptDatabase(Exception):
    pass


class StateStore:
    """Async facade over one SQLite connection living on its own thread."""

    def __init__(self, path: Path, executor: ThreadPoolExecutor, conn: sqlite3.Connection | None,
                 *, problem: str = "") -> None:
        self.path = path
        self._executor = executor
        self._conn = conn
        # Why the store is degraded ("" when healthy); shown in /v1/readyz details.
        self.problem = problem
        self._read_only = False
        self._max_bytes: int | None = None
        self._closed = False
        # Every write retries opening a degraded store; log that once per episode, not per retry.
        self._unwritable = Episode()
        self.clock: Callable[[], float] = time.monotonic
        self.tx_hooks: list[TxHook] = []
        self.listeners: list[Listener] = []
        # `running` entries an online upgrade of this process is applying right now. `pending()` leaves them
        # out: only a `running` entry nobody here owns (a crash mid-apply) is the drainer's to resume, else the
        # drainer and the online call would both DELETE the same pod. (Single set operations: safe across the
        # store's thread and the event loop.)
        self._claimed: set[str] = set()

    # ---------------------------------------------------------------- opening

    @classmethod
    async def open(cls, state_dir: Path, *, read_only: bool = False, max_bytes: int | None = None) -> StateStore:
        """Open (creating if needed) `<state_dir>/edgeagent.db`.

        Never fails for a bad disk: the agent must still serve `GET /pods` with an unwritable state dir,
        so the store comes up degraded (writes raise StateUnavailable) and says why in `problem`.
        `read_only` opens the file without write access (inspection, and tests run as root where chmod
        does not bite); `max_bytes` caps the file size, beyond which writes fail as on a full disk.
        """
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgeagent-state")
        path = Path(state_dir) / DB_NAME
        store = cls(path, executor, None)
        store._read_only = read_only
        store._max_bytes = max_bytes
        await store._call(store._connect)
        return store

    def _connect(self) -> None:
        """Runs on the state thread: open read-write, fall back to read-only, else degraded."""
        if self._read_only:
            self._conn = self._open_read_only("opened read-only on request")
            return
        try:
            self._conn = self._open_read_write()
            self.problem = ""
        except (OSError, sqlite3.Error) as exc:
            reason = f"state not writable: {self.path}: {type(exc).__name__}: {exc}"
            loud = self._unwritable.failed(self.clock())
            if loud:
                _log.error("state_unwritable", path=str(self.path), error=str(exc),
                           failures=self._unwritable.failures,
                           hint="upgrade requests cannot be queued until this is fixed; the agent keeps "
                                "serving; repeated every 10 min while it lasts")
            self._conn = self._open_read_only(reason, loud=loud)
            return
        failures = self._unwritable.succeeded()
        if failures:
            _log.info("state_writable_again", path=str(self.path), failed_attempts=failures)

    def _open_read_only(self, reason: str, *, loud: bool = True) -> sqlite3.Connection | None:
        """Read what is there, so the snapshot and the queue stay visible on an unwritable disk.

        `mode=ro` cannot open a WAL database whose `-shm` file is gone (clean shutdown) in a directory
        it cannot write; `immutable=1` can, and is safe there because nothing can write that directory.
        """
        self.problem = reason
        if not self.path.exists():
            return None
        error: sqlite3.Error | None = None
        for option in ("mode=ro", "immutable=1"):
            conn: sqlite3.Connection | None = None
            try:
                conn = sqlite3.connect(f"file:{quote(str(self.path))}?{option}", uri=True, isolation_level=None)
                conn.execute("PRAGMA query_only = ON")
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.Error as exc:
                if conn is not None:
                    conn.close()
                error = exc
                continue
            if loud and option == "immutable=1" and self.path.with_name(self.path.name + "-wal").exists():
                _log.warning("state_wal_not_visible", path=str(self.path),
                             hint="the last writes before the disk turned read-only are not visible until it is "
                                  "writable again; nothing is lost")
            return conn
        if loud:
            _log.error("state_unreadable", path=str(self.path), error=str(error))
        self.problem = f"{reason}; unreadable: {error}"
        return None

    def _open_read_write(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._prepare(self._connect_file())
        except _CorruptDatabase as exc:
            self._move_aside(str(exc))
            return self._prepare(self._connect_file())

    def _connect_file(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves, so the transaction
        # boundaries are exactly the ones written here.
        return sqlite3.connect(self.path, isolation_level=None, timeout=5.0)

    def _prepare(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        try:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                conn.execute("PRAGMA synchronous = FULL")
                check = conn.execute("PRAGMA integrity_check").fetchone()
            except sqlite3.Error as exc:
                if _is_corruption(exc):
                    raise _CorruptDatabase(f"{type(exc).__name__}: {exc}") from exc
                raise
            if not check or check[0] != "ok":
                raise _CorruptDatabase(f"integrity_check: {check[0] if check else 'no answer'}")
            if not mode or str(mode[0]).lower() != "wal":
                raise sqlite3.OperationalError(f"could not switch to WAL journal (got {mode})")
            self._migrate(conn)
            if self._max_bytes is not None:
                page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
                pages = max(self._max_bytes // page_size, 1)
                current = int(conn.execute("PRAGMA page_count").fetchone()[0])
                conn.execute(f"PRAGMA max_page_count = {max(pages, current)}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            # Written by a newer agent: do not guess at its meaning, keep it aside intact.
            raise _CorruptDatabase(f"schema version {version} is newer than this agent's {SCHEMA_VERSION}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            for step in _MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _move_aside(self, reason: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        self.path.rename(target)
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.rename(target.with_name(target.name + suffix))
        _log.error("state_corrupt_moved_aside", path=str(self.path), moved_to=str(target), reason=reason,
                   hint="starting with an empty state; the pod cache is refilled from the cloud")

    # ---------------------------------------------------------------- plumbing

    async def _call(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise StateUnavailable(f"state store {self.path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn)

    def _writable(self) -> sqlite3.Connection:
        """The connection for a write; a degraded store retries opening, so a fixed disk heals it."""
        if self._conn is None or self.problem:
            if self._read_only:
                raise StateUnavailable(f"state store {self.path} is read-only")
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._connect()
            if self._conn is None or self.problem:
                raise StateUnavailable(self.problem or f"state store {self.path} is not available")
        return self._conn

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """One IMMEDIATE transaction; any SQLite/OS error rolls it back and becomes StateUnavailable."""
        conn = self._writable()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StateUnavailable(f"cannot write state store {self.path}: {exc}") from exc
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            self._rollback(conn)
            raise StateUnavailable(f"cannot write state store {self.path}: {exc}") from exc
        except BaseException:
            self._rollback(conn)
            raise
        return result

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                _log.error("state_rollback_failed", error=str(exc))

    def _read(self, fn: Callable[[sqlite3.Connection], T], empty: T) -> T:
        if self._conn is None:
            return empty
        try:
            return fn(self._conn)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return empty  # a read-only fallback onto a file that never got its schema
            raise StateUnavailable(f"cannot read state store {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StateUnavailable(f"cannot read state store {self.path}: {exc}") from exc

    async def close(self) -> None:
        """Idempotent; later calls raise StateUnavailable instead of touching a closed connection."""
        if self._closed:
            return
        self._closed = True

        def _close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, _close)
        finally:
            self._executor.shutdown(wait=True)

    @property
    def available(self) -> bool:
        return not self.problem

    # ---------------------------------------------------------------- snapshot

    async def load_snapshot(self) -> tuple[list[dict[str, Any]], str]:
        """The last saved pods and their list resourceVersion; `([], "")` if none or unreadable."""
        def _load(conn: sqlite3.Connection) -> tuple[list[dict[str, Any]], str]:
            row = conn.execute("SELECT pods, resource_version FROM snapshot WHERE id = 1").fetchone()
            if row is None:
                return [], ""
            pods = json.loads(row[0])
            return [p for p in pods if isinstance(p, dict)], str(row[1])

        empty: tuple[list[dict[str, Any]], str] = ([], "")
        try:
            return await self._call(lambda: self._read(_load, empty))
        except (StateUnavailable, ValueError) as exc:
            _log.error("snapshot_unreadable", path=str(self.path), error=str(exc))
            return [], ""

    async def save_snapshot(self, pods: list[dict[str, Any]], resource_version: str) -> None:
        """Replace the snapshot in one transaction: a reader sees the old one or the new one, whole."""
        def _save() -> None:
            encoded = json.dumps(pods, separators=(",", ":"))

            def _tx(conn: sqlite3.Connection) -> None:
                conn.execute(
                    "INSERT INTO snapshot (id, resource_version, pods, saved) VALUES (1, ?, ?, ?) "
                    "ON CONFLICT (id) DO UPDATE SET resource_version = excluded.resource_version, "
                    "pods = excluded.pods, saved = excluded.saved",
                    (resource_version, encoded, time.time()),
                )

            self._write(_tx)

        await self._call(_save)

    # ---------------------------------------------------------------- requests

    async def _transact(self, fn: Callable[[sqlite3.Connection, list[Change]], T]) -> T:
        """One write transaction that may change requests' states; listeners hear of them after the commit."""
        changes: list[Change] = []

        def run(conn: sqlite3.Connection) -> T:
            changes.clear()  # a retried transaction starts over
            return fn(conn, changes)

        result = await self._call(lambda: self._write(run))
        for before, after in changes:
            for listener in self.listeners:
                try:
                    listener(before, after)
                except Exception:
                    _log.exception("request_listener_failed", id=after.id)
        return result

    def _changed(self, conn: sqlite3.Connection, changes: list[Change], before: UpgradeRequest | None,
                 request_id: str) -> UpgradeRequest:
        after = self._get_for_update(conn, request_id)
        for hook in self.tx_hooks:
            hook(conn, before, after)
        changes.append((before, after))
        return after

    async def enqueue(self, namespace: str, name: str, uid: str, node: str, *,
                      message: str = "queued: cloud unreachable", state: str = QUEUED,
                      origin: str = "queued", when_open: bool = False) -> tuple[UpgradeRequest, bool]:
        """Durably record an upgrade request; returns (entry, created_new). Committed (fsynced) when this returns.

        `state` is `queued` (the drainer applies it) or `running` (the caller deletes the pod now, and owns the
        new entry until it calls `release()`: the drainer does not touch it meanwhile). The same pod already
        queued or running gives back that entry (created_new False: the caller must not apply it). A queued
        entry for an earlier incarnation of the pod (different UID) would only end obsolete, so it is
        superseded instead.
        """
        if state not in ACTIVE_STATES:
            raise ValueError(f"a new request is queued or running, not {state!r}")

        def _tx(conn: sqlite3.Connection, changes: list[Change]) -> tuple[UpgradeRequest, bool]:
            now = time.time()
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM requests WHERE namespace = ? AND name = ? AND state IN (?, ?)",
                (namespace, name, QUEUED, RUNNING),
            ).fetchone()
            if row is not None:
                existing = _row(row)
                if existing.uid == uid or existing.state == RUNNING:
                    return existing, False
                conn.execute(
                    "UPDATE requests SET state = ?, message = ?, updated = ? WHERE id = ?",
                    (OBSOLETE, f"superseded: pod was replaced (uid {uid})", now, existing.id),
                )
                self._changed(conn, changes, existing, existing.id)
            request_id = _new_id()
            conn.execute(
                "INSERT INTO requests (id, namespace, name, uid, node, state, message, attempts, created, updated, "
                "origin, when_open) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
                (request_id, namespace, name, uid, node, state, message, now, now, origin, int(when_open)),
            )
            request = self._changed(conn, changes, None, request_id)
            if state == RUNNING:
                self._claimed.add(request_id)  # before the commit: no pending() can see it unclaimed
            conn.execute(
                "DELETE FROM requests WHERE state IN (?, ?, ?, ?) AND seq NOT IN "
                "(SELECT seq FROM requests WHERE state IN (?, ?, ?, ?) ORDER BY seq DESC LIMIT ?)",
                (*TERMINAL_STATES, *TERMINAL_STATES, KEEP_FINISHED),
            )
            return request, True

        request, created = await self._transact(_tx)
        if created:
            _log.info("upgrade_recorded", id=request.id, pod=request.key, uid=request.uid, state=request.state,
                      origin=origin)
        return request, created

    async def list_requests(self) -> list[UpgradeRequest]:
        """All requests, newest first."""
        return await self._call(lambda: self._read(
            lambda c: [_row(r) for r in c.execute(f"SELECT {_COLUMNS} FROM requests ORDER BY seq DESC")], []))

    async def get_request(self, request_id: str) -> UpgradeRequest | None:
        def _get(conn: sqlite3.Connection) -> UpgradeRequest | None:
            row = conn.execute(f"SELECT {_COLUMNS} FROM requests WHERE id = ?", (request_id,)).fetchone()
            return _row(row) if row else None

        return await self._call(lambda: self._read(_get, None))

    async def active_request(self, namespace: str, name: str) -> UpgradeRequest | None:
        """The queued or running request for this pod, if any."""
        def _get(conn: sqlite3.Connection) -> UpgradeRequest | None:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM requests WHERE namespace = ? AND name = ? AND state IN (?, ?)",
                (namespace, name, *ACTIVE_STATES),
            ).fetchone()
            return _row(row) if row else None

        return await self._call(lambda: self._read(_get, None))

    async def pending(self) -> list[UpgradeRequest]:
        """Queued or running (a crash mid-apply leaves `running`), oldest first; not the `running` entries an
        online upgrade of this process still owns (see `enqueue`)."""
        return await self._call(lambda: self._read(
            lambda c: [e for e in (_row(r) for r in c.execute(
                f"SELECT {_COLUMNS} FROM requests WHERE state IN (?, ?) ORDER BY seq ASC", ACTIVE_STATES))
                if e.id not in self._claimed], []))

    def release(self, request_id: str) -> None:
        """The online upgrade that created this `running` entry is done with it (whatever state it left)."""
        self._claimed.discard(request_id)

    async def verifying(self) -> list[UpgradeRequest]:
        """Requests whose pod was deleted and whose replacement is not judged yet, oldest first."""
        return await self._call(lambda: self._read(
            lambda c: [_row(r) for r in c.execute(
                f"SELECT {_COLUMNS} FROM requests WHERE state = ? ORDER BY seq ASC", (VERIFYING,))], []))

    async def failed_replacements(self) -> list[UpgradeRequest]:
        """Failed requests that judged a replacement pod, oldest first: the failures the agent reports on that
        pod's status (requests/failure_status.py), which must outlive a restart and a cut link."""
        return await self._call(lambda: self._read(
            lambda c: [_row(r) for r in c.execute(
                f"SELECT {_COLUMNS} FROM requests WHERE state = ? AND replacement != '' ORDER BY seq ASC",
                (FAILED,))], []))

    async def counts(self) -> dict[str, int]:
        """Number of requests per state (every state present, zeros included)."""
        def _counts(conn: sqlite3.Connection) -> dict[str, int]:
            out = dict.fromkeys(STATES, 0)
            for state, n in conn.execute("SELECT state, count(*) FROM requests GROUP BY state"):
                out[str(state)] = int(n)
            return out

        return await self._call(lambda: self._read(_counts, dict.fromkeys(STATES, 0)))

    async def set_state(self, request_id: str, state: str, message: str = "", *,
                        attempts: int | None = None, reason: str | None = None,
                        replacement: str | None = None) -> UpgradeRequest:
        """Move a request on. A finished request never changes again, so a late drainer cannot undo a cancel.

        Entering `verifying` goes through `start_verifying`, which records what the verifier needs.
        """
        if state not in STATES:
            raise ValueError(f"unknown request state {state!r}")

        def _tx(conn: sqlite3.Connection, changes: list[Change]) -> UpgradeRequest:
            current = self._get_for_update(conn, request_id)
            if current.state in TERMINAL_STATES or (current.state == VERIFYING and state in ACTIVE_STATES):
                raise InvalidTransition(current, state)
            conn.execute(
                "UPDATE requests SET state = ?, message = ?, attempts = ?, updated = ?, reason = ?, replacement = ? "
                "WHERE id = ?",
                (state, message, current.attempts if attempts is None else attempts, time.time(),
                 current.reason if reason is None else reason,
                 current.replacement if replacement is None else replacement, request_id))
            return self._changed(conn, changes, current, request_id)

        updated = await self._transact(_tx)
        _log.info("upgrade_request_state", id=updated.id, pod=updated.key, state=state, message=message,
                  attempts=updated.attempts, reason=updated.reason or None)
        return updated

    async def start_verifying(self, request_id: str, message: str, *, revision: str, generation: str,
                              owner_uid: str, target: str, deadline: float, in_place: str = "") -> UpgradeRequest:
        """The pod was deleted (or, `in_place`, asked to restart in place): from now on the verifier follows its
        replacement (or the pod itself) until `deadline`."""
        def _tx(conn: sqlite3.Connection, changes: list[Change]) -> UpgradeRequest:
            current = self._get_for_update(conn, request_id)
            if current.state in TERMINAL_STATES:
                raise InvalidTransition(current, VERIFYING)
            conn.execute(
                "UPDATE requests SET state = ?, message = ?, updated = ?, revision = ?, generation = ?, "
                "owner_uid = ?, target = ?, deadline = ?, in_place = ? WHERE id = ?",
                (VERIFYING, message, time.time(), revision, generation, owner_uid, target, deadline, in_place,
                 request_id))
            return self._changed(conn, changes, current, request_id)

        updated = await self._transact(_tx)
        _log.info("upgrade_request_state", id=updated.id, pod=updated.key, state=VERIFYING, message=message)
        return updated

    async def cancel(self, request_id: str) -> UpgradeRequest:
        """Cancel a request that is still queued; raises UnknownRequest or InvalidTransition otherwise."""
        def _tx(conn: sqlite3.Connection, changes: list[Change]) -> UpgradeRequest:
            current = self._get_for_update(conn, request_id)
            if current.state != QUEUED:
                raise InvalidTransition(current, CANCELLED)
            conn.execute("UPDATE requests SET state = ?, message = ?, updated = ? WHERE id = ?",
                         (CANCELLED, "cancelled by request", time.time(), request_id))
            return self._changed(conn, changes, current, request_id)

        cancelled = await self._transact(_tx)
        _log.info("upgrade_request_cancelled", id=cancelled.id, pod=cancelled.key)
        return cancelled

    # ---------------------------------------------------------------- the tables other features own

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """One write transaction on the state thread, committed (fsynced) when this returns.

        How a feature reads and writes the table it owns on this one shared database: the Events outbox
        (requests/events.py), the hold (policy/hold_table.py), the pre-pull asks (policy/autoprepull.py).
        """
        return await self._call(lambda: self._write(fn))

    async def read(self, fn: Callable[[sqlite3.Connection], T], empty: T) -> T:
        """One read on the state thread; `empty` when the database cannot be read."""
        return await self._call(lambda: self._read(fn, empty))

    @staticmethod
    def _get_for_update(conn: sqlite3.Connection, request_id: str) -> UpgradeRequest:
        row = conn.execute(f"SELECT {_COLUMNS} FROM requests WHERE id = ?", (request_id,)).fetchone()
        if row is None:
            raise UnknownRequest(f"no upgrade request with id {request_id!r}")
        return _row(row)
