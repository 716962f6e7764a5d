"""The sim's durable state in `--dir`: every stored object, the resourceVersion counter, the ports and the
simulated image registry (`POST /sim/v1/images`).

Restarting `edgeagent sim` on the same directory must look to running agents and controllers like an
API server restart, not like a new cluster: same objects and UIDs, a resourceVersion that never goes
back (a client holding an RV the new process has not reached would get `Too large resource version`),
and the same API and link ports, so kubeconfigs already loaded keep working.

Each commit is written through before it becomes visible (one SQLite transaction: the object row and the
counter), so a SIGKILL loses nothing a client has seen. `synchronous=OFF` keeps that cheap: a killed
process leaves its writes in the OS page cache; only a machine crash could lose the tail, and SQLite's WAL
then rolls back to a consistent earlier state rather than a torn one. A file that is not a readable state
database is refused with a message saying what to do; it is never half-loaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeagent.sim.images import ImageCatalog
from edgeagent.sim.resources import RESOURCES
from edgeagent.sim.store import Store, WatchEvent, dumps

JSON = dict[str, Any]

STATE_FILE = "sim-state.db"
LOCK_FILE = "sim.lock"
FORMAT = "1"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS objects (plural TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,"
    " body TEXT NOT NULL, PRIMARY KEY (plural, namespace, name))",
)


class StateError(Exception):
    """The state directory cannot be used as it is; the message says why and what to do."""


@dataclass
class Snapshot:
    resource_version: int
    objects: dict[str, list[JSON]]
    api_port: int | None = None
    link_ports: dict[str, int] = field(default_factory=dict)
    images: list[JSON] = field(default_factory=list)  # the registry's entries (sim/images.ImageSpec.saved)


class StateFile:
    """One sim's state database, held exclusively (a second sim on the same directory is refused)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / STATE_FILE
        self._lock_fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            raise StateError(f"{directory} is in use by another edgeagent sim (lock {LOCK_FILE} is held)") from exc
        existed = self.path.exists() and self.path.stat().st_size > 0
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            self._unlock()
            raise self._unreadable(exc) from exc
        try:
            if existed:
                self._check()
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=OFF")
            for statement in _SCHEMA:
                self._db.execute(statement)
        except sqlite3.Error as exc:
            self.close()
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: BaseException) -> StateError:
        return StateError(
            f"{self.path} is not a readable sim state database ({exc}); nothing was loaded. Move it away to "
            "start with a new cluster, or restore a good copy"
        )

    def _check(self) -> None:
        verdict = self._db.execute("PRAGMA quick_check").fetchone()
        if not verdict or verdict[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {verdict[0] if verdict else 'no answer'}")
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"meta", "objects"} <= tables:
            raise sqlite3.DatabaseError("tables meta/objects missing")
        version = self._meta("format")
        if version is not None and version != FORMAT:
            raise sqlite3.DatabaseError(f"state format {version}, this sim writes {FORMAT}")

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def load(self) -> Snapshot | None:
        """The saved state, or None for a new directory; every row is decoded before anything is used."""
        try:
            rv_text = self._meta("resourceVersion")
            if rv_text is None:
                return None
            objects: dict[str, list[JSON]] = {plural: [] for plural in RESOURCES}
            for plural, namespace, name, body in self._db.execute(
                "SELECT plural, namespace, name, body FROM objects ORDER BY plural, namespace, name"
            ):
                # A custom kind's key is `<plural>.<group>` (Resource.key); its CRD must be among the rows.
                if plural not in objects and "." not in plural:
                    raise ValueError(f"unknown resource {plural!r}")
                obj = json.loads(body)
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                if not isinstance(meta, dict) or meta.get("name") != name:
                    raise ValueError(f"row {plural}/{namespace}/{name} does not hold that object")
                objects.setdefault(plural, []).append(obj)
            ports = json.loads(self._meta("linkPorts") or "{}")
            api_port = self._meta("apiPort")
            images = json.loads(self._meta("images") or "[]")
            if not isinstance(images, list) or not all(isinstance(entry, dict) for entry in images):
                raise ValueError("the image registry is not a list of entries")
            for entry in images:  # checked as a POST /sim/v1/images body would be
                ImageCatalog.parse({k: v for k, v in entry.items() if v is not None})
            return Snapshot(
                resource_version=int(rv_text),
                objects=objects,
                api_port=int(api_port) if api_port else None,
                link_ports={str(k): int(v) for k, v in ports.items()},
                images=images,
            )
        except (sqlite3.Error, ValueError, TypeError, AttributeError) as exc:
            raise self._unreadable(exc) from exc

    def save_all(self, store: Store) -> None:
        """The whole store at once (a new directory): one transaction, so it is there entirely or not at all."""
        with self._transaction():
            self._db.execute("DELETE FROM objects")
            for key, res in store.registry.stored.items():
                for stored in store.list_page(res).items:
                    self._put(key, stored.obj)
            self._set("format", FORMAT)
            self._set("resourceVersion", str(store.resource_version))

    def record(self, event: WatchEvent) -> None:
        """Write one commit through (called by the Store before the change becomes visible)."""
        with self._transaction():
            if event.type == "DELETED":
                meta = event.object.get("metadata") or {}
                self._db.execute(
                    "DELETE FROM objects WHERE plural = ? AND namespace = ? AND name = ?",
                    (event.resource.key, str(meta.get("namespace") or ""), str(meta.get("name") or "")),
                )
            else:
                self._put(event.resource.key, event.object, event.object_json())
            self._set("resourceVersion", str(event.rv))

    def save_ports(self, api_port: int, link_ports: dict[str, int]) -> None:
        with self._transaction():
            self._set("apiPort", str(api_port))
            self._set("linkPorts", json.dumps(link_ports, sort_keys=True))

    def save_images(self, entries: list[JSON]) -> None:
        """The whole image registry (a handful of entries), written through before it takes effect."""
        with self._transaction():
            self._set("images", json.dumps(entries, sort_keys=True))

    def _put(self, plural: str, obj: JSON, body: bytes | None = None) -> None:
        """`body`: the object's JSON when the caller has it encoded already (a commit's, shared with watchers)."""
        meta = obj.get("metadata") or {}
        self._db.execute(
            "INSERT OR REPLACE INTO objects (plural, namespace, name, body) VALUES (?, ?, ?, ?)",
            (plural, str(meta.get("namespace") or ""), str(meta.get("name") or ""),
             (body if body is not None else dumps(obj)).decode()),
        )

    def _set(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    @contextlib.contextmanager
    def _transaction(self) -> Any:
        self._db.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = -1
